// Longer than our ~500-line guideline, on purpose: one class whose handshake (with the
// shared-memory ring negotiation), per-link reader and writer and progress engine share
// private state; splitting them would expose that state in a header.
#include "shared/collective/net_transport.hpp"

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

#include "shared/collective/shm_ring.hpp"
#include "shared/net/frame_channel.hpp"
#include "shared/net/listener.hpp"
#include "shared/tls/context.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::collective {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using protocol::MessageType;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
// Readers wait between operations for as long as the job lives; operation deadlines
// are enforced by recv and wait_sends, not by the channel's idle timer.
constexpr std::chrono::milliseconds kReaderIdle = std::chrono::hours(24 * 365);

// Payloads smaller than this always travel inline: for them the socket's copy costs
// less than the placement's extra metadata.
constexpr std::size_t kRingMinPayload = 1024;
// A peer's ring offer larger than this is refused (it would be mapped here).
constexpr std::size_t kRingMaxBytes = std::size_t{1} << 30;

// The frame metadata of a message: its envelope, plus the payload's placement in the
// shared-memory ring when the payload travels there instead of in the frame.
std::string encode_envelope(const Envelope& e,
                            const std::optional<ShmRing::Placement>& placement = {}) {
  nlohmann::json j = {{"job", e.job},      {"seq", e.seq},     {"op", static_cast<int>(e.op)},
                      {"tag", e.tag},      {"bytes", e.bytes}, {"segment", e.segment},
                      {"length", e.length}};
  if (placement) {
    j["ring_offset"] = placement->offset;
    j["ring_end"] = placement->end;
  }
  return j.dump();
}

struct DecodedMetadata {
  Envelope envelope;
  std::optional<ShmRing::Placement> placement;
};

result<DecodedMetadata> decode_envelope(const std::string& metadata) {
  auto j = nlohmann::json::parse(metadata, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::data_loss, "collective metadata is not JSON");
  try {
    DecodedMetadata d;
    Envelope& e = d.envelope;
    e.job = j.at("job").get<std::string>();
    e.seq = j.at("seq").get<std::uint64_t>();
    e.op = static_cast<OpType>(j.at("op").get<int>());
    e.tag = j.at("tag").get<std::uint32_t>();
    e.bytes = j.at("bytes").get<std::uint64_t>();
    e.segment = j.at("segment").get<std::uint32_t>();
    e.length = j.at("length").get<std::uint64_t>();
    if (j.contains("ring_offset")) {
      d.placement = ShmRing::Placement{j.at("ring_offset").get<std::uint64_t>(),
                                       j.at("ring_end").get<std::uint64_t>()};
    }
    return d;
  } catch (const nlohmann::json::exception& ex) {
    return fail(errc::data_loss, std::string("collective metadata: ") + ex.what());
  }
}

// {"name", "cookie", "capacity"} of a ring offered to a peer, or null.
nlohmann::json ring_offer(const std::optional<ShmRing>& ring) {
  if (!ring)
    return nullptr;
  return {{"name", ring->name()}, {"cookie", ring->cookie()}, {"capacity", ring->capacity()}};
}

// Opens the ring a peer offered in handshake metadata `j` (key "ring"), when shared
// memory is on here. Any failure (another host, a malformed offer) means no ring.
std::optional<ShmRing> open_offered_ring(const nlohmann::json& j, const NetOptions& options) {
  if (options.shared_memory_bytes == 0 || !j.is_object() || !j.contains("ring") ||
      !j["ring"].is_object()) {
    return std::nullopt;
  }
  try {
    const auto& offer = j["ring"];
    const auto capacity = offer.at("capacity").get<std::uint64_t>();
    if (capacity > kRingMaxBytes)
      return std::nullopt;
    auto ring = ShmRing::open(offer.at("name").get<std::string>(),
                              offer.at("cookie").get<std::uint64_t>(), capacity);
    if (!ring)
      return std::nullopt;
    return std::move(*ring);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// Whether handshake metadata `j` says the peer opened the ring this rank offered.
bool peer_opened_ring(const nlohmann::json& j) {
  return j.is_object() && j.contains("ring_opened") && j["ring_opened"].is_boolean() &&
         j["ring_opened"].get<bool>();
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
    std::optional<ShmRing::Placement> placed;
    if (link.out_ring && payload.size() >= kRingMinPayload)
      placed = link.out_ring->try_write(payload);
    if (placed) {
      link.outbox.push_back({encode_envelope(envelope, placed), {}, payload.size()});
      ring_sent_ += payload.size();
    } else {
      link.outbox.push_back({encode_envelope(envelope), payload, 0});
    }
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
      // The previous message's bytes are no longer the caller's.
      if (link.current.ring_end > 0)
        link.in_ring->release(link.current.ring_end);
      if (link.current.payload.capacity() > 0)
        link.spare = std::move(link.current.payload);
      link.current = std::move(link.inbox.front());
      link.inbox.pop_front();
      if (auto ok = check_envelope(expected, link.current.envelope, peer); !ok)
        return ok.error();
      return link.current.bytes();
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
  std::uint64_t bytes_sent_shared_memory() const noexcept override { return ring_sent_; }

 private:
  struct Incoming {
    Envelope envelope;
    std::vector<std::byte> payload;         // inline payload, or empty
    std::span<const std::byte> ring_bytes;  // or the payload in the link's ring,
    std::uint64_t ring_end = 0;             // up to this ring position (0: inline)
    std::uint64_t arrival = 0;              // frames read so far on all links, for wait_any

    std::span<const std::byte> bytes() const {
      return ring_end > 0 ? ring_bytes : std::span<const std::byte>(payload);
    }
  };
  struct Outgoing {
    std::string metadata;
    std::span<const std::byte> payload;  // inline bytes (the caller's), or empty
    std::uint64_t ring_bytes = 0;        // payload bytes already copied into the ring
  };
  struct Link {
    std::optional<net::FrameChannel<Stream>> channel;
    std::optional<ShmRing> out_ring;  // payloads to this peer, when it shares our memory
    std::optional<ShmRing> in_ring;   // payloads from this peer
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
      if (options_.spin.count() > 0 && spin_until(done))
        return true;
      if (io_.stopped())
        io_.restart();
      if (io_.run_one_until(deadline) == 0 && io_.stopped() && Clock::now() < deadline) {
        // Nothing left that could make progress (every link is down).
        return done();
      }
    }
  }

  // Polls the io_context without sleeping for up to options_.spin, until `done()`.
  // Returns done(). A sleeping wait costs a wake-up (tens of microseconds on a VM) per
  // message; a rank with a core of its own loses nothing by polling for a while first.
  template <class Pred>
  bool spin_until(Pred& done) {
    const auto until = Clock::now() + options_.spin;
    do {
      if (io_.stopped())
        io_.restart();
      while (io_.poll_one() > 0) {
        if (done())
          return true;
      }
      if (aborted())
        return false;
    } while (Clock::now() < until);
    return done();
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
      auto decoded = decode_envelope(frame->metadata);
      Incoming in;
      if (decoded && decoded->placement) {
        if (!link.in_ring || !frame->payload.empty()) {
          decoded = fail(errc::data_loss, link.in_ring
                                              ? "payload both inline and in shared memory"
                                              : "shared-memory placement on a link without a ring");
        } else if (auto view = link.in_ring->view(*decoded->placement, decoded->envelope.length);
                   !view) {
          decoded = view.error();
        } else {
          in.ring_bytes = *view;
          in.ring_end = decoded->placement->end;
        }
      } else if (decoded && decoded->envelope.length != frame->payload.size()) {
        decoded = fail(errc::data_loss, "payload length differs from the envelope's");
      }
      if (!decoded) {
        link.failed = decoded.error();
        link.channel->close();
        co_return;
      }
      received_ += decoded->envelope.length + protocol::kFrameHeaderSize + frame->metadata.size();
      in.envelope = std::move(decoded->envelope);
      in.payload = std::move(frame->payload);
      in.arrival = ++arrivals_;
      link.inbox.push_back(std::move(in));
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
          co_await link.channel->write_frame(MessageType::collective, out.metadata, out.payload);
      if (!written) {
        link.failed = written.error();
        if (!send_error_)
          send_error_ = peer_error(peer, written.error());
        pending_sends_ -= link.outbox.size();
        link.outbox.clear();
        break;
      }
      sent_ +=
          out.payload.size() + out.ring_bytes + protocol::kFrameHeaderSize + out.metadata.size();
      link.outbox.pop_front();
      --pending_sends_;
    }
    link.writing = false;
  }

  // A ring for payloads to one peer, when shared memory is on and /dev/shm works here.
  std::optional<ShmRing> make_ring() const {
    if (options_.shared_memory_bytes == 0)
      return std::nullopt;
    auto ring = ShmRing::create(options_.shared_memory_bytes);
    if (!ring)
      return std::nullopt;  // e.g. no /dev/shm: the socket carries everything
    return std::move(*ring);
  }

  // Keeps `offered` as the link's outgoing ring if the peer opened it. Either way its
  // name is no longer needed.
  static std::optional<ShmRing> settle_ring(std::optional<ShmRing> offered, bool opened) {
    if (!offered)
      return std::nullopt;
    offered->unlink();
    if (!opened)
      return std::nullopt;
    return offered;
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
    net::set_no_delay(socket_of(stream));
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
    std::optional<ShmRing> out_ring = make_ring();
    const std::string hello = nlohmann::json{
        {"job", options_.job},
        {"rank", options_.rank},
        {"size", options_.size},
        {"ring",
         ring_offer(out_ring)}}.dump();
    if (auto w = co_await channel.write_frame(MessageType::peer_hello, hello); !w) {
      setup_error_ = peer_error(peer, w.error());
      co_return;
    }
    auto answer = co_await channel.read_frame();
    if (!answer) {
      setup_error_ = peer_error(peer, answer.error());
      co_return;
    }
    if (answer->type != MessageType::peer_welcome) {
      setup_error_ = fail(errc::permission_denied, "rank " + std::to_string(peer) +
                                                       " refused this rank: " + answer->metadata);
      co_return;
    }
    // The welcome says whether the acceptor opened our ring and offers its own; our
    // answer says whether we opened that one.
    const auto welcome = nlohmann::json::parse(answer->metadata, nullptr, false);
    out_ring = settle_ring(std::move(out_ring), peer_opened_ring(welcome));
    std::optional<ShmRing> in_ring = open_offered_ring(welcome, options_);
    const std::string opened = nlohmann::json{{"ring_opened", in_ring.has_value()}}.dump();
    if (auto w = co_await channel.write_frame(MessageType::peer_welcome, opened); !w) {
      setup_error_ = peer_error(peer, w.error());
      co_return;
    }
    Link& link = *links_[peer];
    link.out_ring = std::move(out_ring);
    link.in_ring = std::move(in_ring);
    link.channel.emplace(std::move(channel));
    --links_missing_;
  }

  asio::awaitable<void> greet(tcp::socket socket) {
    net::set_no_delay(socket);
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
    if (!frame || frame->type != MessageType::peer_hello)
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
    std::optional<ShmRing> in_ring =
        open_offered_ring(nlohmann::json::parse(frame->metadata, nullptr, false), options_);
    std::optional<ShmRing> out_ring = make_ring();
    const std::string welcome =
        nlohmann::json{{"ring_opened", in_ring.has_value()}, {"ring", ring_offer(out_ring)}}.dump();
    if (auto w = co_await channel.write_frame(MessageType::peer_welcome, welcome); !w)
      co_return;
    auto opened = co_await channel.read_frame();
    if (!opened || opened->type != MessageType::peer_welcome)
      co_return;  // the dialer gave up; it reports its own error
    Link& link = *links_[peer];
    link.out_ring =
        settle_ring(std::move(out_ring),
                    peer_opened_ring(nlohmann::json::parse(opened->metadata, nullptr, false)));
    link.in_ring = std::move(in_ring);
    link.channel.emplace(std::move(channel));
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
  std::uint64_t ring_sent_ = 0;
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
