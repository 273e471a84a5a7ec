#include "server/store/detail/dp_charge_text.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

namespace fedcore::store::detail {

std::string dp_charge_text(const DpCharge& charge) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& s : charge.shapes) {
    shapes.push_back({s.q, s.steps});
  }
  nlohmann::json j{{"z", charge.noise_multiplier}, {"shapes", std::move(shapes)}};
  if (charge.clip_norm) {
    j["clip"] = *charge.clip_norm;
  }
  return j.dump();
}

result<DpCharge> parse_dp_charge(const std::string& text) {
  const auto bad = [&] {
    return fail(errc::data_loss, "rounds.dp_charge is not a DP charge: " + text.substr(0, 200));
  };
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("z") || !j["z"].is_number() || !j.contains("shapes") ||
      !j["shapes"].is_array()) {
    return bad();
  }
  DpCharge charge;
  charge.noise_multiplier = j["z"].get<double>();
  for (const auto& s : j["shapes"]) {
    if (!s.is_array() || s.size() != 2 || !s[0].is_number() || !s[1].is_number_integer()) {
      return bad();
    }
    charge.shapes.push_back({s[0].get<double>(), s[1].get<std::int64_t>()});
  }
  if (j.contains("clip")) {
    if (!j["clip"].is_number()) {
      return bad();
    }
    charge.clip_norm = j["clip"].get<double>();
  }
  if (!std::isfinite(charge.noise_multiplier) || charge.noise_multiplier < 0) {
    return bad();
  }
  return charge;
}

}  // namespace fedcore::store::detail
