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
// Ordered uploads (reproducibility). The server folds updates into a float running mean
// in arrival order, and float addition is not associative; with sites on several threads
// the arrival order, and so the last bits of the model, would vary between runs. When
// told how many clients a round selected (round_started), the behaviour holds every
// finished update and releases them one at a time in client-index order, the next one
// only after the server answered the previous (answered()). A site that will send nothing
// (gave_up(): its training failed) counts as settled, so the others do not wait for it.
// Without round_started, an update is released as soon as it is ready (unordered).
//
// Thread safety: all methods may be called from any thread. The seam's coroutine runs
// on the calling daemon's io_context and resumes there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

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
  SiteBehaviour(const SimOptions& options, std::size_t clients);
  ~SiteBehaviour();
  SiteBehaviour(const SiteBehaviour&) = delete;
  SiteBehaviour& operator=(const SiteBehaviour&) = delete;

  // The seeded fault of client `index` in `round` (pure; the same for every run).
  Fault fault(std::size_t index, std::int64_t round, std::uint32_t attempt = 0) const noexcept;

  // The before_update seam for client `index`. The behaviour must outlive the daemon.
  std::function<boost::asio::awaitable<client::UpdateAction>(const client::TrainedRound&)> seam(
      std::size_t index);

  // The server started `round` with `selected` clients: order that round's updates.
  void round_started(std::int64_t round, std::size_t selected);
  // The server has dealt with the update (accepted, rejected or refused) of `client_id`.
  void answered(const std::string& client_id);
  // `client_index` will send nothing this round (its local training failed; the server
  // recorded that as its answer): the ordered release must not wait for it.
  void gave_up(std::size_t client_index, std::int64_t round);

  FaultCounts counts() const;

 private:
  struct Waiter;
  boost::asio::awaitable<client::UpdateAction> before_update(std::size_t index,
                                                             client::TrainedRound trained);
  void arrive(std::size_t index, std::int64_t round, std::shared_ptr<Waiter> waiter);
  void release_ready();  // REQUIRES: mutex_ held

  SimOptions options_;
  std::size_t clients_;
  mutable std::mutex mutex_;
  FaultCounts counts_;                                   // guarded by mutex_
  std::int64_t round_ = 0;                               // guarded by mutex_
  std::size_t expected_ = 0;                             // 0: unordered; guarded by mutex_
  std::size_t released_ = 0;                             // guarded by mutex_
  std::string in_flight_;                                // guarded by mutex_
  std::map<std::size_t, std::shared_ptr<Waiter>> held_;  // guarded by mutex_
  std::set<std::size_t> settled_;  // arrived or gave up this round; guarded by mutex_
  // Per client: the last round it trained and how many times (attempts); guarded by mutex_.
  std::map<std::size_t, std::pair<std::int64_t, std::uint32_t>> attempts_;
};

}  // namespace fedcore::sim
