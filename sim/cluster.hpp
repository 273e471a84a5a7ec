// Cluster: how the processes of one simulation meet when it runs across several
// (`mpirun -n K fedcore-sim --mpi ...`, docs/sim.md "Across processes").
//
// Rank 0 hosts the server (and the history, reports and plots) and its share of the
// simulated sites; every other rank hosts only its share of the sites, which connect to
// rank 0's server over mutual TLS like sites on other machines would. Site i belongs to
// rank i * K / clients (contiguous blocks, see sites_of). The ranks need two meeting
// points: rank 0 tells the others the port its server listens on (after the throwaway PKI
// in <out>/certs is complete), and every rank waits at a barrier until the run has ended
// before it stops its sites.
//
// Thread safety: one thread calls all of a cluster's functions.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "shared/util/error.hpp"

namespace fedcore::sim {

class Cluster {
 public:
  virtual ~Cluster() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // Rank 0 passes `value`; every rank returns rank 0's value once it has it. Waits at
  // most `timeout`. Errors: deadline_exceeded, or the launcher's.
  virtual result<std::uint64_t> share_from_rank0(std::uint64_t value,
                                                 std::chrono::milliseconds timeout) = 0;
  // Returns once every rank has called it, at most `timeout` later. Waits without
  // spinning (the sites of this rank need the cores). Errors: deadline_exceeded, or the
  // launcher's.
  virtual result<void> barrier(std::chrono::milliseconds timeout) = 0;
};

// A simulation in one process: rank 0 of 1, meeting nobody.
std::unique_ptr<Cluster> single_process_cluster();

// The sites [begin, end) of `clients` that rank `rank` of `size` hosts.
struct SiteRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t count() const noexcept { return end - begin; }
};
SiteRange sites_of(std::size_t clients, int rank, int size) noexcept;

}  // namespace fedcore::sim
