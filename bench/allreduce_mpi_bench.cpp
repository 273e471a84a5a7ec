// OpenMPI's MPI_Allreduce (float sum, in place) for the same sizes and iterations as
// allreduce_bench; run it with mpirun, e.g. over the TCP BTL:
//   mpirun -n 4 --mca btl tcp,self --mca btl_tcp_if_include lo allreduce_mpi_bench
// or over shared memory (vader), naming the result lines openmpi-shm:
//   mpirun -n 4 --mca btl vader,self allreduce_mpi_bench --name openmpi-shm
#include <mpi.h>
#include <string>
#include <vector>

#include "bench/allreduce_bench_common.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::size_t max_bytes = std::size_t{64} << 20;
  std::string name = "openmpi-tcp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--max-bytes")
      max_bytes = std::stoull(argv[i + 1]);
    else if (std::string(argv[i]) == "--name")
      name = argv[i + 1];
  }
  for (std::size_t bytes : fedcore::bench::allreduce_sizes(max_bytes)) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    const int count = static_cast<int>(data.size());
    for (int i = 0; i < fedcore::bench::kWarmups; ++i)
      MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const int iterations = fedcore::bench::iterations_for(bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double seconds = (MPI_Wtime() - start) / iterations;
    if (rank == 0)
      fedcore::bench::print_result(name.c_str(), size, bytes, seconds);
  }
  MPI_Finalize();
  return 0;
}
