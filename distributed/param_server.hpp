// Parameter-server asynchronous SGD (PS-ASGD; Dean et al. 2012's Downpour SGD with one
// server shard, or Recht et al.'s Hogwild! across processes).
//
// Rank 0 is the server: it holds the authoritative parameters, their version (the number
// of updates applied so far) and the optimizer. Ranks 1..N-1 are workers; each loops:
// receive the current parameters with their version, compute the gradient of one local
// batch of its own shard, send the gradient tagged with the version it was computed
// from. The server applies gradients one at a time in the order they arrive, with no
// barrier, and answers each worker with the parameters as they are after that update.
// Nobody waits for the slowest worker, and a fast worker contributes more updates.
//
// Staleness. A gradient computed from version v and arriving at version V has staleness
// V - v: the other workers' updates applied meanwhile. With W workers of equal speed it is
// about W - 1. Gradients staler than `max_staleness` are discarded (counted; the worker
// gets fresh parameters); with StalenessLr::inverse the update of a gradient of staleness
// s uses lr / (s + 1). The trade-off: ASGD converges like SGD as long as staleness stays
// bounded, but a stale gradient points where the parameters were, so the usable learning
// rate shrinks as staleness (~ the number of workers) grows; the 1/(s+1) scaling does
// that damping automatically, at the price of slower progress per update. Momentum adds
// to staleness (Mitliagkas et al. 2016: asynchrony acts like extra momentum), so use
// less of it than in synchronous training.
//
// The server is a bottleneck by design: it receives and sends one whole model per
// update, and applies updates sequentially, so throughput is capped by its bandwidth
// and optimizer step however many workers there are. The order of updates depends on
// timing, so runs are not reproducible bit for bit (unlike synchronous data parallelism).
//
// Data. With W workers, every epoch's shuffled training set is cut into global batches of
// batch_size × W samples and worker w takes slot w - 1 of each (train_support.hpp), moving
// on at its own pace, epoch after epoch, until the server stops it. A step is one applied
// update of one local batch, so an epoch is steps_per_epoch × W updates; the server stops
// after epochs × that many updates, or max_steps updates when it is set.
//
// Ending. After the last update the server collects the gradient each other worker
// still owes it (counted as unused_at_stop), then sends every worker a stop message with
// the final parameters: every rank ends with the same parameters (checked by CRC in the
// report), and no message is left in flight.
//
// Failures. Every wait has the operation deadline (the communicator's default timeout):
// a worker that dies makes the server fail at once (its link breaks); a worker that is
// alive but silent for longer than the deadline after it was sent parameters fails the
// server with deadline_exceeded naming it; a worker whose server is gone fails its next
// receive. The server fails the whole group (communicator.hpp), so nothing hangs.
//
// Checkpoints (checkpoint_dir, checkpoint_every): the server writes parameters and
// optimizer state every K applied updates (distributed/checkpoint.hpp), with step = version. On
// resume the version continues from the checkpoint's step and each worker restarts its
// shard walk at step / W. Resuming is not bit-exact: the order of updates never is.
//
// Thread safety: one call per rank, each on its rank's thread.
#pragma once

#include <cstdint>

#include "distributed/data_parallel.hpp"
#include "shared/collective/communicator.hpp"
#include "shared/data/dataset.hpp"

namespace fedcore::distributed {

// Trains with PS-ASGD: TrainOptions as for synchronous training plus max_staleness and
// staleness_lr; batch_size is per worker. Rank 0's result carries the statistics
// (TrainResult::ps) and the test accuracy; every rank's `params` are the final ones.
// Errors: invalid_argument (world < 2, EASGD requested too, too little data for one
// batch per worker, bad options), deadline_exceeded (a worker silent past the deadline),
// the collectives' errors (unavailable when a peer died), checkpoint errors.
result<TrainResult> train_parameter_server(collective::Communicator& comm,
                                           const data::TrainTest& data,
                                           const TrainOptions& options);

// The wire protocol, for tests and other implementations. Every exchange is two tagged
// messages (collectives.hpp send/recv): a PsHeader under kPsHeaderTag, then the
// parameters (server to worker) or the gradient (worker to server), parameter-count
// floats, under kPsTensorTag. The server starts by sending `compute` to every worker and
// ends with `stop`; before, all ranks take part in restore_checkpoint's broadcasts (only
// with a checkpoint directory), and after, in one allgather of RankStats
// (gather_rank_stats in distributed/train_support.hpp).
inline constexpr std::uint32_t kPsHeaderTag = 0x50530001;
inline constexpr std::uint32_t kPsTensorTag = 0x50530002;

enum class PsCommand : std::uint64_t {
  compute = 1,   // server → worker: here are parameters of `version`, send a gradient
  stop = 2,      // server → worker: the final parameters; the job is done
  gradient = 3,  // worker → server: a gradient computed from parameters of `version`
};

struct PsHeader {
  PsCommand command = PsCommand::compute;
  std::uint64_t version = 0;  // updates applied to the parameters (sent or used)
  double loss = 0;            // gradient: the batch's training loss
  std::uint64_t samples = 0;  // gradient: the batch's sample count
};
static_assert(sizeof(PsHeader) == 32);

}  // namespace fedcore::distributed
