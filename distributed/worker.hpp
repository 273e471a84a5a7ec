// One fedcore-dist worker process: join the rendezvous, connect the mesh, run the job,
// write the report. Exit codes: 0 done; 2 bad options; 3 the group failed (a peer died,
// timed out or went out of step: the launcher stops and may restart the job); 4 local
// failure (data, checkpoint, report).
#pragma once

#include <chrono>
#include <string>

#include "distributed/data_parallel.hpp"
#include "distributed/pipeline.hpp"

namespace fedcore::distributed {

enum class TransportKind { tcp, tls, mpi };

struct TlsFiles {
  std::string ca;           // the job CA (certs/fedcore-pki init)
  std::string crl;          // the CA's CRL
  std::string server_cert;  // presented on links this rank accepts (fedcore-pki server NAME)
  std::string server_key;
  std::string client_cert;  // presented on links this rank dials (fedcore-pki client ID)
  std::string client_key;
  std::string server_name = "localhost";  // the name in server_cert
};

struct WorkerOptions {
  int rank = 0;
  int world = 1;
  std::string job = "fedcore-dist";
  std::string rendezvous = "127.0.0.1:29500";  // rank 0 hosts it here
  std::string bind_host = "127.0.0.1";         // this rank's mesh listener
  // tcp/tls: rendezvous and mesh of our own; mpi: rank and world come from
  // MPI_COMM_WORLD (the process has called MPI_Init; build with FEDCORE_MPI).
  TransportKind transport = TransportKind::tcp;
  TlsFiles tls;
  // tcp/tls: shared memory this worker gives its outgoing payload rings to the peers on
  // its host (collective::NetOptions::shared_memory_bytes), split evenly among its
  // world - 1 peers, at least 1 MiB each; 0 = every payload through the sockets.
  std::size_t shared_memory_bytes = 0;
  // tcp/tls: how long a waiting collective polls before it sleeps
  // (collective::NetOptions::spin).
  std::chrono::microseconds spin{0};
  std::chrono::milliseconds join_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds op_timeout{std::chrono::seconds(60)};
  // Fashion-MNIST as it is (28x28x1), padded to 32x32 (the CIFAR-10 stand-in, 1 or 3
  // channels), or CIFAR-10 from data_dir (the binary version).
  enum class Data { fashion_mnist, fashion_mnist_32, fashion_mnist_32x3, cifar10 };
  Data data = Data::fashion_mnist;
  std::string data_dir;           // Fashion-MNIST IDX or CIFAR-10 binary folder
  std::size_t train_samples = 0;  // use the first N training samples (0 = all)
  std::size_t test_samples = 0;   // (0 = all)
  int compute_threads = 1;
  TrainOptions train;
  // Pipeline (and hybrid when world > stages) instead of pure data parallelism.
  bool pipeline = false;
  int stages = 2;
  int micro_batches = 4;
  Schedule schedule = Schedule::one_f_one_b;
  Balance balance = Balance::params;
  std::string report;  // rank 0 writes the run's JSON report here (empty: none)
};

int run_worker(const WorkerOptions& options);

}  // namespace fedcore::distributed
