#include "shared/collective/mpi_transport.hpp"

#include <array>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "shared/util/assert.hpp"

namespace fedcore::collective {
namespace {

constexpr int kEnvelopeTag = 7001;
constexpr int kPayloadTag = 7002;
constexpr std::uint64_t kMaxPayload = std::uint64_t{1} << 30;

std::uint64_t job_hash(const std::string& job) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : job) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

struct WireEnvelope {
  std::uint64_t job = 0;
  std::uint64_t seq = 0;
  std::uint64_t bytes = 0;
  std::uint64_t length = 0;
  std::uint32_t tag = 0;
  std::uint32_t segment = 0;
  std::uint32_t op = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(WireEnvelope) == 48);

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm) {
    MPI_Comm_dup(comm, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiTransport() override {
    // Only after a failure can sends still be pending. MPI cannot reliably cancel a send,
    // and waiting could block forever on a dead peer: let MPI finish or drop them, and
    // leak their envelopes rather than free memory MPI may still read.
    for (auto& p : pending_) {
      int done = 0;
      MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
      if (!done) {
        MPI_Request_free(&p.request);
        (void)p.header.release();
      }
    }
    MPI_Comm_free(&comm_);
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  const char* name() const noexcept override { return "mpi"; }

  void post_send(int peer, const Envelope& e, std::span<const std::byte> payload) override {
    FEDCORE_ASSERT(peer >= 0 && peer < size_ && peer != rank_, "bad peer");
    FEDCORE_ASSERT(e.length == payload.size() && payload.size() <= kMaxPayload,
                   "bad payload length");
    if (failure_)
      return;
    auto header = std::make_unique<WireEnvelope>();
    *header = {job_hash(e.job),
               e.seq,
               e.bytes,
               e.length,
               e.tag,
               e.segment,
               static_cast<std::uint32_t>(e.op),
               0};
    Pending h{};
    MPI_Isend(header.get(), sizeof(WireEnvelope), MPI_BYTE, peer, kEnvelopeTag, comm_, &h.request);
    h.header = std::move(header);
    pending_.push_back(std::move(h));
    if (!payload.empty()) {
      Pending p{};
      MPI_Isend(payload.data(), static_cast<int>(payload.size()), MPI_BYTE, peer, kPayloadTag,
                comm_, &p.request);
      pending_.push_back(std::move(p));
    }
    sent_ += sizeof(WireEnvelope) + payload.size();
  }

  result<void> wait_sends(Clock::time_point deadline) override {
    if (failure_)
      return *failure_;
    while (!pending_.empty()) {
      int done = 0;
      MPI_Test(&pending_.front().request, &done, MPI_STATUS_IGNORE);
      if (done) {
        pending_.erase(pending_.begin());
        continue;
      }
      if (Clock::now() >= deadline) {
        return fail(
            errc::deadline_exceeded,
            "timed out sending (" + std::to_string(pending_.size()) + " MPI requests pending)");
      }
      std::this_thread::yield();
    }
    return {};
  }

  result<std::span<const std::byte>> recv(int peer, const Envelope& expected,
                                          Clock::time_point deadline) override {
    FEDCORE_ASSERT(peer >= 0 && peer < size_ && peer != rank_, "bad peer");
    if (failure_)
      return *failure_;
    WireEnvelope header;
    MPI_Request request;
    MPI_Irecv(&header, sizeof header, MPI_BYTE, peer, kEnvelopeTag, comm_, &request);
    if (auto ok = wait(request, deadline, peer, expected); !ok)
      return ok.error();
    Envelope got;
    got.job = header.job == job_hash(expected.job) ? expected.job : "<another job>";
    got.seq = header.seq;
    got.op = static_cast<OpType>(header.op);
    got.tag = header.tag;
    got.bytes = header.bytes;
    got.segment = header.segment;
    got.length = header.length;
    if (header.length > kMaxPayload)
      return fail(errc::data_loss, "MPI envelope announces too large a payload");
    // The payload follows the envelope even when the envelope does not match, so it is
    // received before the check: a later operation must not mistake it for its own.
    current_.resize(header.length);
    if (header.length > 0) {
      MPI_Irecv(current_.data(), static_cast<int>(header.length), MPI_BYTE, peer, kPayloadTag,
                comm_, &request);
      if (auto ok = wait(request, deadline, peer, expected); !ok)
        return ok.error();
    }
    received_ += sizeof header + header.length;
    if (auto ok = check_envelope(expected, got, peer); !ok)
      return ok.error();
    return std::span<const std::byte>(current_);
  }

  // MPI_Iprobe tells whether a peer's envelope is waiting, not when it came, so ready
  // peers are served round robin, starting after the one returned last time.
  result<std::optional<int>> wait_any(std::span<const int> peers,
                                      Clock::time_point deadline) override {
    FEDCORE_ASSERT(!peers.empty(), "wait_any needs peers");
    if (failure_)
      return *failure_;
    for (;;) {
      for (std::size_t k = 1; k <= peers.size(); ++k) {
        const std::size_t i = (last_probed_ + k) % peers.size();
        FEDCORE_ASSERT(peers[i] >= 0 && peers[i] < size_ && peers[i] != rank_, "bad peer");
        int waiting = 0;
        MPI_Iprobe(peers[i], kEnvelopeTag, comm_, &waiting, MPI_STATUS_IGNORE);
        if (waiting) {
          last_probed_ = i;
          return std::optional<int>(peers[i]);
        }
      }
      if (Clock::now() >= deadline)
        return std::optional<int>();
      std::this_thread::yield();
    }
  }

  void abort(const error& why) noexcept override {
    if (!failure_)
      failure_ = fail(errc::aborted, why.message);
  }

  std::uint64_t bytes_sent() const noexcept override { return sent_; }
  std::uint64_t bytes_received() const noexcept override { return received_; }

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::unique_ptr<WireEnvelope> header;  // kept alive until the send completes
  };

  result<void> wait(MPI_Request& request, Clock::time_point deadline, int peer,
                    const Envelope& expected) {
    for (;;) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done)
        return {};
      // Sends to other peers progress meanwhile: MPI_Test drives the progress engine.
      if (Clock::now() >= deadline) {
        MPI_Cancel(&request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
        return fail(errc::deadline_exceeded, "timed out waiting for rank " + std::to_string(peer) +
                                                 " (" + to_string(expected) + ")");
      }
      std::this_thread::yield();
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<Pending> pending_;
  std::vector<std::byte> current_;
  std::size_t last_probed_ = 0;
  std::optional<error> failure_;
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(MPI_Comm comm) {
  return std::make_unique<MpiTransport>(comm);
}

}  // namespace fedcore::collective
