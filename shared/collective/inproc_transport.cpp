#include "shared/collective/inproc_transport.hpp"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shared/util/assert.hpp"

namespace fedcore::collective {

struct Message {
  Envelope envelope;
  std::vector<std::byte> payload;
  std::uint64_t arrival = 0;  // the group's send counter when it was posted
};

// One mutex and condition variable for the whole group: the in-process transport is for
// tests and small experiments, where simplicity beats contention.
struct InProcessGroup::State {
  explicit State(int n)
      : size(n), mailboxes(static_cast<std::size_t>(n) * n), dead(n, false), made(n, false) {}
  int size;
  std::mutex mutex;
  std::condition_variable changed;
  // mailboxes[to * size + from]
  std::vector<std::deque<Message>> mailboxes;
  std::vector<bool> dead;
  std::vector<bool> made;
  std::uint64_t arrivals = 0;  // messages posted so far, for wait_any's arrival order
};

namespace {

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(std::shared_ptr<InProcessGroup::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}
  ~InProcessTransport() override { abort(fail(errc::aborted, "transport destroyed")); }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return state_->size; }
  const char* name() const noexcept override { return "inproc"; }

  void post_send(int peer, const Envelope& envelope, std::span<const std::byte> payload) override {
    FEDCORE_ASSERT(peer >= 0 && peer < state_->size && peer != rank_, "bad peer");
    FEDCORE_ASSERT(envelope.length == payload.size(), "envelope length differs from payload");
    std::lock_guard lock(state_->mutex);
    if (failure_)
      return;
    if (state_->dead[peer]) {
      failure_ = fail(errc::unavailable, "rank " + std::to_string(peer) + " is gone");
      return;
    }
    Message m{envelope, std::vector<std::byte>(payload.begin(), payload.end()), ++state_->arrivals};
    sent_ += payload.size();
    state_->mailboxes[static_cast<std::size_t>(peer) * state_->size + rank_].push_back(
        std::move(m));
    state_->changed.notify_all();
  }

  result<void> wait_sends(Clock::time_point) override {
    std::lock_guard lock(state_->mutex);
    if (failure_)
      return *failure_;
    return {};
  }

  result<std::span<const std::byte>> recv(int peer, const Envelope& expected,
                                          Clock::time_point deadline) override {
    FEDCORE_ASSERT(peer >= 0 && peer < state_->size && peer != rank_, "bad peer");
    std::unique_lock lock(state_->mutex);
    auto& box = state_->mailboxes[static_cast<std::size_t>(rank_) * state_->size + peer];
    for (;;) {
      if (failure_)
        return *failure_;
      if (!box.empty())
        break;
      if (state_->dead[peer]) {
        return fail(errc::unavailable, "rank " + std::to_string(peer) + " is gone");
      }
      if (state_->changed.wait_until(lock, deadline) == std::cv_status::timeout && box.empty() &&
          !failure_) {
        return fail(errc::deadline_exceeded, "timed out waiting for rank " + std::to_string(peer) +
                                                 " (" + to_string(expected) + ")");
      }
    }
    current_ = std::move(box.front());
    box.pop_front();
    received_ += current_.payload.size();
    if (auto ok = check_envelope(expected, current_.envelope, peer); !ok)
      return ok.error();
    return std::span<const std::byte>(current_.payload);
  }

  result<std::optional<int>> wait_any(std::span<const int> peers,
                                      Clock::time_point deadline) override {
    FEDCORE_ASSERT(!peers.empty(), "wait_any needs peers");
    std::unique_lock lock(state_->mutex);
    for (;;) {
      if (failure_)
        return *failure_;
      int ready = -1;
      std::uint64_t first_arrival = 0;
      int gone = -1;
      for (int peer : peers) {
        FEDCORE_ASSERT(peer >= 0 && peer < state_->size && peer != rank_, "bad peer");
        const auto& box = state_->mailboxes[static_cast<std::size_t>(rank_) * state_->size + peer];
        if (!box.empty()) {
          if (ready < 0 || box.front().arrival < first_arrival) {
            ready = peer;
            first_arrival = box.front().arrival;
          }
        } else if (state_->dead[peer] && gone < 0) {
          gone = peer;
        }
      }
      // Messages a dead peer sent before dying are still delivered first.
      if (ready >= 0)
        return std::optional<int>(ready);
      if (gone >= 0)
        return std::optional<int>(gone);
      if (Clock::now() >= deadline)
        return std::optional<int>();
      state_->changed.wait_until(lock, deadline);
    }
  }

  void abort(const error& why) noexcept override {
    std::lock_guard lock(state_->mutex);
    if (!failure_)
      failure_ = fail(errc::aborted, why.message);
    state_->dead[rank_] = true;
    state_->changed.notify_all();
  }

  std::uint64_t bytes_sent() const noexcept override { return sent_; }
  std::uint64_t bytes_received() const noexcept override { return received_; }

 private:
  std::shared_ptr<InProcessGroup::State> state_;
  int rank_;
  std::optional<error> failure_;  // guarded by state_->mutex
  Message current_;
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
};

}  // namespace

InProcessGroup::InProcessGroup(int size) {
  FEDCORE_ASSERT(size > 0, "group size must be positive");
  state_ = std::make_shared<State>(size);
}
InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const noexcept {
  return state_->size;
}

std::unique_ptr<Transport> InProcessGroup::transport(int rank) {
  FEDCORE_ASSERT(rank >= 0 && rank < state_->size, "rank out of range");
  std::lock_guard lock(state_->mutex);
  FEDCORE_ASSERT(!state_->made[rank], "transport of this rank already made");
  state_->made[rank] = true;
  return std::make_unique<InProcessTransport>(state_, rank);
}

}  // namespace fedcore::collective
