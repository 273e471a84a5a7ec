// Pipeline model parallelism, and its hybrid with data parallelism (D × S ranks).
//
// The model's layers are split into S contiguous stages (partition.hpp: balanced by
// parameter count, or by forward + backward time measured on rank 0 and shared). With
// world = D × S, rank d·S + s runs stage s of replica d: replica d is one pipeline and
// trains on the d-th slice of every global batch (global batch = batch_size × D, as in
// data_parallel.hpp), and the D copies of stage s form a data-parallel group that
// averages the stage's gradients by allreduce after each step.
//
// A step cuts the replica's batch into M equal micro-batches. Activations flow forward
// and gradients backward over tagged send/recv. Schedules:
//   - gpipe: all M forwards, then all M backwards;
//   - one_f_one_b: stage s runs S-s-1 forwards, then alternates one forward and one
//     backward, then finishes the backwards (fewer activations in flight, same result).
// Stages keep each micro-batch's input and recompute its forward just before its
// backward (GPipe's re-materialisation) instead of keeping every layer's activations, so
// memory holds M stage inputs, not M × all activations. Parameter gradients are
// accumulated over micro-batches with the loss scaled by 1/M, so a step equals one
// single-process step on the whole batch up to float rounding (a test checks it).
// Layers must be deterministic between the two forwards: no dropout (checked).
//
// BatchNorm: statistics are those of each micro-batch, as in GPipe (so a pipelined step
// equals a single-process step on the whole batch only for models without BatchNorm; with
// it, the step equals M single-process steps' gradients on the micro-batches, summed). The
// recomputed forward normalises with the same micro-batch statistics and does not move the
// running statistics a second time. Replicas average their stage's running statistics
// before every evaluation. Evaluation (train.evaluate, train.evaluate_every_epoch): every
// stage of replica 0 sends its parameters and state to rank 0, which tests the whole
// model and shares the result.
#pragma once

#include "distributed/data_parallel.hpp"
#include "shared/collective/communicator.hpp"

namespace fedcore::distributed {

enum class Schedule { gpipe, one_f_one_b };
enum class Balance { params, time };

struct PipelineOptions {
  TrainOptions train;  // spec, optimizer, epochs, batch_size (per replica), seed, max_steps
  int stages = 2;
  int micro_batches = 4;  // must divide batch_size
  Schedule schedule = Schedule::one_f_one_b;
  Balance balance = Balance::params;
};

struct PipelineResult {
  int stages = 1;
  int replicas = 1;
  int stage = 0;                                // this rank's
  int replica = 0;                              // this rank's
  std::size_t first_layer = 0, last_layer = 0;  // this stage's layers [first, last)
  std::size_t param_offset = 0;                 // where its parameters sit in the model's
  std::vector<float> params;                    // this stage's final parameters
  std::size_t state_offset = 0;                 // where its state sits in the model's
  std::vector<float> state;                     // its final state (running statistics)
  std::size_t steps = 0;
  double samples = 0;  // over all replicas
  double wall_seconds = 0;
  double samples_per_second = 0;
  double comm_seconds = 0;        // this rank
  double final_loss = -1;         // last stage: mean loss of the last step's batch
  double compute_seconds = 0;     // this rank: inside its stage's forwards and backwards
  std::size_t output_values = 0;  // per sample, what this stage sends to the next
  std::vector<EpochPoint> curve;  // train.evaluate_every_epoch: on every rank
  double test_accuracy = -1;      // train.evaluate: the final model's, on every rank
  double test_loss = -1;
};

// Errors: invalid_argument (world not a multiple of stages, more stages than layers,
// micro-batches not dividing the batch, dropout in the model, too little data), the
// collectives' errors.
result<PipelineResult> train_pipeline(collective::Communicator& world, const data::TrainTest& data,
                                      const PipelineOptions& options);

}  // namespace fedcore::distributed
