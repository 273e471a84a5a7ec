#include "client/site_batch_norm.hpp"

#include <utility>

#include <nlohmann/json.hpp>

#include "shared/model/spec.hpp"

namespace fedcore::client {

std::vector<float> with_site_values(std::span<const float> global,
                                    std::span<const model::ValueRange> ranges,
                                    std::span<const float> site) {
  std::vector<float> start(global.begin(), global.end());
  if (!site.empty() && site.size() == model::total_size(ranges)) {
    model::scatter_ranges(site, start, ranges);
  }
  return start;
}

std::vector<float> take_site_values(std::span<const float> global, std::span<float> trained,
                                    std::span<const model::ValueRange> ranges) {
  auto site = model::gather_ranges(trained, ranges);
  model::scatter_ranges(model::gather_ranges(global, ranges), trained, ranges);
  return site;
}

result<std::vector<model::ValueRange>> external_site_ranges(const nlohmann::json& spec) {
  auto parsed = model::parse_model_spec(spec);
  if (!parsed) {
    return parsed.error();
  }
  auto ranges = model::external_site_ranges(*parsed);
  if (ranges.empty()) {
    return fail(errc::invalid_argument,
                "'site_batch_norm' (FedBN) asks for the site's own normalisation layers, but "
                "the model's layout marks no tensor \"normalization\"");
  }
  return ranges;
}

std::vector<float> SiteBatchNorm::of(std::int64_t run_id) {
  std::lock_guard lock(mutex_);
  return run_id == run_id_ ? values_ : std::vector<float>();
}

void SiteBatchNorm::keep(std::int64_t run_id, std::vector<float> values) {
  std::lock_guard lock(mutex_);
  run_id_ = run_id;
  values_ = std::move(values);
}

}  // namespace fedcore::client
