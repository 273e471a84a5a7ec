#include "distributed/subgroup.hpp"

#include <algorithm>

#include "shared/util/assert.hpp"

namespace fedcore::distributed {
namespace {

class SubTransport final : public collective::Transport {
 public:
  SubTransport(collective::Transport& parent, std::vector<int> members)
      : parent_(parent), members_(std::move(members)) {
    const auto it = std::find(members_.begin(), members_.end(), parent_.rank());
    FEDCORE_ASSERT(it != members_.end(), "this rank is not a member of the sub-group");
    rank_ = static_cast<int>(it - members_.begin());
  }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return static_cast<int>(members_.size()); }
  const char* name() const noexcept override { return parent_.name(); }
  void post_send(int peer, const collective::Envelope& e,
                 std::span<const std::byte> payload) override {
    parent_.post_send(members_[peer], e, payload);
  }
  result<void> wait_sends(collective::Clock::time_point deadline) override {
    return parent_.wait_sends(deadline);
  }
  result<std::span<const std::byte>> recv(int peer, const collective::Envelope& expected,
                                          collective::Clock::time_point deadline) override {
    return parent_.recv(members_[peer], expected, deadline);
  }
  result<std::optional<int>> wait_any(std::span<const int> peers,
                                      collective::Clock::time_point deadline) override {
    std::vector<int> global(peers.size());
    for (std::size_t i = 0; i < peers.size(); ++i)
      global[i] = members_[peers[i]];
    auto ready = parent_.wait_any(global, deadline);
    if (!ready || !*ready)
      return ready;
    const auto it = std::find(members_.begin(), members_.end(), **ready);
    return std::optional<int>(static_cast<int>(it - members_.begin()));
  }
  void abort(const error& why) noexcept override { parent_.abort(why); }
  std::uint64_t bytes_sent() const noexcept override { return parent_.bytes_sent(); }
  std::uint64_t bytes_received() const noexcept override { return parent_.bytes_received(); }

 private:
  collective::Transport& parent_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace

std::unique_ptr<collective::Transport> make_subgroup(collective::Transport& parent,
                                                     std::vector<int> members) {
  for (int m : members)
    FEDCORE_ASSERT(m >= 0 && m < parent.size(), "sub-group member out of range");
  return std::make_unique<SubTransport>(parent, std::move(members));
}

}  // namespace fedcore::distributed
