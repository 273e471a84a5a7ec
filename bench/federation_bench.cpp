// Federation benchmarks (issue: "round overhead" and "raw transfer").
//
//   federation_bench rounds   [PARAMS...] [--clients 2,8,32] [--rounds R] : the real
//                                         fedcore-server process, N no-op clients (they
//                                         echo the model back at once), R rounds; median
//                                         wall time per round, the round period (first
//                                         TRAIN to the next round's, as the clients see
//                                         it) and the server's peak RSS
//                                         (VmHWM); then, from the server's own record
//                                         (round_phases), where each round's time went and
//                                         the server's CPU per round against the floor of
//                                         the bytes it moved (costs measured in the run),
//                                         and the round against the TLS floor: its bytes
//                                         at the CPU per MB our TLS channel costs each side
//                                         (measured in the run), on 2 cores; and the busy
//                                         floor: the CPU the server and the clients used
//                                         per round, on 2 cores.
//                                         --client-threads T spreads the clients over T
//                                         threads (default 1); --overlap off|both runs the
//                                         server without (and with) checkpoint overlap;
//                                         --max-inflight N admits N uploads at a time and
//                                         no more (the server's max_inflight_updates);
//                                         --workers 0,1 runs each cell with each of these
//                                         server worker_threads (TLS record work off the
//                                         io thread; default: the server's own default).
//   federation_bench secure   [options] : the cost of secure aggregation (SecAgg+) next to
//                                         plain FedAvg: per client count, a plain run and
//                                         SecAgg+ runs (keys bound, and not) back to back;
//                                         round time, server and client CPU per round,
//                                         bytes a client uploads, server peak RSS.
//                                         bench/secagg_cost.sh runs it.
//   federation_bench transfer MB        : one 40 MB-class parameter frame after another
//                                         over our TLS channel on loopback; MB/s.
//   federation_bench streams MB         : raw stream throughput of plain TCP,
//                                         asio::ssl::stream and our TlsStream, interleaved.
//
// bench/federation_bench.sh runs both and `openssl speed` for the comparison.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <utility>
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

#include "client/secure_participation.hpp"
#include "server/store/history_store.hpp"
#include "shared/net/frame_channel.hpp"
#include "shared/net/listener.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/secagg/key_binding.hpp"
#include "shared/secagg/plan.hpp"
#include "shared/tls/context.hpp"
#include "shared/util/allocator_tuning.hpp"
#include "shared/util/rng.hpp"
#include "tests/support/build_outputs.hpp"

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
  const std::string script = fedcore::testing::pki_script() + " --dir " + dir;
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

// What the simulated clients do with a TRAIN.
enum class Mode {
  plain,            // echo the model back at once as the update (FedAvg in the clear)
  secure_signed,    // SecAgg+ as a real site does it, keys signed with the TLS client key and
                    // every neighbour's binding checked against the CA
  secure_unsigned,  // SecAgg+ without key binding ("bind_keys": false, no signer, no anchor)
};

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::plain:
      return "plain FedAvg";
    case Mode::secure_signed:
      return "SecAgg+, keys bound";
    case Mode::secure_unsigned:
      return "SecAgg+, keys not bound";
  }
  return "?";
}

// What all simulated clients of one run sent in its rounds, by message, counted as on the
// wire inside TLS (header + metadata + payload).
struct Traffic {
  std::atomic<std::uint64_t> update{0}, keys{0}, shares{0}, masked{0}, revealed{0};
  std::atomic<std::uint64_t> completed{0};  // (client, round) pairs seen through to the end
  std::atomic<std::uint64_t> failures{0};   // secure steps that failed at a client

  // When, per round, the first client received its TRAIN and the last client sent each
  // of its answers (keys, shares, masked input, revealed shares; or its plain update):
  // the spans between them say where a round's time goes.
  enum Mark { first_train, last_keys, last_shares, last_masked, last_answer, kMarks };
  void mark(std::int64_t round, Mark which) {
    const auto now = Clock::now();
    std::lock_guard lock(mutex);
    auto& at = marks[round][which];
    if (at == Clock::time_point{} || (which == first_train ? now < at : now > at)) {
      at = now;
    }
  }
  std::mutex mutex;
  std::map<std::int64_t, std::array<Clock::time_point, kMarks>> marks;
};

struct TrafficTotals {
  std::uint64_t update = 0, keys = 0, shares = 0, masked = 0, revealed = 0, completed = 0,
                failures = 0;
  std::uint64_t total() const { return update + keys + shares + masked + revealed; }
  // Median over rounds of the spans between the marks, in ms: TRAIN -> last keys, ->
  // last shares, -> last masked input, -> last revealed shares (plain: TRAIN -> last update
  // in the last slot).
  std::array<double, 4> spans_ms{};
};

// utime + stime of a process in seconds (fields 14 and 15 of /proc/<pid>/stat).
double process_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto name_end = text.rfind(')');  // the command name may hold spaces and parentheses
  if (name_end == std::string::npos) {
    return -1;
  }
  std::istringstream fields(text.substr(name_end + 1));
  std::string skipped;
  for (int field = 3; field <= 13; ++field) {
    fields >> skipped;
  }
  unsigned long long user = 0, system = 0;
  fields >> user >> system;
  return double(user + system) / double(::sysconf(_SC_CLK_TCK));
}

// CPU time of the server and of the client threads, from the first TRAIN any client
// receives (so connecting, handshakes and the server's start are left out) to the end.
class CpuProbe {
 public:
  explicit CpuProbe(pid_t server) : server_(server) {}
  // Before the client threads do any work.
  void add_client_thread(std::thread& thread) {
    clockid_t clock{};
    pthread_getcpuclockid(thread.native_handle(), &clock);
    clocks_.push_back(clock);
  }
  double clients_seconds() const {
    double sum = 0;
    for (clockid_t clock : clocks_) {
      timespec t{};
      clock_gettime(clock, &t);
      sum += double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
    }
    return sum;
  }
  double server_seconds() const { return process_cpu_seconds(server_); }
  // Any client thread, at every TRAIN; only the first counts.
  void on_train() {
    std::lock_guard lock(mutex_);
    if (!started_) {
      started_ = true;
      server_start_ = server_seconds();
      clients_start_ = clients_seconds();
    }
  }
  // {server, clients} CPU seconds since the first TRAIN (0, 0 if there was none).
  std::pair<double, double> since_first_train() const {
    std::lock_guard lock(mutex_);
    if (!started_) {
      return {0, 0};
    }
    return {server_seconds() - server_start_, clients_seconds() - clients_start_};
  }

 private:
  pid_t server_;
  std::vector<clockid_t> clocks_;
  mutable std::mutex mutex_;
  bool started_ = false;
  double server_start_ = 0, clients_start_ = 0;
};

struct ClientOptions {
  Mode mode = Mode::plain;
  fedcore::client::SecureIdentity keys;  // key binding (secure_signed only)
  Traffic* traffic = nullptr;
  CpuProbe* probe = nullptr;
};

asio::awaitable<void> send(FrameChannel<TlsStream>& channel,
                           const fedcore::client::OutgoingFrame& frame) {
  std::span<const std::byte> payload;
  if (frame.payload) {
    payload = std::as_bytes(std::span<const float>(*frame.payload));
  }
  co_await channel.write_frame(frame.type, frame.metadata, payload);
}

// A no-op client: HELLO, then answers every TRAIN at once without training. In the clear
// it echoes the model it received; when the TRAIN asks for secure aggregation it takes part
// as a real site does (client::SecureParticipation, the code client/session.cpp runs): its
// keys, then an answer to secagg_neighbours, secagg_relay, secagg_survivors and
// secagg_unmask, masking a zero
// delta (trained = global).
asio::awaitable<void> bench_client(asio::io_context& io, asio::ssl::context& ctx,
                                   std::uint16_t port, std::vector<std::int64_t> shape,
                                   ClientOptions options) {
  using fedcore::protocol::MessageType;
  // Connect and handshake, retrying as a daemon does: the server may not listen yet, and
  // it closes connections beyond its per-address limit of handshakes in progress (all the
  // bench's clients come from 127.0.0.1 at once).
  std::optional<TlsStream> connected;
  for (int attempt = 0; attempt < 200 && !connected; ++attempt) {
    if (attempt > 0) {
      asio::steady_timer t(io, std::chrono::milliseconds(50 + 10 * (attempt % 8)));
      co_await t.async_wait(kNoThrow);
    }
    TlsStream candidate(io, ctx);
    (void)fedcore::tls::prepare_client_stream(candidate, "localhost");
    auto [ec] = co_await candidate.next_layer().async_connect(
        {asio::ip::make_address("127.0.0.1"), port}, kNoThrow);
    if (ec) {
      continue;
    }
    fedcore::net::set_no_delay(candidate.next_layer());  // as the daemon does
    auto [hs] = co_await candidate.async_handshake(asio::ssl::stream_base::client, kNoThrow);
    if (!hs) {
      connected.emplace(std::move(candidate));
    }
  }
  if (!connected) {
    co_return;
  }
  TlsStream stream(std::move(*connected));
  fedcore::net::ChannelOptions channel_options;
  channel_options.limits.max_payload_bytes = std::uint64_t{1} << 31;
  FrameChannel<TlsStream> channel(std::move(stream), channel_options);
  fedcore::protocol::Hello hello{100, 0, shape, 2, {"train"}, "bench"};
  co_await channel.write_frame(MessageType::hello, fedcore::protocol::to_metadata(hello));
  Traffic& traffic = *options.traffic;
  std::string identity;  // from WELCOME: our certificate's CN
  std::optional<fedcore::client::SecureParticipation> secure;
  std::optional<fedcore::protocol::Frame> frame;  // the one being answered
  while (true) {
    // Into the payload of the frame before, answered by now, as a site's session does.
    // (Not as a conditional expression inside the co_await: written so, the bench died of
    // a double free under GCC 12, whose coroutines mishandle such temporaries.)
    std::vector<std::byte> spare;
    if (frame) {
      spare = std::move(frame->payload);
    }
    auto next = co_await channel.read_frame(std::move(spare));
    if (!next) {
      co_return;
    }
    frame = std::move(*next);
    if (frame->type == MessageType::welcome) {
      if (auto welcome = fedcore::protocol::parse_welcome(frame->metadata); welcome) {
        identity = welcome->client_id;
      }
      continue;
    }
    if (frame->type == MessageType::train) {
      options.probe->on_train();
      auto request = fedcore::protocol::parse_train_request(frame->metadata);
      if (!request) {
        continue;
      }
      traffic.mark(request->round, Traffic::first_train);
      fedcore::protocol::UpdateReport report;
      report.run_id = request->run_id;
      report.round = request->round;
      report.nonce = request->nonce;
      report.layout_fingerprint = request->layout_fingerprint;
      report.samples = 100;
      if (!request->privacy.secure_aggregation &&
          request->compression.up != fedcore::protocol::UpdateEncoding::f32) {
        // A no-op site of a compressing run: a small fixed step (not zero, so the encoder
        // does a real site's work: int8 rounds every value, top-k selects), encoded as the
        // run asks.
        const std::size_t n = request->compression.down == fedcore::protocol::UpdateEncoding::f16
                                  ? request->compression.parameters
                                  : frame->payload.size() / sizeof(float);
        std::vector<float> step(n);
        for (std::size_t i = 0; i < n; ++i) {
          step[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 255) - 127);
        }
        fedcore::Rng rng(request->round);
        const auto bytes = fedcore::protocol::encode_step(step, request->compression, rng);
        report.encoding = request->compression.up;
        const auto metadata = fedcore::protocol::to_metadata(report);
        traffic.update += fedcore::protocol::kFrameHeaderSize + metadata.size() + bytes.size();
        co_await channel.write_frame(MessageType::update, metadata, bytes);
        traffic.mark(request->round, Traffic::last_answer);
        ++traffic.completed;
        continue;
      }
      if (!request->privacy.secure_aggregation) {
        const auto metadata = fedcore::protocol::to_metadata(report);
        traffic.update +=
            fedcore::protocol::kFrameHeaderSize + metadata.size() + frame->payload.size();
        co_await channel.write_frame(MessageType::update, metadata, frame->payload);
        traffic.mark(request->round, Traffic::last_answer);
        ++traffic.completed;
        continue;
      }
      auto global = fedcore::protocol::payload_floats(frame->payload);
      if (!global) {
        continue;
      }
      fedcore::client::LocalResult local;
      local.params.assign(global->begin(), global->end());
      local.report = report;
      auto started = fedcore::client::SecureParticipation::begin(*request, identity, *global,
                                                                 std::move(local), options.keys);
      if (!started) {
        std::fprintf(stderr, "  %s: cannot start secure aggregation: %s\n", identity.c_str(),
                     started.error().message.c_str());
        ++traffic.failures;
        continue;
      }
      secure.emplace(std::move(*started));
      const auto keys = secure->advertise();
      traffic.keys += keys.bytes();
      co_await send(channel, keys);
      traffic.mark(request->round, Traffic::last_keys);
      continue;
    }
    if (frame->type != MessageType::secagg_neighbours && frame->type != MessageType::secagg_relay &&
        frame->type != MessageType::secagg_survivors && frame->type != MessageType::secagg_unmask) {
      continue;  // heartbeats, goodbye
    }
    if (!secure) {
      continue;
    }
    auto answer = secure->on_message(*frame);
    if (!answer) {
      std::fprintf(stderr, "  %s: leaving the secure round: %s\n", identity.c_str(),
                   answer.error().message.c_str());
      ++traffic.failures;
      co_await channel.write_frame(
          MessageType::error,
          fedcore::protocol::to_metadata(fedcore::protocol::ErrorMessage{
              std::string(fedcore::errc_name(answer.error().code)), answer.error().message}));
      secure.reset();
      continue;
    }
    // The survivor-list signature (the consistency check) counts with the revealed shares.
    auto& counter = answer->type == MessageType::secagg_shares   ? traffic.shares
                    : answer->type == MessageType::secagg_masked ? traffic.masked
                                                                 : traffic.revealed;
    counter += answer->bytes();
    co_await send(channel, *answer);
    if (answer->type == MessageType::secagg_signed) {
      continue;
    }
    traffic.mark(secure->round(), answer->type == MessageType::secagg_shares ? Traffic::last_shares
                                  : answer->type == MessageType::secagg_masked
                                      ? Traffic::last_masked
                                      : Traffic::last_answer);
    if (secure->finished()) {
      ++traffic.completed;
      secure.reset();
    }
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

struct RunSpec {
  long params = 0;  // asked for; logreg gets close (actual_params)
  int clients = 0;
  int rounds = 5;
  Mode mode = Mode::plain;
  int client_threads = 1;  // io threads the simulated clients share
  bool overlap = true;     // the server's overlap_checkpoints
  int max_inflight = 0;    // > 0: the server's max_inflight_updates, with no extra memory budget
  int workers = -1;        // >= 0: the server's worker_threads; -1: its default
  // The run's compression: none, f16, int8, topk (1%), or int8+f16 (the model down as f16).
  std::string compression = "none";
};

// The run config's "compression" for a RunSpec's name (empty for none).
std::string compression_json(const std::string& name) {
  if (name == "none")
    return "";
  if (name == "int8+f16")
    return R"(,"compression":{"up":"int8","down":"f16"})";
  if (name == "topk")
    return R"(,"compression":{"up":"topk","topk_fraction":0.01})";
  return R"(,"compression":{"up":")" + name + R"("})";
}

struct RunResult {
  bool finished = false;
  long actual_params = 0;
  std::vector<double> round_ms;  // committed rounds, wall time from the round rows
  // From one round's first TRAIN received to the next round's, as the clients see it: the
  // federation's cadence, with everything the server does between rounds (aggregation,
  // checkpoint, commit, or only the part of them the next round waits for).
  std::vector<double> period_ms;
  int failed_rounds = 0;
  long peak_rss_kib = -1;
  double server_cpu_s = 0;          // from the first TRAIN to the end of the run
  double clients_cpu_s = 0;         // all client threads, same window
  std::int64_t store_bytes_up = 0;  // what the server recorded, committed rounds
  std::int64_t store_accepted = 0;
  TrafficTotals traffic;
  double seconds = 0;  // the whole run, server start to finish
  // Committed rounds: where each spent its time (the server's round_phases) and the bytes
  // it moved through TLS (TRAIN frames down, updates up).
  std::vector<fedcore::store::RoundPhases> phases;
  std::vector<double> round_mb_down, round_mb_up;
};

double median(std::vector<double> values) {
  if (values.empty()) {
    return -1;
  }
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// One run of the real fedcore-server with `spec.clients` no-op clients: a logreg of
// about `spec.params` parameters, every client in every round.
RunResult run_federation(const std::string& server_bin, const Pki& pki,
                         const std::filesystem::path& root, const RunSpec& spec) {
  const auto run_started = Clock::now();
  static int serial = 0;
  const auto dir = root / ("p" + std::to_string(spec.params) + "-c" + std::to_string(spec.clients) +
                           "-" + std::to_string(++serial));
  std::filesystem::create_directories(dir);
  RunResult out;
  // logreg on a two-class input of `params - 1` features has exactly `params` parameters.
  const long features = spec.params - 1;
  const std::vector<std::int64_t> shape = features > 65536
                                              ? std::vector<std::int64_t>{features / 1000, 1000, 1}
                                              : std::vector<std::int64_t>{features};
  out.actual_params = (shape.size() == 3 ? shape[0] * shape[1] : shape[0]) + 1;
  asio::io_context probe_io;
  asio::ip::tcp::acceptor probe(probe_io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto port = probe.local_endpoint().port();
  probe.close();
  std::ofstream(dir / "server.json")
      << R"({"port":)" << port << R"(,"database":")" << (dir / "db").string()
      << R"(","checkpoint_dir":")" << (dir / "ckpt").string() << R"(",)"
      << (spec.max_inflight > 0 ? R"("upload_memory_mb":0,"max_inflight_updates":)" +
                                      std::to_string(spec.max_inflight) + ","
                                : std::string())
      << (spec.workers >= 0 ? R"("worker_threads":)" + std::to_string(spec.workers) + ","
                            : std::string())
      << R"("overlap_checkpoints":)" << (spec.overlap ? "true" : "false") << R"(,"tls":{"ca":")"
      << pki.ca() << R"(","cert":")" << pki.server().cert_file << R"(","key":")"
      << pki.server().key_file << R"(","crl":")" << pki.server().crl_file << R"("}})";
  std::string shape_json = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    shape_json += std::to_string(shape[i]) + (i + 1 == shape.size() ? "]" : ",");
  }
  std::string privacy;
  if (spec.mode != Mode::plain) {
    privacy = std::string(R"(,"privacy":{"secure_aggregation":{"stage_timeout_s":300,)") +
              R"("bind_keys":)" + (spec.mode == Mode::secure_signed ? "true" : "false") + "}}";
  }
  std::ofstream(dir / "run.json") << R"({"model":{"type":"logreg","input_shape":)" << shape_json
                                  << R"(,"num_classes":2},"rounds":)" << spec.rounds
                                  << R"(,"clients_per_round":)" << spec.clients
                                  << R"(,"min_clients":)" << spec.clients
                                  << R"(,"round_timeout_s":1200,"wait_for_clients_s":120,)"
                                  << R"("federated_evaluation":false)" << privacy
                                  << compression_json(spec.compression) << "}";
  std::string a0 = server_bin, a1 = "--config", a2 = (dir / "server.json").string(), a3 = "--run",
              a4 = (dir / "run.json").string(), a5 = "--log-level", a6 = "warn";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(),
                  a4.data(), a5.data(), a6.data(), nullptr};
  // The server's log goes to a file, shown only when the run did not finish.
  const std::string server_log = (dir / "server.log").string();
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, server_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, server_bin.c_str(), &files, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&files);
  if (spawned != 0) {
    std::fprintf(stderr, "cannot start %s\n", server_bin.c_str());
    std::exit(1);
  }

  Traffic traffic;
  CpuProbe cpu(pid);
  std::shared_ptr<const fedcore::secagg::TrustAnchor> trust;
  if (spec.mode == Mode::secure_signed) {
    trust = std::move(*fedcore::secagg::TrustAnchor::from_file(pki.ca()));
  }
  const int threads = std::max(1, std::min(spec.client_threads, spec.clients));
  std::vector<std::unique_ptr<asio::io_context>> ios;
  for (int t = 0; t < threads; ++t) {
    ios.push_back(std::make_unique<asio::io_context>(1));
  }
  std::vector<asio::ssl::context> contexts;
  contexts.reserve(static_cast<std::size_t>(spec.clients));
  for (int c = 0; c < spec.clients; ++c) {
    const auto tls = pki.client("c" + std::to_string(c));
    contexts.push_back(std::move(*fedcore::tls::make_client_context(tls)));
    ClientOptions options{spec.mode, {}, &traffic, &cpu};
    if (spec.mode == Mode::secure_signed) {
      options.keys = {std::move(*fedcore::secagg::Signer::from_files(tls.key_file, tls.cert_file)),
                      trust};
    }
    auto& io = *ios[static_cast<std::size_t>(c % threads)];
    asio::co_spawn(io, bench_client(io, contexts.back(), port, shape, std::move(options)),
                   asio::detached);
  }
  std::latch go(1);
  std::vector<std::thread> client_threads;
  for (int t = 0; t < threads; ++t) {
    client_threads.emplace_back([&, t] {
      go.wait();
      ios[static_cast<std::size_t>(t)]->run();
    });
    cpu.add_client_thread(client_threads.back());
  }
  go.count_down();
  // Wait (bounded) until the run finishes, polling the server's database.
  const auto deadline = Clock::now() + std::chrono::minutes(30);
  while (!out.finished && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (auto store = fedcore::store::HistoryStore::open_read_only((dir / "db").string()); store) {
      if (auto run = store->get_run(1); run) {
        out.finished = run->state == fedcore::store::RunState::finished;
      }
    }
  }
  std::tie(out.server_cpu_s, out.clients_cpu_s) = cpu.since_first_train();
  out.peak_rss_kib = peak_rss_kib(pid);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  for (auto& io : ios) {
    io->stop();
  }
  for (auto& thread : client_threads) {
    thread.join();
  }
  if (auto store = fedcore::store::HistoryStore::open_read_only((dir / "db").string()); store) {
    if (auto rounds = store->list_rounds(1); rounds) {
      for (const auto& r : *rounds) {
        if (r.state == fedcore::store::RoundState::committed) {
          out.round_ms.push_back(double(r.finished_ms - r.started_ms));
          out.store_bytes_up += r.bytes_up;
          out.store_accepted += r.accepted;
          out.round_mb_down.push_back(double(r.bytes_down) / 1e6);
          out.round_mb_up.push_back(double(r.bytes_up) / 1e6);
        } else {
          ++out.failed_rounds;
        }
      }
    }
    if (auto phases = store->list_round_phases(1); phases) {
      out.phases = std::move(*phases);
    }
  }
  out.traffic = {traffic.update,   traffic.keys,      traffic.shares,   traffic.masked,
                 traffic.revealed, traffic.completed, traffic.failures, {}};
  for (auto it = traffic.marks.begin(); it != traffic.marks.end(); ++it) {
    const auto next = std::next(it);
    if (next != traffic.marks.end() && next->first == it->first + 1 &&
        it->second[Traffic::first_train] != Clock::time_point{} &&
        next->second[Traffic::first_train] != Clock::time_point{}) {
      out.period_ms.push_back(
          std::chrono::duration<double, std::milli>(next->second[Traffic::first_train] -
                                                    it->second[Traffic::first_train])
              .count());
    }
  }
  for (int span = 0; span < 4; ++span) {
    std::vector<double> ms;
    for (const auto& [round, at] : traffic.marks) {
      // Plain rounds have only the first and the last mark: one span, in the last slot.
      const auto from = spec.mode == Mode::plain ? at[Traffic::first_train] : at[span];
      const auto to = spec.mode == Mode::plain ? at[Traffic::last_answer] : at[span + 1];
      if ((spec.mode != Mode::plain || span == 3) && from != Clock::time_point{} &&
          to != Clock::time_point{}) {
        ms.push_back(std::chrono::duration<double, std::milli>(to - from).count());
      }
    }
    out.traffic.spans_ms[static_cast<std::size_t>(span)] = median(ms);
  }
  if (!out.finished || out.failed_rounds > 0) {
    std::fprintf(stderr, "  the server's log (%s):\n", server_log.c_str());
    std::fflush(stderr);
    sh("tail -n 20 '" + server_log + "' >&2");
  }
  std::filesystem::remove_all(dir);
  out.seconds = std::chrono::duration<double>(Clock::now() - run_started).count();
  return out;
}

std::filesystem::path bench_root() {
  const auto root =
      std::filesystem::temp_directory_path() / ("fedcore-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root);
  return root;
}

struct TransferCost;
TransferCost transfer_bench(int megabytes, int frames, bool tls, bool print);

// What one byte costs on this machine, measured in the same run as the rounds: an AES-GCM
// pass (`openssl speed -evp aes-128-gcm`, 16 KiB blocks: TLS 1.3's records), the kernel's
// send and receive on loopback (CPU per MB of each side of a plain-TCP channel), and one
// read pass over memory (the accumulation reads each update once).
struct ByteCosts {
  double aes_ms_per_mb = 0;
  double send_ms_per_mb = 0;
  double receive_ms_per_mb = 0;
  double memory_ms_per_mb = 0;
  // The same channel over TLS (our TlsStream on OpenSSL): each side's whole CPU per MB,
  // i.e. the AES pass and the kernel's TCP work above plus what the TLS stack adds (OpenSSL
  // 3.0's record copies, the BIO pair's copy, record framing). Only kernel TLS would remove
  // the copies, and this kernel has none (docs/results.md, "The copies TLS makes").
  double tls_send_ms_per_mb = 0;
  double tls_receive_ms_per_mb = 0;
};

double aes_gcm_ms_per_mb() {
  FILE* pipe = ::popen("openssl speed -evp aes-128-gcm -seconds 2 -bytes 16384 2>/dev/null", "r");
  if (pipe == nullptr) {
    return -1;
  }
  char line[512];
  double kb_per_s = -1;
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    if (std::strncmp(line, "AES-128-GCM", 11) == 0) {
      kb_per_s = std::atof(line + 11);  // "3131461.32k": thousands of bytes per second
    }
  }
  ::pclose(pipe);
  return kb_per_s > 0 ? 1e3 / (kb_per_s / 1e3) : -1;
}

double memory_read_ms_per_mb() {
  std::vector<float> data(10'000'000, 1.0f);
  std::vector<double> ms;
  volatile float sink = 0;
  for (int repeat = 0; repeat < 5; ++repeat) {
    const auto start = Clock::now();
    float sum = 0;
    for (float v : data) {
      sum += v;
    }
    sink = sink + sum;
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return median(ms) / (double(data.size()) * 4 / 1e6);
}

ByteCosts measure_byte_costs();

// The server's CPU floor for a round: it encrypts what it sends (an AES pass and the
// kernel's send per byte), decrypts what it receives (the kernel's receive and an AES
// pass), and reads each update once to accumulate it.
double server_floor_ms(const ByteCosts& c, double mb_down, double mb_up) {
  return mb_down * (c.aes_ms_per_mb + c.send_ms_per_mb) +
         mb_up * (c.receive_ms_per_mb + c.aes_ms_per_mb + c.memory_ms_per_mb);
}

// The whole loopback system's wall-clock floor: every byte is encrypted, sent, received
// and decrypted once (by the server or a client), on 2 cores, with no other work.
double system_floor_ms(const ByteCosts& c, double mb_down, double mb_up) {
  return (mb_down + mb_up) * (2 * c.aes_ms_per_mb + c.send_ms_per_mb + c.receive_ms_per_mb) / 2;
}

// The server's floor at the TLS channel's measured costs: what its bytes cost each side of
// our TlsStream (so OpenSSL's copies count), plus one memory pass over each update.
double server_tls_floor_ms(const ByteCosts& c, double mb_down, double mb_up) {
  return mb_down * c.tls_send_ms_per_mb + mb_up * (c.tls_receive_ms_per_mb + c.memory_ms_per_mb);
}

// The same through the TLS channel as it is: every byte sent once and received once over
// TlsStream, at the CPU per MB the `transfer` bench measures for each side, on 2 cores, with
// no other work (no fold, no checkpoint, no client work). A target below it cannot be met
// on this machine with this TLS stack, whatever the server does.
double tls_floor_ms(const ByteCosts& c, double mb_down, double mb_up) {
  return (mb_down + mb_up) * (c.tls_send_ms_per_mb + c.tls_receive_ms_per_mb) / 2;
}

// The CPU the round actually used, the server's and the clients' together, spread over 2
// cores with nothing idle. Above a target, the target needs less CPU per round, not better
// overlap; a round far above it is waiting (dependencies, wake-ups), not computing.
double busy_floor_ms(double server_cpu_ms, double clients_cpu_ms) {
  return (server_cpu_ms + clients_cpu_ms) / 2;
}

template <class Field>
double median_of(const std::vector<fedcore::store::RoundPhases>& phases, Field field) {
  std::vector<double> values;
  for (const auto& p : phases) {
    values.push_back(field(p));
  }
  return median(values);
}

// `overlaps`: the server's overlap_checkpoints settings to run each cell with, in order.
void rounds_bench(const std::string& server_bin, const std::vector<long>& param_counts,
                  const std::vector<int>& client_counts, int rounds, int client_threads,
                  const std::vector<bool>& overlaps, int max_inflight,
                  const std::vector<int>& workers, const std::vector<std::string>& compressions) {
  const int max_clients = *std::max_element(client_counts.begin(), client_counts.end());
  const auto root = bench_root();
  const Pki pki = make_pki((root / "pki").string(), max_clients);
  std::vector<std::pair<RunSpec, RunResult>> runs;
  // "median round": the round rows' finished - started, whole milliseconds (the issue's
  // metric); "µs clock": the same interval from round_phases.closed_ms, which a 1.6 ms round
  // does not round up to 2.
  std::printf("%-10s %-8s %-8s %-8s %-10s %-18s %-14s %-19s %-18s %-14s %-14s %-12s %-12s\n",
              "params", "clients", "overlap", "workers", "compress", "median round (ms)",
              "µs clock (ms)", "round period (ms)", "server peak RSS", "model size", "target RSS",
              "MB up/round", "MB down/round");
  for (long params : param_counts) {
    for (int clients : client_counts) {
      for (bool overlap : overlaps) {
        for (int worker_threads : workers) {
          for (const auto& compression : compressions) {
            const RunSpec spec{params,  clients,      rounds,         Mode::plain, client_threads,
                               overlap, max_inflight, worker_threads, compression};
            const RunResult r = run_federation(server_bin, pki, root, spec);
            const double model_mb = double(r.actual_params) * 4 / 1e6;
            // Both in MB (10^6 bytes), the target's unit: a peak in MiB beside a target in MB
            // read 5% low.
            const double peak_mb = double(r.peak_rss_kib) * 1024 / 1e6;
            const double target_mb = 3 * model_mb + 100;
            std::vector<double> closed;
            for (const auto& p : r.phases) {
              if (p.closed_ms) {
                closed.push_back(*p.closed_ms);
              }
            }
            std::printf(
                "%-10ld %-8d %-8s %-8s %-10s %-18.1f %-14.2f %-19.1f %-18s %-14s %-14s %-12.2f "
                "%-12.2f%s%s\n",
                r.actual_params, clients, overlap ? "on" : "off",
                worker_threads < 0 ? "default" : std::to_string(worker_threads).c_str(),
                compression.c_str(), median(r.round_ms), median(closed), median(r.period_ms),
                (std::to_string(int(peak_mb + 0.5)) + " MB").c_str(),
                (std::to_string(int(model_mb)) + " MB").c_str(),
                (std::to_string(int(target_mb)) + " MB").c_str(), median(r.round_mb_up),
                median(r.round_mb_down), peak_mb > target_mb ? "  (over the RSS target)" : "",
                r.finished ? "" : "  (did not finish)");
            std::fflush(stdout);
            runs.emplace_back(spec, r);
          }
        }
      }
    }
  }
  std::filesystem::remove_all(root);

  // Where the time went (the server's own record of each round, round_phases), and the
  // server's CPU time against what the bytes it moved must cost.
  const ByteCosts costs = measure_byte_costs();
  std::printf(
      "\nbyte costs, this run: AES-128-GCM %.3f ms/MB, loopback TCP send %.3f / receive %.3f "
      "ms/MB (CPU), one memory read pass %.3f ms/MB; the TLS channel send %.3f / receive %.3f "
      "ms/MB (CPU)\n",
      costs.aes_ms_per_mb, costs.send_ms_per_mb, costs.receive_ms_per_mb, costs.memory_ms_per_mb,
      costs.tls_send_ms_per_mb, costs.tls_receive_ms_per_mb);
  std::printf(
      "\nmedians over committed rounds, ms (offsets from the round's start: TRAIN written, "
      "first and last update; then durations)\n");
  std::printf(
      "| params | clients | overlap | workers | round, all in | TRAIN written | first update | "
      "last update | "
      "validate | aggregate | checkpoint | commit | server CPU | CPU floor | CPU / floor "
      "| system floor | round / system floor | TLS floor | round / TLS floor | server TLS floor "
      "| CPU / server TLS floor | clients' CPU | busy floor | round / busy floor |\n");
  std::printf(
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
      "---|---|\n");
  for (const auto& [spec, r] : runs) {
    if (r.phases.empty()) {
      std::printf("| %ld | %d | no phases recorded |\n", r.actual_params, spec.clients);
      continue;
    }
    using P = fedcore::store::RoundPhases;
    const double total = median_of(r.phases, [](const P& p) { return p.total_ms; });
    const double cpu =
        median_of(r.phases, [](const P& p) { return p.cpu_user_ms + p.cpu_system_ms; });
    const double mb_down = median(r.round_mb_down), mb_up = median(r.round_mb_up);
    const double server_floor = server_floor_ms(costs, mb_down, mb_up);
    const double system_floor = system_floor_ms(costs, mb_down, mb_up);
    const double tls_floor = tls_floor_ms(costs, mb_down, mb_up);
    const double server_tls_floor = server_tls_floor_ms(costs, mb_down, mb_up);
    // The clients' CPU is known only for the whole run (their threads' clocks): a mean.
    const double clients_cpu =
        r.round_ms.empty() ? 0 : r.clients_cpu_s * 1000 / double(r.round_ms.size());
    const double busy_floor = busy_floor_ms(cpu, clients_cpu);
    std::printf(
        "| %ld | %d | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | "
        "%.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | %.1f | %.2f |\n",
        r.actual_params, spec.clients, spec.overlap ? "on" : "off",
        spec.workers < 0 ? "default" : std::to_string(spec.workers).c_str(), total,
        median_of(r.phases, [](const P& p) { return p.train_written_ms.value_or(-1); }),
        median_of(r.phases, [](const P& p) { return p.first_update_ms.value_or(-1); }),
        median_of(r.phases, [](const P& p) { return p.last_update_ms.value_or(-1); }),
        median_of(r.phases, [](const P& p) { return p.validate_ms; }),
        median_of(r.phases, [](const P& p) { return p.aggregate_ms; }),
        median_of(r.phases, [](const P& p) { return p.checkpoint_ms; }),
        median_of(r.phases, [](const P& p) { return p.commit_ms; }), cpu, server_floor,
        cpu / server_floor, system_floor, total / system_floor, tls_floor, total / tls_floor,
        server_tls_floor, cpu / server_tls_floor, clients_cpu, busy_floor, total / busy_floor);
  }
  std::fflush(stdout);
}

std::string with_commas(std::uint64_t n) {
  auto digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<std::size_t>(i), ",");
  }
  return digits;
}

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

// The cost of secure aggregation next to plain FedAvg: for each client count, one run of
// plain FedAvg, one of SecAgg+ with key binding and (optionally) one without, back to
// back, so that all three see the same state of the machine; `repeats` times over.
// Prints two markdown tables: time, CPU, upload and memory; and what a client uploads,
// message by message.
struct SecureBenchOptions {
  long params = 1000000;
  std::vector<std::pair<int, int>> clients_and_rounds{{10, 5}, {32, 5}, {100, 5}};
  int client_threads = 2;
  bool unsigned_too = true;
};

void secure_bench(const std::string& server_bin, const SecureBenchOptions& o) {
  int max_clients = 0;
  for (const auto& [clients, rounds] : o.clients_and_rounds) {
    max_clients = std::max(max_clients, clients);
  }
  const auto root = bench_root();
  const Pki pki = make_pki((root / "pki").string(), max_clients);
  struct Row {
    int clients;
    Mode mode;
    RunResult result;
  };
  std::vector<Row> rows;
  for (const auto& [clients, rounds] : o.clients_and_rounds) {
    std::vector<Mode> modes{Mode::plain, Mode::secure_signed};
    if (o.unsigned_too) {
      modes.push_back(Mode::secure_unsigned);
    }
    for (Mode mode : modes) {
      std::fprintf(stderr, "%d clients, %s, %d rounds ...\n", clients, mode_name(mode), rounds);
      RunResult r = run_federation(server_bin, pki, root,
                                   {o.params, clients, rounds, mode, o.client_threads});
      std::fprintf(stderr,
                   "  %.1f s in all; median round %.0f ms; server CPU %.2f s, clients' CPU "
                   "%.2f s; %zu committed, %d failed rounds; %llu client-rounds completed, "
                   "%llu failures%s\n",
                   r.seconds, median(r.round_ms), r.server_cpu_s, r.clients_cpu_s,
                   r.round_ms.size(), r.failed_rounds,
                   static_cast<unsigned long long>(r.traffic.completed),
                   static_cast<unsigned long long>(r.traffic.failures),
                   r.finished ? "" : " (DID NOT FINISH)");
      rows.push_back({clients, mode, std::move(r)});
    }
  }
  std::filesystem::remove_all(root);

  auto plain_of = [&](int clients) -> const RunResult& {
    for (const auto& row : rows) {
      if (row.clients == clients && row.mode == Mode::plain) {
        return row.result;
      }
    }
    std::abort();
  };
  auto per_client_round = [](const RunResult& r, std::uint64_t bytes, int clients) {
    const auto n = std::max<std::size_t>(1, r.round_ms.size()) * std::size_t(clients);
    return double(bytes) / double(n);
  };
  std::printf("%s parameters (logreg), every client in every round; client threads: %d\n\n",
              with_commas(std::uint64_t(rows.empty() ? 0 : rows[0].result.actual_params)).c_str(),
              o.client_threads);
  std::printf(
      "| clients | k | variant | rounds | median round | secure / plain | server CPU / round | "
      "clients' CPU / round (all; per client) | upload / client / round | upload / plain "
      "update | server peak RSS |\n");
  std::printf("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& row : rows) {
    const RunResult& r = row.result;
    const RunResult& plain = plain_of(row.clients);
    const auto plan = fedcore::secagg::plan_round(std::uint32_t(row.clients), {});
    const double rounds = double(std::max<std::size_t>(1, r.round_ms.size()));
    const double upload = per_client_round(r, r.traffic.total(), row.clients);
    const double plain_upload = per_client_round(plain, plain.traffic.total(), row.clients);
    std::string status;
    if (!r.finished || r.failed_rounds > 0 ||
        r.traffic.completed != std::uint64_t(row.clients) * r.round_ms.size()) {
      status = " (" + std::to_string(r.round_ms.size()) + " committed, " +
               std::to_string(r.failed_rounds) + " failed, " + std::to_string(r.traffic.completed) +
               " client-rounds completed)";
    }
    std::printf(
        "| %d | %s | %s | %zu | %s ms | %s | %s s | %s s; %s ms | %s B | %s | %ld MiB |%s\n",
        row.clients, row.mode == Mode::plain || !plan ? "–" : std::to_string(plan->degree).c_str(),
        mode_name(row.mode), r.round_ms.size(),
        with_commas(std::uint64_t(median(r.round_ms) + 0.5)).c_str(),
        row.mode == Mode::plain
            ? "1"
            : format("%.2f", median(r.round_ms) / median(plain.round_ms)).c_str(),
        format("%.2f", r.server_cpu_s / rounds).c_str(),
        format("%.2f", r.clients_cpu_s / rounds).c_str(),
        format("%.0f", 1e3 * r.clients_cpu_s / rounds / row.clients).c_str(),
        with_commas(std::uint64_t(upload + 0.5)).c_str(),
        format("%.4f", upload / plain_upload).c_str(), r.peak_rss_kib / 1024, status.c_str());
  }
  std::printf(
      "\nUpload per client per round, by message (bytes, frame header + metadata + "
      "payload):\n\n");
  std::printf(
      "| clients | variant | update | keys | shares | masked | revealed | masked / plain update "
      "| (keys + shares + revealed) / k | server's count (bytes_up / accepted) |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& row : rows) {
    const RunResult& r = row.result;
    const RunResult& plain = plain_of(row.clients);
    const auto plan = fedcore::secagg::plan_round(std::uint32_t(row.clients), {});
    auto b = [&](std::uint64_t bytes) {
      return with_commas(std::uint64_t(per_client_round(r, bytes, row.clients) + 0.5));
    };
    const double plain_update = per_client_round(plain, plain.traffic.update, row.clients);
    const bool secure = row.mode != Mode::plain;
    const double small =
        per_client_round(r, r.traffic.keys + r.traffic.shares + r.traffic.revealed, row.clients);
    std::printf(
        "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", row.clients, mode_name(row.mode),
        secure ? "–" : b(r.traffic.update).c_str(), secure ? b(r.traffic.keys).c_str() : "–",
        secure ? b(r.traffic.shares).c_str() : "–", secure ? b(r.traffic.masked).c_str() : "–",
        secure ? b(r.traffic.revealed).c_str() : "–",
        secure ? format("%.6f", per_client_round(r, r.traffic.masked, row.clients) / plain_update)
                     .c_str()
               : "–",
        secure && plan ? with_commas(std::uint64_t(small / plan->degree + 0.5)).c_str() : "–",
        r.store_accepted > 0
            ? with_commas(std::uint64_t(r.store_bytes_up / r.store_accepted)).c_str()
            : "–");
  }
  std::printf(
      "\nWhere a round's time goes, as the clients see it (median over rounds, ms): from the "
      "first TRAIN received to the last client's keys sent, then to the last shares, the last "
      "masked input and the last revealed shares (plain: to the last update); the rest of "
      "the round is the server's (unmasking or averaging, commit):\n\n");
  std::printf(
      "| clients | variant | median round | TRAIN → keys | → shares | → masked | → revealed "
      "(plain: → update) | rest |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& row : rows) {
    const RunResult& r = row.result;
    const auto& t = r.traffic.spans_ms;
    const bool secure = row.mode != Mode::plain;
    const double covered = secure ? t[0] + t[1] + t[2] + t[3] : t[3];
    auto ms = [](double v) { return format("%.0f", v); };
    std::printf("| %d | %s | %s | %s | %s | %s | %s | %s |\n", row.clients, mode_name(row.mode),
                ms(median(r.round_ms)).c_str(), secure ? ms(t[0]).c_str() : "–",
                secure ? ms(t[1]).c_str() : "–", secure ? ms(t[2]).c_str() : "–", ms(t[3]).c_str(),
                ms(median(r.round_ms) - covered).c_str());
  }
  std::fflush(stdout);
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
struct TransferCost {
  double mb_per_s = 0;
  double sender_ms_per_mb = 0;  // CPU, user + system
  double receiver_ms_per_mb = 0;
};

TransferCost transfer_bench(int megabytes, int frames, bool tls, bool print) {
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
  std::filesystem::remove_all(root);
  const TransferCost cost{megabytes_moved / seconds, 1e3 * sender_cpu / megabytes_moved,
                          1e3 * receiver_cpu / megabytes_moved};
  if (!print) {
    return cost;
  }
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
  return cost;
}

ByteCosts measure_byte_costs() {
  ByteCosts c;
  c.aes_ms_per_mb = aes_gcm_ms_per_mb();
  const TransferCost tcp = transfer_bench(40, 6, false, false);
  c.send_ms_per_mb = tcp.sender_ms_per_mb;
  c.receive_ms_per_mb = tcp.receiver_ms_per_mb;
  c.memory_ms_per_mb = memory_read_ms_per_mb();
  // The cheapest of three: the VM's speed moves by ±20% from one second to the next, and a
  // floor that claims a target out of reach must not be one measured in a slow second.
  for (int repeat = 0; repeat < 3; ++repeat) {
    const TransferCost tls = transfer_bench(40, 6, true, false);
    const double sum = tls.sender_ms_per_mb + tls.receiver_ms_per_mb;
    if (repeat == 0 || sum < c.tls_send_ms_per_mb + c.tls_receive_ms_per_mb) {
      c.tls_send_ms_per_mb = tls.sender_ms_per_mb;
      c.tls_receive_ms_per_mb = tls.receiver_ms_per_mb;
    }
  }
  return c;
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
  fedcore::keep_large_buffers_warm();  // model-sized buffers: no page faults per round
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "transfer") {
    transfer_bench(argc > 2 ? std::atoi(argv[2]) : 40, argc > 3 ? std::atoi(argv[3]) : 26, true,
                   true);
    return 0;
  }
  if (mode == "transfer-tcp") {
    transfer_bench(argc > 2 ? std::atoi(argv[2]) : 40, argc > 3 ? std::atoi(argv[3]) : 26, false,
                   true);
    return 0;
  }
  if (mode == "streams") {
    streams_bench(argc > 2 ? std::atoi(argv[2]) : 40, argc > 3 ? std::atoi(argv[3]) : 11,
                  argc > 4 ? std::atoi(argv[4]) : 3);
    return 0;
  }
  if (mode == "rounds") {
    // rounds [PARAMS...] [--clients 2,8,32] [--rounds R] [--client-threads T]
    //        [--overlap on|off|both] [--max-inflight N] [--workers N,...]
    //        [--compression none,f16,int8,topk,int8+f16]
    std::vector<long> params;
    std::vector<int> clients;
    int rounds = 5;
    int client_threads = 1;
    std::vector<bool> overlaps{true};
    int max_inflight = 0;
    std::vector<int> workers{-1};
    std::vector<std::string> compressions{"none"};
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--compression" && i + 1 < argc) {
        compressions.clear();
        std::istringstream list(argv[++i]);
        for (std::string item; std::getline(list, item, ',');) {
          if (item != "none" && item != "f16" && item != "int8" && item != "topk" &&
              item != "int8+f16") {
            std::fprintf(stderr, "rounds: --compression takes none, f16, int8, topk, int8+f16\n");
            return 2;
          }
          compressions.push_back(item);
        }
      } else if (arg == "--clients" && i + 1 < argc) {
        std::istringstream list(argv[++i]);
        for (std::string item; std::getline(list, item, ',');) {
          clients.push_back(std::atoi(item.c_str()));
        }
      } else if (arg == "--rounds" && i + 1 < argc) {
        rounds = std::atoi(argv[++i]);
      } else if (arg == "--client-threads" && i + 1 < argc) {
        client_threads = std::atoi(argv[++i]);
      } else if (arg == "--max-inflight" && i + 1 < argc) {
        max_inflight = std::atoi(argv[++i]);
      } else if (arg == "--workers" && i + 1 < argc) {
        workers.clear();
        std::istringstream list(argv[++i]);
        for (std::string item; std::getline(list, item, ',');) {
          workers.push_back(std::atoi(item.c_str()));
        }
      } else if (arg == "--overlap" && i + 1 < argc) {
        const std::string which = argv[++i];
        overlaps = which == "off"    ? std::vector<bool>{false}
                   : which == "both" ? std::vector<bool>{false, true}
                                     : std::vector<bool>{true};
      } else {
        params.push_back(std::atol(arg.c_str()));
      }
    }
    if (params.empty()) {
      params = {100000, 1000000, 10000000};
    }
    if (clients.empty()) {
      clients = {2, 8, 32};
    }
    if (rounds < 1 || client_threads < 1 ||
        std::any_of(clients.begin(), clients.end(), [](int n) { return n < 1; }) ||
        std::any_of(params.begin(), params.end(), [](long n) { return n < 2; })) {
      std::fprintf(stderr, "rounds: need >= 1 round, >= 1 client, >= 2 parameters\n");
      return 2;
    }
    rounds_bench(fedcore::testing::server_binary(), params, clients, rounds, client_threads,
                 overlaps, max_inflight, workers, compressions);
    return 0;
  }
  if (mode == "secure") {
    // secure [--params P] [--clients 10,32,100:3] [--rounds R] [--client-threads T]
    //        [--no-unsigned]   (N:R runs R rounds at N clients)
    SecureBenchOptions options;
    std::string clients = "10,32,100";
    int rounds = 5;
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      const bool has_value = i + 1 < argc;
      if (arg == "--params" && has_value) {
        options.params = std::atol(argv[++i]);
      } else if (arg == "--clients" && has_value) {
        clients = argv[++i];
      } else if (arg == "--rounds" && has_value) {
        rounds = std::atoi(argv[++i]);
      } else if (arg == "--client-threads" && has_value) {
        options.client_threads = std::atoi(argv[++i]);
      } else if (arg == "--no-unsigned") {
        options.unsigned_too = false;
      } else {
        std::fprintf(stderr, "secure: unknown argument '%s'\n", arg.c_str());
        return 2;
      }
    }
    options.clients_and_rounds.clear();
    std::istringstream list(clients);
    for (std::string item; std::getline(list, item, ',');) {
      const auto colon = item.find(':');
      const int n = std::atoi(item.substr(0, colon).c_str());
      const int r = colon == std::string::npos ? rounds : std::atoi(item.substr(colon + 1).c_str());
      if (n < 3 || r < 1 || options.params < 2 || options.client_threads < 1) {
        std::fprintf(stderr, "secure: need >= 3 clients, >= 1 round, >= 2 parameters\n");
        return 2;
      }
      options.clients_and_rounds.emplace_back(n, r);
    }
    secure_bench(fedcore::testing::server_binary(), options);
    return 0;
  }
  std::fprintf(stderr,
               "usage: federation_bench rounds [PARAMS...] [--clients N,...] [--rounds R] "
               "[--client-threads T] [--overlap on|off|both] [--max-inflight N] [--workers N,...] "
               "[--compression none,f16,int8,topk,int8+f16] | secure "
               "[--params P] [--clients "
               "N[:R],...] [--rounds R] [--client-threads T] [--no-unsigned] | transfer [MB] "
               "[FRAMES] | transfer-tcp [MB] [FRAMES] | streams [MB] [FRAMES] [REPEATS]\n");
  return 2;
}
