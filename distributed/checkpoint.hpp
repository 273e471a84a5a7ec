// Checkpoints of fedcore-dist jobs: the model's parameters, its non-trainable state
// (BatchNorm's running statistics) and the optimizer's state in one file, so that a resumed
// job continues exactly where the checkpointed one was.
//
// File format ("<dir>/dist-checkpoint.fcp"; integers little-endian):
//
//   magic "FCDISTCK" | u32 version (2) | u32 0 |
//   u64 length | model section | u64 length | optimizer section | u64 length | state section |
//   u32 CRC-32
//
// Version 1 (before models had state) has no state section and is still read.
// Each section is a complete parameter file (model/param_io.hpp, docs/formats.md) with
// its own checksum, so either can be cut out and read by the usual tools:
//   - model section: the model's layout and parameters; metadata {"step": n, "world": w};
//   - optimizer section: one tensor of shape [parameter count] per optimizer buffer, in
//     the optimizer's order ("velocity"; or "m", "s"), none for plain SGD; metadata
//     {"kind": "sgd"|"adam", "steps": t} (model/optimizer.hpp, OptimizerState);
//   - state section: the model's state layout and values (no tensors for a model without
//     state); metadata {}.
// The final CRC-32 covers every byte before it. Files are written atomically (temp file,
// fsync, rename, fsync of the directory): a crash leaves the old checkpoint or the new
// one, never half of one.
//
// Thread safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "shared/collective/communicator.hpp"
#include "shared/model/layout.hpp"
#include "shared/model/optimizer.hpp"
#include "shared/model/param_io.hpp"

namespace fedcore::distributed {

inline constexpr std::uint32_t kCheckpointFormatVersion = 2;

struct Checkpoint {
  std::size_t step = 0;  // global steps (or applied updates) done when it was taken
  model::ParamBundle model;
  model::OptimizerState optimizer;
  model::ParamBundle state;  // empty layout for a model without state, or a version-1 file
};

// "<dir>/dist-checkpoint.fcp"
std::string checkpoint_path(const std::string& dir);

// REQUIRES: params.size() == layout.total(); every optimizer buffer as long as params;
// state.size() == state_layout.total().
std::vector<std::byte> encode_checkpoint(const model::ParamLayout& layout,
                                         std::span<const float> params,
                                         const model::OptimizerState& optimizer, std::size_t step,
                                         int world, const model::ParamLayout& state_layout = {},
                                         std::span<const float> state = {});
// Errors: data_loss (magic, checksums, section lengths, missing or malformed metadata),
// out_of_range (truncated), unimplemented (another format version), failed_precondition
// (a bare parameter file as written before optimizer state was saved), and the
// sections' own errors (model/param_io.hpp). `what` names the source (a path).
result<Checkpoint> decode_checkpoint(std::span<const std::byte> bytes, std::string_view what);

// Writes atomically. Errors: io_error, not_found (no such directory).
result<void> save_checkpoint(const std::string& path, const model::ParamLayout& layout,
                             std::span<const float> params, const model::OptimizerState& optimizer,
                             std::size_t step, int world,
                             const model::ParamLayout& state_layout = {},
                             std::span<const float> state = {});
// Errors: not_found, io_error, resource_exhausted (too large), and decode_checkpoint's.
result<Checkpoint> load_checkpoint(const std::string& path);

// Resumes every rank of a group from the checkpoint in `dir`, if there is one. Call on
// every rank, with `params` holding the freshly initialised model and `optimizer` fresh.
// Rank 0 reads the file (so only rank 0 needs to see it), checks it against `layout` and
// `optimizer`, and broadcasts the step, the parameters and the optimizer state; every rank
// then holds them. Returns the checkpoint's step, or 0 (and leaves everything unchanged)
// when `dir` holds no checkpoint; with `dir` empty (on every rank) it returns 0 at once,
// without any communication.
// Errors (on rank 0, and as failed_precondition "rank 0 could not ..." on the others,
// which never wait for a rank 0 that gave up): load_checkpoint's; failed_precondition
// when the checkpoint is for another model or its optimizer state does not fit
// `optimizer` (kind, buffers, sizes; the message names the mismatch), or when its state
// does not match `state_layout` (a model with state cannot resume from a file without);
// the collectives'. `state` (laid out by `state_layout`) is restored like `params`.
result<std::size_t> restore_checkpoint(collective::Communicator& comm, const std::string& dir,
                                       const model::ParamLayout& layout, std::span<float> params,
                                       model::Optimizer& optimizer,
                                       const model::ParamLayout& state_layout = {},
                                       std::span<float> state = {});

}  // namespace fedcore::distributed
