#include "collective/net_transport.hpp"

#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "net/frame_channel.hpp"
#include "tls/context.hpp"
#include "util/assert.hpp"

namespace fedcore::collective {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using protocol::MessageType;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
// Readers wait between operations for as long as the job lives; operation deadlines
// are enforced by recv and wait_sends, not by the channel's idle timer.
constexpr std::chrono::milliseconds kReaderIdle = std::chrono::hours(24 * 365);

std::string encode_envelope(const Envelope& e) {
  nlohmann::json j = {{"job", e.job},      {"seq", e.seq},     {"op", static_cast<int>(e.op)},
                      {"tag", e.tag},      {"bytes", e.bytes}, {"segment", e.segment},
                      {"length", e.length}};
  return j.dump();
}

result<Envelope> decode_envelope(const std::string& metadata) {
  auto j = nlohmann::json::parse(metadata, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::data_loss, "collective metadata is not JSON");
  try {
    Envelope e;
    e.job = j.at("job").get<std::string>();
    e.seq = j.at("seq").get<std::uint64_t>();
    e.op = static_cast<OpType>(j.at("op").get<int>());
    e.tag = j.at("tag").get<std::uint32_t>();
    e.bytes = j.at("bytes").get<std::uint64_t>();
    e.segment = j.at("segment").get<std::uint32_t>();
    e.length = j.at("length").get<std::uint64_t>();
    return e;
  } catch (const nlohmann::json::exception& ex) {
    return fail(errc::data_loss, std::string("collective metadata: ") + ex.what());
  }
}

std::string refusal_metadata(const std::string& message) {
  return nlohmann::json{{"message", message}}.dump();
}

// The rank a dialer claims in its hello, if it belongs here (job, size, a higher rank).
result<int> check_hello(const std::string& metadata, const NetOptions& options) {
  auto j = nlohmann::json::parse(metadata, nullptr, false);
  if (!j.is_object() || !j.contains("job") || !j.contains("rank") || !j.contains("size") ||
      !j["job"].is_string() || !j["rank"].is_number_integer() || !j["size"].is_number_integer()) {
    return fail(errc::invalid_argument, "malformed hello");
  }
  if (j["job"].get<std::string>() != options.job) {
    return fail(errc::permission_denied,
                "wrong job '" + j["job"].get<std::string>() + "', this is '" + options.job + "'");
  }
  if (j["size"].get<int>() != options.size) {
    return fail(errc::permission_denied,
                "wrong group size " + std::to_string(j["size"].get<int>()));
  }
  const int peer = j["rank"].get<int>();
  if (peer <= options.rank || peer >= options.size) {
    return fail(errc::permission_denied, "unexpected rank " + std::to_string(peer));
  }
  return peer;
}

template <class Stream>
tcp::socket& socket_of(Stream& s) {
  if constexpr (std::is_same_v<Stream, net::TlsStream>) {
    return s.next_layer();
  } else {
    return s;
  }
}

template <class Stream>
class NetTransport final : public Transport {
 public:
  NetTransport(const NetOptions& options, const TlsContexts* tls) : options_(options) {
    if (tls)
      tls_ = *tls;
    for (int i = 0; i < options.size; ++i)
      links_.push_back(std::make_unique<Link>());
  }

  ~NetTransport() override {
    close_all();
    // Let every coroutine see its closed channel and finish while the links exist.
    io_.restart();
    while (io_.poll() > 0) {
    }
  }

  int rank() const noexcept override { return options_.rank; }
  int size() const noexcept override { return options_.size; }
  const char* name() const noexcept override { return tls_.server ? "tls" : "tcp"; }

  result<void> connect(Rendezvous& rendezvous);

  void post_send(int peer, const Envelope& envelope, std::span<const std::byte> payload) override {
    FEDCORE_ASSERT(peer >= 0 && peer < size() && peer != rank(), "bad peer");
    FEDCORE_ASSERT(envelope.length == payload.size(), "envelope length differs from payload");
    Link& link = *links_[peer];
    if (link.failed) {
      if (!send_error_)
        send_error_ = peer_error(peer, *link.failed);
      return;
    }
    link.outbox.push_back({encode_envelope(envelope), payload});
    ++pending_sends_;
    if (!link.writing) {
      link.writing = true;
      asio::co_spawn(io_, write_loop(peer), asio::detached);
    }
  }

  result<void> wait_sends(Clock::time_point deadline) override {
    if (auto f = aborted())
      return *f;
    const bool done = run_until([&] { return pending_sends_ == 0 || send_error_; }, deadline);
    if (auto f = aborted())
      return *f;
    if (send_error_)
      return *send_error_;
    if (!done) {
      return fail(
          errc::deadline_exceeded,
          "timed out sending to peers (" + std::to_string(pending_sends_) + " messages pending)");
    }
    return {};
  }

  result<std::span<const std::byte>> recv(int peer, const Envelope& expected,
                                          Clock::time_point deadline) override {
    FEDCORE_ASSERT(peer >= 0 && peer < size() && peer != rank(), "bad peer");
    if (auto f = aborted())
      return *f;
    Link& link = *links_[peer];
    const bool done =
        run_until([&] { return !link.inbox.empty() || link.failed || send_error_; }, deadline);
    if (auto f = aborted())
      return *f;
    if (!link.inbox.empty()) {
      link.spare = std::move(link.current.payload);
      link.current = std::move(link.inbox.front());
      link.inbox.pop_front();
      if (auto ok = check_envelope(expected, link.current.envelope, peer); !ok)
        return ok.error();
      return std::span<const std::byte>(link.current.payload);
    }
    if (link.failed)
      return peer_error(peer, *link.failed);
    if (send_error_)
      return *send_error_;
    FEDCORE_ASSERT(!done, "recv finished without a message or an error");
    return fail(errc::deadline_exceeded, "timed out waiting for rank " + std::to_string(peer) +
                                             " (" + to_string(expected) + ")");
  }

  result<std::optional<int>> wait_any(std::span<const int> peers,
                                      Clock::time_point deadline) override {
    FEDCORE_ASSERT(!peers.empty(), "wait_any needs peers");
    for (int peer : peers)
      FEDCORE_ASSERT(peer >= 0 && peer < size() && peer != rank(), "bad peer");
    if (auto f = aborted())
      return *f;
    auto pick = [&]() -> std::optional<int> {
      std::optional<int> ready, gone;
      for (int peer : peers) {
        const Link& link = *links_[peer];
        if (!link.inbox.empty()) {
          if (!ready || link.inbox.front().arrival < links_[*ready]->inbox.front().arrival)
            ready = peer;
        } else if (link.failed && !gone) {
          gone = peer;
        }
      }
      return ready ? ready : gone;
    };
    run_until([&] { return pick().has_value() || send_error_.has_value(); }, deadline);
    if (auto f = aborted())
      return *f;
    if (auto peer = pick())
      return peer;
    if (send_error_)
      return *send_error_;
    return std::optional<int>();
  }

  void abort(const error& why) noexcept override {
    {
      std::lock_guard lock(failure_mutex_);
      if (!failure_)
        failure_ = fail(errc::aborted, why.message);
    }
    // Inside run_until, only the io_context's thread may touch the channels; otherwise
    // nobody is using them and they can be closed at once. (A foreign thread that aborts
    // just as the owner enters run_until races with it; the owner's next check of
    // aborted() then stops it. Only a watchdog thread would abort from outside.)
    if (!running_.load()) {
      close_all();
    } else {
      asio::post(io_, [this] { close_all(); });
    }
  }

  std::uint64_t bytes_sent() const noexcept override { return sent_; }
  std::uint64_t bytes_received() const noexcept override { return received_; }

 private:
  struct Incoming {
    Envelope envelope;
    std::vector<std::byte> payload;
    std::uint64_t arrival = 0;  // frames read so far on all links, for wait_any
  };
  struct Outgoing {
    std::string metadata;
    std::span<const std::byte> payload;
  };
  struct Link {
    std::optional<net::FrameChannel<Stream>> channel;
    std::deque<Incoming> inbox;
    std::deque<Outgoing> outbox;
    bool writing = false;
    std::optional<error> failed;
    Incoming current;
    // The payload of the message before `current`, which the next read receives into:
    // a ring's chunks arrive one after another at the same sizes, so they reuse warm memory.
    std::vector<std::byte> spare;
  };

  static error peer_error(int peer, const error& e) {
    return fail(errc::unavailable,
                "link to rank " + std::to_string(peer) + " failed: " + e.to_string());
  }

  std::optional<error> aborted() {
    std::lock_guard lock(failure_mutex_);
    return failure_;
  }

  void close_all() noexcept {
    for (auto& link : links_) {
      if (link->channel)
        link->channel->close();
    }
  }

  // Runs the io_context on this thread until `done()` or the deadline. Returns done().
  template <class Pred>
  bool run_until(Pred done, Clock::time_point deadline) {
    running_.store(true);
    struct Reset {
      std::atomic<bool>& flag;
      ~Reset() { flag.store(false); }
    } reset{running_};
    for (;;) {
      if (done())
        return true;
      if (aborted())
        return false;
      if (Clock::now() >= deadline)
        return false;
      if (io_.stopped())
        io_.restart();
      if (io_.run_one_until(deadline) == 0 && io_.stopped() && Clock::now() < deadline) {
        // Nothing left that could make progress (every link is down).
        return done();
      }
    }
  }

  net::ChannelOptions channel_options() const {
    net::ChannelOptions o;
    o.limits = options_.limits;
    o.idle_timeout = options_.connect_timeout;
    o.transfer_timeout = options_.connect_timeout;
    return o;
  }

  Stream make_stream(bool dialing) {
    if constexpr (std::is_same_v<Stream, net::TlsStream>) {
      return Stream(io_, dialing ? *tls_.client : *tls_.server);
    } else {
      (void)dialing;
      return Stream(io_);
    }
  }

  asio::awaitable<void> read_loop(int peer) {
    Link& link = *links_[peer];
    for (;;) {
      auto frame = co_await link.channel->read_frame(std::exchange(link.spare, {}));
      if (!frame) {
        link.failed = frame.error();
        co_return;
      }
      auto envelope = decode_envelope(frame->metadata);
      if (envelope && envelope->length != frame->payload.size()) {
        envelope = fail(errc::data_loss, "payload length differs from the envelope's");
      }
      if (!envelope) {
        link.failed = envelope.error();
        link.channel->close();
        co_return;
      }
      received_ += frame->payload.size() + protocol::kFrameHeaderSize + frame->metadata.size();
      link.inbox.push_back({std::move(*envelope), std::move(frame->payload), ++arrivals_});
    }
  }

  asio::awaitable<void> write_loop(int peer) {
    Link& link = *links_[peer];
    while (!link.outbox.empty()) {
      if (!link.channel->is_open()) {
        // Closed (aborted, or the transport is being destroyed): the posted buffers may
        // belong to a caller that has already returned, so they are not touched again.
        if (!link.failed)
          link.failed = fail(errc::aborted, "link closed with sends pending");
        pending_sends_ -= link.outbox.size();
        link.outbox.clear();
        break;
      }
      const Outgoing& out = link.outbox.front();
      auto written =
          co_await link.channel->write_frame(MessageType::update, out.metadata, out.payload);
      if (!written) {
        link.failed = written.error();
        if (!send_error_)
          send_error_ = peer_error(peer, written.error());
        pending_sends_ -= link.outbox.size();
        link.outbox.clear();
        break;
      }
      sent_ += out.payload.size() + protocol::kFrameHeaderSize + out.metadata.size();
      link.outbox.pop_front();
      --pending_sends_;
    }
    link.writing = false;
  }

  std::string hello() const {
    return nlohmann::json{{"job", options_.job}, {"rank", options_.rank}, {"size", options_.size}}
        .dump();
  }

  asio::awaitable<void> dial(int peer, tcp::endpoint endpoint) {
    Stream stream = make_stream(true);
    auto [ec] = co_await socket_of(stream).async_connect(endpoint, kNoThrow);
    if (ec) {
      setup_error_ =
          fail(errc::unavailable, "connecting to rank " + std::to_string(peer) + " at " +
                                      endpoint.address().to_string() + ":" +
                                      std::to_string(endpoint.port()) + ": " + ec.message());
      co_return;
    }
    socket_of(stream).set_option(tcp::no_delay(true), ec);
    if constexpr (std::is_same_v<Stream, net::TlsStream>) {
      if (auto prepared = tls::prepare_client_stream(stream, tls_.server_name); !prepared) {
        setup_error_ = prepared.error();
        co_return;
      }
      auto [hs] = co_await stream.async_handshake(asio::ssl::stream_base::client, kNoThrow);
      if (hs) {
        setup_error_ = fail(errc::unauthenticated, "TLS handshake with rank " +
                                                       std::to_string(peer) + ": " + hs.message());
        co_return;
      }
    }
    net::FrameChannel<Stream> channel(std::move(stream), channel_options());
    if (auto w = co_await channel.write_frame(MessageType::hello, hello()); !w) {
      setup_error_ = peer_error(peer, w.error());
      co_return;
    }
    auto answer = co_await channel.read_frame();
    if (!answer) {
      setup_error_ = peer_error(peer, answer.error());
      co_return;
    }
    if (answer->type != MessageType::welcome) {
      setup_error_ = fail(errc::permission_denied, "rank " + std::to_string(peer) +
                                                       " refused this rank: " + answer->metadata);
      co_return;
    }
    links_[peer]->channel.emplace(std::move(channel));
    --links_missing_;
  }

  asio::awaitable<void> greet(tcp::socket socket) {
    boost::system::error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    Stream stream = [&] {
      if constexpr (std::is_same_v<Stream, net::TlsStream>) {
        return Stream(std::move(socket), *tls_.server);
      } else {
        return std::move(socket);
      }
    }();
    if constexpr (std::is_same_v<Stream, net::TlsStream>) {
      auto [hs] = co_await stream.async_handshake(asio::ssl::stream_base::server, kNoThrow);
      if (hs)
        co_return;  // not a member of this job; the dialer sees its own error
    }
    net::FrameChannel<Stream> channel(std::move(stream), channel_options());
    auto frame = co_await channel.read_frame();
    if (!frame || frame->type != MessageType::hello)
      co_return;
    auto checked = check_hello(frame->metadata, options_);
    std::string refusal;
    int peer = -1;
    if (!checked) {
      refusal = checked.error().message;
    } else {
      peer = *checked;
      if (links_[peer]->channel)
        refusal = "rank " + std::to_string(peer) + " is already connected";
    }
    if (!refusal.empty()) {
      const std::string answer = refusal_metadata(refusal);
      (void)co_await channel.write_frame(MessageType::error, answer);
      co_return;
    }
    if (auto w = co_await channel.write_frame(MessageType::welcome, std::string_view("{}")); !w)
      co_return;
    links_[peer]->channel.emplace(std::move(channel));
    --links_missing_;
  }

  asio::awaitable<void> accept_loop(tcp::acceptor& acceptor) {
    while (links_missing_ > 0) {
      auto [ec, socket] = co_await acceptor.async_accept(kNoThrow);
      if (ec)
        co_return;
      asio::co_spawn(io_, greet(std::move(socket)), asio::detached);
    }
  }

  // Declared first: destroyed after every socket that uses it.
  asio::io_context io_;
  NetOptions options_;
  TlsContexts tls_;
  std::atomic<bool> running_{false};
  std::vector<std::unique_ptr<Link>> links_;
  std::size_t pending_sends_ = 0;
  std::optional<error> send_error_;
  std::optional<error> setup_error_;
  int links_missing_ = 0;
  std::mutex failure_mutex_;
  std::optional<error> failure_;  // guarded by failure_mutex_
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
  std::uint64_t arrivals_ = 0;
};

result<tcp::endpoint> parse_endpoint(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos)
    return fail(errc::invalid_argument, "address '" + address + "' lacks a port");
  boost::system::error_code ec;
  auto ip = asio::ip::make_address(address.substr(0, colon), ec);
  if (ec)
    return fail(errc::invalid_argument, "address '" + address + "': " + ec.message());
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (port <= 0 || port > 65535)
    return fail(errc::invalid_argument, "address '" + address + "': bad port");
  return tcp::endpoint(ip, static_cast<unsigned short>(port));
}

template <class Stream>
result<void> NetTransport<Stream>::connect(Rendezvous& rendezvous) {
  const auto deadline = Clock::now() + options_.connect_timeout;
  boost::system::error_code ec;
  auto host = asio::ip::make_address(options_.bind_host, ec);
  if (ec)
    return fail(errc::invalid_argument, "bind host '" + options_.bind_host + "': " + ec.message());
  tcp::acceptor acceptor(io_);
  acceptor.open(host.is_v4() ? tcp::v4() : tcp::v6(), ec);
  if (!ec)
    acceptor.bind(tcp::endpoint(host, 0), ec);
  if (!ec)
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return fail(errc::unavailable, "listening on " + options_.bind_host + ": " + ec.message());
  const std::string address =
      options_.bind_host + ":" + std::to_string(acceptor.local_endpoint().port());
  auto addresses = rendezvous.exchange(options_.rank, options_.size, address, deadline);
  if (!addresses)
    return addresses.error();

  links_missing_ = options_.size - 1;
  for (int peer = 0; peer < options_.rank; ++peer) {
    auto endpoint = parse_endpoint((*addresses)[peer]);
    if (!endpoint)
      return endpoint.error();
    asio::co_spawn(io_, dial(peer, *endpoint), asio::detached);
  }
  if (options_.rank + 1 < options_.size)
    asio::co_spawn(io_, accept_loop(acceptor), asio::detached);
  const bool up = run_until([&] { return links_missing_ == 0 || setup_error_; }, deadline);
  acceptor.close(ec);
  if (setup_error_)
    return *setup_error_;
  if (!up) {
    return fail(errc::deadline_exceeded, "rank " + std::to_string(options_.rank) + ": " +
                                             std::to_string(links_missing_) + " of " +
                                             std::to_string(options_.size - 1) +
                                             " links not up within the connect timeout");
  }
  for (int peer = 0; peer < options_.size; ++peer) {
    if (peer == options_.rank)
      continue;
    links_[peer]->channel->set_timeouts(kReaderIdle, options_.transfer_timeout);
    asio::co_spawn(io_, read_loop(peer), asio::detached);
  }
  return {};
}

result<void> check_options(const NetOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return fail(errc::invalid_argument, "rank " + std::to_string(options.rank) +
                                            " is not in a group of " +
                                            std::to_string(options.size));
  }
  return {};
}

}  // namespace

result<std::unique_ptr<Transport>> connect_tcp(const NetOptions& options, Rendezvous& rendezvous) {
  if (auto ok = check_options(options); !ok)
    return ok.error();
  auto transport = std::make_unique<NetTransport<net::TcpStream>>(options, nullptr);
  if (auto ok = transport->connect(rendezvous); !ok)
    return ok.error();
  return std::unique_ptr<Transport>(std::move(transport));
}

result<std::unique_ptr<Transport>> connect_tls(const NetOptions& options, Rendezvous& rendezvous,
                                               const TlsContexts& tls) {
  if (auto ok = check_options(options); !ok)
    return ok.error();
  FEDCORE_ASSERT(tls.server != nullptr && tls.client != nullptr, "TLS needs both contexts");
  auto transport = std::make_unique<NetTransport<net::TlsStream>>(options, &tls);
  if (auto ok = transport->connect(rendezvous); !ok)
    return ok.error();
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace fedcore::collective
