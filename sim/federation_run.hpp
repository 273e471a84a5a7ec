// One simulated federated run: the real FederationServer and one real ClientDaemon per
// simulated site in this process, talking over loopback mutual TLS (or, with
// Transport::inproc, over connected socket pairs), until the run ends.
//
// Layout of the output folder it fills:
//   <out>/history.db            the server's SQLite history (runs, rounds, clients, events)
//   <out>/checkpoints/run-1/    the global model after every committed round
//   <out>/certs/                throwaway PKI (TLS transport only)
// An existing history.db, checkpoints/ and certs/ in <out> are removed first, so running
// twice into the same folder starts afresh.
//
// Each committed round's global model is evaluated on the whole test split on the
// calling thread (one compute thread), while the federation goes on with the next round.
//
// Threads: the server has one io_context thread; clients share up to 16 io_context
// threads; the daemons train on one shared pool of a thread per core, each training with
// `threads` compute threads.
// Everything started is stopped and joined before run_federation returns.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shared/util/error.hpp"
#include "sim/cluster.hpp"
#include "sim/options.hpp"
#include "sim/sim_data.hpp"
#include "sim/site_behaviour.hpp"

namespace fedcore::sim {

// One committed round, as rounds.csv shows it.
struct RoundRow {
  std::int64_t round = 0;
  // The global model on the test split; with FedBN (--batch-norm local), which has no global
  // BatchNorm, the federated evaluation's accuracy (as fed_eval_accuracy).
  double accuracy = 0;
  double loss = 0;
  std::int64_t selected = 0;
  std::int64_t participants = 0;  // accepted updates
  std::int64_t rejected = 0;
  std::int64_t dropped = 0;
  std::int64_t timed_out = 0;
  std::int64_t bytes_up = 0;
  std::int64_t bytes_down = 0;
  double duration_s = 0;  // server's round time, TRAIN sent to commit
  double train_loss = 0;  // sample-weighted over accepted updates
  std::optional<double> fed_eval_accuracy;
  std::optional<double> epsilon;    // DP runs: budget spent through this round
  std::optional<double> clip_norm;  // adaptive clipping: the clip after this round
  double elapsed_s = 0;             // since the run started
};

struct FederatedResult {
  std::vector<RoundRow> rounds;
  std::int64_t failed_rounds = 0;
  std::string end_state;  // finished, paused, failed, stopped
  std::string end_reason;
  double setup_s = 0;  // certificates, data split, connections
  double run_s = 0;    // start_run to run end
  FaultCounts faults;
  std::int64_t run_id = 0;
  std::string history_path;
};

struct RunCallbacks {
  std::function<void(const RoundRow&)> round_done;  // on the calling thread, in order
  std::function<void(const std::string&)> note;     // setup progress ("12 clients online")
};

// Errors: certificate generation, server creation or listen, a client that cannot be
// created, clients that do not all come online within a deadline, start_run's errors.
// A run that ends paused or failed is a result (end_state), not an error.
// With a cluster of several ranks (sim/cluster.hpp), rank 0 runs the server and its share
// of the sites and returns the result; every other rank runs its share of the sites until
// the run ends and returns a result without rounds (end_state "sites of rank k").
// Errors also: invalid_argument (fewer sites than ranks, or several ranks without TLS),
// the cluster's.
result<FederatedResult> run_federation(const SimOptions& options, const SimData& data,
                                       const RunCallbacks& callbacks, Cluster& cluster);

}  // namespace fedcore::sim
