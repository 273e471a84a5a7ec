// Colluding attackers for fedcore-sim's "a little is enough" attack (Baruch et al. 2019,
// "A Little Is Enough: Circumventing Defenses For Distributed Learning").
//
// The malicious sites pool the honest updates they trained in a round and all send the same
// crafted one, mu - z * sigma per coordinate (the mean and standard deviation of their honest
// updates), a shift small enough to sit inside the spread of honest updates that median,
// trimmed mean and Krum trust, in the direction that hurts. z comes from the paper: with n
// sites in a round and m of them malicious, s = floor(n / 2 + 1) - m honest sites must be
// "won over", and z = Phi^-1((n - s) / n) (kept in [0, 3]); --attack-scale > 0 sets z itself.
//
// How the sites meet without blocking each other: each malicious site deposits its honest
// update from the after_training seam (on the compute pool, returning at once), and waits
// for the others in the before_update seam, on its io thread, polling a timer, so that a
// compute pool smaller than the number of attackers never deadlocks. The wait is bounded
// (the round's timeout); an attacker that has not heard from all the others by then sends
// what the deposits so far make.
//
// What this needs of a run: every malicious site trains in every round (fedcore-sim refuses
// the attack with --clients-per-round or --fraction below all sites), in one process (not
// across --mpi ranks). Thread safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include <boost/asio/awaitable.hpp>

namespace fedcore::sim {

// z = Phi^-1((n - s) / n), s = floor(n / 2 + 1) - m, clamped to [0, 3]. REQUIRES: n > 0.
double little_is_enough_z(std::size_t sites, std::size_t malicious);

// mu - z * sigma per coordinate over `updates` (sigma: the population standard deviation).
// REQUIRES: updates non-empty, all of one size.
std::vector<float> little_is_enough_update(const std::vector<std::vector<float>>& updates,
                                           double z);

class Collusion {
 public:
  // `attackers`: how many malicious sites deposit per round; `z` as above.
  Collusion(std::size_t attackers, double z);

  // Attacker `index` trained `honest` in `round`. A deposit for a round whose crafted
  // update was already made starts that round over (the server redid it).
  void deposit(std::int64_t round, std::size_t index, std::span<const float> honest);
  // The crafted update of `round` once every attacker has deposited; nothing before.
  std::optional<std::vector<float>> crafted(std::int64_t round);
  // The crafted update from whatever was deposited for `round` (the wait ran out); nothing
  // when no attacker deposited.
  std::optional<std::vector<float>> crafted_from_what_came(std::int64_t round);
  // Waits (polling every `poll`, at most `limit`) for the crafted update of `round` and
  // writes it over `update`; after `limit`, uses what came. Runs on the caller's executor.
  boost::asio::awaitable<void> rewrite(std::int64_t round, std::vector<float>& update,
                                       std::chrono::milliseconds limit,
                                       std::chrono::milliseconds poll);

  double z() const noexcept { return z_; }

 private:
  struct Round {
    std::map<std::size_t, std::vector<float>> honest;
    std::optional<std::vector<float>> crafted;
  };
  std::vector<float> craft(Round& round);  // REQUIRES: mutex_ held, honest non-empty

  const std::size_t attackers_;
  const double z_;
  std::mutex mutex_;
  std::map<std::int64_t, Round> rounds_;  // guarded by mutex_; the last few rounds only
};

}  // namespace fedcore::sim
