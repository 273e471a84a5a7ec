// JSON views of the store's records and the request helpers every resource uses.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "server/api/handlers.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::api::detail {
namespace {

nlohmann::json parse_or(const std::string& text, nlohmann::json fallback) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

}  // namespace

nlohmann::json number_or_null(std::optional<double> v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json client_json(const store::ClientRecord& c, const federation::SessionInfo* session) {
  const auto caps = parse_or(c.capabilities_json, nlohmann::json::object());
  auto field = [&](const char* key) {
    return caps.is_object() && caps.contains(key) ? caps[key] : nlohmann::json(nullptr);
  };
  return {
      {"id", c.id},
      {"online", session != nullptr},
      {"peer", session ? nlohmann::json(session->peer) : nlohmann::json(nullptr)},
      {"connected_ms", session ? nlohmann::json(session->connected_ms) : nlohmann::json(nullptr)},
      {"first_seen_ms", c.first_seen_ms},
      {"last_seen_ms", c.last_seen_ms},
      {"samples", c.samples},
      {"test_samples", field("test_samples")},
      {"input_shape", parse_or(c.input_shape_json, nlohmann::json::array())},
      {"num_classes", field("num_classes")},
      {"software", field("software")},
      {"rounds_joined", c.rounds_joined},
      {"training", session != nullptr && session->training}};
}

nlohmann::json run_json(const store::RunRecord& r) {
  auto config = parse_or(r.config_json, nlohmann::json::object());
  const bool manual = config.is_object() && config.contains("manual") &&
                      config["manual"].is_boolean() && config["manual"].get<bool>();
  return {{"id", r.id},
          {"name", r.name},
          {"state", store::to_string(r.state)},
          {"reason", r.error},
          {"rounds_total", r.rounds_total},
          {"last_round", r.last_round},
          {"manual", manual},
          {"created_ms", r.created_ms},
          {"updated_ms", r.updated_ms},
          {"config", std::move(config)}};
}

nlohmann::json storage_hold_json(const federation::StorageHold& hold, const Clock& clock) {
  const auto until_probe = std::chrono::duration<double>(hold.next_probe - clock.steady()).count();
  return {{"run_id", hold.run_id},
          {"kind", federation::storage_fault_code(hold.kind)},
          {"reason", hold.reason},
          {"since_ms", hold.since_ms},
          {"recorded", hold.recorded},
          {"failed_probes", hold.probes},
          {"last_probe_error", hold.last_probe_error},
          {"next_probe_in_s", std::max(until_probe, 0.0)}};
}

nlohmann::json run_view(const ApiContext& context, const store::RunRecord& r) {
  const auto hold = context.federation.status().storage_hold;
  if (!hold || hold->run_id != r.id) {
    return run_json(r);
  }
  auto held = r;
  held.state = store::RunState::paused;
  held.error = hold->reason;
  auto out = run_json(held);
  out["storage"] = storage_hold_json(*hold, clock_of(context));
  return out;
}

nlohmann::json round_json(const store::RoundRecord& r) {
  const double duration =
      r.finished_ms >= r.started_ms ? double(r.finished_ms - r.started_ms) / 1000.0 : 0.0;
  return {{"run_id", r.run_id},
          {"round", r.round},
          {"attempt", r.attempt},
          {"state", store::to_string(r.state)},
          {"started_ms", r.started_ms},
          {"finished_ms", r.finished_ms},
          {"duration_s", duration},
          {"selected", r.selected},
          {"accepted", r.accepted},
          {"rejected", r.rejected},
          {"timed_out", r.timed_out},
          {"dropped", r.dropped},
          {"late", r.late},
          {"train_loss", number_or_null(r.train_loss)},
          {"train_accuracy", number_or_null(r.train_accuracy)},
          {"eval_loss", number_or_null(r.eval_loss)},
          {"eval_accuracy", number_or_null(r.eval_accuracy)},
          {"fed_eval_loss", number_or_null(r.fed_eval_loss)},
          {"fed_eval_accuracy", number_or_null(r.fed_eval_accuracy)},
          {"bytes_up", r.bytes_up},
          {"bytes_down", r.bytes_down},
          {"secure_aggregation", r.secure_aggregation},
          {"epsilon", number_or_null(r.epsilon)},
          {"failure_reason", r.failure_reason}};
}

nlohmann::json phases_json(const store::RoundPhases& p) {
  return {{"total_ms", p.total_ms},
          {"requests_queued_ms", p.requests_queued_ms},
          {"train_written_ms", number_or_null(p.train_written_ms)},
          {"first_update_ms", number_or_null(p.first_update_ms)},
          {"last_update_ms", number_or_null(p.last_update_ms)},
          {"validate_ms", p.validate_ms},
          {"aggregate_ms", p.aggregate_ms},
          {"evaluate_ms", p.evaluate_ms},
          {"federated_evaluation_ms", number_or_null(p.federated_evaluation_ms)},
          {"checkpoint_ms", p.checkpoint_ms},
          {"commit_ms", p.commit_ms},
          {"cpu_user_ms", p.cpu_user_ms},
          {"cpu_system_ms", p.cpu_system_ms}};
}

nlohmann::json result_json(const store::ClientResult& r) {
  return {{"client_id", r.client_id},
          {"status", store::to_string(r.status)},
          {"reason", r.reason},
          {"samples", r.samples},
          {"loss", number_or_null(r.loss)},
          {"accuracy", number_or_null(r.accuracy)},
          {"duration_s", number_or_null(r.duration_s)},
          {"bytes_up", r.bytes_up},
          {"bytes_down", r.bytes_down},
          {"eval_loss", number_or_null(r.eval_loss)},
          {"eval_accuracy", number_or_null(r.eval_accuracy)},
          {"eval_samples", r.eval_samples}};
}

result<Page> page_params(std::string_view query) {
  auto limit = int_param(query, "limit", 1, 500, 50);
  if (!limit) {
    return limit.error();
  }
  auto offset = int_param(query, "offset", 0, 1'000'000'000, 0);
  if (!offset) {
    return offset.error();
  }
  return Page{*limit, *offset};
}

Response page_response(const nlohmann::json& all, const Page& page) {
  nlohmann::json items = nlohmann::json::array();
  const auto total = static_cast<std::int64_t>(all.size());
  for (std::int64_t i = page.offset; i < total && i < page.offset + page.limit; ++i) {
    items.push_back(all[static_cast<std::size_t>(i)]);
  }
  nlohmann::json body{{"items", std::move(items)},
                      {"total", total},
                      {"limit", page.limit},
                      {"offset", page.offset}};
  return json_reply(200, body);
}

result<std::int64_t> id_param(const PathParams& params, std::string_view name) {
  const auto it = params.find(name);
  if (it != params.end()) {
    if (auto v = parse_int(it->second, 1, std::numeric_limits<std::int64_t>::max())) {
      return *v;
    }
  }
  return fail(errc::invalid_argument,
              std::string(name) + ": must be a positive integer, got " +
                  nlohmann::json(it == params.end() ? std::string() : it->second.substr(0, 64))
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

result<nlohmann::json> json_object_body(const Request& request) {
  if (request.body.empty()) {
    return result<nlohmann::json>(boost::system::in_place_value, nlohmann::json::object());
  }
  // Strictly: besides invalid JSON (which includes invalid UTF-8 and numbers past a double,
  // 1e400), duplicate keys and nesting past 64 levels are refused; nothing throws.
  auto j = parse_json_strict(request.body, "body");
  if (!j) {
    return j.error();
  }
  if (!j->is_object()) {
    return fail(errc::invalid_argument, "body: must be a JSON object");
  }
  return j;
}

Response json_reply(int status, const nlohmann::json& body) {
  return json_response(status, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace fedcore::api::detail
