// Typed metadata of the federation's messages (docs/protocol.md), with the validation
// that turns untrusted JSON into these structs. JSON stays here, at the edge: sessions
// and rounds only ever see the structs.
//
// Every parse_* function accepts the metadata text of one frame and returns
// errc::invalid_argument naming the field for anything missing, mistyped or out of
// range. Unknown fields are ignored (so a newer peer can add optional fields).
// to_metadata() produces what the matching parse_* accepts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/util/client_id.hpp"
#include "shared/util/error.hpp"

namespace fedcore::protocol {

using fedcore::is_valid_client_id;  // util/client_id.hpp

struct Hello {
  std::uint64_t samples = 0;       // training samples held by the client
  std::uint64_t test_samples = 0;  // local test split, for federated evaluation
  std::vector<std::int64_t> input_shape;
  std::int32_t num_classes = 0;
  std::vector<std::string> capabilities;  // e.g. "train", "evaluate"
  std::string software;                   // "fedcore-client 0.1.0"
};

struct Welcome {
  std::string client_id;  // as read from the client's certificate
  std::uint32_t heartbeat_seconds = 15;
};

struct TrainSettings {
  std::int32_t epochs = 1;
  std::int32_t batch_size = 32;
  nlohmann::json optimizer = {{"kind", "sgd"}, {"lr", 0.05}};  // an optimizer config object
  float proximal_mu = 0.0f;
  std::uint64_t seed = 0;
};

// Which differential privacy a run applies (docs/privacy.md says what each protects).
enum class DpMode {
  none,
  record,              // DP-SGD in every site's local training: protects one patient
  client_central,      // DP-FedAvg, the server noises the sum: protects one site
  client_distributed,  // DP-FedAvg, each site adds its share of the noise under SecAgg+
};
std::string_view dp_mode_name(DpMode mode) noexcept;
std::optional<DpMode> dp_mode_from_name(std::string_view name) noexcept;

// The privacy terms of a run, sent with every TRAIN so that a site can check them against
// its policy before it trains (client/site_policy.hpp).
struct PrivacyTerms {
  bool secure_aggregation = false;
  DpMode dp = DpMode::none;
  double epsilon = 0;  // the run's whole budget; 0 when dp is none
  double delta = 0;
  // Record-level DP-SGD (dp == record): per-example clip and noise multiplier.
  double clip_norm = 0;
  double noise_multiplier = 0;
};

// The payload of a train frame is the global model's parameters.
struct TrainRequest {
  std::int64_t run_id = 0;
  std::int64_t round = 0;
  std::string nonce;                                     // 32 hex digits, fresh per (round, client)
  nlohmann::json model_spec = nlohmann::json::object();  // a model spec object
  std::string layout_fingerprint;                        // 16 hex digits
  TrainSettings settings;
  bool evaluate = false;  // also evaluate the received model on the local test split
  PrivacyTerms privacy;   // "privacy" in the metadata; absent means none
};

struct LocalEvaluation {
  double loss = 0;
  double accuracy = 0;
  std::uint64_t samples = 0;
};

// The payload of an update frame is the locally trained parameters.
struct UpdateReport {
  std::int64_t run_id = 0;
  std::int64_t round = 0;
  std::string nonce;
  std::string layout_fingerprint;
  std::uint64_t samples = 0;  // the weight of this update in FedAvg
  double loss = 0;
  double accuracy = 0;
  double train_seconds = 0;
  std::optional<LocalEvaluation> evaluation;  // of the received global model
};

struct ErrorMessage {
  std::string code;  // an errc name, e.g. "invalid_argument"
  std::string message;
};

result<Hello> parse_hello(std::string_view metadata);
result<Welcome> parse_welcome(std::string_view metadata);
result<TrainRequest> parse_train_request(std::string_view metadata);
result<UpdateReport> parse_update_report(std::string_view metadata);
result<ErrorMessage> parse_error_message(std::string_view metadata);

std::string to_metadata(const Hello& m);
std::string to_metadata(const Welcome& m);
std::string to_metadata(const TrainRequest& m);
std::string to_metadata(const UpdateReport& m);
std::string to_metadata(const ErrorMessage& m);

}  // namespace fedcore::protocol
