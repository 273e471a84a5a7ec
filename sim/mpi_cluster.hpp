// The ranks of an MPI job as a simulation's Cluster (built with -DFEDCORE_MPI=ON). The
// process must have called MPI_Init_thread (FUNNELED is enough: only the calling thread
// uses MPI) and calls MPI_Finalize after the cluster is gone.
//
// Waits are non-blocking MPI operations tested every few milliseconds with a sleep in
// between: OpenMPI's blocking calls poll a core at 100%, which on a small machine would
// starve the simulated sites the rank exists to run.
#pragma once

#include <memory>

#include "sim/cluster.hpp"

namespace fedcore::sim {

std::unique_ptr<Cluster> mpi_world_cluster();

}  // namespace fedcore::sim
