#include "shared/privacy/sampling.hpp"

#include <string>

namespace fedcore::privacy {

std::string_view sampling_name(Sampling sampling) noexcept {
  switch (sampling) {
    case Sampling::poisson:
      return "poisson";
    case Sampling::fixed_size:
      return "fixed_size";
    case Sampling::full:
      return "full";
  }
  return "unknown";
}

result<Sampling> accountant_sampling(const RunSampling& run) {
  switch (run.selection) {
    case Selection::poisson:
      if (!(run.probability > 0 && run.probability <= 1)) {
        return fail(errc::invalid_argument, "poisson selection probability " +
                                                std::to_string(run.probability) +
                                                " is not in (0, 1]");
      }
      // Amplification needs the coins hidden from the model's observers.
      return run.selection_secret && run.probability < 1 ? Sampling::poisson : Sampling::full;
    case Selection::uniform_fixed_size:
      if (run.per_round == 0 || run.per_round > run.population) {
        return fail(errc::invalid_argument, "fixed-size selection of " +
                                                std::to_string(run.per_round) + " from " +
                                                std::to_string(run.population) + " clients");
      }
      return run.selection_secret && run.per_round < run.population ? Sampling::fixed_size
                                                                    : Sampling::full;
    case Selection::everyone:
    case Selection::schedule:
      // No randomness to amplify with; every round is charged to every client.
      return Sampling::full;
    case Selection::weighted:
      return fail(errc::failed_precondition,
                  "weighted: clients are selected with unequal probabilities, which the "
                  "accountant's Poisson and fixed-size analyses do not cover; refusing to "
                  "account this run");
    case Selection::first_responders:
      return fail(errc::failed_precondition,
                  "first_responders: over-selection keeps whoever answers first, so who is "
                  "aggregated may depend on the clients' data; refusing to account this run");
  }
  return fail(errc::invalid_argument, "unknown selection method");
}

}  // namespace fedcore::privacy
