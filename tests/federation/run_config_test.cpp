#include "server/federation/run_config.hpp"

#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fedcore::federation {
namespace {

TEST(RunConfig, ParsesAFullConfigAndRoundTrips) {
  auto c =
      parse_run_config(R"({"name":"bc","model":{"type":"logreg"},"rounds":5,"clients_per_round":3,
    "min_clients":2,"min_available_clients":3,"local_epochs":2,"batch_size":16,
    "optimizer":{"kind":"sgd","lr":0.1},
    "round_timeout_s":30,"seed":7,"on_failed_round":"retry","max_retries":1})");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->rounds, 5);
  EXPECT_EQ(c->min_available_clients, 3);
  EXPECT_EQ(c->clients_per_round, 3);
  EXPECT_FLOAT_EQ(c->optimizer.learning_rate, 0.1f);
  EXPECT_EQ(c->on_failed_round, FailedRoundPolicy::retry);
  auto again = parse_run_config(to_json_text(*c));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(to_json_text(*again), to_json_text(*c));
}

TEST(RunConfig, RejectsBadFieldsByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"rounds":5})", "'model'"},
      {R"({"model":{"type":"rnn"}})", "'model.type'"},
      {R"({"model":{"type":"logreg"},"rounds":0})", "'rounds'"},
      {R"({"model":{"type":"logreg"},"rounds":2.5})", "'rounds'"},
      {R"({"model":{"type":"logreg"},"clients_per_round":2,"min_clients":3})", "'min_clients'"},
      {R"({"model":{"type":"logreg"},"min_clients":3,"min_available_clients":2})",
       "'min_available_clients' (2) is below 'min_clients' (3)"},
      {R"({"model":{"type":"logreg"},"min_available_clients":-1})", "'min_available_clients'"},
      {R"({"model":{"type":"logreg"},"clients_per_round":2,"fraction":0.5})", "not both"},
      {R"({"model":{"type":"logreg"},"fraction":1.5})", "'fraction'"},
      {R"({"model":{"type":"logreg"},"strategy":"fedprox"})", "proximal_mu"},
      {R"({"model":{"type":"logreg"},"optimizer":{"lr":-1}})", "'optimizer.lr'"},
      {R"({"model":{"type":"logreg"},"round_timeout_s":0})", "'round_timeout_s'"},
      {R"({"model":{"type":"logreg"},"on_failed_round":"ignore"})", "'on_failed_round'"},
      {R"({"model":{"type":"logreg"},"roundz":3})", "unknown key 'roundz'; did you mean 'rounds'?"},
      {R"({"model":{"type":"logreg"},"manual":"yes"})", "'manual'"},
      {R"([])", "JSON object"},
  };
  for (const auto& [text, fragment] : cases) {
    auto c = parse_run_config(text);
    ASSERT_FALSE(c) << text;
    EXPECT_EQ(c.error().code, errc::invalid_argument);
    EXPECT_NE(c.error().message.find(fragment), std::string::npos) << c.error().message;
  }
}

TEST(RunConfig, OverSelectionIsParsedKeptAndRefusedWherePrivacyDecidesWhoCounts) {
  auto c = parse_run_config(
      R"({"model":{"type":"logreg"},"clients_per_round":3,"min_clients":2,"over_selection":2})");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->over_selection, 2);
  EXPECT_EQ(clients_to_sample(*c, 10), 3u);
  EXPECT_EQ(clients_to_select(*c, 10), 5u);
  EXPECT_EQ(clients_to_select(*c, 4), 4u) << "never more than are online";
  auto again = parse_run_config(to_json_text(*c));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->over_selection, 2);
  const std::pair<const char*, const char*> refused[] = {
      {R"({"model":{"type":"logreg"},"over_selection":-1})", "'over_selection'"},
      {R"({"model":{"type":"logreg"},"over_selection":1,"privacy":{"secure_aggregation":{}}})",
       "does not apply with secure aggregation"},
      {R"({"model":{"type":"logreg"},"over_selection":1,"privacy":{"dp":{"mode":"client_central",)"
       R"("epsilon":4,"delta":1e-5,"clip_norm":0.5}}})",
       "does not apply with differential privacy"},
  };
  for (const auto& [text, fragment] : refused) {
    auto bad = parse_run_config(text);
    ASSERT_FALSE(bad) << text;
    EXPECT_EQ(bad.error().code, errc::invalid_argument);
    EXPECT_NE(bad.error().message.find(fragment), std::string::npos) << bad.error().message;
  }
}

TEST(RunConfig, ClientSamplingIsParsedKeptAndRefusedWhereAUniformSampleIsAssumed) {
  auto absent = parse_run_config(R"({"model":{"type":"logreg"}})");
  ASSERT_TRUE(absent);
  EXPECT_EQ(absent->client_sampling, ClientSampling::uniform);
  auto weighted = parse_run_config(R"({"model":{"type":"logreg"},"client_sampling":"weighted"})");
  ASSERT_TRUE(weighted) << weighted.error().to_string();
  EXPECT_EQ(weighted->client_sampling, ClientSampling::weighted);
  auto again = parse_run_config(to_json_text(*weighted));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->client_sampling, ClientSampling::weighted);
  const std::pair<const char*, const char*> refused[] = {
      {R"({"model":{"type":"logreg"},"client_sampling":"by_size"})", "'client_sampling'"},
      {R"({"model":{"type":"logreg"},"client_sampling":"weighted","over_selection":1})",
       "\"weighted\" does not apply with 'over_selection'"},
      {R"({"model":{"type":"logreg"},"client_sampling":"weighted",)"
       R"("privacy":{"secure_aggregation":{}}})",
       "\"weighted\" does not apply with secure aggregation"},
      {R"({"model":{"type":"logreg"},"client_sampling":"weighted","privacy":{"dp":{)"
       R"("mode":"client_central","epsilon":4,"delta":1e-5,"clip_norm":0.5}}})",
       "\"weighted\" does not apply with differential privacy"},
  };
  for (const auto& [text, fragment] : refused) {
    auto bad = parse_run_config(text);
    ASSERT_FALSE(bad) << text;
    EXPECT_EQ(bad.error().code, errc::invalid_argument);
    EXPECT_NE(bad.error().message.find(fragment), std::string::npos) << bad.error().message;
  }
}

TEST(RunConfig, BatchNormIsAveragedOrKeptAtTheSitesAndRefusedWhereItCannotWork) {
  auto absent = parse_run_config(R"({"model":{"type":"mobilenetv2","width":0.5}})");
  ASSERT_TRUE(absent) << absent.error().to_string();
  EXPECT_EQ(absent->batch_norm, BatchNormMode::averaged);
  auto local = parse_run_config(
      R"({"model":{"type":"cnn","batch_norm":true},"batch_norm":"local","privacy":{"dp":{)"
      R"("mode":"client_central","epsilon":4,"delta":1e-5,"clip_norm":0.5}},)"
      R"("federated_evaluation":false})");
  ASSERT_TRUE(local) << local.error().to_string();
  EXPECT_EQ(local->batch_norm, BatchNormMode::local);
  auto again = parse_run_config(to_json_text(*local));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->batch_norm, BatchNormMode::local);
  // An external model whose layout marks its normalisation tensors (the Python SDK's).
  auto external = parse_run_config(
      R"({"model":{"type":"external","layout":{"tensors":[{"name":"w","shape":[2]},)"
      R"({"name":"bn.weight","shape":[2],"normalization":true}]}},"batch_norm":"local"})");
  ASSERT_TRUE(external) << external.error().to_string();
  EXPECT_EQ(external->model.normalization_tensors, std::vector<std::size_t>{1});
  auto external_again = parse_run_config(to_json_text(*external));
  ASSERT_TRUE(external_again) << external_again.error().to_string();
  EXPECT_EQ(external_again->model.normalization_tensors, std::vector<std::size_t>{1});
  const std::pair<const char*, const char*> refused[] = {
      {R"({"model":{"type":"cnn","batch_norm":true},"batch_norm":"shared"})", "'batch_norm'"},
      {R"({"model":{"type":"cnn"},"batch_norm":"local"})",
       "'batch_norm' \"local\" (FedBN) keeps BatchNorm layers at the sites; this model has none"},
      {R"({"model":{"type":"external","layout":{"tensors":[{"name":"w","shape":[2]}]}},)"
       R"("batch_norm":"local"})",
       "this external model's layout marks no tensor \"normalization\": true"},
      {R"({"model":{"type":"mobilenetv2"},"batch_norm":"local",)"
       R"("server_test_set":"fashion-mnist"})",
       "every site evaluates with its own BatchNorm"},
      {R"({"model":{"type":"mobilenetv2"},"strategy":"scaffold"})",
       "BatchNorm's running statistics do not have"},
      {R"({"model":{"type":"mobilenetv2"},"batch_norm":"local","federated_evaluation":false,)"
       R"("privacy":{"dp":{"mode":"record","epsilon":4,"delta":1e-5,"clip_norm":1}}})",
       "BatchNorm mixes the records of a batch"},
      {R"({"model":{"type":"cnn","batch_norm":true},"federated_evaluation":false,)"
       R"("privacy":{"dp":{"mode":"client_central","epsilon":4,"delta":1e-5,"clip_norm":1}}})",
       "noise to averaged BatchNorm running variances"},
  };
  for (const auto& [text, fragment] : refused) {
    auto bad = parse_run_config(text);
    ASSERT_FALSE(bad) << text;
    EXPECT_EQ(bad.error().code, errc::invalid_argument);
    EXPECT_NE(bad.error().message.find(fragment), std::string::npos) << bad.error().message;
  }
}

TEST(RunConfig, MaxSamplesPerClientIsParsedValidatedAndKept) {
  auto absent = parse_run_config(R"({"model":{"type":"logreg"}})");
  ASSERT_TRUE(absent);
  EXPECT_EQ(absent->max_samples_per_client, 0u);  // no cap
  auto capped = parse_run_config(R"({"model":{"type":"logreg"},"max_samples_per_client":5000})");
  ASSERT_TRUE(capped) << capped.error().to_string();
  EXPECT_EQ(capped->max_samples_per_client, 5000u);
  auto again = parse_run_config(to_json_text(*capped));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->max_samples_per_client, 5000u);
  auto largest =
      parse_run_config(R"({"model":{"type":"logreg"},"max_samples_per_client":4294967296})");
  ASSERT_TRUE(largest) << largest.error().to_string();
  EXPECT_EQ(largest->max_samples_per_client, std::uint64_t{1} << 32);
  for (const char* bad : {R"({"model":{"type":"logreg"},"max_samples_per_client":-1})",
                          R"({"model":{"type":"logreg"},"max_samples_per_client":2.5})",
                          R"({"model":{"type":"logreg"},"max_samples_per_client":"100"})",
                          R"({"model":{"type":"logreg"},"max_samples_per_client":4294967297})"}) {
    auto c = parse_run_config(bad);
    ASSERT_FALSE(c) << bad;
    EXPECT_EQ(c.error().code, errc::invalid_argument);
    EXPECT_NE(c.error().message.find("'max_samples_per_client'"), std::string::npos)
        << c.error().message;
  }
}

TEST(RunConfig, SamplesClientsPerRoundOrFraction) {
  auto fixed = parse_run_config(R"({"model":{"type":"logreg"},"clients_per_round":3})");
  EXPECT_EQ(clients_to_sample(*fixed, 10), 3u);
  EXPECT_EQ(clients_to_sample(*fixed, 2), 2u);
  auto fraction = parse_run_config(R"({"model":{"type":"logreg"},"fraction":0.25})");
  EXPECT_EQ(clients_to_sample(*fraction, 10), 3u);
  EXPECT_EQ(clients_to_sample(*fraction, 1), 1u);
}

// Issue 19: every key of a run config is read strictly, nested objects included, and each
// problem names its full key path. One case per kind of mistake and per level.
TEST(RunConfigStrict, EveryProblemNamesItsFullKeyPath) {
  const std::pair<const char*, const char*> cases[] = {
      // Unknown keys, with the closest known one (or the list when none is close).
      {R"({"model":{"type":"logreg"},"batchsize":8})",
       "run config: unknown key 'batchsize'; did you mean 'batch_size'?"},
      {R"({"model":{"type":"mlp","hiden":[4]}})",
       "run config: unknown key 'model.hiden'; did you mean 'model.hidden'?"},
      {R"({"model":{"type":"logreg"},"optimizer":{"kind":"sgd","lr":0.1,"momentun":0.9}})",
       "run config: unknown key 'optimizer.momentun'; did you mean 'optimizer.momentum'?"},
      {R"({"model":{"type":"logreg"},"federated_evaluation":false,)"
       R"("privacy":{"dp":{"mode":"record","epsilom":8}}})",
       "run config: unknown key 'privacy.dp.epsilom'; did you mean 'privacy.dp.epsilon'?"},
      {R"({"model":{"type":"logreg"},"privacy":{"secure_aggregation":{"treshold":3}}})",
       "run config: unknown key 'privacy.secure_aggregation.treshold'; did you mean "
       "'privacy.secure_aggregation.threshold'?"},
      {R"({"model":{"type":"logreg"},"privacy":{"colour":1}})",
       "run config: unknown key 'privacy.colour' (known keys: secure_aggregation, dp)"},
      // Wrong types.
      {R"({"model":{"type":"logreg"},"rounds":"10"})",
       "run config: 'rounds' must be an integer in [1, 100000], got \"10\""},
      {R"({"model":{"type":"logreg"},"manual":1})",
       "run config: 'manual' must be true or false, got 1"},
      {R"({"model":{"type":"logreg"},"optimizer":{"lr":"0.1"}})",
       "run config: 'optimizer.lr' must be a number in (0, 100], got \"0.1\""},
      {R"({"model":"logreg"})", "run config: 'model' must be a JSON object, got \"logreg\""},
      {R"({"model":{"type":"logreg"},"strategy":"FedAvg"})",
       "run config: 'strategy' must be one of \"fedavg\", \"fedprox\", \"fedavgm\", \"fedadam\", "
       "\"fedyogi\", \"fedadagrad\", \"median\", \"trimmed_mean\", \"krum\", \"multi_krum\", "
       "\"bulyan\", \"centered_clipping\", \"scaffold\", got \"FedAvg\"; did you mean "
       "\"fedavg\"?"},
      // SCAFFOLD's control variates assume plain local SGD steps on a model Fedcore trains.
      {R"({"model":{"type":"logreg"},"strategy":"scaffold",)"
       R"("optimizer":{"kind":"sgd","lr":0.1,"momentum":0.9}})",
       "run config: strategy \"scaffold\": its control variates assume plain local SGD "
       "(optimizer kind \"sgd\" without momentum)"},
      {R"({"model":{"type":"logreg"},"strategy":"scaffold","compression":{"up":"int8"}})",
       "run config: strategy \"scaffold\": the update and the control variate travel as f32; "
       "'compression' applies to other strategies"},
      {R"({"model":{"type":"logreg"},"strategy":"scaffold","proximal_mu":0.1})",
       "run config: strategy \"scaffold\": 'proximal_mu' is FedProx's correction; SCAFFOLD "
       "corrects with control variates"},
      {R"({"model":{"type":"logreg"},"strategy":"scaffold","strategy_options":{"tau":0.1}})",
       "run config: 'strategy_options.tau' does not apply to strategy \"scaffold\""},
      {R"({"model":{"type":"logreg"},"strategy":"krum","clients_per_round":4,)"
       R"("strategy_options":{"byzantine":1}})",
       "run config: krum with byzantine = 1 needs more than 2f + 2 = 4 updates per round; "
       "clients_per_round is 4"},
      {R"({"model":{"type":"logreg"},"strategy":"fedavgm","strategy_options":{"tau":0.1}})",
       "run config: 'strategy_options.tau' does not apply to strategy \"fedavgm\""},
      {R"({"model":{"type":"logreg"},"strategy":"fedadam","strategy_options":{"beta1":1}})",
       "run config: 'strategy_options.beta1' must be a number in [0, 1), got 1"},
      // Out of range.
      {R"({"model":{"type":"logreg"},"batch_size":65537})",
       "run config: 'batch_size' must be an integer in [1, 65536], got 65537"},
      {R"({"model":{"type":"mlp","hidden":[64,0]}})",
       "run config: 'model.hidden[1]' must be an integer in [1, 65536], got 0"},
      {R"({"model":{"type":"logreg"},"federated_evaluation":false,)"
       R"("privacy":{"dp":{"mode":"record","epsilon":-1,"delta":1e-5,"clip_norm":1}}})",
       "run config: 'privacy.dp.epsilon' must be a number in [0, 10000], got -1"},
      {R"({"model":{"type":"logreg"},"optimizer":{"kind":"adam","beta2":1}})",
       "run config: 'optimizer.beta2' must be a number in [0, 1), got 1"},
      // Integers past int64 and uint64 are out of range, never wrapped or truncated.
      {R"({"model":{"type":"logreg"},"seed":18446744073709551616})",
       "run config: 'seed' must be an integer in [0, 9000000000000000], got "
       "1.8446744073709552e+19"},
      {R"({"model":{"type":"logreg"},"local_epochs":4294967297})",
       "run config: 'local_epochs' must be an integer in [1, 1000], got 4294967297"},
      {R"({"model":{"type":"logreg"},"max_samples_per_client":-9223372036854775809})",
       "run config: 'max_samples_per_client' must be an integer in [0, 4294967296], got "
       "-9.223372036854776e+18"},
      // A value that becomes out of range once stored as a float.
      {R"({"model":{"type":"mlp","hidden":[4],"dropout":0.99999999}})",
       "run config: 'model.dropout' must be a number in [0, 1), got 0.99999999 (1 as a 32-bit "
       "float)"},
      // Keys that would be ignored, and so would silently change what is trained.
      {R"({"model":{"type":"logreg"},"proximal_mu":0.1})",
       "run config: 'proximal_mu' applies only to strategy \"fedprox\""},
      {R"({"model":{"type":"logreg","dropout":0.5}})",
       "run config: 'model.dropout' applies only to an mlp, a cnn or a mobilenetv2"},
      {R"({"model":{"type":"logreg"},"optimizer":{"kind":"adam","momentum":0.9}})",
       "run config: 'optimizer.momentum' applies only to sgd (adam's counterpart is beta1)"},
      {R"({"model":{"type":"logreg"},"optimizer":{"kind":"sgd","beta1":0.9}})",
       "run config: 'optimizer.beta1' applies only to adam"},
      {R"({"model":{"type":"logreg"},"federated_evaluation":false,)"
       R"("privacy":{"dp":{"epsilon":8,"delta":1e-5,"clip_norm":1}}})",
       "run config: 'privacy.dp.mode' is required: none, record, client_central or "
       "client_distributed"},
      {R"({"model":{"type":"logreg"},"privacy":{"dp":{"mode":"none","epsilon":8}}})",
       "run config: 'privacy.dp.epsilon' applies only when 'privacy.dp.mode' is not \"none\""},
      {R"({"model":{"type":"logreg"},"label_column":"y"})",
       "run config: 'label_column' applies only with a 'server_test_set'"},
      // The text itself.
      {R"({"model":{"type":"logreg"},"rounds":1,"rounds":100})",
       "run config: duplicate key 'rounds'"},
      {R"({"model":{"type":"logreg","type":"cnn"}})", "run config: duplicate key 'type'"},
      {R"({"model":{"type":"logreg"},"round_timeout_s":1e400})",
       "run config: invalid JSON: a number is too large for a double"},
      {"{\"model\":{\"type\":\"logreg\"},\"name\":\"\xff\"}",
       "run config: invalid JSON at byte 36"},
      {R"({"model":{"type":"logreg"},"name":"a\u0001b"})",
       "run config: 'name' must not contain control characters, got \"a?b\""},
  };
  for (const auto& [text, message] : cases) {
    auto c = parse_run_config(text);
    ASSERT_FALSE(c) << text;
    EXPECT_EQ(c.error().code, errc::invalid_argument) << text;
    EXPECT_EQ(c.error().message, message) << text;
  }
}

// A config built in memory (fedcore-sim builds its own) can hold what JSON text cannot.
TEST(RunConfigStrict, NonFiniteNumbersAreRefusedAtEveryLevel) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto with = [](const char* key, nlohmann::json value) {
    nlohmann::json j{{"model", {{"type", "logreg"}}}};
    j[key] = std::move(value);
    return run_config_from_json(j);
  };
  auto timeout = with("round_timeout_s", inf);
  ASSERT_FALSE(timeout);
  EXPECT_EQ(timeout.error().message,
            "run config: 'round_timeout_s' must be a number in [0.1, 86400], got inf");
  auto fraction = with("fraction", nan);
  ASSERT_FALSE(fraction);
  EXPECT_EQ(fraction.error().message,
            "run config: 'fraction' must be a number in [1e-06, 1], got nan");
  auto rounds = with("rounds", -inf);
  ASSERT_FALSE(rounds);
  EXPECT_EQ(rounds.error().message,
            "run config: 'rounds' must be an integer in [1, 100000], got -inf");
  auto lr = with("optimizer", {{"kind", "sgd"}, {"lr", nan}});
  ASSERT_FALSE(lr);
  EXPECT_EQ(lr.error().message, "run config: 'optimizer.lr' must be a number in (0, 100], got nan");
  auto epsilon = with("privacy", {{"dp", {{"mode", "record"}, {"epsilon", inf}}}});
  ASSERT_FALSE(epsilon);
  EXPECT_EQ(epsilon.error().message,
            "run config: 'privacy.dp.epsilon' must be a number in [0, 10000], got inf");
}

// Integral numbers written as floats are integers; neutral values of the other optimizer
// kind are accepted (tools pass every flag).
TEST(RunConfigStrict, AcceptsWhatIsUnambiguous) {
  auto c = parse_run_config(R"({"model":{"type":"logreg"},"rounds":5.0,"batch_size":1e2,
      "optimizer":{"kind":"adam","lr":0.001,"momentum":0,"nesterov":false}})");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->rounds, 5);
  EXPECT_EQ(c->batch_size, 100);
  EXPECT_EQ(c->optimizer.kind, model::OptimizerKind::adam);
}

TEST(RunConfigStrict, FeatureScalingIsReadCheckedAndKept) {
  auto site = parse_run_config(R"({"model":{"type":"logreg"},"feature_scaling":"site"})");
  ASSERT_TRUE(site) << site.error().message;
  EXPECT_EQ(site->feature_scaling, protocol::ScalingMode::site);
  auto again = parse_run_config(to_json_text(*site));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->feature_scaling, protocol::ScalingMode::site);
  auto bad = parse_run_config(R"({"model":{"type":"logreg"},"feature_scaling":"global"})");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "run config: 'feature_scaling' must be one of \"federated\", \"site\", \"none\", got "
            "\"global\"");
}

// Every run config the server stores must parse again when a run resumes.
TEST(RunConfigStrict, TheStoredFormOfEveryKindOfRunParsesAgain) {
  for (const char* text :
       {R"({"model":{"type":"mlp","hidden":[8],"dropout":0.25},"strategy":"fedprox",
            "proximal_mu":0.1,"optimizer":{"kind":"adam","lr":0.001},"fraction":0.5})",
        R"({"model":{"type":"cnn","input_shape":[28,28,1],"num_classes":10,"channels":[4]},
            "clients_per_round":5,"min_clients":3,"federated_evaluation":false,
            "on_failed_round":"retry","max_retries":1,"privacy":{"secure_aggregation":{},
            "dp":{"mode":"client_distributed","epsilon":4,"delta":1e-5,"clip_norm":0.5}}})",
        R"({"model":{"type":"logreg"},"federated_evaluation":false,"min_clients":2,
            "clients_per_round":4,"privacy":{"dp":{"mode":"client_central","epsilon":2,
            "delta":1e-6,"clip_norm":1,"adaptive_clip":{"count_stddev":5}}}})"}) {
    auto c = parse_run_config(text);
    ASSERT_TRUE(c) << c.error().message;
    auto again = parse_run_config(to_json_text(*c));
    ASSERT_TRUE(again) << again.error().message << "\n" << to_json_text(*c);
    EXPECT_EQ(to_json_text(*again), to_json_text(*c));
  }
}

}  // namespace
}  // namespace fedcore::federation
