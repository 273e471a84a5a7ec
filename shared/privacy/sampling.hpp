// Which sampling assumption the RDP accountant may make for a run, given how the run
// really picks the clients whose updates enter each round's aggregate — or why it must
// refuse to account the run at all.
//
// Privacy amplification by sampling holds only if the sample is random in the way the
// analysis assumes, independent of the clients' data, and unknown to whoever sees the
// released models. The accountant knows three assumptions:
//   poisson     each client is in a round independently with the same probability q
//               (RdpAccountant::compose_poisson_gaussian, add-or-remove-one);
//   fixed_size  exactly m of the N eligible clients, uniformly without replacement, N
//               public (compose_fixed_size_gaussian, replace-one);
//   full        no amplification: every client is assumed to be in every round
//               (compose_poisson_gaussian with q = 1). This bounds ANY selection that does
//               not depend on client data, so it is the conservative fallback.
// Refused (errc::failed_precondition, the message names the reason):
//   weighted         inclusion probabilities differ between clients (by data size, say):
//                    the probability itself depends on the data, no assumption fits;
//   first_responders over-selection, "ask k, keep the first m answers": who is kept
//                    depends on response times, which can depend on the data.
#pragma once

#include <cstdint>
#include <string_view>

#include "shared/util/error.hpp"

namespace fedcore::privacy {

// The accountant's assumption.
enum class Sampling { poisson, fixed_size, full };
std::string_view sampling_name(Sampling sampling) noexcept;

// How a run actually selects clients each round.
enum class Selection {
  poisson,             // an independent coin with probability q per eligible client
  uniform_fixed_size,  // exactly per_round of population, uniformly without replacement
  everyone,            // every eligible client every round
  schedule,            // a fixed schedule (round-robin, cohorts): no randomness
  weighted,            // unequal probabilities
  first_responders,    // over-selection, the first answers kept
};

struct RunSampling {
  Selection selection = Selection::everyone;
  std::uint64_t population = 0;  // N, eligible clients (uniform_fixed_size)
  std::uint64_t per_round = 0;   // m (uniform_fixed_size)
  double probability = 0;        // q (poisson)
  // True if the selection is hidden from whoever sees the released models (drawn from a
  // cryptographic source and not published). A selection anyone can recompute, e.g. a
  // shuffle seeded by the run's configured seed, gives no amplification: such a run is
  // accounted as `full`.
  bool selection_secret = false;
};

// The assumption to account `run` under. poisson and uniform_fixed_size map to
// themselves when the selection is secret and to `full` otherwise; everyone and schedule
// map to `full`.
// Errors: failed_precondition for weighted and first_responders (the message starts with
// the selection's name); invalid_argument for a poisson probability not in (0, 1] or a
// fixed size of 0 or above the population.
result<Sampling> accountant_sampling(const RunSampling& run);

}  // namespace fedcore::privacy
