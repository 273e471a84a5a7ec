// The federated-evaluation routes over real HTTPS, after a run with real client daemons: the
// per-round curve is the rounds' recorded means, the last round is the final model, and
// each round lists its clients' answers; bad ids and rounds that were not committed are
// refused.
#include <gtest/gtest.h>

#include "tests/api/api_fixture.hpp"

namespace fedcore::api {
namespace {

using testing::ApiFixture;

TEST(ApiEvaluation, TheCurveAndEachRoundsClientsDescribeTheRun) {
  ApiFixture fixture;
  fixture.start_client("hospital-a");
  fixture.start_client("hospital-b");
  ASSERT_TRUE(fixture.wait_until([&] { return fixture.online() == 2; }, std::chrono::seconds(60)));
  auto client = fixture.client();
  auto created = client.post_json(
      "/api/v1/runs",
      R"({"name":"ev","model":{"type":"logreg"},"rounds":3,"clients_per_round":2,"min_clients":2,
          "local_epochs":1,"batch_size":32,"optimizer":{"kind":"sgd","lr":0.1},
          "round_timeout_s":60,"wait_for_clients_s":60,"seed":1,"evaluate_every":2})");
  ASSERT_EQ(created.status, 201) << created.describe();
  EXPECT_EQ(created.json()["config"]["evaluate_every"], 2);
  const auto id = created.json()["id"].get<std::int64_t>();
  ASSERT_TRUE(fixture.wait_until([&] { return fixture.ended().has_value(); }))
      << "the run did not end";
  const auto base = "/api/v1/runs/" + std::to_string(id);

  auto curve_reply = client.get(base + "/evaluation");
  ASSERT_EQ(curve_reply.status, 200) << curve_reply.describe();
  const auto curve = curve_reply.json();
  EXPECT_EQ(curve["run_id"], id);
  EXPECT_EQ(curve["rounds_total"], 3);
  // Every 2nd round and the last: rounds 2 and 3, not 1.
  ASSERT_EQ(curve["items"].size(), 2u) << curve;
  const auto rounds = client.get(base + "/rounds").json()["items"];
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& e = curve["items"][i];
    const auto round = e["round"].get<int>();
    EXPECT_EQ(round, i == 0 ? 2 : 3);
    EXPECT_EQ(e["final"], round == 3);
    EXPECT_TRUE(e["per_client"].get<bool>());
    EXPECT_EQ(e["clients"]["ok"], 2);
    EXPECT_EQ(e["clients"]["timeout"], 0);
    EXPECT_GT(e["samples"].get<std::int64_t>(), 0);
    // The curve is the mean each round committed with.
    EXPECT_EQ(e["accuracy"], rounds[round - 1]["fed_eval_accuracy"]);
    EXPECT_EQ(e["loss"], rounds[round - 1]["fed_eval_loss"]);
  }
  EXPECT_TRUE(rounds[0]["fed_eval_accuracy"].is_null()) << "round 1 was not evaluated";

  auto final_reply = client.get(base + "/rounds/3/evaluation");
  ASSERT_EQ(final_reply.status, 200) << final_reply.describe();
  const auto final_round = final_reply.json();
  EXPECT_TRUE(final_round["final"].get<bool>());
  ASSERT_EQ(final_round["items"].size(), 2u);
  double weighted = 0;
  std::int64_t samples = 0;
  for (const auto& c : final_round["items"]) {
    EXPECT_EQ(c["status"], "ok");
    EXPECT_EQ(c["message"], "");
    EXPECT_GT(c["samples"].get<std::int64_t>(), 0);
    weighted += c["accuracy"].get<double>() * c["samples"].get<double>();
    samples += c["samples"].get<std::int64_t>();
  }
  EXPECT_EQ(final_round["items"][0]["client_id"], "hospital-a");
  EXPECT_NEAR(final_round["accuracy"].get<double>(), weighted / double(samples), 1e-12);
  EXPECT_EQ(samples, curve["items"][1]["samples"].get<std::int64_t>());

  // A committed round that was not evaluated has no rows; one that does not exist is 404.
  auto first = client.get(base + "/rounds/1/evaluation");
  ASSERT_EQ(first.status, 200) << first.describe();
  EXPECT_TRUE(first.json()["items"].empty());
  EXPECT_TRUE(first.json()["accuracy"].is_null());
  EXPECT_EQ(client.get(base + "/rounds/4/evaluation").status, 404);
  EXPECT_EQ(client.get("/api/v1/runs/999/evaluation").status, 404);
  EXPECT_EQ(client.get("/api/v1/runs/999/rounds/1/evaluation").status, 404);
  EXPECT_EQ(client.get(base + "/rounds/x/evaluation").status, 400);
  EXPECT_EQ(client.get(base + "/evaluation?limit=3").status, 400);
}

}  // namespace
}  // namespace fedcore::api
