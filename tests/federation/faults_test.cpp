// Faults at the federation level, over real TLS: broken and hostile clients must be
// rejected and recorded while the round completes for everyone else.
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "shared/data/csv.hpp"
#include "shared/util/source_tree.hpp"
#include "tests/federation/federation_fixture.hpp"
#include "tests/federation/rogue_client.hpp"

namespace fedcore {
namespace {

using testing::Federation;
using testing::Misbehaviour;
using testing::RogueClient;
using testing::TempDir;

client::DataSource breast_cancer() {
  client::DataSource source;
  source.format = "csv";
  source.path = fedcore::source_path("data/breast_cancer_wisconsin.csv");
  source.label_column = "benign";
  return source;
}

// Starts a logreg run (breast-cancer schema) with the given further keys of its run config
// and waits at most 60 s for it to end; nullopt (with a test failure) when it does not.
std::optional<std::int64_t> run_to_the_end(Federation& federation, const std::string& keys) {
  auto run = federation.start_run(R"({"model":{"type":"logreg"},)" + keys + "}");
  if (!run) {
    ADD_FAILURE() << run.error().to_string();
    return std::nullopt;
  }
  if (!federation.wait_until([&] { return federation.ended().has_value(); },
                             std::chrono::seconds(60))) {
    ADD_FAILURE() << "run " << *run << " did not end within 60 s";
    return std::nullopt;
  }
  return *run;
}

std::map<std::string, store::ClientResult> results_by_client(store::HistoryStore& history,
                                                             std::int64_t run, std::int64_t round) {
  std::map<std::string, store::ClientResult> out;
  auto results = history.list_client_results(run, round);
  EXPECT_TRUE(results);
  for (auto& r : *results) {
    out[r.client_id] = r;
  }
  return out;
}

TEST(FederationFaults, BadSilentAndVanishingClientsAreRecordedAndTheRoundCompletes) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"good-1", "good-2", "nan", "layout", "silent", "dropper"}) {
    federation.add_client_certificate(id);
  }
  const auto port = federation.start_server();
  federation.start_client("good-1", breast_cancer());
  federation.start_client("good-2", breast_cancer());
  RogueClient nan(Misbehaviour::nan_update, federation.pki().client_config("nan"), port);
  RogueClient layout(Misbehaviour::wrong_layout, federation.pki().client_config("layout"), port);
  RogueClient silent(Misbehaviour::silent, federation.pki().client_config("silent"), port);
  RogueClient dropper(Misbehaviour::drop_on_train, federation.pki().client_config("dropper"), port);
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 6; }, std::chrono::seconds(30)));
  const auto run = run_to_the_end(federation, R"("rounds":1,"clients_per_round":6,"min_clients":2,
      "round_timeout_s":3,"seed":3,"optimizer":{"kind":"sgd","lr":0.1})");
  ASSERT_TRUE(run);
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  federation.stop();

  auto history = federation.open_store();
  auto rounds = history.list_rounds(*run);
  ASSERT_TRUE(rounds);
  ASSERT_EQ(rounds->size(), 1u);
  const auto& round = rounds->front();
  EXPECT_EQ(round.state, store::RoundState::committed);
  EXPECT_EQ(round.selected, 6);
  EXPECT_EQ(round.accepted, 2);
  EXPECT_EQ(round.rejected, 2);
  EXPECT_EQ(round.timed_out, 1);
  EXPECT_EQ(round.dropped, 1);
  auto results = results_by_client(history, *run, 1);
  EXPECT_EQ(results["good-1"].status, store::ResultStatus::ok);
  EXPECT_EQ(results["good-2"].status, store::ResultStatus::ok);
  EXPECT_EQ(results["nan"].status, store::ResultStatus::rejected);
  EXPECT_NE(results["nan"].reason.find("NaN"), std::string::npos) << results["nan"].reason;
  EXPECT_EQ(results["layout"].status, store::ResultStatus::rejected);
  EXPECT_NE(results["layout"].reason.find("layout"), std::string::npos) << results["layout"].reason;
  EXPECT_EQ(results["silent"].status, store::ResultStatus::timeout);
  EXPECT_EQ(results["dropper"].status, store::ResultStatus::dropped);
  EXPECT_NE(results["dropper"].reason.find("connection lost"), std::string::npos)
      << results["dropper"].reason;
}

// A site whose local training fails says so; that is its answer for the round. The round
// must close on everyone's answers (the 600 s deadline would outlast the wait below), and
// the site's session must survive to be asked again in the next round.
TEST(FederationFaults, AClientThatCannotTrainAnswersTheRoundAndStaysOnline) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"good-1", "good-2", "failing"}) {
    federation.add_client_certificate(id);
  }
  const auto port = federation.start_server();
  federation.start_client("good-1", breast_cancer());
  federation.start_client("good-2", breast_cancer());
  RogueClient failing(Misbehaviour::cannot_train, federation.pki().client_config("failing"), port);
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 3; }, std::chrono::seconds(30)));
  const auto run = run_to_the_end(federation, R"("rounds":2,"clients_per_round":3,"min_clients":2,
      "round_timeout_s":600,"seed":3,"optimizer":{"kind":"sgd","lr":0.1})");
  ASSERT_TRUE(run);
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  EXPECT_EQ(failing.trains_received(), 2);
  EXPECT_EQ(federation.online(), 3);
  federation.stop();

  auto history = federation.open_store();
  for (std::int64_t round = 1; round <= 2; ++round) {
    auto results = results_by_client(history, *run, round);
    EXPECT_EQ(results["good-1"].status, store::ResultStatus::ok);
    EXPECT_EQ(results["good-2"].status, store::ResultStatus::ok);
    EXPECT_EQ(results["failing"].status, store::ResultStatus::dropped);
    EXPECT_EQ(results["failing"].reason,
              "could not train: out of memory while training round " + std::to_string(round));
  }
  auto rounds = history.list_rounds(*run);
  ASSERT_TRUE(rounds);
  ASSERT_EQ(rounds->size(), 2u);
  EXPECT_EQ(rounds->back().accepted, 2);
  EXPECT_EQ(rounds->back().dropped, 1);
}

// Protocol negotiation (shared/protocol/messages.hpp, kProtocolVersion): a client one version
// older — its HELLO names no version — is welcomed in version 1 and trains the built-in
// models as before, and is never selected for an external model, which version 1 lacks.
TEST(FederationFaults, AClientOneProtocolVersionOlderTrainsBuiltInModelsOnly) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"current", "older"}) {
    federation.add_client_certificate(id);
  }
  const auto port = federation.start_server();
  federation.start_client("current", breast_cancer());
  RogueClient older(Misbehaviour::older_protocol, federation.pki().client_config("older"), port);
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 2; }, std::chrono::seconds(30)));
  // WELCOME reaches the rogue's own thread, which no hook of the fixture announces: polled.
  ASSERT_TRUE(federation.poll_server([&](auto&) { return older.welcomed_protocol() != 0; },
                                     std::chrono::seconds(30)));
  EXPECT_EQ(older.welcomed_protocol(), 1u);
  const auto run = run_to_the_end(federation, R"("rounds":1,"clients_per_round":2,"min_clients":2,
      "round_timeout_s":60,"seed":3,"optimizer":{"kind":"sgd","lr":0.1})");
  ASSERT_TRUE(run);
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  EXPECT_EQ(older.trains_received(), 1);
  {
    auto history = federation.open_store();
    auto results = results_by_client(history, *run, 1);
    EXPECT_EQ(results["older"].status, store::ResultStatus::ok);
    EXPECT_EQ(results["current"].status, store::ResultStatus::ok);
  }
  // The clients' results in round 1 of `run_json`, once that round is on record (empty when
  // the run cannot start or the round never comes).
  const auto first_round_of = [&](const char* run_json) {
    std::map<std::string, store::ClientResult> results;
    auto run = federation.start_run(run_json);
    EXPECT_TRUE(run) << run.error().to_string();
    if (!run) {
      return results;
    }
    const bool recorded = federation.wait_until(
        [&] {
          auto history = federation.open_store();
          auto rounds = history.list_rounds(*run);
          return rounds && !rounds->empty();
        },
        std::chrono::seconds(60));
    EXPECT_TRUE(recorded);
    auto history = federation.open_store();
    return recorded ? results_by_client(history, *run, 1) : results;
  };
  // An external model: only the current client is asked (and, being fedcore-client rather
  // than a Python site, refuses it); the older one is not selected at all.
  auto results = first_round_of(R"({"model": {"type": "external", "input_shape": [30],
      "num_classes": 2, "layout": {"tensors": [{"name": "w", "shape": [1, 30]},
      {"name": "b", "shape": [1]}]}}, "rounds": 1, "clients_per_round": 2, "min_clients": 1,
      "round_timeout_s": 60, "wait_for_clients_s": 1})");
  EXPECT_EQ(older.trains_received(), 1);
  EXPECT_EQ(results.count("older"), 0u);
  EXPECT_EQ(results["current"].status, store::ResultStatus::dropped);
  EXPECT_NE(results["current"].reason.find("the Python SDK"), std::string::npos)
      << results["current"].reason;
  // A run that compresses its updates (protocol 3): the older client is not selected; the
  // current one sends int8 and is accepted.
  auto compressed_results = first_round_of(R"({"model": {"type": "logreg"}, "rounds": 1,
      "clients_per_round": 2, "min_clients": 1, "round_timeout_s": 60, "wait_for_clients_s": 1,
      "seed": 3, "compression": {"up": "int8"}})");
  EXPECT_EQ(older.trains_received(), 1);
  EXPECT_EQ(compressed_results.count("older"), 0u);
  EXPECT_EQ(compressed_results["current"].status, store::ResultStatus::ok)
      << compressed_results["current"].reason;
  // A SCAFFOLD run (protocol 4): the same; the current client's update carries its control
  // variate's change and is accepted.
  auto scaffold_results = first_round_of(R"({"model": {"type": "logreg"}, "rounds": 1,
      "clients_per_round": 2, "min_clients": 1, "round_timeout_s": 60, "wait_for_clients_s": 1,
      "seed": 3, "strategy": "scaffold", "optimizer": {"kind": "sgd", "lr": 0.1}})");
  EXPECT_EQ(older.trains_received(), 1);
  EXPECT_EQ(scaffold_results.count("older"), 0u);
  EXPECT_EQ(scaffold_results["current"].status, store::ResultStatus::ok)
      << scaffold_results["current"].reason;
}

// A compressed update whose payload does not match its encoding is refused with the reason,
// and the round commits with the others.
TEST(FederationFaults, AMalformedCompressedUpdateIsRefusedNamingTheProblem) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"good-1", "good-2", "broken"}) {
    federation.add_client_certificate(id);
  }
  const auto port = federation.start_server();
  RogueClient broken(Misbehaviour::bad_encoding, federation.pki().client_config("broken"), port);
  federation.start_client("good-1", breast_cancer());
  federation.start_client("good-2", breast_cancer());
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 3; }, std::chrono::seconds(30)));
  const auto run = run_to_the_end(federation, R"("rounds":1,"clients_per_round":3,"min_clients":2,
      "round_timeout_s":600,"seed":3,"optimizer":{"kind":"sgd","lr":0.1},
      "compression":{"up":"topk","topk_fraction":0.5})");
  ASSERT_TRUE(run);
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  federation.stop();
  auto history = federation.open_store();
  auto results = results_by_client(history, *run, 1);
  EXPECT_EQ(results["good-1"].status, store::ResultStatus::ok) << results["good-1"].reason;
  EXPECT_EQ(results["good-2"].status, store::ResultStatus::ok) << results["good-2"].reason;
  EXPECT_NE(results["broken"].status, store::ResultStatus::ok);
  EXPECT_NE(results["broken"].reason.find("update encoding topk: 8 bytes announcing 5 entries"),
            std::string::npos)
      << results["broken"].reason;
}

TEST(FederationFaults, AReplayedUpdateFromAnEarlierRoundIsRefused) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"good-1", "replayer"}) {
    federation.add_client_certificate(id);
  }
  const auto port = federation.start_server();
  federation.start_client("good-1", breast_cancer());
  RogueClient replayer(Misbehaviour::replay, federation.pki().client_config("replayer"), port);
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 2; }, std::chrono::seconds(30)));
  const auto run = run_to_the_end(federation, R"("rounds":2,"clients_per_round":2,"min_clients":1,
      "round_timeout_s":2,"seed":3)");
  ASSERT_TRUE(run);
  federation.stop();

  auto history = federation.open_store();
  auto round1 = results_by_client(history, *run, 1);
  EXPECT_EQ(round1["replayer"].status, store::ResultStatus::ok);  // honest in round 1
  auto round2 = results_by_client(history, *run, 2);
  // Its round-1 answer replayed in round 2 never counted: the round saw no answer.
  EXPECT_EQ(round2["replayer"].status, store::ResultStatus::timeout);
  EXPECT_EQ(round2["good-1"].status, store::ResultStatus::ok);
  auto events = history.list_events(0, 1000);
  ASSERT_TRUE(events);
  bool refused = false;
  for (const auto& e : *events) {
    if (e.kind == "update_stale" && e.client_id == "replayer" && e.round == 2) {
      refused = e.detail_json.find("replayed") != std::string::npos;
    }
  }
  EXPECT_TRUE(refused) << "the replay should be recorded as a stale/replayed update event";
}

// Four selected clients that announce their uploads and stall once took the server's two
// upload slots for the whole transfer deadline, and the real clients' updates timed out
// behind them. A slot holder now loses its slot when it stalls; the round completes with
// the honest clients and records the stallers as dropped.
TEST(FederationFaults, ClientsThatStallTheirUploadsLoseTheirSlotsAndTheRoundCompletes) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"good-1", "good-2", "stall-1", "stall-2", "stall-3", "stall-4"}) {
    federation.add_client_certificate(id);
  }
  federation::ServerOptions options;
  options.large_payload_bytes = 64;  // the 31-parameter logreg goes through the gate too
  options.max_inflight_updates = 2;
  options.channel.stall_timeout = std::chrono::milliseconds(500);
  options.channel.gate_wait_timeout = std::chrono::seconds(20);
  const auto port = federation.start_server(options);
  std::vector<std::unique_ptr<RogueClient>> stallers;
  for (const char* id : {"stall-1", "stall-2", "stall-3", "stall-4"}) {
    stallers.push_back(std::make_unique<RogueClient>(Misbehaviour::stall_upload,
                                                     federation.pki().client_config(id), port));
  }
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 4; }, std::chrono::seconds(30)));
  federation.start_client("good-1", breast_cancer());
  federation.start_client("good-2", breast_cancer());
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 6; }, std::chrono::seconds(30)));
  const auto run = run_to_the_end(federation, R"("rounds":1,"clients_per_round":6,"min_clients":2,
      "round_timeout_s":30,"seed":3,"optimizer":{"kind":"sgd","lr":0.1})");
  ASSERT_TRUE(run);
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  federation.stop();
  auto history = federation.open_store();
  auto rounds = history.list_rounds(*run);
  ASSERT_TRUE(rounds);
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ(rounds->front().state, store::RoundState::committed);
  EXPECT_EQ(rounds->front().accepted, 2);
  EXPECT_EQ(rounds->front().dropped, 4);
  auto results = results_by_client(history, *run, 1);
  EXPECT_EQ(results["good-1"].status, store::ResultStatus::ok);
  EXPECT_EQ(results["good-2"].status, store::ResultStatus::ok);
  EXPECT_EQ(results["stall-1"].status, store::ResultStatus::dropped);
}

// An UPDATE whose metadata does not parse (here: a NaN loss) is refused -- and is still
// that client's answer: the round closes on everyone's answers instead of waiting for its
// deadline (a 100-site DP run once waited 600 s for an answer it had already refused).
TEST(FederationFaults, AMalformedUpdateIsTheClientsAnswerAndTheRoundDoesNotWaitForIt) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"good-1", "good-2", "broken"}) {
    federation.add_client_certificate(id);
  }
  const auto port = federation.start_server();
  RogueClient broken(Misbehaviour::nonfinite_loss, federation.pki().client_config("broken"), port);
  federation.start_client("good-1", breast_cancer());
  federation.start_client("good-2", breast_cancer());
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 3; }, std::chrono::seconds(30)));
  // Far less than the 600 s deadline.
  const auto run = run_to_the_end(federation, R"("rounds":1,"clients_per_round":3,"min_clients":2,
      "round_timeout_s":600,"seed":3,"optimizer":{"kind":"sgd","lr":0.1})");
  ASSERT_TRUE(run);
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  federation.stop();
  auto history = federation.open_store();
  auto results = results_by_client(history, *run, 1);
  EXPECT_EQ(results["good-1"].status, store::ResultStatus::ok);
  EXPECT_NE(results["broken"].status, store::ResultStatus::ok);
  EXPECT_NE(results["broken"].reason.find("malformed update"), std::string::npos)
      << results["broken"].reason;
}

TEST(FederationFaults, NoQuorumFailsTheRoundVisiblyAndPausesTheRun) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"good-1", "silent"}) {
    federation.add_client_certificate(id);
  }
  const auto port = federation.start_server();
  federation.start_client("good-1", breast_cancer());
  RogueClient silent(Misbehaviour::silent, federation.pki().client_config("silent"), port);
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 2; }, std::chrono::seconds(30)));
  const auto run = run_to_the_end(federation, R"("rounds":3,"clients_per_round":2,"min_clients":2,
      "round_timeout_s":1,"seed":3,"on_failed_round":"retry","max_retries":1)");
  ASSERT_TRUE(run);
  EXPECT_EQ(*federation.ended(), store::RunState::paused);
  EXPECT_EQ(federation.rounds_failed(), 2);  // the first attempt and one retry
  EXPECT_EQ(federation.rounds_committed(), 0);
  federation.stop();
  auto history = federation.open_store();
  auto stored = history.get_run(*run);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->state, store::RunState::paused);
  EXPECT_EQ(stored->last_round, 0);
  EXPECT_NE(stored->error.find("no quorum"), std::string::npos) << stored->error;
  auto rounds = history.list_rounds(*run);
  ASSERT_TRUE(rounds);
  ASSERT_EQ(rounds->size(), 2u);
  EXPECT_EQ((*rounds)[0].state, store::RoundState::failed);
  EXPECT_EQ((*rounds)[1].attempt, 2);
}

}  // namespace
}  // namespace fedcore
