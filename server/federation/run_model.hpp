// RunModel: the model side of one active run — its spec, layout, current global
// parameters, aggregation strategy, optional server-side test set and its checkpoints.
//
// The global model is one shared, immutable buffer: every TRAIN frame of a round sends it
// as it is, and each committed round replaces it with the strategy's output (moved, not
// copied). A Model object is kept only when the server evaluates.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/federation/aggregate.hpp"
#include "server/federation/run_config.hpp"
#include "server/federation/storage_fault.hpp"
#include "server/store/history_store.hpp"
#include "shared/model/eval_report.hpp"
#include "shared/model/federated_vector.hpp"
#include "shared/model/layout.hpp"
#include "shared/model/spec.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

// The model and test set of server-side evaluation (run_model.cpp): behind a pointer so
// that the run controller's many includers do not compile Eigen.
struct ServerEvaluation;

struct RunModel {
  RunModel();
  RunModel(RunModel&&) noexcept;
  RunModel& operator=(RunModel&&) noexcept;
  ~RunModel();

  model::ModelSpec spec;      // complete
  nlohmann::json spec_json;   // `spec` as sent in TRAIN messages, made once per run
  model::ParamLayout layout;  // of the vector rounds carry: parameters, then BatchNorm state
  // FedBN ('batch_norm' "local"): the values each site keeps (model/federated_vector.hpp);
  // every aggregate keeps the global model's values there. Empty otherwise.
  std::vector<model::ValueRange> site_ranges;
  std::shared_ptr<const std::vector<float>> global;
  std::unique_ptr<Strategy> strategy;
  std::unique_ptr<ServerEvaluation> evaluation;  // only with a server test set
  std::filesystem::path run_dir;                 // checkpoints of this run

  // The strategy's aggregate as the next global model: with FedBN, the site-local values
  // are the current global model's (the sites sent those; this also undoes what a server
  // optimizer or DP noise did to them).
  std::vector<float> next_global(std::vector<float> aggregate) const;
  // Server-side evaluation of the current global model, when the run names a test set.
  std::optional<model::EvalReport> evaluate_global();
  // Scales the server's test set (if any, and tabular) as the sites scale theirs: with
  // the federation's scale, or fitted on itself when every site uses its own.
  void scale_server_test_set(const protocol::FeatureScaling& scaling);
  // Writes the current global model as round `round`'s checkpoint, atomically and
  // durably (model/param_io.hpp), through `disks` (null: the real file system). A
  // failure leaves no partial file under the checkpoint's name. Errors: those of
  // Disks::write_file (io_error, not_found).
  [[nodiscard]] result<store::CheckpointRef> write_checkpoint(std::int64_t run_id,
                                                              std::int64_t round,
                                                              Disks* disks = nullptr) const;
  // The same for `params` (a global model not yet in `global`) and, when the strategy
  // keeps state, that state's file beside it (server_state_file.hpp), written first:
  // callable from another thread while nothing changes `layout`, `spec` or `run_dir`.
  [[nodiscard]] result<store::CheckpointRef> write_checkpoint(
      std::int64_t run_id, std::int64_t round, const std::vector<float>& params, Disks* disks,
      const ServerState* state = nullptr) const;
};

// Completes the spec from one client's data schema when it lacks input shape or classes
// (`schema_shape` null when the spec is complete), builds and initialises the model with
// the run's seed, resumes from the run's last committed checkpoint, makes the strategy and
// loads the server test set. A strategy with state (a server optimizer) continues from
// the state file of the checkpoint it resumes from. Errors name what failed: the spec, a
// checkpoint whose layout differs, the strategy (its name, options, or a missing or
// mismatched state file), the test set, the checkpoint directory.
[[nodiscard]] result<RunModel> prepare_run_model(const RunConfig& config, std::int64_t run_id,
                                                 const std::vector<std::int64_t>* schema_shape,
                                                 std::int32_t schema_classes,
                                                 store::HistoryStore& store,
                                                 const std::string& checkpoint_dir);

}  // namespace fedcore::federation
