#include "server/api/events.hpp"

#include <nlohmann/json.hpp>

namespace fedcore::api {

std::string event_json(const store::EventRecord& e) {
  auto detail = nlohmann::json::parse(e.detail_json, nullptr, false);
  if (detail.is_discarded()) {
    detail = nlohmann::json::object();
  }
  // Databases written before the federation named end states hold their index; the API
  // names states everywhere ("finished"), so old events are translated.
  if (e.kind == "run_ended" && detail.is_object() && detail.contains("state") &&
      detail["state"].is_number_integer()) {
    const auto index = detail["state"].get<std::int64_t>();
    if (index >= 0 && index < static_cast<std::int64_t>(store::kRunStateNames.size())) {
      detail["state"] = store::kRunStateNames[static_cast<std::size_t>(index)];
    }
  }
  nlohmann::json j{{"id", e.id},
                   {"time_ms", e.time_ms},
                   {"kind", e.kind},
                   {"run_id", e.run_id ? nlohmann::json(*e.run_id) : nlohmann::json(nullptr)},
                   {"round", e.round ? nlohmann::json(*e.round) : nlohmann::json(nullptr)},
                   {"client_id", e.client_id},
                   {"detail", std::move(detail)}};
  // dump() never emits a raw newline, which would end the SSE data line.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string format_sse(const store::EventRecord& e) {
  std::string kind;
  for (char c : e.kind) {
    // The event name is ours, but keep the frame well-formed whatever it holds.
    kind.push_back(c == '\n' || c == '\r' ? '_' : c);
  }
  return "id: " + std::to_string(e.id) + "\nevent: " + kind + "\ndata: " + event_json(e) + "\n\n";
}

std::shared_ptr<Subscription> EventHub::subscribe() {
  auto s = std::make_shared<Subscription>();
  subs_.emplace(s.get(), s);
  return s;
}

void EventHub::unsubscribe(const std::shared_ptr<Subscription>& s) {
  subs_.erase(s.get());
}

void EventHub::publish(const store::EventRecord& event) {
  if (subs_.empty()) {
    return;
  }
  const auto frame = format_sse(event);
  for (auto& [key, s] : subs_) {
    if (s->overflowed) {
      continue;
    }
    if (s->frames.size() >= max_queue_) {
      s->overflowed = true;
      s->frames.clear();
    } else {
      s->frames.push_back(frame);
    }
    if (s->wake) {
      s->wake();
    }
  }
}

}  // namespace fedcore::api
