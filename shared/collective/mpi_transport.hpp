// MPI transport (built with -DFEDCORE_MPI=ON, Debian's OpenMPI): the ranks of an MPI
// communicator as a collective group, so that clusters that launch with mpirun or Slurm
// keep their launcher (`mpirun -n N fedcore-dist worker --backend mpi ...`).
//
// The same algorithms run over it as over TCP and TLS; only the bytes move through MPI.
// Each message is two MPI messages to the peer: a fixed 48-byte envelope (the job as a
// 64-bit FNV-1a hash, sequence, op, tag, bytes, segment, length) and then the payload,
// sent from the caller's buffer without a copy. MPI's non-overtaking rule keeps each
// pair in order. Waits poll MPI_Test until the deadline, so a silent peer gives
// errc::deadline_exceeded like the other transports.
//
// Limits: MPI cannot close one link, so abort() only fails this rank's later operations;
// peers notice through their own deadlines, or earlier because mpirun ends the whole job
// when a rank exits non-zero (its default). The process must have called MPI_Init (or
// MPI_Init_thread) and must call MPI_Finalize after the transport is gone.
//
// Thread safety: as Transport; MPI is called only from the owning thread (MPI_THREAD_FUNNELED
// is enough as long as that thread is the one that initialised MPI, or SERIALIZED otherwise).
#pragma once

#include <memory>
#include <mpi.h>

#include "shared/collective/transport.hpp"

namespace fedcore::collective {

// A transport over a duplicate of `comm` (MPI_COMM_WORLD for a whole job).
std::unique_ptr<Transport> make_mpi_transport(MPI_Comm comm);

}  // namespace fedcore::collective
