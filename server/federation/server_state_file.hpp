// The file a strategy's ServerState is saved in beside each round's checkpoint:
// `run-<id>/round-<n>.state.fcp`, a parameter file (docs/formats.md) whose tensors are the
// state's vectors ("m", "v", each one value per parameter) and whose metadata holds the
// strategy's name and its step count.
//
// Durability (docs/schema.md, "Strategy state"): the state of round n is written, atomically
// and durably, before the transaction that commits round n, together with the round's
// checkpoint; a run resumes from the last committed round's checkpoint and its state file.
// A state file whose round never committed is an orphan (orphan_checkpoints.hpp); the one
// of round n - 1 is deleted once round n has committed (a run keeps one state file, not
// one per round: the moments are twice the model).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "server/federation/aggregate.hpp"
#include "server/federation/storage_fault.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

// `<run_dir>/round-<round>.state.fcp`.
std::filesystem::path server_state_path(const std::filesystem::path& run_dir, std::int64_t round);

// Writes `state` for a model of `param_count` parameters through `disks` (null: the real
// file system). REQUIRES: state.values.size() == state.names.size() * param_count.
// Errors: those of Disks::write_file.
[[nodiscard]] result<void> write_server_state(const std::filesystem::path& path,
                                              const ServerState& state, std::size_t param_count,
                                              Disks* disks);

// Reads a state file back. Errors: not_found (no file: the run was checkpointed without
// one); data_loss and the other errors of model::load_params; invalid_argument when its
// tensors are not one vector of `param_count` values each or its metadata is not a state's.
[[nodiscard]] result<ServerState> read_server_state(const std::filesystem::path& path,
                                                    std::size_t param_count);

}  // namespace fedcore::federation
