#include "server/federation/server_state_file.hpp"

#include <system_error>

#include <nlohmann/json.hpp>

#include "shared/model/param_io.hpp"

namespace fedcore::federation {

std::filesystem::path server_state_path(const std::filesystem::path& run_dir, std::int64_t round) {
  return run_dir / ("round-" + std::to_string(round) + ".state.fcp");
}

result<void> write_server_state(const std::filesystem::path& path, const ServerState& state,
                                std::size_t param_count, Disks* disks) {
  model::ParamLayout layout;
  for (const auto& name : state.names) {
    layout.append(name, {static_cast<std::int64_t>(param_count)});
  }
  // In pieces, from where the values lie: at 10M parameters Adam's state is 80 MB.
  const auto encoded = model::encode_params_in_parts(
      layout, state.values,
      nlohmann::json{{"strategy", state.strategy}, {"steps", state.steps}}.dump());
  const auto parts = encoded.parts();
  RealDisks real;
  return (disks != nullptr ? *disks : real).write_file(path.string(), parts);
}

result<ServerState> read_server_state(const std::filesystem::path& path, std::size_t param_count) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return fail(errc::not_found, "no strategy state file " + path.string());
  }
  auto bundle = model::load_params(path.string());
  if (!bundle) {
    return bundle.error();
  }
  const auto bad = [&](const std::string& why) {
    return fail(errc::invalid_argument, "strategy state file " + path.string() + ": " + why);
  };
  ServerState state;
  for (const auto& entry : bundle->layout.entries()) {
    if (entry.size != param_count) {
      return bad("vector '" + entry.name + "' holds " + std::to_string(entry.size) +
                 " values for a model of " + std::to_string(param_count));
    }
    state.names.push_back(entry.name);
  }
  const auto meta = nlohmann::json::parse(bundle->metadata_json, nullptr, false);
  if (!meta.is_object() || !meta.contains("strategy") || !meta["strategy"].is_string() ||
      !meta.contains("steps") || !meta["steps"].is_number_integer()) {
    return bad("its metadata names no strategy and step count");
  }
  state.strategy = meta["strategy"].get<std::string>();
  state.steps = meta["steps"].get<std::int64_t>();
  state.values = std::move(bundle->params);
  return state;
}

}  // namespace fedcore::federation
