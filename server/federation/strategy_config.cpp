#include "server/federation/strategy_config.hpp"

#include <algorithm>
#include <array>
#include <span>

#include <nlohmann/json.hpp>

namespace fedcore::federation {
namespace {

using nlohmann::json;

constexpr std::string_view kOptionKeys[] = {
    "server_lr",       "server_momentum", "beta1",         "beta2",           "tau",
    "byzantine",       "trim_fraction",   "krum_selected", "clipping_radius", "clipping_iterations",
    "clipping_center", "memory_budget_mb"};

// Which options each strategy reads. A key outside its strategy's list is refused rather
// than ignored: "beta2" given to fedavgm would otherwise look like it was applied.
std::span<const std::string_view> options_of(std::string_view name) {
  static constexpr std::array<std::string_view, 0> kNone{};
  static constexpr std::array<std::string_view, 2> kMomentum{"server_lr", "server_momentum"};
  static constexpr std::array<std::string_view, 3> kAdagrad{"server_lr", "beta1", "tau"};
  static constexpr std::array<std::string_view, 4> kAdaptive{"server_lr", "beta1", "beta2", "tau"};
  static constexpr std::array<std::string_view, 1> kBuffered{"memory_budget_mb"};
  static constexpr std::array<std::string_view, 2> kTrimmed{"trim_fraction", "memory_budget_mb"};
  static constexpr std::array<std::string_view, 2> kKrum{"byzantine", "memory_budget_mb"};
  static constexpr std::array<std::string_view, 3> kMultiKrum{"byzantine", "krum_selected",
                                                              "memory_budget_mb"};
  static constexpr std::array<std::string_view, 4> kClipping{
      "clipping_radius", "clipping_iterations", "clipping_center", "memory_budget_mb"};
  if (name == "fedavgm")
    return kMomentum;
  if (name == "fedadagrad")
    return kAdagrad;
  if (name == "fedadam" || name == "fedyogi")
    return kAdaptive;
  if (name == "median")
    return kBuffered;
  if (name == "trimmed_mean")
    return kTrimmed;
  if (name == "krum" || name == "bulyan")
    return kKrum;
  if (name == "multi_krum")
    return kMultiKrum;
  if (name == "centered_clipping")
    return kClipping;
  if (name == "scaffold")
    return std::span<const std::string_view>(kMomentum).first(1);  // server_lr
  return kNone;
}

bool reads(std::string_view name, std::string_view key) {
  const auto keys = options_of(name);
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

}  // namespace

result<StrategyConfig> parse_strategy_config(std::string_view name, const json* options,
                                             const JsonPath& at) {
  StrategyConfig c;
  c.name = std::string(name);
  if (options == nullptr) {
    return c;
  }
  StrictObject o(*options, at, kOptionKeys);
  if (o.ok()) {
    for (const auto key : kOptionKeys) {
      if (o.has(key) && !reads(name, key)) {
        o.reject(key, "does not apply to strategy \"" + std::string(name) + "\"");
        break;
      }
    }
  }
  o.number("server_lr", c.server_lr, {0, 100, true});
  o.number("server_momentum", c.server_momentum, {0, 1, false, true});
  o.number("beta1", c.beta1, {0, 1, false, true});
  o.number("beta2", c.beta2, {0, 1, false, true});
  o.number("tau", c.tau, {0, 1, true});
  o.integer("byzantine", c.byzantine, {0, 100000});
  o.number("trim_fraction", c.trim_fraction, {0, 0.5, false, true});
  o.integer("krum_selected", c.krum_selected, {0, 1000000});
  o.number("clipping_radius", c.clipping_radius, {0, 1e12, true});
  o.integer("clipping_iterations", c.clipping_iterations, {1, 100});
  o.choice("clipping_center", c.clipping_center, {"model", "previous_step"});
  std::size_t budget_mb = c.memory_budget_bytes >> 20;
  o.integer("memory_budget_mb", budget_mb, {1, std::int64_t{1} << 20});
  c.memory_budget_bytes = budget_mb << 20;
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return c;
}

json strategy_options_json(const StrategyConfig& c) {
  const json all{{"server_lr", c.server_lr},
                 {"server_momentum", c.server_momentum},
                 {"beta1", c.beta1},
                 {"beta2", c.beta2},
                 {"tau", c.tau},
                 {"byzantine", c.byzantine},
                 {"trim_fraction", c.trim_fraction},
                 {"krum_selected", c.krum_selected},
                 {"clipping_radius", c.clipping_radius},
                 {"clipping_iterations", c.clipping_iterations},
                 {"clipping_center", c.clipping_center},
                 {"memory_budget_mb", c.memory_budget_bytes >> 20}};
  json out = json::object();
  for (const auto key : options_of(c.name)) {
    out[std::string(key)] = all.at(std::string(key));
  }
  return out;
}

}  // namespace fedcore::federation
