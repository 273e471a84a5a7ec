// Runs driven through the admin API with real client daemons over mutual TLS: the event
// stream, rounds, per-client results, model downloads, clients and metrics all describe
// what actually happened.
#include <gtest/gtest.h>

#include "shared/model/param_io.hpp"
#include "tests/api/api_fixture.hpp"
#include "tests/api/metrics_parser.hpp"
#include "tests/federation/rogue_client.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::api {
namespace {

using testing::ApiFixture;

const char* kTwoRounds =
    R"({"name":"bc","model":{"type":"logreg"},"rounds":2,"clients_per_round":2,"min_clients":2,
        "local_epochs":1,"batch_size":32,"optimizer":{"kind":"sgd","lr":0.1},
        "round_timeout_s":60,"wait_for_clients_s":60,"seed":1})";

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

class ApiRun : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture_.start_client("hospital-a");
    fixture_.start_client("hospital-b");
    ASSERT_TRUE(
        fixture_.wait_until([&] { return fixture_.online() == 2; }, std::chrono::seconds(60)));
  }
  ApiFixture fixture_;
};

TEST_F(ApiRun, TheEventStreamCarriesARunFromStartToEnd) {
  auto client = fixture_.client();
  std::int64_t run_id = 0;
  auto stream = client.stream_events(
      // Until the whole run_ended frame is in: it may arrive in more than one read.
      [](const std::string& body) {
        const auto at = body.find("event: run_ended");
        return at != std::string::npos && body.find("\n\n", at) != std::string::npos;
      },
      std::chrono::seconds(120),
      [&] {
        auto created = fixture_.client().post_json("/api/v1/runs", kTwoRounds);
        EXPECT_EQ(created.status, 201) << created.describe();
        run_id = created.json().value("id", std::int64_t{0});
      });
  ASSERT_EQ(stream.status, 200) << stream.describe();
  EXPECT_EQ(stream.header("content-type"), "text/event-stream");
  EXPECT_EQ(stream.header("cache-control"), "no-store");
  ASSERT_NE(stream.body.find("event: run_ended"), std::string::npos) << stream.describe();
  EXPECT_EQ(stream.body.rfind(": connected\n\n", 0), 0u);
  EXPECT_EQ(count(stream.body, "event: run_started\n"), 1u);
  EXPECT_EQ(count(stream.body, "event: round_started\n"), 2u);
  EXPECT_EQ(count(stream.body, "event: update_accepted\n"), 4u);
  EXPECT_EQ(count(stream.body, "event: round_committed\n"), 2u);
  // Every frame is id / event / data, and the data is the event as JSON.
  std::int64_t last_id = 0;
  for (auto at = stream.body.find("id: "); at != std::string::npos;
       at = stream.body.find("\nid: ", at + 1)) {
    const auto start = stream.body[at] == '\n' ? at + 1 : at;
    const auto end = stream.body.find("\n\n", start);
    ASSERT_NE(end, std::string::npos);
    const auto frame = stream.body.substr(start, end - start);
    const auto data = frame.substr(frame.find("\ndata: ") + 7);
    auto j = nlohmann::json::parse(data, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << frame;
    EXPECT_GT(j["id"].get<std::int64_t>(), last_id) << "events out of order";
    last_id = j["id"].get<std::int64_t>();
    EXPECT_EQ(frame.rfind("id: " + std::to_string(last_id) +
                              "\nevent: " + j["kind"].get<std::string>() + "\n",
                          0),
              0u)
        << frame;
    if (j["kind"] == "round_committed") {
      EXPECT_EQ(j["run_id"], run_id);
    }
    if (j["kind"] == "run_ended") {
      EXPECT_EQ(j["detail"]["state"], "finished") << frame;
    }
  }
}

TEST_F(ApiRun, RoundsResultsModelsClientsAndMetricsDescribeTheRun) {
  auto client = fixture_.client();
  auto created = client.post_json("/api/v1/runs", kTwoRounds);
  ASSERT_EQ(created.status, 201) << created.describe();
  const auto id = created.json()["id"].get<std::int64_t>();
  ASSERT_TRUE(fixture_.wait_until([&] { return fixture_.ended().has_value(); }))
      << "the run did not end";
  const auto base = "/api/v1/runs/" + std::to_string(id);

  auto run = client.get(base).json();
  EXPECT_EQ(run["state"], "finished");
  EXPECT_EQ(run["last_round"], 2);

  auto rounds_reply = client.get(base + "/rounds");
  ASSERT_EQ(rounds_reply.status, 200) << rounds_reply.describe();
  const auto rounds = rounds_reply.json();
  ASSERT_EQ(rounds["total"], 2);
  for (int i = 0; i < 2; ++i) {
    const auto& r = rounds["items"][i];
    EXPECT_EQ(r["round"], i + 1);
    EXPECT_EQ(r["attempt"], 1);
    EXPECT_EQ(r["state"], "committed");
    EXPECT_EQ(r["selected"], 2);
    EXPECT_EQ(r["accepted"], 2);
    EXPECT_TRUE(r["train_loss"].is_number()) << r;
    EXPECT_TRUE(r["fed_eval_accuracy"].is_number()) << r;
    EXPECT_TRUE(r["eval_accuracy"].is_null()) << "no server test set was configured";
    EXPECT_GE(r["duration_s"].get<double>(), 0.0);
    EXPECT_GT(r["bytes_up"].get<std::int64_t>(), 0);
    // Where the round's time went, in the order a round lives it: both TRAIN frames left
    // before either update came back, and the commit is inside the whole, except for round
    // 1, whose checkpoint and commit ran alongside round 2 (overlap_checkpoints).
    const auto& p = r["phases"];
    ASSERT_TRUE(p.is_object()) << r;
    const double total = p["total_ms"], queued = p["requests_queued_ms"];
    const double written = p["train_written_ms"], first = p["first_update_ms"],
                 last = p["last_update_ms"];
    EXPECT_LE(queued, written) << p;
    EXPECT_LE(written, first) << p;
    EXPECT_LE(first, last) << p;
    EXPECT_LE(last, total) << p;
    EXPECT_GT(p["validate_ms"].get<double>() + p["aggregate_ms"].get<double>(), 0.0) << p;
    EXPECT_GT(p["checkpoint_ms"].get<double>(), 0.0) << p;
    EXPECT_GT(p["commit_ms"].get<double>(), 0.0) << p;
    if (i == 1) {
      EXPECT_LE(p["checkpoint_ms"].get<double>() + p["commit_ms"].get<double>(), total) << p;
    }
    EXPECT_TRUE(p["federated_evaluation_ms"].is_number()) << "the run evaluates: " << p;
    EXPECT_GT(p["cpu_user_ms"].get<double>() + p["cpu_system_ms"].get<double>(), 0.0) << p;
  }
  auto paged = client.get(base + "/rounds?limit=1&offset=1").json();
  ASSERT_EQ(paged["items"].size(), 1u);
  EXPECT_EQ(paged["items"][0]["round"], 2);
  EXPECT_EQ(paged["total"], 2);

  auto results_reply = client.get(base + "/rounds/2/results");
  ASSERT_EQ(results_reply.status, 200) << results_reply.describe();
  const auto results = results_reply.json();
  ASSERT_EQ(results["items"].size(), 2u);
  for (const auto& r : results["items"]) {
    EXPECT_EQ(r["status"], "ok");
    EXPECT_GT(r["samples"].get<std::int64_t>(), 0);
    EXPECT_TRUE(r["loss"].is_number());
  }
  EXPECT_EQ(client.get(base + "/rounds/3/results").status, 404);

  auto fcp = client.get(base + "/model?round=1&format=fcp");
  ASSERT_EQ(fcp.status, 200) << fcp.describe();
  EXPECT_EQ(fcp.header("content-type"), "application/octet-stream");
  EXPECT_NE(fcp.header("content-disposition").find("run-" + std::to_string(id) + "-round-1.fcp"),
            std::string::npos);
  auto bundle = model::decode_params(
      std::span(reinterpret_cast<const std::byte*>(fcp.body.data()), fcp.body.size()));
  ASSERT_TRUE(bundle) << bundle.error().to_string();
  auto latest = client.get(base + "/model");
  ASSERT_EQ(latest.status, 200);
  EXPECT_EQ(latest.header("x-fedcore-round"), "2");
  EXPECT_NE(latest.body, fcp.body) << "round 2 should have moved the model";
  auto npy = client.get(base + "/model?round=2&format=npy");
  ASSERT_EQ(npy.status, 200) << npy.describe();
  ASSERT_GT(npy.body.size(), 10u);
  EXPECT_EQ(npy.body.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t header_len =
      static_cast<unsigned char>(npy.body[8]) | (static_cast<unsigned char>(npy.body[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const auto header = npy.body.substr(10, header_len);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': (" + std::to_string(bundle->params.size()) + ",)"),
            std::string::npos)
      << header;
  EXPECT_EQ(npy.body.size(), 10 + header_len + bundle->params.size() * sizeof(float));
  auto latest_bundle = model::decode_params(
      std::span(reinterpret_cast<const std::byte*>(latest.body.data()), latest.body.size()));
  ASSERT_TRUE(latest_bundle);
  EXPECT_EQ(std::memcmp(npy.body.data() + 10 + header_len, latest_bundle->params.data(),
                        latest_bundle->params.size() * sizeof(float)),
            0);
  EXPECT_EQ(client.get(base + "/model?round=3").status, 404);

  auto clients_reply = client.get("/api/v1/clients");
  ASSERT_EQ(clients_reply.status, 200) << clients_reply.describe();
  const auto clients = clients_reply.json();
  ASSERT_EQ(clients["total"], 2);
  for (const auto& c : clients["items"]) {
    EXPECT_EQ(c["online"], true);
    EXPECT_TRUE(c["peer"].is_string());
    EXPECT_GT(c["samples"].get<std::int64_t>(), 0);
    EXPECT_EQ(c["rounds_joined"], 2);
    EXPECT_EQ(c["input_shape"], nlohmann::json::array({30}));
    EXPECT_EQ(c["num_classes"], 2);
    EXPECT_EQ(c["training"], false);
  }
  auto one = client.get("/api/v1/clients/hospital-b");
  ASSERT_EQ(one.status, 200) << one.describe();
  EXPECT_EQ(one.json()["id"], "hospital-b");

  auto metrics = testing::parse_prometheus(client.get("/metrics").body);
  ASSERT_TRUE(metrics.ok) << metrics.problem;
  EXPECT_EQ(metrics.value("fedcore_clients_online"), 2);
  EXPECT_EQ(metrics.value("fedcore_runs{state=\"finished\"}"), 1);
  EXPECT_EQ(metrics.value("fedcore_rounds_total{state=\"committed\"}"), 2);
  EXPECT_EQ(metrics.value("fedcore_updates_total{result=\"accepted\",reason=\"\"}"), 4);
  EXPECT_EQ(metrics.value("fedcore_round_duration_seconds_count"), 2);
  EXPECT_EQ(metrics.value("fedcore_round_phase_rounds_total"), 2);
  EXPECT_GT(metrics.value("fedcore_round_phase_seconds_total{phase=\"all\"}"), 0);
  EXPECT_GE(metrics.value("fedcore_round_phase_seconds_total{phase=\"all\"}"),
            metrics.value("fedcore_round_phase_seconds_total{phase=\"commit\"}") +
                metrics.value("fedcore_round_phase_seconds_total{phase=\"checkpoint\"}"));
  EXPECT_GT(metrics.value("fedcore_round_phase_seconds_total{phase=\"commit\"}"), 0);
  EXPECT_GT(metrics.value("fedcore_round_cpu_seconds_total{mode=\"user\"}") +
                metrics.value("fedcore_round_cpu_seconds_total{mode=\"system\"}"),
            0);
  EXPECT_GT(metrics.value("fedcore_bytes_received_total"), 0);
  EXPECT_GT(metrics.value("fedcore_bytes_sent_total"), 0);
}

// keep_checkpoints 1: only the newest round's file stays; the API says why an older round's
// model cannot be downloaded, and still serves the newest.
TEST(ApiRetention, AnOlderRoundsModelIsGoneWithAReasonAndTheNewestIsServed) {
  fedcore::testing::TempDir data;
  testing::FixtureOptions options;
  options.data_dir = data.path();
  options.tune_federation = [](federation::ServerOptions& o) { o.keep_checkpoints = 1; };
  ApiFixture fixture(std::move(options));
  fixture.start_client("hospital-a");
  fixture.start_client("hospital-b");
  ASSERT_TRUE(fixture.wait_until([&] { return fixture.online() == 2; }, std::chrono::seconds(60)));
  auto client = fixture.client();
  auto created = client.post_json("/api/v1/runs", kTwoRounds);
  ASSERT_EQ(created.status, 201) << created.describe();
  const auto id = created.json()["id"].get<std::int64_t>();
  ASSERT_TRUE(fixture.wait_until([&] { return fixture.ended().has_value(); }))
      << "the run did not end";
  const auto base = "/api/v1/runs/" + std::to_string(id);

  auto gone = client.get(base + "/model?round=1");
  EXPECT_EQ(gone.status, 404) << gone.describe();
  EXPECT_EQ(gone.json()["error"]["message"],
            "the checkpoint of round 1 of run " + std::to_string(id) +
                " was removed by the server's checkpoint retention (keep_checkpoints); the "
                "history keeps the round's record");
  auto latest = client.get(base + "/model");
  ASSERT_EQ(latest.status, 200) << latest.describe();
  EXPECT_EQ(latest.header("x-fedcore-round"), "2");
  const auto run_dir =
      std::filesystem::path(data.path("checkpoints")) / ("run-" + std::to_string(id));
  EXPECT_FALSE(std::filesystem::exists(run_dir / "round-1.fcp"));
  EXPECT_TRUE(std::filesystem::exists(run_dir / "round-2.fcp"));
  // The round itself is still in the history.
  EXPECT_EQ(client.get(base + "/rounds").json()["total"], 2);
}

TEST_F(ApiRun, AManualRunAdvancesOneRoundPerRequest) {
  auto client = fixture_.client();
  auto config = nlohmann::json::parse(kTwoRounds);
  config["manual"] = true;
  auto created = client.post_json("/api/v1/runs", config.dump());
  ASSERT_EQ(created.status, 201) << created.describe();
  EXPECT_EQ(created.json()["manual"], true);
  const auto base = "/api/v1/runs/" + std::to_string(created.json()["id"].get<std::int64_t>());
  ASSERT_TRUE(ApiFixture::poll_until(
      [&] { return client.get("/api/v1/info").json()["waiting_for_admin"] == true; },
      std::chrono::seconds(30)));
  EXPECT_EQ(fixture_.rounds_committed(), 0) << "a manual run started a round by itself";
  for (int round = 1; round <= 2; ++round) {
    auto advanced = client.post_json(base + "/rounds", "");
    ASSERT_EQ(advanced.status, 202) << advanced.describe();
    EXPECT_EQ(advanced.json()["round"], round);
    ASSERT_TRUE(fixture_.wait_until([&] { return fixture_.rounds_committed() == round; }));
  }
  ASSERT_TRUE(fixture_.wait_until([&] { return fixture_.ended().has_value(); }));
  EXPECT_EQ(client.get(base).json()["state"], "finished");
  EXPECT_EQ(client.post_json(base + "/rounds", "").status, 409);
}

TEST(ApiRunMetrics, RejectedUpdatesAreCountedByReason) {
  ApiFixture fixture({.client_ids = {"hospital-a", "hospital-b", "nan"}});
  fixture.start_client("hospital-a");
  fixture.start_client("hospital-b");
  fedcore::testing::RogueClient nan(fedcore::testing::Misbehaviour::nan_update,
                                    fixture.pki().client_config("nan"), fixture.federation_port());
  ASSERT_TRUE(fixture.wait_until([&] { return fixture.online() == 3; }, std::chrono::seconds(60)));
  auto config = nlohmann::json::parse(kTwoRounds);
  config["rounds"] = 1;
  config["clients_per_round"] = 3;
  auto created = fixture.client().post_json("/api/v1/runs", config.dump());
  ASSERT_EQ(created.status, 201) << created.describe();
  ASSERT_TRUE(fixture.wait_until([&] { return fixture.ended().has_value(); }));
  auto metrics = testing::parse_prometheus(fixture.client().get("/metrics").body);
  ASSERT_TRUE(metrics.ok) << metrics.problem;
  EXPECT_EQ(metrics.value("fedcore_updates_total{result=\"accepted\",reason=\"\"}"), 2);
  EXPECT_EQ(metrics.value("fedcore_updates_total{result=\"rejected\",reason=\"non_finite\"}"), 1);
  auto results = fixture.client().get("/api/v1/runs/1/rounds/1/results").json();
  ASSERT_EQ(results["items"].size(), 3u);
  for (const auto& r : results["items"]) {
    if (r["client_id"] == "nan") {
      EXPECT_EQ(r["status"], "rejected");
      EXPECT_NE(r["reason"].get<std::string>().find("NaN"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace fedcore::api
