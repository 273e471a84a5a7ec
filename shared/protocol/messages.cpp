#include "shared/protocol/messages.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "shared/protocol/metadata.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::protocol {
namespace {

using nlohmann::json;

// Reads fields of one message and remembers the first problem; the parse functions
// then read like a list of fields.
class Reader {
 public:
  Reader(std::string_view what, std::string_view metadata) : what_(what) {
    auto parsed = parse_metadata(metadata);
    if (!parsed) {
      fail_with(parsed.error().message);
    } else {
      json_ = std::move(*parsed);
    }
  }

  bool ok() const noexcept { return !error_; }
  error take_error() { return std::move(*error_); }

  template <class Int>
  Int integer(const char* key, Int low, Int high, std::optional<Int> fallback = std::nullopt) {
    const json* v = field(key, fallback.has_value());
    if (v == nullptr) {
      return fallback.value_or(Int{});
    }
    if (!v->is_number_integer()) {
      fail_with(std::string("'") + key + "' must be an integer");
      return Int{};
    }
    // Compare in the widest type the value can take so that huge numbers cannot wrap.
    const bool in_range =
        v->is_number_unsigned()
            ? v->get<std::uint64_t>() <= static_cast<std::uint64_t>(high) &&
                  (low <= 0 || v->get<std::uint64_t>() >= static_cast<std::uint64_t>(low))
            : v->get<std::int64_t>() >= static_cast<std::int64_t>(low) &&
                  v->get<std::int64_t>() <= static_cast<std::int64_t>(high);
    if (!in_range) {
      fail_with(std::string("'") + key + "' = " + v->dump() + " is outside [" +
                std::to_string(low) + ", " + std::to_string(high) + "]");
      return Int{};
    }
    return v->get<Int>();
  }

  double number(const char* key, double low, double high,
                std::optional<double> fallback = std::nullopt) {
    const json* v = field(key, fallback.has_value());
    if (v == nullptr) {
      return fallback.value_or(0.0);
    }
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < low ||
        v->get<double>() > high) {
      fail_with(std::string("'") + key + "' must be a finite number in [" + std::to_string(low) +
                ", " + std::to_string(high) + "]");
      return 0.0;
    }
    return v->get<double>();
  }

  std::string text(const char* key, std::size_t max_length,
                   std::optional<std::string> fallback = std::nullopt) {
    const json* v = field(key, fallback.has_value());
    if (v == nullptr) {
      return fallback.value_or("");
    }
    if (!v->is_string() || v->get_ref<const std::string&>().size() > max_length) {
      fail_with(std::string("'") + key + "' must be a string of at most " +
                std::to_string(max_length) + " bytes");
      return {};
    }
    return v->get<std::string>();
  }

  std::string hex(const char* key, std::size_t length) {
    auto s = text(key, length);
    if (ok() &&
        (s.size() != length || s.find_first_not_of("0123456789abcdef") != std::string::npos)) {
      fail_with(std::string("'") + key + "' must be " + std::to_string(length) +
                " lowercase hex digits");
    }
    return s;
  }

  bool boolean(const char* key, bool fallback) {
    const json* v = field(key, true);
    if (v == nullptr) {
      return fallback;
    }
    if (!v->is_boolean()) {
      fail_with(std::string("'") + key + "' must be true or false");
      return fallback;
    }
    return v->get<bool>();
  }

  // A nested JSON object, returned as compact text.
  // A nested object, handed on as parsed JSON (its reader validates it; nobody parses the
  // text again).
  json object(const char* key, std::size_t max_members) {
    const json* v = field(key, false);
    if (v == nullptr) {
      return json::object();
    }
    if (!v->is_object()) {
      fail_with(std::string("'") + key + "' must be a JSON object");
      return json::object();
    }
    if (v->size() > max_members) {
      fail_with(std::string("'") + key + "' has more than " + std::to_string(max_members) +
                " members");
      return json::object();
    }
    return *v;
  }

  std::vector<std::int64_t> shape(const char* key) {
    const json* v = field(key, false);
    std::vector<std::int64_t> out;
    if (v == nullptr) {
      return out;
    }
    if (!v->is_array() || v->empty() || v->size() > 4) {
      fail_with(std::string("'") + key + "' must be an array of 1 to 4 positive integers");
      return out;
    }
    for (const auto& d : *v) {
      if (!d.is_number_integer() || d.get<std::int64_t>() <= 0 ||
          d.get<std::int64_t>() > (1 << 20)) {
        fail_with(std::string("'") + key + "' must be an array of 1 to 4 positive integers");
        return {};
      }
      out.push_back(d.get<std::int64_t>());
    }
    return out;
  }

  std::vector<std::string> strings(const char* key, std::size_t max_count, std::size_t max_length) {
    const json* v = field(key, true);
    std::vector<std::string> out;
    if (v == nullptr) {
      return out;
    }
    if (!v->is_array() || v->size() > max_count) {
      fail_with(std::string("'") + key + "' must be an array of at most " +
                std::to_string(max_count) + " strings");
      return out;
    }
    for (const auto& s : *v) {
      if (!s.is_string() || s.get_ref<const std::string&>().size() > max_length) {
        fail_with(std::string("'") + key + "' entries must be strings of at most " +
                  std::to_string(max_length) + " bytes");
        return {};
      }
      out.push_back(s.get<std::string>());
    }
    return out;
  }

  // A required array of at most `max_count` finite numbers in [low, high].
  std::vector<double> numbers(const char* key, std::size_t max_count, double low, double high) {
    const json* v = field(key, false);
    std::vector<double> out;
    if (v == nullptr) {
      return out;
    }
    const auto refuse = [&] {
      fail_with(std::string("'") + key + "' must be an array of at most " +
                std::to_string(max_count) + " finite numbers in [" + std::to_string(low) + ", " +
                std::to_string(high) + "]");
      return std::vector<double>{};
    };
    if (!v->is_array() || v->size() > max_count) {
      return refuse();
    }
    out.reserve(v->size());
    for (const auto& x : *v) {
      if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() < low ||
          x.get<double>() > high) {
        return refuse();
      }
      out.push_back(x.get<double>());
    }
    return out;
  }

  // A required array of at most `max_count` integers in [0, high].
  std::vector<std::uint64_t> counts(const char* key, std::size_t max_count, std::uint64_t high) {
    const json* v = field(key, false);
    std::vector<std::uint64_t> out;
    if (v == nullptr) {
      return out;
    }
    const auto refuse = [&] {
      fail_with(std::string("'") + key + "' must be an array of at most " +
                std::to_string(max_count) + " integers in [0, " + std::to_string(high) + "]");
      return std::vector<std::uint64_t>{};
    };
    if (!v->is_array() || v->size() > max_count) {
      return refuse();
    }
    out.reserve(v->size());
    for (const auto& x : *v) {
      if (!x.is_number_unsigned() || x.get<std::uint64_t>() > high) {
        return refuse();  // a negative count is a signed integer: refused here
      }
      out.push_back(x.get<std::uint64_t>());
    }
    return out;
  }

  const json& raw() const { return json_; }
  bool has(const char* key) const { return json_.is_object() && json_.contains(key); }
  void fail_with(std::string message) {
    if (!error_) {
      error_ = fail(errc::invalid_argument, what_ + ": " + std::move(message));
    }
  }

 private:
  const json* field(const char* key, bool optional) {
    if (error_) {
      return nullptr;
    }
    if (!json_.contains(key)) {
      if (!optional) {
        fail_with(std::string("missing '") + key + "'");
      }
      return nullptr;
    }
    return &json_[key];
  }

  std::string what_;
  json json_;
  std::optional<error> error_;
};

constexpr std::int64_t kMaxRound = std::int64_t{1} << 40;
constexpr std::uint64_t kMaxSamples = std::uint64_t{1} << 40;
// Feature values are floats: a mean, standard deviation or sum of them stays below this.
constexpr double kMaxMagnitude = 1e300;

// TRAIN's "scaling": the mode, and for a federated scale its mean and std per feature.
result<FeatureScaling> parse_scaling(const std::string& what, const json& j) {
  Reader r(what, j.is_object() ? j.dump() : std::string("null"));
  FeatureScaling out;
  const auto mode = r.text("mode", 32);
  if (!r.ok()) {
    return r.take_error();
  }
  const auto parsed = scaling_mode_from_name(mode);
  if (!parsed) {
    return fail(errc::invalid_argument, what + ": unknown 'mode' '" + mode + "'");
  }
  out.mode = *parsed;
  if (out.mode != ScalingMode::federated) {
    return out;
  }
  out.mean = r.numbers("mean", kMaxScaledFeatures, -kMaxMagnitude, kMaxMagnitude);
  out.stddev = r.numbers("std", kMaxScaledFeatures, 0.0, kMaxMagnitude);
  if (r.ok() && (out.mean.empty() || out.mean.size() != out.stddev.size())) {
    r.fail_with("'mean' and 'std' must have one entry per feature (got " +
                std::to_string(out.mean.size()) + " and " + std::to_string(out.stddev.size()) +
                ")");
  }
  if (r.ok() &&
      std::any_of(out.stddev.begin(), out.stddev.end(), [](double s) { return s <= 0; })) {
    r.fail_with("'std' entries must be positive");
  }
  if (!r.ok()) {
    return r.take_error();
  }
  return out;
}

// TRAIN's and EVALUATE's "privacy": the run's privacy terms.
result<PrivacyTerms> parse_privacy(const std::string& what, const json& p) {
  Reader inner(what, p.is_object() ? p.dump() : std::string("null"));
  PrivacyTerms out;
  out.secure_aggregation = inner.boolean("secure_aggregation", false);
  const auto mode = inner.text("dp", 32, std::string("none"));
  if (auto parsed = dp_mode_from_name(mode)) {
    out.dp = *parsed;
  } else if (inner.ok()) {
    return fail(errc::invalid_argument, what + ": unknown 'dp' mode '" + mode + "'");
  }
  out.epsilon = inner.number("epsilon", 0.0, 1e6, 0.0);
  out.delta = inner.number("delta", 0.0, 1.0, 0.0);
  out.clip_norm = inner.number("clip_norm", 0.0, 1e9, 0.0);
  out.noise_multiplier = inner.number("noise_multiplier", 0.0, 1e6, 0.0);
  out.count_stddev = inner.number("count_stddev", 0.0, 1e6, 0.0);
  if (!inner.ok()) {
    return inner.take_error();
  }
  return out;
}

json privacy_json(const PrivacyTerms& p) {
  json j = {{"secure_aggregation", p.secure_aggregation},
            {"dp", dp_mode_name(p.dp)},
            {"epsilon", p.epsilon},
            {"delta", p.delta},
            {"clip_norm", p.clip_norm},
            {"noise_multiplier", p.noise_multiplier}};
  if (p.count_stddev > 0) {
    j["count_stddev"] = p.count_stddev;
  }
  return j;
}

json scaling_json(const FeatureScaling& scaling) {
  json j = {{"mode", scaling_mode_name(scaling.mode)}};
  if (scaling.mode == ScalingMode::federated) {
    j["mean"] = scaling.mean;
    j["std"] = scaling.stddev;
  }
  return j;
}

}  // namespace

std::string_view dp_mode_name(DpMode mode) noexcept {
  switch (mode) {
    case DpMode::none:
      return "none";
    case DpMode::record:
      return "record";
    case DpMode::client_central:
      return "client_central";
    case DpMode::client_distributed:
      return "client_distributed";
  }
  return "none";
}

std::optional<DpMode> dp_mode_from_name(std::string_view name) noexcept {
  for (auto mode :
       {DpMode::none, DpMode::record, DpMode::client_central, DpMode::client_distributed}) {
    if (dp_mode_name(mode) == name) {
      return mode;
    }
  }
  return std::nullopt;
}

std::string_view scaling_mode_name(ScalingMode mode) noexcept {
  switch (mode) {
    case ScalingMode::none:
      return "none";
    case ScalingMode::site:
      return "site";
    case ScalingMode::federated:
      return "federated";
  }
  return "none";
}

std::optional<ScalingMode> scaling_mode_from_name(std::string_view name) noexcept {
  for (auto mode : {ScalingMode::none, ScalingMode::site, ScalingMode::federated}) {
    if (scaling_mode_name(mode) == name) {
      return mode;
    }
  }
  return std::nullopt;
}

result<Hello> parse_hello(std::string_view metadata) {
  Reader r("hello", metadata);
  Hello m;
  m.samples = r.integer<std::uint64_t>("samples", 0, kMaxSamples);
  m.test_samples = r.integer<std::uint64_t>("test_samples", 0, kMaxSamples, 0);
  m.input_shape = r.shape("input_shape");
  m.num_classes = r.integer<std::int32_t>("num_classes", 2, 100000);
  m.capabilities = r.strings("capabilities", 16, 32);
  m.software = r.text("software", 128, "");
  m.protocol_version = r.integer<std::uint32_t>("protocol", 1, 65535, 1);
  if (!r.ok()) {
    return r.take_error();
  }
  return m;
}

result<Welcome> parse_welcome(std::string_view metadata) {
  Reader r("welcome", metadata);
  Welcome m;
  m.client_id = r.text("client_id", 64);
  m.heartbeat_seconds = r.integer<std::uint32_t>("heartbeat_seconds", 1, 3600);
  m.protocol_version = r.integer<std::uint32_t>("protocol", 1, 65535, 1);
  if (r.ok() && !is_valid_client_id(m.client_id)) {
    r.fail_with("'client_id' must be 1-64 characters of [A-Za-z0-9._-]");
  }
  if (!r.ok()) {
    return r.take_error();
  }
  return m;
}

// The optional "privacy" and "scaling" objects TRAIN and EVALUATE both carry, read into
// `privacy` and `scaling` (left as they are when absent or when `r` already failed).
static result<void> read_privacy_and_scaling(Reader& r, const std::string& kind,
                                             PrivacyTerms& privacy, FeatureScaling& scaling) {
  if (r.ok() && r.has("privacy")) {
    auto parsed = parse_privacy(kind + ".privacy", r.raw()["privacy"]);
    if (!parsed) {
      return parsed.error();
    }
    privacy = *parsed;
  }
  if (r.ok() && r.has("scaling")) {
    auto parsed = parse_scaling(kind + ".scaling", r.raw()["scaling"]);
    if (!parsed) {
      return parsed.error();
    }
    scaling = std::move(*parsed);
  }
  return {};
}

// TRAIN's "compression": {"up": "int8", "block": 256} or {"up": "topk", "fraction": 0.01}.
static result<CompressionTerms> parse_compression(const json& j) {
  Reader r("train.compression", j.is_object() ? j.dump() : std::string("null"));
  CompressionTerms c;
  const auto up = r.text("up", 8);
  c.block = r.integer<std::uint32_t>("block", kMinInt8Block, kMaxInt8Block, 256);
  c.topk_fraction = r.number("fraction", 1e-9, 1.0, 0.01);
  const auto down = r.text("down", 8, "f32");
  c.parameters = r.integer<std::uint64_t>("params", 0, std::uint64_t{1} << 32, 0);
  if (r.ok()) {
    if (auto known = encoding_from_name(up)) {
      c.up = *known;
    } else {
      r.fail_with("'up' must be f32, f16, int8 or topk");
    }
  }
  if (r.ok()) {
    if (down == "f16" && c.parameters > 0 && c.up != UpdateEncoding::f32) {
      c.down = UpdateEncoding::f16;
    } else if (down != "f32") {
      r.fail_with("'down' must be f32, or f16 with 'params' > 0 and a compressed 'up'");
    }
  }
  if (!r.ok()) {
    return r.take_error();
  }
  return c;
}

result<TrainRequest> parse_train_request(std::string_view metadata) {
  Reader r("train", metadata);
  TrainRequest m;
  m.run_id = r.integer<std::int64_t>("run", 1, kMaxRound);
  m.round = r.integer<std::int64_t>("round", 1, kMaxRound);
  m.nonce = r.hex("nonce", 32);
  m.model_spec = r.object("model", 64);
  m.layout_fingerprint = r.hex("layout", 16);
  m.settings.epochs = r.integer<std::int32_t>("epochs", 1, 1000);
  m.settings.batch_size = r.integer<std::int32_t>("batch_size", 1, 65536);
  m.settings.optimizer = r.object("optimizer", 64);
  m.settings.proximal_mu = static_cast<float>(r.number("proximal_mu", 0.0, 100.0, 0.0));
  m.settings.seed =
      r.integer<std::uint64_t>("seed", 0, std::numeric_limits<std::uint64_t>::max(), 0);
  m.evaluate = r.boolean("evaluate", false);
  if (auto terms = read_privacy_and_scaling(r, "train", m.privacy, m.scaling); !terms) {
    return terms.error();
  }
  if (r.ok() && r.has("compression")) {
    auto parsed = parse_compression(r.raw()["compression"]);
    if (!parsed) {
      return parsed.error();
    }
    m.compression = *parsed;
  }
  m.scaffold = r.boolean("scaffold", false);
  if (r.ok() && m.scaffold && m.compression.down != UpdateEncoding::f32) {
    r.fail_with("'scaffold' sends the model and the control variate as f32: no 'down' encoding");
  }
  m.site_batch_norm = r.boolean("site_batch_norm", false);
  if (!r.ok()) {
    return r.take_error();
  }
  return m;
}

result<UpdateReport> parse_update_report(std::string_view metadata) {
  Reader r("update", metadata);
  UpdateReport m;
  m.run_id = r.integer<std::int64_t>("run", 1, kMaxRound);
  m.round = r.integer<std::int64_t>("round", 1, kMaxRound);
  m.nonce = r.hex("nonce", 32);
  m.layout_fingerprint = r.hex("layout", 16);
  m.samples = r.integer<std::uint64_t>("samples", 1, kMaxSamples);
  m.loss = r.number("loss", 0.0, 1e9);
  m.accuracy = r.number("accuracy", 0.0, 1.0);
  m.train_seconds = r.number("train_seconds", 0.0, 1e7);
  const auto encoding = r.text("encoding", 8, "f32");
  if (r.ok()) {
    if (auto known = encoding_from_name(encoding)) {
      m.encoding = *known;
    } else {
      r.fail_with("'encoding' must be f32, f16, int8 or topk");
    }
  }
  m.scaffold = r.boolean("scaffold", false);
  if (r.ok() && m.scaffold && m.encoding != UpdateEncoding::f32) {
    r.fail_with("'scaffold' updates carry f32 parameters and control: no 'encoding'");
  }
  if (r.ok() && r.has("evaluation")) {
    const auto& e = r.raw()["evaluation"];
    auto inner = Reader("update.evaluation", e.is_object() ? e.dump() : std::string("null"));
    LocalEvaluation eval;
    eval.loss = inner.number("loss", 0.0, 1e9);
    eval.accuracy = inner.number("accuracy", 0.0, 1.0);
    eval.samples = inner.integer<std::uint64_t>("samples", 1, kMaxSamples);
    if (!inner.ok()) {
      return inner.take_error();
    }
    m.evaluation = eval;
  }
  if (!r.ok()) {
    return r.take_error();
  }
  return m;
}

result<FeatureStatsRequest> parse_feature_stats_request(std::string_view metadata) {
  Reader r("feature_stats_request", metadata);
  FeatureStatsRequest m;
  m.run_id = r.integer<std::int64_t>("run", 1, kMaxRound);
  m.nonce = r.hex("nonce", 32);
  m.features = r.integer<std::uint32_t>("features", 1, kMaxScaledFeatures);
  if (!r.ok()) {
    return r.take_error();
  }
  return m;
}

result<FeatureStatsReport> parse_feature_stats_report(std::string_view metadata) {
  Reader r("feature_stats", metadata);
  FeatureStatsReport m;
  m.run_id = r.integer<std::int64_t>("run", 1, kMaxRound);
  m.nonce = r.hex("nonce", 32);
  m.features = r.integer<std::uint32_t>("features", 1, kMaxScaledFeatures);
  m.count = r.counts("count", kMaxScaledFeatures, kMaxSamples);
  m.sum = r.numbers("sum", kMaxScaledFeatures, -kMaxMagnitude, kMaxMagnitude);
  m.sum_squares = r.numbers("sum_squares", kMaxScaledFeatures, 0.0, kMaxMagnitude);
  if (r.ok() && (m.count.size() != m.features || m.sum.size() != m.features ||
                 m.sum_squares.size() != m.features)) {
    r.fail_with(
        "'count', 'sum' and 'sum_squares' must have 'features' = " + std::to_string(m.features) +
        " entries (got " + std::to_string(m.count.size()) + ", " + std::to_string(m.sum.size()) +
        ", " + std::to_string(m.sum_squares.size()) + ")");
  }
  for (std::size_t f = 0; r.ok() && f < m.features; ++f) {
    // Cauchy-Schwarz: (sum x)^2 <= n * sum x^2 for any data; the slack covers rounding.
    const double n = static_cast<double>(m.count[f]);
    const bool possible = m.count[f] == 0
                              ? m.sum[f] == 0 && m.sum_squares[f] == 0
                              : m.sum[f] * m.sum[f] <= n * m.sum_squares[f] * (1 + 1e-9) + 1e-300;
    if (!possible) {
      r.fail_with("feature " + std::to_string(f) +
                  ": no data has this count, sum and sum of squares");
    }
  }
  if (!r.ok()) {
    return r.take_error();
  }
  return m;
}

std::string_view evaluation_status_name(EvaluationStatus status) noexcept {
  switch (status) {
    case EvaluationStatus::ok:
      return "ok";
    case EvaluationStatus::refused:
      return "refused";
    case EvaluationStatus::failed:
      return "failed";
  }
  return "failed";
}

std::optional<EvaluationStatus> evaluation_status_from_name(std::string_view name) noexcept {
  for (auto status : {EvaluationStatus::ok, EvaluationStatus::refused, EvaluationStatus::failed}) {
    if (evaluation_status_name(status) == name) {
      return status;
    }
  }
  return std::nullopt;
}

result<EvaluateRequest> parse_evaluate_request(std::string_view metadata) {
  Reader r("evaluate", metadata);
  EvaluateRequest m;
  m.run_id = r.integer<std::int64_t>("run", 1, kMaxRound);
  m.round = r.integer<std::int64_t>("round", 1, kMaxRound);
  m.nonce = r.hex("nonce", 32);
  m.model_spec = r.object("model", 64);
  m.layout_fingerprint = r.hex("layout", 16);
  m.final_model = r.boolean("final", false);
  m.site_batch_norm = r.boolean("site_batch_norm", false);
  if (auto terms = read_privacy_and_scaling(r, "evaluate", m.privacy, m.scaling); !terms) {
    return terms.error();
  }
  if (!r.ok()) {
    return r.take_error();
  }
  return m;
}

// One shape per status: metrics with ok, words without. A report that mixes them is
// refused, so the server never records a refusal's metrics or an unexplained failure.
result<EvaluationReport> parse_evaluation_report(std::string_view metadata) {
  Reader r("evaluation", metadata);
  EvaluationReport m;
  m.run_id = r.integer<std::int64_t>("run", 1, kMaxRound);
  m.round = r.integer<std::int64_t>("round", 1, kMaxRound);
  m.nonce = r.hex("nonce", 32);
  const auto status = r.text("status", 16);
  if (r.ok()) {
    if (auto parsed = evaluation_status_from_name(status)) {
      m.status = *parsed;
    } else {
      r.fail_with("unknown 'status' '" + status + "' (ok, refused or failed)");
    }
  }
  if (r.ok() && m.status == EvaluationStatus::ok) {
    m.loss = r.number("loss", 0.0, 1e9);
    m.accuracy = r.number("accuracy", 0.0, 1.0);
    m.samples = r.integer<std::uint64_t>("samples", 1, kMaxSamples);
    if (r.ok() && r.has("message")) {
      r.fail_with("'message' is only for a refused or failed evaluation");
    }
  } else if (r.ok()) {
    m.message = r.text("message", kMaxEvaluationMessage);
    if (r.ok() && m.message.empty()) {
      r.fail_with("a " + status + " evaluation needs a 'message' saying why");
    }
    if (r.ok() && (r.has("loss") || r.has("accuracy") || r.has("samples"))) {
      r.fail_with("a " + status + " evaluation carries no metrics");
    }
  }
  if (!r.ok()) {
    return r.take_error();
  }
  return m;
}

result<ErrorMessage> parse_error_message(std::string_view metadata) {
  Reader r("error", metadata);
  ErrorMessage m;
  m.code = r.text("code", 64);
  m.message = r.text("message", 4096);
  if (!r.ok()) {
    return r.take_error();
  }
  return m;
}

std::string to_metadata(const Hello& m) {
  return json{{"samples", m.samples},           {"test_samples", m.test_samples},
              {"input_shape", m.input_shape},   {"num_classes", m.num_classes},
              {"capabilities", m.capabilities}, {"software", m.software},
              {"protocol", m.protocol_version}}
      .dump();
}

std::string to_metadata(const Welcome& m) {
  return json{{"client_id", m.client_id},
              {"heartbeat_seconds", m.heartbeat_seconds},
              {"protocol", m.protocol_version}}
      .dump();
}

std::string to_metadata(const TrainRequest& m) {
  FEDCORE_ASSERT(m.model_spec.is_object() && m.settings.optimizer.is_object(),
                 "TrainRequest: the model spec and the optimizer must be JSON objects");
  json j{{"run", m.run_id},
         {"round", m.round},
         {"nonce", m.nonce},
         {"model", m.model_spec},
         {"layout", m.layout_fingerprint},
         {"epochs", m.settings.epochs},
         {"batch_size", m.settings.batch_size},
         {"optimizer", m.settings.optimizer},
         {"proximal_mu", m.settings.proximal_mu},
         {"seed", m.settings.seed},
         {"evaluate", m.evaluate},
         {"privacy", privacy_json(m.privacy)},
         {"scaling", scaling_json(m.scaling)}};
  if (m.compression.up != UpdateEncoding::f32) {
    j["compression"] = {{"up", encoding_name(m.compression.up)},
                        {"block", m.compression.block},
                        {"fraction", m.compression.topk_fraction}};
    if (m.compression.down != UpdateEncoding::f32) {
      j["compression"]["down"] = encoding_name(m.compression.down);
      j["compression"]["params"] = m.compression.parameters;
    }
  }
  if (m.scaffold) {
    j["scaffold"] = true;
  }
  if (m.site_batch_norm) {
    j["site_batch_norm"] = true;
  }
  return j.dump();
}

std::string to_metadata(const UpdateReport& m) {
  json j{{"run", m.run_id},        {"round", m.round},
         {"nonce", m.nonce},       {"layout", m.layout_fingerprint},
         {"samples", m.samples},   {"loss", m.loss},
         {"accuracy", m.accuracy}, {"train_seconds", m.train_seconds}};
  if (m.encoding != UpdateEncoding::f32) {
    j["encoding"] = encoding_name(m.encoding);
  }
  if (m.scaffold) {
    j["scaffold"] = true;
  }
  if (m.evaluation) {
    j["evaluation"] = {{"loss", m.evaluation->loss},
                       {"accuracy", m.evaluation->accuracy},
                       {"samples", m.evaluation->samples}};
  }
  return j.dump();
}

std::string to_metadata(const FeatureStatsRequest& m) {
  return json{{"run", m.run_id}, {"nonce", m.nonce}, {"features", m.features}}.dump();
}

std::string to_metadata(const FeatureStatsReport& m) {
  return json{{"run", m.run_id},  {"nonce", m.nonce}, {"features", m.features},
              {"count", m.count}, {"sum", m.sum},     {"sum_squares", m.sum_squares}}
      .dump();
}

std::string to_metadata(const EvaluateRequest& m) {
  FEDCORE_ASSERT(m.model_spec.is_object(), "EvaluateRequest: the model spec must be an object");
  json j{{"run", m.run_id},
         {"round", m.round},
         {"nonce", m.nonce},
         {"model", m.model_spec},
         {"layout", m.layout_fingerprint},
         {"final", m.final_model},
         {"privacy", privacy_json(m.privacy)},
         {"scaling", scaling_json(m.scaling)}};
  if (m.site_batch_norm) {
    j["site_batch_norm"] = true;
  }
  return j.dump();
}

std::string to_metadata(const EvaluationReport& m) {
  json j{{"run", m.run_id},
         {"round", m.round},
         {"nonce", m.nonce},
         {"status", evaluation_status_name(m.status)}};
  if (m.status == EvaluationStatus::ok) {
    j["loss"] = m.loss;
    j["accuracy"] = m.accuracy;
    j["samples"] = m.samples;
  } else {
    j["message"] = m.message;
  }
  // A site's words may be cut mid-character: replaced, never thrown on.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string to_metadata(const ErrorMessage& m) {
  return json{{"code", m.code}, {"message", m.message}}.dump();
}

}  // namespace fedcore::protocol
