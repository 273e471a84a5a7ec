// Issue 19, disk full, end to end: the real FederationServer and admin API (one io_context
// thread, as in fedcore-server) with its history and checkpoints on a tmpfs of 8 MiB in a
// private mount namespace (tests/mount_namespace.hpp), two client daemons over mutual
// TLS, a manual run. The tmpfs is filled to the last page between two rounds: the API must
// show the run paused with the reason, /metrics the fault, other requests must keep being
// answered, and once the filler is deleted the run resumes by itself and finishes with
// every round committed exactly once and every checkpoint complete.
#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "server/api/metrics.hpp"
#include "shared/model/param_io.hpp"
#include "tests/api/api_fixture.hpp"
#include "tests/api/metrics_parser.hpp"
#include "tests/mount_namespace.hpp"

namespace fedcore::api {
namespace {

using namespace std::chrono_literals;
using testing::ApiFixture;

const char* kManualRun =
    R"({"name":"disk","model":{"type":"logreg"},"rounds":4,"clients_per_round":2,
        "min_clients":2,"local_epochs":1,"batch_size":32,"optimizer":{"kind":"sgd","lr":0.1},
        "round_timeout_s":60,"wait_for_clients_s":60,"seed":1,"manual":true})";

// GET /api/v1/runs/1 until `done(run)` or the timeout; the last answer.
nlohmann::json watch_run(const testing::HttpsClient& client,
                         const std::function<bool(const nlohmann::json&)>& done,
                         std::chrono::milliseconds timeout) {
  nlohmann::json run;
  ApiFixture::poll_until(
      [&] {
        auto reply = client.get("/api/v1/runs/1");
        run = reply.json();
        return reply.status == 200 && done(run);
      },
      timeout);
  return run;
}

std::string state_of(const nlohmann::json& run) {
  return run.is_object() ? run.value("state", std::string()) : std::string();
}

TEST(ApiStorage, ADiskThatFillsMidRunIsReportedAndTheRunResumesWhenSpaceIsBack) {
  fedcore::testing::TempDir data;
  FEDCORE_REQUIRE_MOUNTS(fedcore::testing::enter_mount_namespace());
  auto tmpfs = fedcore::testing::mount_tmpfs(data.path(), 8 << 20);
  ASSERT_TRUE(tmpfs) << tmpfs.error().message;
  const auto checkpoints = data.path("checkpoints");
  {
    testing::FixtureOptions options;
    options.data_dir = data.path();
    options.tune_federation = [](federation::ServerOptions& o) {
      o.storage_retry = {200ms, 1s, 1 << 20};
    };
    ApiFixture fixture(std::move(options));
    fixture.start_client("hospital-a");
    fixture.start_client("hospital-b");
    ASSERT_TRUE(fixture.wait_until([&] { return fixture.online() == 2; }, 60s));
    auto client = fixture.client();

    auto created = client.post_json("/api/v1/runs", kManualRun);
    ASSERT_EQ(created.status, 201) << created.describe();
    auto next = client.post_json("/api/v1/runs/1/rounds", "{}");
    ASSERT_EQ(next.status, 202) << next.describe();
    ASSERT_TRUE(fixture.wait_until([&] { return fixture.rounds_committed() == 1; }, 120s));
    ASSERT_EQ(state_of(watch_run(
                  client, [](const auto& r) { return r.value("last_round", 0) == 1; }, 10s)),
              "running");

    // The disk fills up; round 2 trains, and its checkpoint is refused.
    auto filled = fedcore::testing::fill_disk(data.path());
    ASSERT_TRUE(filled) << filled.error().message;
    next = client.post_json("/api/v1/runs/1/rounds", "{}");
    ASSERT_EQ(next.status, 202) << next.describe();
    const auto full_at = std::chrono::steady_clock::now();
    auto run = watch_run(
        client, [](const auto& r) { return state_of(r) == "paused"; }, 60s);
    const auto paused_after = std::chrono::steady_clock::now() - full_at;
    ASSERT_EQ(state_of(run), "paused") << run.dump();
    EXPECT_EQ(run["reason"], "disk full: cannot write '" + checkpoints +
                                 "/run-1/round-2.fcp.tmp': No space left on device");
    EXPECT_EQ(run["last_round"], 1);
    ASSERT_TRUE(run.contains("storage")) << run.dump();
    EXPECT_EQ(run["storage"]["kind"], "disk_full");

    auto info = client.get("/api/v1/info").json();
    ASSERT_TRUE(info["storage"].is_object()) << info.dump();
    EXPECT_EQ(info["storage"]["run_id"], 1);
    EXPECT_EQ(info["storage"]["kind"], "disk_full");
    EXPECT_EQ(info["run_active"], false);

    auto metrics = client.get("/metrics");
    ASSERT_EQ(metrics.status, 200) << metrics.describe();
    auto parsed = testing::parse_prometheus(metrics.body);
    ASSERT_TRUE(parsed.ok) << parsed.problem;
    EXPECT_EQ(parsed.value(R"(fedcore_storage_fault{kind="disk_full"})"), 1);
    EXPECT_EQ(parsed.value(R"(fedcore_storage_fault{kind="read_only"})"), 0);
    EXPECT_EQ(parsed.value(R"(fedcore_runs{state="paused"})"), 1);
    EXPECT_EQ(parsed.value(R"(fedcore_runs{state="running"})"), 0);

    // The rest of the admin API keeps answering; nothing can start while the run waits.
    EXPECT_EQ(client.get("/api/v1/clients").status, 200);
    EXPECT_EQ(client.get("/api/v1/runs/1/rounds").status, 200);
    auto other = client.post_json("/api/v1/runs", kManualRun);
    EXPECT_EQ(other.status, 409) << other.describe();
    auto early = client.post_json("/api/v1/runs/1/resume", "{}");
    EXPECT_EQ(early.status, 503) << early.describe();
    EXPECT_NE(early.body.find("No space left on device"), std::string::npos) << early.describe();

    // Probes back off: 0.2, 0.6, 1.4, 2.4 s after the fault...; wait for three.
    ASSERT_TRUE(ApiFixture::poll_until(
        [&] {
          auto j = client.get("/api/v1/info").json();
          return j["storage"].is_object() && j["storage"]["failed_probes"].get<int>() >= 3;
        },
        10s));
    const auto failed_probes = client.get("/api/v1/info").json()["storage"]["failed_probes"];
    EXPECT_LE(failed_probes.get<int>(), 6) << "probes must back off";
    for (const auto& entry : std::filesystem::recursive_directory_iterator(checkpoints)) {
      EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
    }

    // Space is back: the run resumes by itself after round 1 and finishes.
    std::filesystem::remove(data.path("filler"));
    const auto freed_at = std::chrono::steady_clock::now();
    run = watch_run(
        client, [](const auto& r) { return state_of(r) == "running"; }, 30s);
    const auto resumed_after = std::chrono::steady_clock::now() - freed_at;
    ASSERT_EQ(state_of(run), "running") << run.dump();
    EXPECT_FALSE(run.contains("storage"));
    EXPECT_TRUE(client.get("/api/v1/info").json()["storage"].is_null());
    for (int round = 2; round <= 4; ++round) {
      // Wait for the admin-wait after the resume (or the previous round) before asking.
      ASSERT_TRUE(ApiFixture::poll_until(
          [&] { return client.get("/api/v1/info").json().value("waiting_for_admin", false); },
          30s));
      next = client.post_json("/api/v1/runs/1/rounds", "{}");
      ASSERT_EQ(next.status, 202) << next.describe();
      ASSERT_TRUE(fixture.wait_until([&] { return fixture.rounds_committed() == round; }, 120s));
    }
    run = watch_run(
        client, [](const auto& r) { return state_of(r) == "finished"; }, 30s);
    EXPECT_EQ(state_of(run), "finished") << run.dump();
    std::cout << "[figures] disk full: paused " +
                     std::to_string(std::chrono::duration<double>(paused_after).count()) +
                     " s after the fill (round trained, checkpoint refused); " +
                     std::to_string(failed_probes.get<int>()) + " failed probes; resumed " +
                     std::to_string(std::chrono::duration<double>(resumed_after).count()) +
                     " s after the filler was deleted; filler " + std::to_string(*filled) +
                     " bytes\n";

    // The history: rounds 1..4 once each, each with a complete checkpoint.
    fixture.stop();
    auto history = store::HistoryStore::open_read_only(data.path("fedcore.db"));
    ASSERT_TRUE(history) << history.error().message;
    auto rounds = history->list_rounds(1);
    ASSERT_TRUE(rounds);
    std::vector<std::int64_t> committed;
    for (const auto& r : *rounds) {
      if (r.state == store::RoundState::committed) {
        committed.push_back(r.round);
      }
    }
    EXPECT_EQ(committed, (std::vector<std::int64_t>{1, 2, 3, 4}));
    auto files = history->list_checkpoints(1);
    ASSERT_TRUE(files);
    ASSERT_EQ(files->size(), 4u);
    for (const auto& c : *files) {
      EXPECT_TRUE(model::load_params(c.ref.path)) << c.ref.path;
    }
    auto intact = history->integrity_check();
    ASSERT_TRUE(intact);
    EXPECT_TRUE(*intact);
  }
  EXPECT_TRUE(tmpfs->unmount());
}

TEST(ApiStorage, TheStorageMetricsNameTheKindOfTheHold) {
  MetricsSnapshot s;
  s.storage_fault = "read_only";
  s.storage_failed_probes = 4;
  auto parsed = testing::parse_prometheus(render_metrics(s, UpdateCounters{}));
  ASSERT_TRUE(parsed.ok) << parsed.problem;
  EXPECT_EQ(parsed.types["fedcore_storage_fault"], "gauge");
  EXPECT_EQ(parsed.value(R"(fedcore_storage_fault{kind="read_only"})"), 1);
  EXPECT_EQ(parsed.value(R"(fedcore_storage_fault{kind="disk_full"})"), 0);
  EXPECT_EQ(parsed.value(R"(fedcore_storage_fault{kind="io_error"})"), 0);
  EXPECT_EQ(parsed.value("fedcore_storage_failed_probes"), 4);
  auto healthy = testing::parse_prometheus(render_metrics(MetricsSnapshot{}, UpdateCounters{}));
  EXPECT_EQ(healthy.value(R"(fedcore_storage_fault{kind="disk_full"})"), 0);
  EXPECT_EQ(healthy.value("fedcore_storage_failed_probes"), 0);
}

}  // namespace
}  // namespace fedcore::api
