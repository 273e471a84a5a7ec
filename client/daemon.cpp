#include "daemon.hpp"

#include <cmath>
#include <cstring>
#include <numeric>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "data/csv.hpp"
#include "data/fashion_mnist.hpp"
#include "data/partition.hpp"
#include "data/split.hpp"
#include "model/spec.hpp"
#include "model/trainer.hpp"
#include "net/outbox.hpp"
#include "protocol/messages.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

namespace fedcore::client {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using net::TlsStream;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
const char* const kSoftware = "fedcore-client 0.1.0";

std::string megabytes(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", double(bytes) / 1e6);
  return text;
}

std::string with_commas(std::uint64_t n) {
  auto digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<std::size_t>(i), ",");
  }
  return digits;
}

// What one round of local work produced, computed on the worker thread.
struct LocalResult {
  std::optional<error> failure;
  std::vector<float> params;
  protocol::UpdateReport report;
};

// The session's connection, whatever carries it: mutual TLS to the server, or a local
// socket inside fedcore-sim. The session code sees only this.
class Link {
 public:
  virtual ~Link() = default;
  virtual asio::awaitable<result<protocol::Frame>> read_frame() = 0;
  // Queued behind the link's one writer (net/outbox.hpp).
  virtual void send(protocol::MessageType type, std::string metadata,
                    net::SharedPayload payload = nullptr) = 0;
  virtual void close() noexcept = 0;
  virtual bool is_open() const noexcept = 0;
};

template <class Stream>
class StreamLink final : public Link {
 public:
  StreamLink(Stream stream, const net::ChannelOptions& options)
      : channel_(std::make_shared<net::FrameChannel<Stream>>(std::move(stream), options)),
        outbox_(channel_) {}
  asio::awaitable<result<protocol::Frame>> read_frame() override { return channel_->read_frame(); }
  void send(protocol::MessageType type, std::string metadata, net::SharedPayload payload) override {
    outbox_.send(type, std::move(metadata), std::move(payload));
  }
  void close() noexcept override { channel_->close(); }
  bool is_open() const noexcept override { return channel_->is_open(); }

 private:
  std::shared_ptr<net::FrameChannel<Stream>> channel_;
  net::Outbox<Stream> outbox_;
};

}  // namespace

result<data::TrainTest> load_local_data(const DataSource& source) {
  data::Dataset all;
  data::Dataset test_pool;
  bool has_test_pool = false;
  if (source.format == "csv") {
    auto table = data::load_csv(source.path, {.label_column = source.label_column});
    if (!table) {
      return table.error();
    }
    all = std::move(*table);
  } else if (source.format == "fashion-mnist") {
    auto fmnist =
        source.path.empty() ? data::load_fashion_mnist() : data::load_fashion_mnist(source.path);
    if (!fmnist) {
      return fmnist.error();
    }
    all = std::move(fmnist->train);
    test_pool = std::move(fmnist->test);
    has_test_pool = true;
  } else {
    return fail(errc::invalid_argument,
                "data format must be \"csv\" or \"fashion-mnist\", got \"" + source.format + "\"");
  }
  if (!source.partition.empty()) {
    auto spec = data::parse_partition_spec(source.partition);
    if (!spec) {
      return spec.error();
    }
    if (source.partition_clients == 0 || source.partition_index >= source.partition_clients ||
        source.partition_clients > all.size()) {
      return fail(errc::invalid_argument,
                  "partition index " + std::to_string(source.partition_index) + " of " +
                      std::to_string(source.partition_clients) + " clients is out of range");
    }
    auto parts = data::partition(*spec, all.labels, all.num_classes, source.partition_clients,
                                 source.partition_seed);
    all = all.subset(parts[source.partition_index]);
    if (has_test_pool) {
      // Each simulated site also gets its own slice of the public test set.
      auto test_parts =
          data::partition_iid(test_pool.labels, source.partition_clients, source.partition_seed);
      test_pool = test_pool.subset(test_parts[source.partition_index]);
    }
  }
  if (has_test_pool) {
    return data::TrainTest{std::move(all), std::move(test_pool)};
  }
  if (source.test_fraction <= 0) {
    return data::TrainTest{std::move(all), data::Dataset{}};
  }
  auto split = data::stratified_split(all, source.test_fraction, source.split_seed);
  return data::TrainTest{std::move(split.train), std::move(split.test)};
}

struct ClientDaemon::Impl {
  Impl(asio::io_context& io_context, ClientOptions o, data::TrainTest d, asio::ssl::context tls)
      : io(io_context),
        options(std::move(o)),
        data(std::move(d)),
        tls_context(std::move(tls)),
        backoff_timer(io_context),
        rng(options.seed) {}

  asio::io_context& io;
  ClientOptions options;
  data::TrainTest data;
  asio::ssl::context tls_context;
  asio::thread_pool worker{1};
  asio::steady_timer backoff_timer;
  Rng rng;
  bool stopping = false;
  std::shared_ptr<Link> channel;
  std::uint64_t rounds_trained = 0;
  std::uint64_t connections = 0;

  asio::awaitable<result<void>> session();
  asio::awaitable<result<std::shared_ptr<Link>>> connect_tls();
  asio::awaitable<void> heartbeats(std::shared_ptr<Link> ch, std::uint32_t seconds);
  LocalResult train_round(const protocol::TrainRequest& request, std::span<const float> global);
};

ClientDaemon::ClientDaemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClientDaemon::~ClientDaemon() {
  if (impl_) {
    impl_->worker.join();
  }
}

result<std::unique_ptr<ClientDaemon>> ClientDaemon::create(asio::io_context& io,
                                                           ClientOptions options) {
  auto data = load_local_data(options.data);
  if (!data) {
    return data.error();
  }
  return create(io, std::move(options), std::move(*data));
}

result<std::unique_ptr<ClientDaemon>> ClientDaemon::create(asio::io_context& io,
                                                           ClientOptions options,
                                                           data::TrainTest local) {
  if (local.train.size() == 0) {
    return fail(errc::invalid_argument, "the local data set has no training samples");
  }
  // In-process sessions have no TLS; their (unused) context needs no certificates.
  auto tls = [&]() -> result<asio::ssl::context> {
    if (options.connect_local) {
      return asio::ssl::context(asio::ssl::context::tls_client);
    }
    return tls::make_client_context(options.tls);
  }();
  if (!tls) {
    return tls.error();
  }
  auto impl = std::make_unique<Impl>(io, std::move(options), std::move(local), std::move(*tls));
  return std::unique_ptr<ClientDaemon>(new ClientDaemon(std::move(impl)));
}

asio::awaitable<void> ClientDaemon::run() {
  auto& s = *impl_;
  auto backoff = s.options.initial_backoff;
  while (!s.stopping) {
    auto ended = co_await s.session();
    if (s.stopping) {
      break;
    }
    if (ended) {
      backoff = s.options.initial_backoff;  // a session that got going resets the backoff
    }
    const double jitter = 0.5 + s.rng.uniform_double();
    const auto wait =
        std::chrono::milliseconds(static_cast<std::int64_t>(double(backoff.count()) * jitter));
    spdlog::warn("{}; reconnecting in {:.1f} s", ended ? "connection ended" : ended.error().message,
                 double(wait.count()) / 1000.0);
    s.backoff_timer.expires_after(wait);
    co_await s.backoff_timer.async_wait(kNoThrow);
    backoff = std::min(backoff * 2, s.options.max_backoff);
  }
}

asio::awaitable<result<void>> ClientDaemon::Impl::session() {
  if (options.connect_local) {
    auto stream = options.connect_local();
    if (!stream) {
      co_return stream.error();
    }
    channel = std::make_shared<StreamLink<net::LocalStream>>(std::move(*stream), options.channel);
  } else {
    auto connected = co_await connect_tls();
    if (!connected) {
      co_return connected.error();
    }
    channel = std::move(*connected);
  }
  ++connections;

  protocol::Hello hello;
  hello.samples = data.train.size();
  hello.test_samples = data.test.size();
  hello.input_shape = data.train.sample_shape;
  hello.num_classes = data.train.num_classes;
  hello.capabilities = {"train", "evaluate"};
  hello.software = kSoftware;
  channel->send(protocol::MessageType::hello, protocol::to_metadata(hello));
  auto first = co_await channel->read_frame();
  if (!first) {
    co_return first.error();
  }
  if (first->type == protocol::MessageType::error) {
    auto message = protocol::parse_error_message(first->metadata);
    co_return fail(
        errc::permission_denied,
        "server refused us: " + (message ? message->message : std::string("(unreadable error)")));
  }
  auto welcome = protocol::parse_welcome(first->metadata);
  if (first->type != protocol::MessageType::welcome || !welcome) {
    co_return fail(errc::invalid_argument, "server did not welcome us");
  }
  spdlog::info("connected to {}:{} as '{}'; {} training and {} test samples", options.host,
               options.port, welcome->client_id, with_commas(data.train.size()),
               with_commas(data.test.size()));
  asio::co_spawn(io, heartbeats(channel, welcome->heartbeat_seconds), asio::detached);

  while (!stopping) {
    auto frame = co_await channel->read_frame();
    if (!frame) {
      channel->close();
      co_return frame.error();
    }
    switch (frame->type) {
      case protocol::MessageType::heartbeat:
        break;
      case protocol::MessageType::goodbye:
        channel->close();
        co_return result<void>{};
      case protocol::MessageType::error: {
        auto message = protocol::parse_error_message(frame->metadata);
        spdlog::warn("server reported an error: {}",
                     message ? message->message : std::string("(unreadable)"));
        break;
      }
      case protocol::MessageType::train: {
        auto request = protocol::parse_train_request(frame->metadata);
        auto global = protocol::payload_floats(frame->payload);
        if (!request || !global) {
          spdlog::warn("ignoring a malformed train request: {}",
                       !request ? request.error().message : global.error().message);
          break;
        }
        // Training runs on the worker thread; heartbeats keep flowing meanwhile. It is a
        // coroutine spawned on the worker: a bare post() to the worker would resume this
        // coroutine through its associated executor, the io_context, and training would
        // block the heartbeats (sessions of slow trainers then died of the idle timeout).
        LocalResult local = co_await asio::co_spawn(
            worker,
            [&]() -> asio::awaitable<LocalResult> { co_return train_round(*request, *global); },
            asio::use_awaitable);
        if (local.failure) {
          spdlog::warn("round {}: not trained: {}", request->round, local.failure->message);
          channel->send(protocol::MessageType::error,
                        protocol::to_metadata(protocol::ErrorMessage{
                            std::string(errc_name(local.failure->code)), local.failure->message}));
          break;
        }
        if (options.before_update) {
          const TrainedRound trained{request->run_id, request->round, local.report.train_seconds};
          if (co_await options.before_update(trained) == UpdateAction::drop) {
            channel->close();
            co_return fail(errc::aborted,
                           "round " + std::to_string(request->round) + ": update dropped");
          }
        }
        auto payload = std::make_shared<const std::vector<float>>(std::move(local.params));
        const auto bytes = payload->size() * sizeof(float);
        channel->send(protocol::MessageType::update, protocol::to_metadata(local.report), payload);
        ++rounds_trained;
        spdlog::info("round {}: trained {} samples in {:.1f} s, loss {:.2f}, update sent ({})",
                     request->round, with_commas(local.report.samples), local.report.train_seconds,
                     local.report.loss, megabytes(bytes));
        break;
      }
      default:
        spdlog::warn("ignoring an unexpected {} message", protocol::message_type_name(frame->type));
    }
  }
  co_return result<void>{};
}

asio::awaitable<result<std::shared_ptr<Link>>> ClientDaemon::Impl::connect_tls() {
  // Connect with a deadline.
  tcp::resolver resolver(io);
  auto [resolve_error, endpoints] =
      co_await resolver.async_resolve(options.host, std::to_string(options.port), kNoThrow);
  if (resolve_error) {
    co_return fail(errc::unavailable,
                   "cannot resolve " + options.host + ": " + resolve_error.message());
  }
  TlsStream stream(io, tls_context);
  if (auto prepared = tls::prepare_client_stream(stream, options.tls.server_name); !prepared) {
    co_return prepared.error();
  }
  asio::steady_timer watchdog(io);
  bool timed_out = false;
  watchdog.expires_after(options.connect_timeout);
  watchdog.async_wait([&](const error_code& ec) {
    if (!ec) {
      timed_out = true;
      error_code ignored;
      stream.next_layer().close(ignored);
    }
  });
  auto [connect_error, endpoint] =
      co_await asio::async_connect(stream.next_layer(), endpoints, kNoThrow);
  error_code handshake_error;
  if (!connect_error) {
    std::tie(handshake_error) =
        co_await stream.async_handshake(asio::ssl::stream_base::client, kNoThrow);
  }
  watchdog.cancel();
  if (connect_error || handshake_error) {
    const auto& ec = connect_error ? connect_error : handshake_error;
    co_return fail(timed_out ? errc::deadline_exceeded : errc::unavailable,
                   "cannot connect to " + options.host + ":" + std::to_string(options.port) + ": " +
                       (timed_out ? std::string("timed out") : ec.message()));
  }
  co_return std::make_shared<StreamLink<TlsStream>>(std::move(stream), options.channel);
}

asio::awaitable<void> ClientDaemon::Impl::heartbeats(std::shared_ptr<Link> ch,
                                                     std::uint32_t seconds) {
  asio::steady_timer timer(io);
  while (!stopping && ch->is_open() && channel == ch) {
    timer.expires_after(std::chrono::seconds(seconds));
    co_await timer.async_wait(kNoThrow);
    if (!stopping && ch->is_open() && channel == ch) {
      channel->send(protocol::MessageType::heartbeat, "{}");
    }
  }
}

LocalResult ClientDaemon::Impl::train_round(const protocol::TrainRequest& request,
                                            std::span<const float> global) {
  LocalResult out;
  set_compute_threads(options.threads);
  auto spec = model::parse_model_spec(std::string_view(request.model_spec_json));
  if (spec) {
    spec = model::complete_spec(*spec, data.train.sample_shape, data.train.num_classes);
  }
  if (!spec) {
    out.failure = spec.error();
    return out;
  }
  auto built = model::build_model(*spec);
  if (!built) {
    out.failure = built.error();
    return out;
  }
  model::Model model = std::move(*built);
  if (model.layout().fingerprint_hex() != request.layout_fingerprint ||
      global.size() != model.param_count()) {
    out.failure =
        fail(errc::failed_precondition, "the server's model layout " + request.layout_fingerprint +
                                            " does not match the announced spec (" +
                                            model.layout().fingerprint_hex() + ")");
    return out;
  }
  std::copy(global.begin(), global.end(), model.params().begin());
  const auto loss = model::loss_for(*spec);
  if (request.evaluate && data.test.size() > 0) {
    const auto eval = model::evaluate(model, loss, data.test);
    out.report.evaluation = protocol::LocalEvaluation{eval.loss, eval.accuracy, eval.samples};
  }
  auto optimizer_config =
      model::optimizer_config_from_json(nlohmann::json::parse(request.settings.optimizer_json));
  if (!optimizer_config) {
    out.failure = optimizer_config.error();
    return out;
  }
  auto optimizer = model::make_optimizer(*optimizer_config, model.param_count());
  model::TrainConfig config;
  config.epochs = request.settings.epochs;
  config.batch_size = request.settings.batch_size;
  config.seed = request.settings.seed;
  config.proximal_mu = request.settings.proximal_mu;
  const auto report = model::train(model, loss, *optimizer, data.train, config,
                                   config.proximal_mu > 0 ? global : std::span<const float>());
  out.params.assign(model.params().begin(), model.params().end());
  out.report.run_id = request.run_id;
  out.report.round = request.round;
  out.report.nonce = request.nonce;
  out.report.layout_fingerprint = request.layout_fingerprint;
  out.report.samples = data.train.size();
  out.report.loss = std::isfinite(report.loss) ? report.loss : 1e9;
  out.report.accuracy = report.accuracy;
  out.report.train_seconds = report.seconds;
  return out;
}

void ClientDaemon::stop() {
  auto& s = *impl_;
  if (s.stopping) {
    return;
  }
  s.stopping = true;
  s.backoff_timer.cancel();
  if (s.channel && s.channel->is_open()) {
    s.channel->close();
  }
}

std::size_t ClientDaemon::train_samples() const noexcept {
  return impl_->data.train.size();
}
std::size_t ClientDaemon::test_samples() const noexcept {
  return impl_->data.test.size();
}
std::uint64_t ClientDaemon::rounds_trained() const noexcept {
  return impl_->rounds_trained;
}
std::uint64_t ClientDaemon::connections() const noexcept {
  return impl_->connections;
}

}  // namespace fedcore::client
