// Typed metadata of the federation's messages (docs/protocol.md), with the validation
// that turns untrusted JSON into these structs. JSON stays here, at the edge: sessions
// and rounds only ever see the structs.
//
// Every parse_* function accepts the metadata text of one frame and returns
// errc::invalid_argument naming the field for anything missing, mistyped or out of
// range. Unknown fields are ignored (so a newer peer can add optional fields).
// to_metadata() produces what the matching parse_* accepts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/protocol/update_encoding.hpp"
#include "shared/util/client_id.hpp"
#include "shared/util/error.hpp"

namespace fedcore::protocol {

using fedcore::is_valid_client_id;  // util/client_id.hpp

// Protocol versions (docs/protocol.md, "Versions"). A peer speaks every version from
// kOldestProtocolVersion up to its own kProtocolVersion; a session speaks the lower of the
// two ends' versions, which the server names in WELCOME.
//   1  the protocol before versions were announced: a HELLO or WELCOME without "protocol"
//   2  external models (a model spec of "type": "external", trained by the site's own code)
//   3  compressed updates (TRAIN "compression", UPDATE "encoding"; update_encoding.hpp)
//   4  SCAFFOLD (TRAIN and UPDATE "scaffold": a control variate after the parameters)
//   5  FedBN (TRAIN and EVALUATE "site_batch_norm": the site keeps its own BatchNorm)
//   6  adaptive clipping under secure aggregation (TRAIN privacy "count_stddev": the site
//      reports its unclipped bit in the masked vector's last metric slot)
inline constexpr std::uint32_t kProtocolVersion = 6;
inline constexpr std::uint32_t kOldestProtocolVersion = 1;
inline constexpr std::uint32_t kExternalModelsProtocolVersion = 2;
inline constexpr std::uint32_t kCompressionProtocolVersion = 3;
inline constexpr std::uint32_t kScaffoldProtocolVersion = 4;
inline constexpr std::uint32_t kSiteBatchNormProtocolVersion = 5;
inline constexpr std::uint32_t kSecureAdaptiveClipProtocolVersion = 6;
// The version a session with a peer of `peer_version` speaks. REQUIRES: peer_version >= 1.
constexpr std::uint32_t negotiated_protocol(std::uint32_t peer_version) noexcept {
  return peer_version < kProtocolVersion ? peer_version : kProtocolVersion;
}

struct Hello {
  std::uint64_t samples = 0;       // training samples held by the client
  std::uint64_t test_samples = 0;  // local test split, for federated evaluation
  std::vector<std::int64_t> input_shape;
  std::int32_t num_classes = 0;
  std::vector<std::string> capabilities;              // e.g. "train", "evaluate"
  std::string software;                               // "fedcore-client 0.1.0"
  std::uint32_t protocol_version = kProtocolVersion;  // "protocol"; absent: 1
};

struct Welcome {
  std::string client_id;  // as read from the client's certificate
  std::uint32_t heartbeat_seconds = 15;
  std::uint32_t protocol_version = kProtocolVersion;  // "protocol": the session's; absent: 1
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
  // Adaptive clipping under secure aggregation (client-level DP): > 0 asks the site to report
  // its centred unclipped bit (privacy/adaptive_clip.hpp) in the masked vector's last metric
  // slot; the bit sum gets N(0, count_stddev²) (distributed DP: each site its share), and
  // the update noise uses z_Δ = update_noise_multiplier(noise_multiplier, count_stddev).
  double count_stddev = 0;
};

// Feature scaling (docs/protocol.md, "Feature scaling"): how a site standardises its
// tabular features before it trains and evaluates, x' = (x - mean) / std per feature.
enum class ScalingMode {
  none,       // the features as loaded (images: the loaders already scale them)
  site,       // each site with its own training split's statistics, applied to both splits
  federated,  // every site with one scale the server estimated from all sites' statistics
};
std::string_view scaling_mode_name(ScalingMode mode) noexcept;
std::optional<ScalingMode> scaling_mode_from_name(std::string_view name) noexcept;

// Most features a federated scale (and a feature-statistics report) carries: it keeps both
// messages well inside the 64 KiB metadata limit.
inline constexpr std::size_t kMaxScaledFeatures = 512;

struct FeatureScaling {
  ScalingMode mode = ScalingMode::none;
  std::vector<double> mean;    // federated: one per feature (1..kMaxScaledFeatures), finite
  std::vector<double> stddev;  // "std" in the metadata: one per feature, finite and > 0
};

// The payload of a train frame is the global model's parameters (and, for SCAFFOLD, the
// server's control variate after them).
struct TrainRequest {
  std::int64_t run_id = 0;
  std::int64_t round = 0;
  std::string nonce;                                     // 32 hex digits, fresh per (round, client)
  nlohmann::json model_spec = nlohmann::json::object();  // a model spec object
  std::string layout_fingerprint;                        // 16 hex digits
  TrainSettings settings;
  bool evaluate = false;   // also evaluate the received model on the local test split
  PrivacyTerms privacy;    // "privacy" in the metadata; absent means none
  FeatureScaling scaling;  // "scaling" in the metadata; absent means none
  // "compression": how the update is to be sent; absent means f32 (protocol 3).
  CompressionTerms compression;
  // "scaffold" (protocol 4): the payload is the global model followed by the server's
  // control variate, as many f32 values; the site trains with SCAFFOLD's correction and
  // answers with a "scaffold" update (server/federation/scaffold.hpp). Never with a
  // compressed download.
  bool scaffold = false;
  // "site_batch_norm" (protocol 5, FedBN): the site trains and evaluates with its own
  // BatchNorm weights, biases and running statistics (model/federated_vector.hpp
  // site_ranges) in place of the payload's, and sends the payload's values there back
  // unchanged: they never leave the site.
  bool site_batch_norm = false;
};

struct LocalEvaluation {
  double loss = 0;
  double accuracy = 0;
  std::uint64_t samples = 0;
};

// The payload of an update frame is the locally trained parameters (and, for SCAFFOLD, the
// change of the site's control variate after them).
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
  // "encoding": what the payload holds (update_encoding.hpp); absent means f32, the
  // trained parameters themselves.
  UpdateEncoding encoding = UpdateEncoding::f32;
  // "scaffold" (protocol 4): the payload is the trained parameters followed by the change
  // of the site's control variate, as many f32 values (never with an encoding).
  bool scaffold = false;
};

// The HELLO capability of a client that answers feature_stats_request and applies TRAIN's
// "scaling"; the server asks only clients that announce it.
inline constexpr std::string_view kFeatureStatsCapability = "feature_stats";

// Server -> client, before a run's first round (feature_stats_request): report the
// moments of your training split's features, for the run's federated feature scale.
struct FeatureStatsRequest {
  std::int64_t run_id = 0;
  std::string nonce;           // 32 hex digits, fresh per (run, client): echoed in the report
  std::uint32_t features = 0;  // the run's tabular input size, 1..kMaxScaledFeatures
};

// Client -> server (feature_stats): per feature, the number of values in the site's training
// split, their sum and their sum of squares. Each of the three arrays has `features`
// entries; counts are integers in [0, 2^40], sums finite, sums of squares finite, >= 0 and
// no smaller than any data could make them (sum² <= count * sum_squares, up to rounding).
struct FeatureStatsReport {
  std::int64_t run_id = 0;
  std::string nonce;
  std::uint32_t features = 0;
  std::vector<std::uint64_t> count;
  std::vector<double> sum;
  std::vector<double> sum_squares;
};

// Federated evaluation (docs/protocol.md, "Federated evaluation"). The HELLO capability of a
// client that answers EVALUATE; the server asks only clients that announce it.
inline constexpr std::string_view kEvaluateCapability = "evaluate";
// Longest words an EVALUATION refusal or failure carries.
inline constexpr std::size_t kMaxEvaluationMessage = 1024;

// Server -> client (evaluate): evaluate the parameters in the payload on your local test
// split, without training. Sent after a round's aggregation with the round's new global
// model, and at the end of a run with the final one. Carries what a TRAIN carries to build
// and check the model, and the run's privacy terms, so that the site policy can decide.
struct EvaluateRequest {
  std::int64_t run_id = 0;
  std::int64_t round = 0;  // the round whose aggregate this is
  std::string nonce;       // 32 hex digits, fresh per (round, client): echoed in the answer
  nlohmann::json model_spec = nlohmann::json::object();
  std::string layout_fingerprint;  // 16 hex digits
  bool final_model = false;        // "final": the run's last model
  PrivacyTerms privacy;            // "privacy"; absent means none
  FeatureScaling scaling;          // "scaling"; absent means none
  bool site_batch_norm = false;    // "site_batch_norm" (protocol 5): as in TrainRequest
};

// What a site answers to an EVALUATE.
enum class EvaluationStatus {
  ok,       // evaluated: loss, accuracy and samples are set
  refused,  // the site policy forbids it (message: why)
  failed,   // the site could not evaluate (no test split, a layout that does not fit, ...)
};
std::string_view evaluation_status_name(EvaluationStatus status) noexcept;
std::optional<EvaluationStatus> evaluation_status_from_name(std::string_view name) noexcept;

// Client -> server (evaluation), no payload. For status ok: loss in [0, 1e9], accuracy in
// [0, 1], samples in [1, 2^40] and no message; otherwise a message of 1 to
// kMaxEvaluationMessage bytes and no metrics.
struct EvaluationReport {
  std::int64_t run_id = 0;
  std::int64_t round = 0;
  std::string nonce;
  EvaluationStatus status = EvaluationStatus::ok;
  double loss = 0;
  double accuracy = 0;
  std::uint64_t samples = 0;
  std::string message;
};

struct ErrorMessage {
  std::string code;  // an errc name, e.g. "invalid_argument"
  std::string message;
};

result<Hello> parse_hello(std::string_view metadata);
result<Welcome> parse_welcome(std::string_view metadata);
result<TrainRequest> parse_train_request(std::string_view metadata);
result<UpdateReport> parse_update_report(std::string_view metadata);
result<FeatureStatsRequest> parse_feature_stats_request(std::string_view metadata);
result<FeatureStatsReport> parse_feature_stats_report(std::string_view metadata);
result<EvaluateRequest> parse_evaluate_request(std::string_view metadata);
result<EvaluationReport> parse_evaluation_report(std::string_view metadata);
result<ErrorMessage> parse_error_message(std::string_view metadata);

std::string to_metadata(const Hello& m);
std::string to_metadata(const Welcome& m);
std::string to_metadata(const TrainRequest& m);
std::string to_metadata(const UpdateReport& m);
std::string to_metadata(const FeatureStatsRequest& m);
std::string to_metadata(const FeatureStatsReport& m);
std::string to_metadata(const EvaluateRequest& m);
std::string to_metadata(const EvaluationReport& m);
std::string to_metadata(const ErrorMessage& m);

}  // namespace fedcore::protocol
