#include "shared/secagg/plan.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace fedcore::secagg {

result<RoundPlan> plan_round(std::uint32_t clients, const SecAggSettings& settings) {
  if (clients < 3) {
    return fail(
        errc::invalid_argument,
        "secure aggregation needs at least 3 clients in a round, have " + std::to_string(clients));
  }
  if (!(settings.clip_range > 0) || !std::isfinite(settings.clip_range)) {
    return fail(errc::invalid_argument, "secure_aggregation.clip_range must be positive");
  }
  if (settings.quant_range < 2) {
    return fail(errc::invalid_argument, "secure_aggregation.quant_range must be at least 2");
  }
  RoundPlan plan;
  plan.clients = clients;
  plan.clip_range = settings.clip_range;
  if (settings.degree != 0) {
    if (settings.degree >= clients ||
        (settings.degree % 2 != 0 && settings.degree != clients - 1)) {
      return fail(errc::invalid_argument,
                  "secure_aggregation.degree " + std::to_string(settings.degree) +
                      " must be even and below the " + std::to_string(clients) +
                      " clients of the round (or exactly clients - 1)");
    }
    plan.degree = settings.degree;
  } else {
    // ~3 log2 n, rounded up to even; the complete graph when that is not smaller.
    auto k = static_cast<std::uint32_t>(std::ceil(3.0 * std::log2(double(clients))));
    k += k % 2;
    plan.degree = std::min(k, clients - 1);
  }
  plan.threshold = settings.threshold != 0 ? settings.threshold : plan.degree / 2 + 1;
  if (2 * plan.threshold <= plan.degree || plan.threshold > plan.degree) {
    return fail(errc::invalid_argument, "secure_aggregation.threshold " +
                                            std::to_string(plan.threshold) +
                                            " must be a strict majority of the " +
                                            std::to_string(plan.degree) + " neighbours");
  }
  // n * quant_range < 2^32: the sum of n values in [0, quant_range] stays in the ring.
  const std::uint64_t limit = ((std::uint64_t{1} << 32) - 1) / clients;
  plan.quant_range =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(settings.quant_range, limit));
  return plan;
}

std::uint32_t required_survivors(const RoundPlan& plan) noexcept {
  return std::max(plan.threshold, plan.min_survivors);
}

double quantization_step(const RoundPlan& plan) noexcept {
  return 2.0 * plan.clip_range / double(plan.quant_range);
}

}  // namespace fedcore::secagg
