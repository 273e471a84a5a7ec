// SiteBehaviour: what the simulated sites do between finishing local training and
// sending their update, through ClientDaemon's before_update seam. The round code (the
// real FederationServer and ClientDaemon) is untouched; this only decides when, and
// whether, an update leaves a site.
//
// Faults. For each (client, round, attempt) a seeded draw decides, independently of timing
// (attempt: how many times this client has been asked to train this round number, so a
// round the server retries draws again, as a flaky site would fail again or not):
//   drop  with probability drop_prob: the site closes its connection instead of sending
//         (the server records the client as dropped; the daemon reconnects, as after any
//         lost connection);
//   slow  otherwise, with probability slow_prob: the site sends after an extra
//         (slow_factor - 1) x its training time.
//
// Updates leave as soon as they are ready. (Until 2026-11-26 the behaviour also held them
// and released them one at a time in client order, because the server's float running
// mean depended on arrival order; FedAvg's sum is exact now, server/federation/
// fixed_point_mean.hpp, so the order changes no bit and the hand-offs are gone.)
//
// Thread safety: all methods may be called from any thread. The seam's coroutine runs
// on the calling daemon's io_context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include <boost/asio/awaitable.hpp>

#include "client/daemon.hpp"
#include "sim/options.hpp"

namespace fedcore::sim {

enum class Fault { none, drop, slow };

struct FaultCounts {
  std::uint64_t drops = 0;
  std::uint64_t slow = 0;
};

class SiteBehaviour {
 public:
  explicit SiteBehaviour(const SimOptions& options);
  ~SiteBehaviour();
  SiteBehaviour(const SiteBehaviour&) = delete;
  SiteBehaviour& operator=(const SiteBehaviour&) = delete;

  // The seeded fault of client `index` in `round` (pure; the same for every run).
  Fault fault(std::size_t index, std::int64_t round, std::uint32_t attempt = 0) const noexcept;

  // The before_update seam for client `index`. The behaviour must outlive the daemon.
  std::function<boost::asio::awaitable<client::UpdateAction>(const client::TrainedRound&)> seam(
      std::size_t index);

  FaultCounts counts() const;

 private:
  boost::asio::awaitable<client::UpdateAction> before_update(std::size_t index,
                                                             client::TrainedRound trained);

  SimOptions options_;
  mutable std::mutex mutex_;
  FaultCounts counts_;  // guarded by mutex_
  // Per client: the last round it trained and how many times (attempts); guarded by mutex_.
  std::map<std::size_t, std::pair<std::int64_t, std::uint32_t>> attempts_;
};

}  // namespace fedcore::sim
