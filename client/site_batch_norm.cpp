#include "client/site_batch_norm.hpp"

#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>

#include "shared/model/param_io.hpp"
#include "shared/model/spec.hpp"

namespace fedcore::client {
namespace {

constexpr const char* kTensor = "site_batch_norm";  // the one tensor of the state file

}  // namespace

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

result<void> SiteBatchNorm::keep(std::int64_t run_id, std::vector<float> values) {
  std::lock_guard lock(mutex_);
  run_id_ = run_id;
  values_ = std::move(values);
  if (path_.empty()) {
    return {};
  }
  if (values_.empty()) {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
    return {};
  }
  model::ParamLayout layout;
  layout.append(kTensor, {static_cast<std::int64_t>(values_.size())});
  return model::save_params(path_, layout, values_, nlohmann::json{{"run", run_id}}.dump());
}

result<void> SiteBatchNorm::persist_to(std::string path) {
  std::lock_guard lock(mutex_);
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    auto bundle = model::load_params(path);
    if (!bundle) {
      return fail(bundle.error().code, "site state '" + path + "': " + bundle.error().message);
    }
    const auto meta = nlohmann::json::parse(bundle->metadata_json, nullptr, false);
    const auto& entries = bundle->layout.entries();
    if (entries.size() != 1 || entries[0].name != kTensor || !meta.is_object() ||
        !meta.contains("run") || !meta["run"].is_number_integer()) {
      return fail(errc::invalid_argument, "site state '" + path +
                                              "' is a parameter file but not this site's "
                                              "BatchNorm (FedBN) values; move it away to "
                                              "start afresh");
    }
    run_id_ = meta["run"].get<std::int64_t>();
    values_ = std::move(bundle->params);
  }
  path_ = std::move(path);
  return {};
}

}  // namespace fedcore::client
