#include "client/daemon.hpp"

#include <csignal>
#include <filesystem>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "client/audit_log.hpp"
#include "client/backoff.hpp"
#include "client/feature_scaling.hpp"
#include "client/local_evaluator.hpp"
#include "client/server_identity.hpp"
#include "client/site_batch_norm.hpp"
#include "shared/net/link.hpp"
#include "shared/net/listener.hpp"
#include "shared/net/watchdog.hpp"

namespace fedcore::client {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using net::TlsStream;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
const char* const kSoftware = "fedcore-client 0.1.0";

}  // namespace

struct ClientDaemon::Impl {
  Impl(asio::io_context& io_context, ClientOptions o, SiteData d,
       std::optional<asio::ssl::context> tls, std::uint64_t jitter_seed)
      : io(io_context),
        options(std::move(o)),
        data(std::move(d)),
        tls_context(std::move(tls)),
        sleeper(options.sleeper ? options.sleeper
                                : std::make_shared<net::SteadySleeper>(io_context)),
        backoff(options.initial_backoff, options.max_backoff, jitter_seed),
        clock(options.clock ? options.clock : std::make_shared<SystemClock>()),
        policy(options.policy) {}

  asio::io_context& io;
  ClientOptions options;
  SiteData data;
  // None for in-process sessions: an SSL_CTX costs memory and start-up time that 100,000
  // simulated sites would pay for nothing.
  std::optional<asio::ssl::context> tls_context;
  // The pool training runs on: options.compute, or a one-thread pool of the daemon's own.
  std::shared_ptr<asio::thread_pool> worker =
      options.compute ? options.compute : std::make_shared<asio::thread_pool>(1);
  std::shared_ptr<net::Sleeper> sleeper;
  Backoff backoff;
  bool stopping = false;
  std::unique_ptr<ClientSession> session;  // the current one, while connected
  std::uint64_t rounds_trained = 0;
  std::uint64_t connections = 0;
  std::shared_ptr<const Clock> clock;
  SitePolicyGate policy;
  std::unique_ptr<AuditLog> audit;   // when options.audit_log names a file
  SecureIdentity identity;           // empty for in-process sessions (no PKI)
  RecordDpLedger dp_ledger{0};       // sized to the local records in create()
  ErrorFeedback error_feedback;      // top-k's residual, across sessions
  ControlVariates control_variates;  // SCAFFOLD's c_i, across sessions
  SiteBatchNorm site_batch_norm;     // FedBN's BatchNorm of this site, across sessions

  // Keeps the site's FedBN values; a file that cannot be written costs the next restart
  // its values, not this round.
  void keep_site_values(std::int64_t run_id, std::vector<float> values) {
    if (auto kept = site_batch_norm.keep(run_id, std::move(values)); !kept) {
      spdlog::warn("run {}: the site's BatchNorm values are kept in memory only: {}", run_id,
                   kept.error().message);
    }
  }

  // How one connection went: how it ended, and whether it was a healthy session
  // (client/backoff.hpp) that resets the backoff.
  struct Served {
    result<void> ended;
    bool healthy = false;
  };
  asio::awaitable<Served> serve_one_connection();
  asio::awaitable<result<std::shared_ptr<net::Link>>> connect();
  asio::awaitable<result<std::shared_ptr<net::Link>>> connect_tls();
  result<void> check_server(TlsStream& stream);
  protocol::Hello hello() const;
  SessionHooks hooks();
};

ClientDaemon::ClientDaemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClientDaemon::~ClientDaemon() {
  if (impl_) {
    if (!impl_->options.compute) {
      impl_->worker->join();  // a shared pool is its owner's to join
    }
  }
}

result<std::unique_ptr<ClientDaemon>> ClientDaemon::create(asio::io_context& io,
                                                           ClientOptions options) {
  if (options.external) {
    // The site's own code holds the data: the daemon knows only its shape, for HELLO.
    const auto shape = options.external->shape();
    return create(io, std::move(options), SiteData(shape, [] {
                    return data::TrainTest{}; /* never loaded */
                  }));
  }
  auto data = load_local_data(options.data);
  if (!data) {
    return data.error();
  }
  return create(io, std::move(options), SiteData(std::move(*data)));
}

result<std::unique_ptr<ClientDaemon>> ClientDaemon::create(asio::io_context& io,
                                                           ClientOptions options, SiteData local) {
  if (local.shape().train_samples == 0) {
    return fail(errc::invalid_argument, "the local data set has no training samples");
  }
  // In-process sessions have no TLS, and no context.
  auto tls = [&]() -> result<std::optional<asio::ssl::context>> {
    if (options.connect_local) {
      return std::nullopt;
    }
    auto made = tls::make_client_context(options.tls);
    if (!made) {
      return made.error();
    }
    return std::optional<asio::ssl::context>(std::move(*made));
  }();
  if (!tls) {
    return tls.error();
  }
  // Secure aggregation signs this site's keys with its TLS key and checks its neighbours'
  // against the federation CA (shared/secagg/key_binding.hpp).
  SecureIdentity identity;
  if (!options.connect_local) {
    auto signer = secagg::Signer::from_files(options.tls.key_file, options.tls.cert_file);
    if (!signer) {
      return signer.error();
    }
    auto trust = secagg::TrustAnchor::from_file(options.tls.ca_file);
    if (!trust) {
      return trust.error();
    }
    identity = {std::move(*signer), std::move(*trust)};
  }
  // The jitter seed is the site's own unless injected: its certificate names it (in-process
  // sessions have none and rely on the OS randomness alone).
  const std::uint64_t seed =
      options.seed ? *options.seed
                   : jitter_seed(identity.signer ? identity.signer->certificate_pem() : "");
  auto impl =
      std::make_unique<Impl>(io, std::move(options), std::move(local), std::move(*tls), seed);
  impl->identity = std::move(identity);
  impl->dp_ledger = RecordDpLedger(impl->data.shape().train_samples);
  if (!impl->options.audit_log.empty()) {
    auto audit = AuditLog::open(impl->options.audit_log, *impl->clock);
    if (!audit) {
      return audit.error();
    }
    impl->audit = std::move(*audit);
  }
  if (!impl->options.site_state.empty()) {
    const std::filesystem::path dir(impl->options.site_state);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return fail(errc::io_error,
                  "site_state: cannot create '" + dir.string() + "': " + ec.message());
    }
    if (auto opened = impl->site_batch_norm.persist_to((dir / "site-batch-norm.fcp").string());
        !opened) {
      return opened.error();
    }
    if (auto opened = impl->dp_ledger.persist_to((dir / "dp-ledger.json").string()); !opened) {
      return opened.error();
    }
  }
  return std::unique_ptr<ClientDaemon>(new ClientDaemon(std::move(impl)));
}

asio::awaitable<void> ClientDaemon::run() {
  auto& s = *impl_;
  while (!s.stopping) {
    auto served = co_await s.serve_one_connection();
    if (s.stopping) {
      break;
    }
    // Only a healthy session starts the backoff over, however it ended: a lost link after
    // hours of rounds is the next outage's first failure, not its sixth, while a server
    // that accepts and drops us within the minute keeps seeing longer waits.
    if (served.healthy) {
      s.backoff.reset();
    }
    const auto wait = s.backoff.next();
    spdlog::warn("{}; reconnecting in {:.1f} s",
                 served.ended ? "connection ended" : served.ended.error().message,
                 double(wait.count()) / 1000.0);
    const bool slept = co_await s.sleeper->sleep_for(wait);
    if (!slept) {
      break;  // stop() cancelled the wait
    }
  }
}

asio::awaitable<ClientDaemon::Impl::Served> ClientDaemon::Impl::serve_one_connection() {
  auto link = co_await connect();
  if (!link) {
    co_return Served{link.error()};
  }
  if (stopping) {
    // stop() came while we were connecting: it found no session to stop, so none may start
    // (it would run on, heartbeating, and keep the io_context from ever running dry).
    (*link)->close();
    co_return Served{fail(errc::unavailable, "stopped while connecting")};
  }
  ++connections;
  const auto connected_at = clock->steady();
  session = std::make_unique<ClientSession>(io, std::move(*link), *sleeper, hooks(),
                                            options.host + ":" + std::to_string(options.port));
  // Awaited into a variable of its own: GCC destroys a co_await's result twice when it
  // initialises an aggregate directly.
  auto ended = co_await session->run(hello());
  Served served{std::move(ended)};
  const bool welcomed = !session->identity().empty();  // set by WELCOME only
  const auto lasted =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock->steady() - connected_at);
  served.healthy = is_healthy_session(welcomed, lasted, options.healthy_session);
  rounds_trained += session->rounds_trained();
  session.reset();
  co_return served;
}

protocol::Hello ClientDaemon::Impl::hello() const {
  protocol::Hello h;
  const auto& shape = data.shape();
  h.samples = shape.train_samples;
  h.test_samples = shape.test_samples;
  h.input_shape = shape.sample_shape;
  h.num_classes = shape.num_classes;
  h.capabilities = {"train", "evaluate"};
  h.software = kSoftware;
  return h;
}

SessionHooks ClientDaemon::Impl::hooks() {
  SessionHooks h;
  h.keep_receive_buffer = options.keep_receive_buffer;
  // Training runs on the worker thread; heartbeats keep flowing meanwhile. It is a
  // coroutine spawned on the worker: a bare post() to the worker would resume the session
  // through its associated executor, the io_context, and training would block the
  // heartbeats (sessions of slow trainers then died of the idle timeout).
  h.train = [this](const protocol::TrainRequest& request, std::span<const float> global,
                   std::span<const float> correction) -> asio::awaitable<LocalResult> {
    co_return co_await asio::co_spawn(
        *worker,
        [&]() -> asio::awaitable<LocalResult> {
          if (options.external) {
            if (!correction.empty()) {
              LocalResult refused;
              refused.failure = fail(errc::failed_precondition,
                                     "this site trains with its own code, which does not apply "
                                     "SCAFFOLD's control-variate correction");
              co_return refused;
            }
            if (!request.site_batch_norm) {
              co_return train_externally(*options.external, request, global);
            }
            // FedBN for the site's own code: it trains from its own normalisation values and
            // the update carries the global model's in their place (site_batch_norm.hpp).
            auto ranges = external_site_ranges(request.model_spec);
            if (!ranges) {
              LocalResult refused;
              refused.failure = ranges.error();
              co_return refused;
            }
            const auto start =
                with_site_values(global, *ranges, site_batch_norm.of(request.run_id));
            auto local = train_externally(*options.external, request, start);
            if (!local.failure && local.params.size() == global.size()) {
              keep_site_values(request.run_id, take_site_values(global, local.params, *ranges));
            }
            co_return local;
          }
          const auto site =
              request.site_batch_norm ? site_batch_norm.of(request.run_id) : std::vector<float>();
          auto local = train_locally(request, global, *data.samples(), options.threads, {},
                                     correction, site);
          if (request.site_batch_norm && !local.failure) {
            keep_site_values(request.run_id, std::move(local.site_values));
          }
          if (options.after_training && !local.failure) {
            options.after_training(request, global, local);
          }
          co_return local;
        },
        asio::use_awaitable);
  };
  // Evaluations run on the same worker: one model at a time, heartbeats meanwhile.
  h.evaluate =
      [this](const protocol::EvaluateRequest& request,
             std::span<const float> params) -> asio::awaitable<result<protocol::LocalEvaluation>> {
    co_return co_await asio::co_spawn(
        *worker,
        [&]() -> asio::awaitable<result<protocol::LocalEvaluation>> {
          if (options.external) {
            if (!request.site_batch_norm) {
              co_return evaluate_externally(*options.external, request, params);
            }
            auto ranges = external_site_ranges(request.model_spec);
            if (!ranges) {
              co_return ranges.error();
            }
            co_return evaluate_externally(
                *options.external, request,
                with_site_values(params, *ranges, site_batch_norm.of(request.run_id)));
          }
          const auto site =
              request.site_batch_norm ? site_batch_norm.of(request.run_id) : std::vector<float>();
          co_return evaluate_locally(request, params, *data.samples(), options.threads, site);
        },
        asio::use_awaitable);
  };
  h.admit_evaluation = [this](const protocol::EvaluateRequest& request,
                              std::size_t parameter_count) {
    return policy.admit_evaluation(request, parameter_count, clock->steady());
  };
  h.before_update = options.before_update;
  h.admit = [this](const protocol::TrainRequest& request, std::size_t parameter_count) {
    return policy.admit(request, parameter_count, clock->steady());
  };
  h.audit = audit.get();
  h.secure = identity;
  h.dp_ledger = &dp_ledger;
  h.error_feedback = &error_feedback;
  h.control_variates = &control_variates;
  // Feature statistics for the run's federated scale (client/feature_scaling.hpp), unless
  // the site's policy asks every run for protection its statistics would bypass.
  if (shares_feature_statistics(options.policy) && !options.external) {
    h.feature_stats = [this](const protocol::FeatureStatsRequest& request) {
      return feature_stats_report(request, data.samples()->train);
    };
  }
  return h;
}

asio::awaitable<result<std::shared_ptr<net::Link>>> ClientDaemon::Impl::connect() {
  if (options.connect_local) {
    auto link = options.connect_local();
    if (!link) {
      co_return link.error();
    }
    co_return std::shared_ptr<net::Link>(std::move(*link));
  }
  co_return co_await connect_tls();
}

asio::awaitable<result<std::shared_ptr<net::Link>>> ClientDaemon::Impl::connect_tls() {
  // Connect with a deadline.
  tcp::resolver resolver(io);
  auto [resolve_error, endpoints] =
      co_await resolver.async_resolve(options.host, std::to_string(options.port), kNoThrow);
  if (resolve_error) {
    co_return fail(errc::unavailable,
                   "cannot resolve " + options.host + ": " + resolve_error.message());
  }
  TlsStream stream(io, *tls_context);
  if (auto prepared = tls::prepare_client_stream(stream, options.tls.server_name); !prepared) {
    co_return prepared.error();
  }
  // One deadline over connect and handshake; see shared/net/watchdog.hpp for why not a bare
  // timer (a late expiry must not reach this frame or close a stream that got through).
  net::Watchdog watchdog(io.get_executor(), options.connect_timeout, [&stream] {
    error_code ignored;
    stream.next_layer().close(ignored);
  });
  auto [connect_error, endpoint] =
      co_await asio::async_connect(stream.next_layer(), endpoints, kNoThrow);
  error_code handshake_error;
  if (!connect_error) {
    net::set_no_delay(stream.next_layer());
    std::tie(handshake_error) =
        co_await stream.async_handshake(asio::ssl::stream_base::client, kNoThrow);
  }
  watchdog.disarm();
  const bool timed_out = watchdog.fired();
  if (connect_error || handshake_error) {
    const auto& ec = connect_error ? connect_error : handshake_error;
    co_return fail(timed_out ? errc::deadline_exceeded : errc::unavailable,
                   "cannot connect to " + options.host + ":" + std::to_string(options.port) + ": " +
                       (timed_out ? std::string("timed out") : ec.message()));
  }
  if (auto accepted = check_server(stream); !accepted) {
    error_code ignored;
    stream.next_layer().close(ignored);
    co_return accepted.error();
  }
  co_return std::shared_ptr<net::Link>(
      std::make_shared<net::StreamLink<TlsStream>>(std::move(stream), options.channel));
}

// The site policy's pin on the server (client/site_policy.hpp), on top of the CA and the
// host name the TLS context has already checked.
result<void> ClientDaemon::Impl::check_server(TlsStream& stream) {
  const auto& accepted = options.policy.server;
  if (accepted.sha256.empty() && accepted.common_name.empty()) {
    return {};
  }
  const std::string server = options.host + ":" + std::to_string(options.port);
  auto identity = read_server_identity(stream.native_handle());
  std::optional<PolicyRefusal> refused;
  if (!identity) {
    refused = PolicyRefusal{
        accepted.sha256.empty() ? RefusalReason::server_name : RefusalReason::server_fingerprint,
        "the server certificate cannot be read: " + identity.error().message};
  } else {
    refused = policy.check_server(*identity);
  }
  if (!refused) {
    return {};
  }
  spdlog::warn("refusing server {}: site policy: {}", server, refused->words);
  if (audit) {
    if (auto written = audit->server_refused(server, *refused); !written) {
      spdlog::error("site audit log: {}", written.error().message);
    }
  }
  return fail(errc::permission_denied,
              "server " + server + " refused by the site policy: " + refused->words);
}

void ClientDaemon::stop() {
  auto& s = *impl_;
  if (s.stopping) {
    return;
  }
  s.stopping = true;
  s.sleeper->cancel_all();
  if (s.session) {
    s.session->stop();
  }
}

std::size_t ClientDaemon::train_samples() const noexcept {
  return impl_->data.shape().train_samples;
}
std::size_t ClientDaemon::test_samples() const noexcept {
  return impl_->data.shape().test_samples;
}
std::uint64_t ClientDaemon::rounds_trained() const noexcept {
  return impl_->rounds_trained + (impl_->session ? impl_->session->rounds_trained() : 0);
}
std::uint64_t ClientDaemon::connections() const noexcept {
  return impl_->connections;
}

void run_until_signalled(asio::io_context& io, ClientDaemon& daemon) {
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (!ec) {
      spdlog::info("signal {}: stopping", signal);
      daemon.stop();
    }
  });
  asio::co_spawn(io, daemon.run(), [&](std::exception_ptr) { signals.cancel(); });
  io.run();
}

}  // namespace fedcore::client
