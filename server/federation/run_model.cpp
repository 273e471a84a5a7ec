#include "server/federation/run_model.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/federation/server_state_file.hpp"
#include "shared/data/csv.hpp"
#include "shared/data/fashion_mnist.hpp"
#include "shared/data/feature_stats.hpp"
#include "shared/data/normalize.hpp"
#include "shared/model/federated_vector.hpp"
#include "shared/model/model.hpp"
#include "shared/model/param_io.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/checksum.hpp"
#include "shared/util/test_point.hpp"

namespace fedcore::federation {
namespace {

// A CSV file, or "fashion-mnist[:DIR]" for that data set's test split.
result<data::Dataset> load_server_test_set(const RunConfig& config) {
  const std::string& name = config.server_test_set;
  constexpr std::string_view kFashion = "fashion-mnist";
  if (name == kFashion || name.starts_with(std::string(kFashion) + ":")) {
    const auto dir = name.size() > kFashion.size() ? name.substr(kFashion.size() + 1)
                                                   : data::default_fashion_mnist_dir();
    auto loaded = data::load_fashion_mnist(dir);
    if (!loaded) {
      return loaded.error();
    }
    return std::move(loaded->test);
  }
  return data::load_csv(name, {.label_column = config.label_column});
}

// An external model's first global parameters: the run's "initial" file (its layout must be
// the spec's), else the seeded default start (model::initialize_external).
result<std::shared_ptr<const std::vector<float>>> external_start(const model::ModelSpec& spec,
                                                                 std::uint64_t seed) {
  if (spec.initial.empty()) {
    return std::make_shared<const std::vector<float>>(
        model::initialize_external(spec.layout, seed));
  }
  auto bundle = model::load_params(spec.initial);
  if (!bundle) {
    return fail(bundle.error().code, "model.initial: " + bundle.error().message);
  }
  if (bundle->layout.fingerprint() != spec.layout.fingerprint()) {
    return fail(errc::invalid_argument,
                "model.initial: '" + spec.initial + "' holds layout " +
                    bundle->layout.fingerprint_hex() + ", the run's model has " +
                    spec.layout.fingerprint_hex() + " (names, shapes and order must match)");
  }
  return std::make_shared<const std::vector<float>>(std::move(bundle->params));
}

}  // namespace

struct ServerEvaluation {
  model::Model model;
  data::Dataset test_set;
};

RunModel::RunModel() = default;
RunModel::RunModel(RunModel&&) noexcept = default;
RunModel& RunModel::operator=(RunModel&&) noexcept = default;
RunModel::~RunModel() = default;

result<RunModel> prepare_run_model(const RunConfig& config, std::int64_t run_id,
                                   const std::vector<std::int64_t>* schema_shape,
                                   std::int32_t schema_classes, store::HistoryStore& store,
                                   const std::string& checkpoint_dir) {
  RunModel out;
  out.spec = config.model;
  if (!out.spec.complete()) {
    if (schema_shape == nullptr) {
      return fail(errc::internal, "the model spec is incomplete and no client schema is known");
    }
    auto completed = model::complete_spec(out.spec, *schema_shape, schema_classes);
    if (!completed) {
      return completed.error();
    }
    out.spec = std::move(*completed);
  }
  std::optional<model::Model> built;  // Fedcore's own models only; an external one is a layout
  if (out.spec.type == model::ModelType::external) {
    auto start = external_start(out.spec, config.seed);
    if (!start) {
      return start.error();
    }
    out.layout = out.spec.layout;
    out.global = std::move(*start);
    if (config.batch_norm == BatchNormMode::local) {
      out.site_ranges = model::external_site_ranges(out.spec);
    }
  } else {
    auto made = model::build_model(out.spec);
    if (!made) {
      return made.error();
    }
    made->initialize(config.seed);
    // Rounds carry the parameters and the BatchNorm statistics (federated_vector.hpp).
    out.layout = model::federated_layout(*made);
    out.global = std::make_shared<const std::vector<float>>(model::federated_values(*made));
    if (config.batch_norm == BatchNormMode::local) {
      out.site_ranges = model::site_ranges(*made);
    }
    built.emplace(std::move(*made));
  }
  if (config.batch_norm == BatchNormMode::local && out.site_ranges.empty()) {
    return fail(errc::invalid_argument,
                "'batch_norm' \"local\" (FedBN) needs a model with BatchNorm layers");
  }
  out.run_dir = std::filesystem::path(checkpoint_dir) / ("run-" + std::to_string(run_id));
  auto strategy_config = config.strategy_config;
  strategy_config.name = config.strategy;  // programmatic configs may set only the name
  strategy_config.scratch_dir = out.run_dir;
  auto strategy = make_strategy(strategy_config, out.layout.total());
  if (!strategy) {
    return fail(strategy.error().code, "strategy: " + strategy.error().message);
  }
  out.strategy = std::move(*strategy);
  // Resume: the last committed round's checkpoint is the global model.
  auto latest = store.latest_checkpoint(run_id);
  if (!latest) {
    return latest.error();
  }
  if (*latest) {
    const auto& path = (*latest)->ref.path;
    auto bundle = model::load_params(path);
    if (!bundle || bundle->layout.fingerprint() != out.layout.fingerprint()) {
      return fail(errc::failed_precondition,
                  "cannot resume from checkpoint " + path + ": " +
                      (bundle ? "layout differs from the run's model" : bundle.error().message));
    }
    out.global = std::make_shared<const std::vector<float>>(std::move(bundle->params));
    if (out.strategy->state() != nullptr) {
      const auto state_path = server_state_path(out.run_dir, (*latest)->round);
      auto saved = read_server_state(state_path, out.layout.total());
      auto restored = saved ? out.strategy->restore(*saved) : result<void>(saved.error());
      if (!restored) {
        return fail(errc::failed_precondition,
                    "cannot resume strategy " + config.strategy + " after round " +
                        std::to_string((*latest)->round) + ": " + restored.error().message);
      }
    }
    spdlog::info("run {}: resuming after round {} from {}", run_id, (*latest)->round, path);
  }
  if (!config.server_test_set.empty()) {
    if (!built) {
      return fail(errc::invalid_argument,
                  "server test set: an external model cannot be evaluated by the server; "
                  "the sites evaluate it (federated evaluation)");
    }
    auto loaded = load_server_test_set(config);
    if (!loaded) {
      return fail(loaded.error().code, "server test set: " + loaded.error().message);
    }
    out.evaluation =
        std::make_unique<ServerEvaluation>(ServerEvaluation{std::move(*built), std::move(*loaded)});
  }
  out.spec_json = nlohmann::json(out.spec);
  out.spec_json.erase("initial");  // a path on the server: the sites have no use for it
  std::error_code ec;
  std::filesystem::create_directories(out.run_dir, ec);
  if (ec) {
    return fail(errc::io_error, "cannot create checkpoint directory '" + out.run_dir.string() +
                                    "': " + ec.message());
  }
  return out;
}

void RunModel::scale_server_test_set(const protocol::FeatureScaling& scaling) {
  if (!evaluation) {
    return;
  }
  auto& test = evaluation->test_set;
  if (test.size() == 0 || test.sample_shape.size() != 1) {
    return;
  }
  if (scaling.mode == protocol::ScalingMode::federated &&
      test.sample_size() == scaling.mean.size()) {
    data::FeatureScale{scaling.mean, scaling.stddev}.standardizer().apply(test);
  } else if (scaling.mode == protocol::ScalingMode::site) {
    // No scale is shared: the server's test set is one more site, with its own.
    data::Standardizer::fit(test).apply(test);
  }
}

std::vector<float> RunModel::next_global(std::vector<float> aggregate) const {
  if (!site_ranges.empty()) {
    model::scatter_ranges(model::gather_ranges(*global, site_ranges), aggregate, site_ranges);
  }
  return aggregate;
}

std::optional<model::EvalReport> RunModel::evaluate_global() {
  if (!evaluation) {
    return std::nullopt;
  }
  model::load_federated(evaluation->model, *global);
  return model::evaluate(evaluation->model, model::loss_for(spec), evaluation->test_set);
}

result<store::CheckpointRef> RunModel::write_checkpoint(std::int64_t run_id, std::int64_t round,
                                                        Disks* disks) const {
  return write_checkpoint(run_id, round, *global, disks);
}

result<store::CheckpointRef> RunModel::write_checkpoint(std::int64_t run_id, std::int64_t round,
                                                        const std::vector<float>& params,
                                                        Disks* disks,
                                                        const ServerState* state) const {
  test_point("checkpoint.begin", std::to_string(round));
  if (state != nullptr) {
    if (auto saved =
            write_server_state(server_state_path(run_dir, round), *state, params.size(), disks);
        !saved) {
      return saved.error();
    }
  }
  const auto path = (run_dir / ("round-" + std::to_string(round) + ".fcp")).string();
  // In pieces: the parameters go to the file from where they lie, with no 40 MB copy
  // (at 10M parameters) to allocate and fill while the next round runs.
  const auto encoded = model::encode_params_in_parts(
      layout, params,
      nlohmann::json{{"run", run_id}, {"round", round}, {"spec", nlohmann::json(spec)}}.dump());
  const auto parts = encoded.parts();
  RealDisks real;
  if (auto written = (disks != nullptr ? *disks : real).write_file(path, parts); !written) {
    return written.error();
  }
  // The crc32 column identifies the file's content: the CRC-32 of every byte before the
  // file's 4-byte CRC trailer, i.e. the trailer's own value (docs/formats.md). Not the CRC
  // of the whole file: a CRC over a message followed by its own CRC is the same residue
  // for every message (0x2144DF1C = 558161692), so that column was one constant.
  test_point("checkpoint.end", std::to_string(round));
  return store::CheckpointRef{path, static_cast<std::int64_t>(encoded.size()), encoded.crc,
                              layout.fingerprint_hex()};
}

}  // namespace fedcore::federation
