#include "tests/collective/group_support.hpp"

#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "shared/collective/inproc_transport.hpp"
#include "shared/collective/net_transport.hpp"
#include "tests/tls/tls_support.hpp"

namespace fedcore::collective::testing {
namespace {

// The TLS contexts every rank of every TLS test in this process shares. They are built
// once from a throwaway PKI and deliberately never destroyed (ranks' threads may still
// hold them at exit). The PKI's folder goes as soon as they are built: the contexts hold
// the certificates, keys and CRL in memory, and one folder per test process used to be
// left behind in /tmp.
struct TlsMaterial {
  std::optional<boost::asio::ssl::context> server;
  std::optional<boost::asio::ssl::context> client;
};

TlsMaterial& tls_material() {
  static TlsMaterial* material = [] {
    auto* m = new TlsMaterial;
    tls::testing::Federation federation{tls::testing::Federation::Ids{"rank-peer"}};
    EXPECT_TRUE(federation.ok) << federation.log;
    auto server = tls::make_server_context(federation.pki.server_config());
    auto client = tls::make_client_context(federation.pki.client_config("rank-peer"));
    EXPECT_TRUE(server.has_value() && client.has_value());
    if (server && client) {
      m->server.emplace(std::move(*server));
      m->client.emplace(std::move(*client));
    }
    return m;
  }();
  return *material;
}

constexpr std::size_t kTestRingBytes = 256 * 1024;

result<std::unique_ptr<Transport>> make_transport(Kind kind, int rank, int size,
                                                  const std::string& job, Rendezvous& rendezvous,
                                                  InProcessGroup& group,
                                                  const GroupOptions& options) {
  if (kind == Kind::inproc)
    return group.transport(rank);
  NetOptions net;
  net.rank = rank;
  net.size = size;
  net.job = job;
  net.connect_timeout = options.connect_timeout;
  if (uses_rings(kind)) {
    net.shared_memory_bytes = kTestRingBytes;
    net.spin = std::chrono::microseconds(20);  // the polling wait, exercised here
  }
  if (!options.ring_bytes.empty())
    net.shared_memory_bytes = options.ring_bytes[rank];
  if (!uses_tls(kind))
    return connect_tcp(net, rendezvous);
  TlsMaterial& m = tls_material();
  TlsContexts contexts{&*m.server, &*m.client, "localhost"};
  return connect_tls(net, rendezvous, contexts);
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::inproc:
      return "inproc";
    case Kind::tcp:
      return "tcp";
    case Kind::tls:
      return "tls";
    case Kind::tcp_shm:
      return "tcp_shm";
    case Kind::tls_shm:
      return "tls_shm";
  }
  return "?";
}

void run_group(Kind kind, int size, const RankFn& fn, const GroupOptions& options) {
  if (uses_tls(kind))
    tls_material();  // made before the threads start
  MemoryRendezvous rendezvous(size);
  InProcessGroup group(size);
  std::vector<std::thread> threads;
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      const std::string job = options.jobs.empty() ? options.job : options.jobs[rank];
      auto transport = make_transport(kind, rank, size, job, rendezvous, group, options);
      if (!transport) {
        std::lock_guard lock(failures_mutex);
        failures.push_back("rank " + std::to_string(rank) + ": " + transport.error().to_string());
        return;
      }
      Communicator comm(std::move(*transport), job, options.timeout);
      fn(comm);
    });
  }
  for (auto& t : threads)
    t.join();
  for (const auto& f : failures)
    ADD_FAILURE() << "connect failed: " << f;
}

std::vector<result<void>> connect_only(Kind kind, int size, const GroupOptions& options) {
  if (uses_tls(kind))
    tls_material();
  MemoryRendezvous rendezvous(size);
  InProcessGroup group(size);
  std::vector<result<void>> results(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      const std::string job = options.jobs.empty() ? options.job : options.jobs[rank];
      auto transport = make_transport(kind, rank, size, job, rendezvous, group, options);
      if (!transport) {
        results[rank] = transport.error();
        return;
      }
      // Keep the links up until every rank has its answer.
      Communicator comm(std::move(*transport), job, options.timeout);
      (void)barrier(comm, {});
    });
  }
  for (auto& t : threads)
    t.join();
  return results;
}

}  // namespace fedcore::collective::testing
