// Prometheus rendering, reason labels, and the bounded event fan-out.
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/api/events.hpp"
#include "server/api/metrics.hpp"
#include "tests/api/metrics_parser.hpp"

namespace fedcore::api {
namespace {

store::EventRecord event(std::int64_t id, std::string kind, std::string detail = "{}") {
  store::EventRecord e;
  e.id = id;
  e.time_ms = 1000 + id;
  e.kind = std::move(kind);
  e.run_id = 1;
  e.round = 2;
  e.client_id = "hospital-a";
  e.detail_json = std::move(detail);
  return e;
}

TEST(ApiMetrics, ReasonsBecomeAFixedSetOfLabels) {
  EXPECT_EQ(reason_label("update value w[3] is NaN"), "non_finite");
  EXPECT_EQ(reason_label("update value w[3] is infinite"), "non_finite");
  EXPECT_EQ(reason_label("update layout ab differs from the global model's cd"), "layout");
  EXPECT_EQ(reason_label("update has 3 values, the model has 4"), "shape");
  EXPECT_EQ(reason_label("update claims 0 samples; allowed 1 to 10"), "samples");
  EXPECT_EQ(reason_label("update moves the model by L2 norm 9, above the bound 1"), "norm");
  EXPECT_EQ(reason_label("stale or replayed update for run 1 round 1; current is run 1 round 2"),
            "replay");
  EXPECT_EQ(reason_label("nonce does not match"), "nonce");
  EXPECT_EQ(reason_label("something new"), "other");
}

TEST(ApiMetrics, RendersParsableTextWithEveryFamily) {
  MetricsSnapshot s;
  s.clients_online = 3;
  s.runs_by_state = {{"finished", 2}, {"running", 1}};
  s.rounds_committed = 4;
  s.rounds_failed = 1;
  s.round_durations_s = {0.2, 3, 3, 700};
  s.bytes_in = 100;
  s.bytes_out = 200;
  s.uptime_s = 12.5;
  UpdateCounters updates;
  updates.on_event(event(1, "update_accepted"));
  updates.on_event(event(2, "update_accepted"));
  updates.on_event(event(3, "update_rejected", R"({"reason":"update value w[0] is NaN"})"));
  updates.on_event(event(4, "round_committed"));
  updates.on_event(event(5, "update_rejected", R"({"reason":"x","reason_code":"norm"})"));
  updates.on_event(event(6, "update_rejected", R"({"reason":"x","reason_code":"a\"b"})"));
  updates.on_event(
      event(7, "update_stale", R"({"reason":"nonce does not match","reason_code":"stale"})"));
  const auto text = render_metrics(s, updates);
  auto parsed = testing::parse_prometheus(text);
  ASSERT_TRUE(parsed.ok) << parsed.problem << "\n" << text;
  EXPECT_EQ(parsed.value("fedcore_clients_online"), 3);
  EXPECT_EQ(parsed.value("fedcore_runs{state=\"finished\"}"), 2);
  EXPECT_EQ(parsed.value("fedcore_rounds_total{state=\"committed\"}"), 4);
  EXPECT_EQ(parsed.value("fedcore_rounds_total{state=\"failed\"}"), 1);
  EXPECT_EQ(parsed.value("fedcore_updates_total{result=\"accepted\",reason=\"\"}"), 2);
  EXPECT_EQ(parsed.value("fedcore_updates_total{result=\"rejected\",reason=\"non_finite\"}"), 1);
  EXPECT_EQ(parsed.value("fedcore_updates_total{result=\"rejected\",reason=\"norm\"}"), 1);
  EXPECT_EQ(parsed.value("fedcore_updates_total{result=\"rejected\",reason=\"other\"}"), 1)
      << "a code that is no label value is not used";
  EXPECT_EQ(parsed.value("fedcore_updates_total{result=\"stale\",reason=\"nonce\"}"), 1);
  EXPECT_EQ(parsed.value("fedcore_bytes_received_total"), 100);
  EXPECT_EQ(parsed.value("fedcore_bytes_sent_total"), 200);
  EXPECT_EQ(parsed.value("fedcore_round_duration_seconds_bucket{le=\"0.25\"}"), 1);
  EXPECT_EQ(parsed.value("fedcore_round_duration_seconds_bucket{le=\"5\"}"), 3);
  EXPECT_EQ(parsed.value("fedcore_round_duration_seconds_bucket{le=\"600\"}"), 3);
  EXPECT_EQ(parsed.value("fedcore_round_duration_seconds_bucket{le=\"+Inf\"}"), 4);
  EXPECT_EQ(parsed.value("fedcore_round_duration_seconds_count"), 4);
  EXPECT_DOUBLE_EQ(parsed.value("fedcore_round_duration_seconds_sum"), 706.2);
  EXPECT_EQ(parsed.value("fedcore_uptime_seconds"), 12.5);
  EXPECT_EQ(parsed.types["fedcore_round_duration_seconds"], "histogram");
  EXPECT_EQ(parsed.types["fedcore_updates_total"], "counter");
}

TEST(ApiEvents, FramesAreServerSentEventsWithTheEventAsJson) {
  const auto frame = format_sse(event(42, "round_committed", R"({"accuracy":0.9})"));
  ASSERT_EQ(frame.rfind("id: 42\nevent: round_committed\ndata: ", 0), 0u) << frame;
  ASSERT_EQ(frame.substr(frame.size() - 2), "\n\n");
  const auto data = frame.substr(frame.find("data: ") + 6);
  auto j = nlohmann::json::parse(data.substr(0, data.size() - 2));
  EXPECT_EQ(j["id"], 42);
  EXPECT_EQ(j["kind"], "round_committed");
  EXPECT_EQ(j["run_id"], 1);
  EXPECT_EQ(j["round"], 2);
  EXPECT_EQ(j["client_id"], "hospital-a");
  EXPECT_EQ(j["detail"]["accuracy"], 0.9);
  auto no_run = event(1, "client_connected");
  no_run.run_id.reset();
  no_run.round.reset();
  EXPECT_TRUE(nlohmann::json::parse(event_json(no_run))["run_id"].is_null());
  // run_ended names the state, as the rest of the API does.
  auto ended =
      nlohmann::json::parse(event_json(event(4, "run_ended", R"({"state":3,"reason":""})")));
  EXPECT_EQ(ended["detail"]["state"], "finished");
  EXPECT_EQ(ended["detail"]["reason"], "");
  EXPECT_EQ(nlohmann::json::parse(
                event_json(event(5, "run_ended", R"({"state":"stopped"})")))["detail"]["state"],
            "stopped");
  // A newline inside a detail string stays escaped: one data line per event.
  const auto multi = format_sse(event(3, "update_rejected", R"({"reason":"a\nb"})"));
  EXPECT_EQ(std::count(multi.begin(), multi.end(), '\n'), 4);
}

TEST(ApiEvents, ASubscriberFallingTooFarBehindIsCutOffOthersAreNot) {
  EventHub hub(3);
  auto slow = hub.subscribe();
  auto fast = hub.subscribe();
  int woken = 0;
  fast->wake = [&] { ++woken; };
  for (int i = 1; i <= 5; ++i) {
    hub.publish(event(i, "round_started"));
    fast->frames.clear();  // this one keeps up
  }
  EXPECT_TRUE(slow->overflowed);
  EXPECT_TRUE(slow->frames.empty());
  EXPECT_FALSE(fast->overflowed);
  EXPECT_EQ(woken, 5);
  hub.unsubscribe(slow);
  EXPECT_EQ(hub.subscribers(), 1u);
}

}  // namespace
}  // namespace fedcore::api
