// Federation benchmarks (issue: "round overhead" and "raw transfer").
//
//   federation_bench rounds   PARAMS... : the real fedcore-server process, N no-op clients
//                                         (they echo the model back at once), R rounds;
//                                         median wall time per round and the server's
//                                         peak RSS (VmHWM), for 2, 8 and 32 clients.
//   federation_bench transfer MB        : one 40 MB-class parameter frame after another
//                                         over our TLS channel on loopback; MB/s.
//   federation_bench streams MB         : raw stream throughput of plain TCP,
//                                         asio::ssl::stream and our TlsStream, interleaved.
//
// bench/federation_bench.sh runs both and `openssl speed` for the comparison.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <signal.h>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <time.h>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "server/store/history_store.hpp"
#include "shared/net/frame_channel.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/tls/context.hpp"

extern char** environ;

namespace {

namespace asio = boost::asio;
using fedcore::net::FrameChannel;
using fedcore::net::TlsStream;
using Clock = std::chrono::steady_clock;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

int sh(const std::string& command) {
  return std::system(command.c_str());
}

struct Pki {
  std::string dir;
  std::string ca() const { return dir + "/ca.pem"; }
  fedcore::tls::ClientTlsConfig client(const std::string& id) const {
    return {ca(), dir + "/clients/" + id + ".pem", dir + "/clients/" + id + ".key", "localhost"};
  }
  fedcore::tls::ServerTlsConfig server() const {
    return {ca(), dir + "/server/fedcore-server.pem", dir + "/server/fedcore-server.key",
            dir + "/crl.pem"};
  }
};

Pki make_pki(const std::string& dir, int clients) {
  const std::string script = std::string(FEDCORE_PKI_SCRIPT) + " --dir " + dir;
  if (sh(script + " init >/dev/null") != 0 ||
      sh(script + " server fedcore-server >/dev/null") != 0) {
    std::fprintf(stderr, "PKI setup failed\n");
    std::exit(1);
  }
  for (int i = 0; i < clients; ++i) {
    if (sh(script + " client c" + std::to_string(i) + " >/dev/null") != 0) {
      std::exit(1);
    }
  }
  return {dir};
}

// A no-op client: HELLO, then answers every TRAIN with the model it received.
asio::awaitable<void> echo_client(asio::io_context& io, asio::ssl::context& ctx, std::uint16_t port,
                                  std::vector<std::int64_t> shape) {
  TlsStream stream(io, ctx);
  (void)fedcore::tls::prepare_client_stream(stream, "localhost");
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto [ec] = co_await stream.next_layer().async_connect(
        {asio::ip::make_address("127.0.0.1"), port}, kNoThrow);
    if (!ec) {
      break;
    }
    stream.next_layer().close();
    asio::steady_timer t(io, std::chrono::milliseconds(100));
    co_await t.async_wait(kNoThrow);
  }
  auto [hs] = co_await stream.async_handshake(asio::ssl::stream_base::client, kNoThrow);
  if (hs) {
    co_return;
  }
  fedcore::net::ChannelOptions options;
  options.limits.max_payload_bytes = std::uint64_t{1} << 31;
  FrameChannel<TlsStream> channel(std::move(stream), options);
  fedcore::protocol::Hello hello{100, 0, shape, 2, {"train"}, "bench"};
  co_await channel.write_frame(fedcore::protocol::MessageType::hello,
                               fedcore::protocol::to_metadata(hello));
  while (true) {
    auto frame = co_await channel.read_frame();
    if (!frame) {
      co_return;
    }
    if (frame->type != fedcore::protocol::MessageType::train) {
      continue;
    }
    auto request = fedcore::protocol::parse_train_request(frame->metadata);
    fedcore::protocol::UpdateReport report;
    report.run_id = request->run_id;
    report.round = request->round;
    report.nonce = request->nonce;
    report.layout_fingerprint = request->layout_fingerprint;
    report.samples = 100;
    co_await channel.write_frame(fedcore::protocol::MessageType::update,
                                 fedcore::protocol::to_metadata(report), frame->payload);
  }
}

long peak_rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "VmHWM:") {
      status >> value;
      return value;
    }
    status.ignore(1 << 12, '\n');
  }
  return -1;
}

void rounds_bench(const std::string& server_bin, const std::vector<long>& param_counts,
                  const std::vector<int>& client_counts, int rounds) {
  const int max_clients = *std::max_element(client_counts.begin(), client_counts.end());
  const auto root =
      std::filesystem::temp_directory_path() / ("fedcore-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root);
  const Pki pki = make_pki((root / "pki").string(), max_clients);
  std::printf("%-10s %-8s %-18s %-18s %-14s %-14s\n", "params", "clients", "median round (ms)",
              "server peak RSS", "model size", "target RSS");
  for (long params : param_counts) {
    for (int clients : client_counts) {
      const auto dir = root / ("p" + std::to_string(params) + "-c" + std::to_string(clients));
      std::filesystem::create_directories(dir);
      // logreg on a two-class input of `params - 1` features has exactly `params` parameters.
      const long features = params - 1;
      const std::vector<std::int64_t> shape =
          features > 65536 ? std::vector<std::int64_t>{features / 1000, 1000, 1}
                           : std::vector<std::int64_t>{features};
      const long actual_params = (shape.size() == 3 ? shape[0] * shape[1] : shape[0]) + 1;
      asio::io_context probe_io;
      asio::ip::tcp::acceptor probe(probe_io, {asio::ip::make_address("127.0.0.1"), 0});
      const auto port = probe.local_endpoint().port();
      probe.close();
      std::ofstream(dir / "server.json")
          << R"({"port":)" << port << R"(,"database":")" << (dir / "db").string()
          << R"(","checkpoint_dir":")" << (dir / "ckpt").string() << R"(","tls":{"ca":")"
          << pki.ca() << R"(","cert":")" << pki.server().cert_file << R"(","key":")"
          << pki.server().key_file << R"(","crl":")" << pki.server().crl_file << R"("}})";
      std::string shape_json = "[";
      for (auto d : shape) {
        shape_json += std::to_string(d) + (d == shape.back() ? "]" : ",");
      }
      std::ofstream(dir / "run.json")
          << R"({"model":{"type":"logreg","input_shape":)" << shape_json
          << R"(,"num_classes":2},"rounds":)" << rounds << R"(,"clients_per_round":)" << clients
          << R"(,"min_clients":)" << clients
          << R"(,"round_timeout_s":600,"wait_for_clients_s":120,"federated_evaluation":false})";
      std::string a0 = server_bin, a1 = "--config", a2 = (dir / "server.json").string(),
                  a3 = "--run", a4 = (dir / "run.json").string(), a5 = "--log-level", a6 = "warn";
      char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(),
                      a4.data(), a5.data(), a6.data(), nullptr};
      pid_t pid = 0;
      posix_spawn(&pid, server_bin.c_str(), nullptr, nullptr, argv, environ);

      asio::io_context io;
      std::vector<asio::ssl::context> contexts;
      contexts.reserve(static_cast<std::size_t>(clients));
      for (int c = 0; c < clients; ++c) {
        contexts.push_back(
            std::move(*fedcore::tls::make_client_context(pki.client("c" + std::to_string(c)))));
        asio::co_spawn(io, echo_client(io, contexts.back(), port, shape), asio::detached);
      }
      std::thread client_thread([&] { io.run(); });
      // Wait (bounded) until the run finishes.
      const auto deadline = Clock::now() + std::chrono::minutes(10);
      bool finished = false;
      while (!finished && Clock::now() < deadline) {
        std::this_thread::sleep_for(
            std::chrono::milliseconds(100));  // polling the server's database
        if (auto store = fedcore::store::HistoryStore::open_read_only((dir / "db").string());
            store) {
          if (auto run = store->get_run(1); run) {
            finished = run->state == fedcore::store::RunState::finished;
          }
        }
      }
      const long rss = peak_rss_kib(pid);
      ::kill(pid, SIGTERM);
      int status = 0;
      ::waitpid(pid, &status, 0);
      io.stop();
      client_thread.join();
      std::vector<double> durations;
      if (auto store = fedcore::store::HistoryStore::open_read_only((dir / "db").string()); store) {
        for (const auto& r : *store->list_rounds(1)) {
          durations.push_back(double(r.finished_ms - r.started_ms));
        }
      }
      std::sort(durations.begin(), durations.end());
      const double median = durations.empty() ? -1 : durations[durations.size() / 2];
      const double model_mb = double(actual_params) * 4 / 1e6;
      std::printf("%-10ld %-8d %-18.1f %-18s %-14s %-14s%s\n", actual_params, clients, median,
                  (std::to_string(rss / 1024) + " MiB").c_str(),
                  (std::to_string(int(model_mb)) + " MB").c_str(),
                  (std::to_string(int(3 * model_mb + 100)) + " MB").c_str(),
                  finished ? "" : "  (did not finish)");
      std::fflush(stdout);
      std::filesystem::remove_all(dir);
    }
  }
  std::filesystem::remove_all(root);
}

// CPU time of the calling thread, user and system, in seconds.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// Sends `frames` frames of `megabytes` MB (the first is warm-up) over a FrameChannel on
// loopback and prints MB/s, and the CPU time each side spent per MB (user + system, so
// the kernel's share of TCP is in it). The CPU figures say where the ceiling is: on two
// cores, the transfer can go no faster than 2 / (sender + receiver CPU per byte). With `tls` the
// channel runs over mutual TLS 1.3, otherwise over plain TCP: the ceiling that TLS is measured
// against.
void transfer_bench(int megabytes, int frames, bool tls) {
  const auto root =
      std::filesystem::temp_directory_path() / ("fedcore-tls-" + std::to_string(::getpid()));
  std::optional<Pki> pki;
  std::optional<asio::ssl::context> server_ctx, client_ctx;
  if (tls) {
    pki = make_pki(root.string(), 1);
    server_ctx.emplace(std::move(*fedcore::tls::make_server_context(pki->server())));
    client_ctx.emplace(std::move(*fedcore::tls::make_client_context(pki->client("c0"))));
  }
  asio::io_context server_io, client_io;
  asio::ip::tcp::acceptor acceptor(server_io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto port = acceptor.local_endpoint().port();
  std::vector<float> params(static_cast<std::size_t>(megabytes) * 250000, 0.5f);
  fedcore::net::ChannelOptions options;
  options.limits.max_payload_bytes = std::uint64_t{1} << 31;
  Clock::time_point first, last;
  std::uint64_t received = 0;
  double receiver_cpu = 0, sender_cpu = 0;

  // Each frame is received into the previous one's payload, as a long-lived receiver does.
  auto receive = [&](auto& channel) -> asio::awaitable<void> {
    std::vector<std::byte> spare;
    for (int i = 0; i < frames; ++i) {
      auto frame = co_await channel.read_frame(std::move(spare));
      if (!frame) {
        co_return;
      }
      if (i == 0) {
        first = Clock::now();  // the first frame is warm-up
        receiver_cpu = -thread_cpu_seconds();
      } else {
        received += frame->payload.size();
      }
      last = Clock::now();
      spare = std::move(frame->payload);
    }
    receiver_cpu += thread_cpu_seconds();
  };
  auto send = [&](auto& channel) -> asio::awaitable<void> {
    for (int i = 0; i < frames; ++i) {
      co_await channel.write_frame(fedcore::protocol::MessageType::update, "{}",
                                   std::as_bytes(std::span<const float>(params)));
      if (i == 0) {
        sender_cpu = -thread_cpu_seconds();
      }
    }
    sender_cpu += thread_cpu_seconds();
  };
  asio::co_spawn(
      server_io,
      [&]() -> asio::awaitable<void> {
        auto socket = co_await acceptor.async_accept(asio::use_awaitable);
        if (tls) {
          TlsStream stream(std::move(socket), *server_ctx);
          co_await stream.async_handshake(asio::ssl::stream_base::server, asio::use_awaitable);
          FrameChannel<TlsStream> channel(std::move(stream), options);
          co_await receive(channel);
        } else {
          FrameChannel<fedcore::net::TcpStream> channel(std::move(socket), options);
          co_await receive(channel);
        }
      },
      asio::detached);
  asio::co_spawn(
      client_io,
      [&]() -> asio::awaitable<void> {
        const asio::ip::tcp::endpoint server(asio::ip::make_address("127.0.0.1"), port);
        if (tls) {
          TlsStream stream(client_io, *client_ctx);
          (void)fedcore::tls::prepare_client_stream(stream, "localhost");
          co_await stream.next_layer().async_connect(server, asio::use_awaitable);
          co_await stream.async_handshake(asio::ssl::stream_base::client, asio::use_awaitable);
          FrameChannel<TlsStream> channel(std::move(stream), options);
          co_await send(channel);
        } else {
          asio::ip::tcp::socket socket(client_io);
          co_await socket.async_connect(server, asio::use_awaitable);
          FrameChannel<fedcore::net::TcpStream> channel(std::move(socket), options);
          co_await send(channel);
        }
      },
      asio::detached);
  std::thread server_thread([&] { server_io.run(); });
  client_io.run();
  server_thread.join();
  const double seconds = std::chrono::duration<double>(last - first).count();
  const double megabytes_moved = double(received) / 1e6;
  std::printf(
      "%s channel: %d frames of %d MB, %.0f MB/s (%s)\n", tls ? "TLS" : "TCP", frames - 1,
      megabytes, megabytes_moved / seconds,
      tls ? "TLS 1.3, loopback, one sender thread and one receiver thread" : "plain TCP, loopback");
  std::printf(
      "  CPU per MB: sender %.3f ms, receiver %.3f ms; busy %.0f%% / %.0f%% of the time; "
      "two-core ceiling at this CPU cost %.0f MB/s\n",
      1e3 * sender_cpu / megabytes_moved, 1e3 * receiver_cpu / megabytes_moved,
      100 * sender_cpu / seconds, 100 * receiver_cpu / seconds,
      2 * megabytes_moved / (sender_cpu + receiver_cpu));
  std::filesystem::remove_all(root);
}

// Raw stream throughput, without frames: `frames` writes of `megabytes` over one loopback
// connection (the first is warm-up), sender and receiver on their own threads, 4 MiB per
// read_some/write_some as FrameChannel does. Compares Fedcore's TlsStream with
// asio::ssl::stream (what the channel used before) and plain TCP in one run.
enum class StreamKind { tcp, asio_ssl, fedcore_tls };

struct LargeSteps {
  std::size_t operator()(const boost::system::error_code& ec, std::size_t) const {
    return ec ? 0 : std::size_t{4} << 20;
  }
};

template <StreamKind kind>
double stream_mbps(const Pki& pki, int megabytes, int frames) {
  using Stream =
      std::conditional_t<kind == StreamKind::tcp, asio::ip::tcp::socket,
                         std::conditional_t<kind == StreamKind::asio_ssl,
                                            asio::ssl::stream<asio::ip::tcp::socket>, TlsStream>>;
  auto server_ctx = std::move(*fedcore::tls::make_server_context(pki.server()));
  auto client_ctx = std::move(*fedcore::tls::make_client_context(pki.client("c0")));
  asio::io_context server_io, client_io;
  asio::ip::tcp::acceptor acceptor(server_io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto port = acceptor.local_endpoint().port();
  std::vector<char> out(static_cast<std::size_t>(megabytes) * 1000000, 'x');
  std::vector<char> in(out.size());
  Clock::time_point first, last;
  auto make = [&](asio::ip::tcp::socket socket, asio::ssl::context& ctx) {
    if constexpr (kind == StreamKind::tcp) {
      (void)ctx;
      return socket;
    } else {
      return Stream(std::move(socket), ctx);
    }
  };
  auto handshake = [](Stream& stream,
                      asio::ssl::stream_base::handshake_type type) -> asio::awaitable<void> {
    if constexpr (kind != StreamKind::tcp) {
      co_await stream.async_handshake(type, asio::use_awaitable);
    } else {
      (void)stream;
      (void)type;
    }
  };
  asio::co_spawn(
      server_io,
      [&]() -> asio::awaitable<void> {
        Stream stream = make(co_await acceptor.async_accept(asio::use_awaitable), server_ctx);
        co_await handshake(stream, asio::ssl::stream_base::server);
        for (int i = 0; i < frames; ++i) {
          co_await asio::async_read(stream, asio::buffer(in), LargeSteps{}, asio::use_awaitable);
          (i == 0 ? first : last) = Clock::now();
        }
      },
      asio::detached);
  asio::co_spawn(
      client_io,
      [&]() -> asio::awaitable<void> {
        Stream stream = make(asio::ip::tcp::socket(client_io), client_ctx);
        auto& socket = [&]() -> asio::ip::tcp::socket& {
          if constexpr (kind == StreamKind::tcp) {
            return stream;
          } else {
            return stream.next_layer();
          }
        }();
        co_await socket.async_connect({asio::ip::make_address("127.0.0.1"), port},
                                      asio::use_awaitable);
        co_await handshake(stream, asio::ssl::stream_base::client);
        for (int i = 0; i < frames; ++i) {
          co_await asio::async_write(stream, asio::buffer(out), LargeSteps{}, asio::use_awaitable);
        }
      },
      asio::detached);
  std::thread server_thread([&] { server_io.run(); });
  client_io.run();
  server_thread.join();
  return double(out.size()) * (frames - 1) / 1e6 /
         std::chrono::duration<double>(last - first).count();
}

void streams_bench(int megabytes, int frames, int repeats) {
  const auto root =
      std::filesystem::temp_directory_path() / ("fedcore-streams-" + std::to_string(::getpid()));
  const Pki pki = make_pki(root.string(), 1);
  std::printf("stream throughput, MB/s (%d writes of %d MB after one warm-up; loopback)\n",
              frames - 1, megabytes);
  std::printf("%-8s %12s %18s %18s\n", "repeat", "plain TCP", "asio::ssl::stream",
              "fedcore TlsStream");
  for (int r = 1; r <= repeats; ++r) {  // interleaved, so that load on the machine hits all
    const double tcp = stream_mbps<StreamKind::tcp>(pki, megabytes, frames);
    const double asio_ssl = stream_mbps<StreamKind::asio_ssl>(pki, megabytes, frames);
    const double ours = stream_mbps<StreamKind::fedcore_tls>(pki, megabytes, frames);
    std::printf("%-8d %12.0f %18.0f %18.0f\n", r, tcp, asio_ssl, ours);
  }
  std::filesystem::remove_all(root);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "transfer") {
    transfer_bench(argc > 2 ? std::atoi(argv[2]) : 40, argc > 3 ? std::atoi(argv[3]) : 26, true);
    return 0;
  }
  if (mode == "transfer-tcp") {
    transfer_bench(argc > 2 ? std::atoi(argv[2]) : 40, argc > 3 ? std::atoi(argv[3]) : 26, false);
    return 0;
  }
  if (mode == "streams") {
    streams_bench(argc > 2 ? std::atoi(argv[2]) : 40, argc > 3 ? std::atoi(argv[3]) : 11,
                  argc > 4 ? std::atoi(argv[4]) : 3);
    return 0;
  }
  if (mode == "rounds") {
    std::vector<long> params{100000, 1000000, 10000000};
    if (argc > 2) {
      params = {std::atol(argv[2])};
    }
    rounds_bench(FEDCORE_SERVER_BIN, params, {2, 8, 32}, 5);
    return 0;
  }
  std::fprintf(stderr,
               "usage: federation_bench rounds [PARAMS] | transfer [MB] [FRAMES] | "
               "transfer-tcp [MB] [FRAMES] | streams [MB] [FRAMES] [REPEATS]\n");
  return 2;
}
