#include "tests/support/connection_storm.hpp"

#include <algorithm>
#include <cmath>
#include <netinet/in.h>
#include <optional>
#include <set>
#include <sstream>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include "shared/net/listener.hpp"
#include "shared/protocol/frame.hpp"
#include "shared/tls/context.hpp"
#include "tests/tls/tls_support.hpp"

namespace fedcore::testing {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using Mode = StormOptions::Mode;

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

bool uses_tls(Mode mode) {
  return mode != Mode::tcp_idle && mode != Mode::tls_trickle;
}

// The bytes a client sends first on a TLS connection made from `context`: its
// ClientHello, produced by OpenSSL into a memory BIO (nothing is connected).
std::string client_hello(asio::ssl::context& context, const std::string& server_name) {
  SSL* ssl = SSL_new(context.native_handle());
  if (ssl == nullptr) {
    return {};
  }
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);  // the SSL owns both from here
  SSL_set_connect_state(ssl);
  SSL_set_tlsext_host_name(ssl, server_name.c_str());
  SSL_do_handshake(ssl);  // wants to read the ServerHello: the ClientHello is in `out`
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<std::size_t>(std::max(size, 0L)));
  SSL_free(ssl);
  return hello;
}

}  // namespace

std::string http_get(const std::string& path, bool complete) {
  return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: fedcore-storm\r\n" +
         (complete ? "Connection: close\r\n\r\n" : "");
}

std::string hello_frame_header(std::uint32_t metadata_bytes) {
  const auto header = protocol::encode_header({protocol::MessageType::hello, metadata_bytes, 0, 0});
  return std::string(reinterpret_cast<const char*>(header.data()), header.size());
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) {
    return 0;
  }
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

std::string StormReport::summary() const {
  std::ostringstream out;
  out << "attempts " << attempts;
  for (const auto& [name, n] :
       {std::pair{"completed", completed}, std::pair{"rejected", rejected},
        std::pair{"refused", refused}, std::pair{"connect_failed", connect_failed},
        std::pair{"timed_out", timed_out}, std::pair{"answered", answered},
        std::pair{"closed_by_server", closed_by_server}, std::pair{"still_open", still_open},
        std::pair{"stopped", stopped}, std::pair{"local_errors", local_errors}}) {
    if (n > 0) {
      out << ", " << name << " " << n;
    }
  }
  for (const auto& [status, n] : statuses) {
    out << ", HTTP " << status << " x" << n;
  }
  if (!handshake_ms.empty()) {
    out << "; handshake ms p50 " << quantile(handshake_ms, 0.5) << " p99 "
        << quantile(handshake_ms, 0.99);
  }
  if (!close_ms.empty()) {
    out << "; closed by the server after ms min " << quantile(close_ms, 0) << " p50 "
        << quantile(close_ms, 0.5) << " max " << quantile(close_ms, 1);
  }
  out << "; wall " << static_cast<long>(wall_ms) << " ms";
  if (!first_error.empty()) {
    out << "; first local error: " << first_error;
  }
  return out.str();
}

// One connection: its socket (and TLS stream, for the TLS modes) and the timer that
// bounds what it is waiting for. Shared by the coroutines that use it, so that a
// completion arriving after the attempt ended still finds it alive.
struct Connection : std::enable_shared_from_this<Connection> {
  Connection(asio::io_context& io, asio::ssl::context& tls) : stream(io, tls), timer(io) {}
  asio::ssl::stream<tcp::socket> stream;
  asio::steady_timer timer;
  bool deadline_passed = false;
  std::uint64_t generation = 0;
  bool closed_by_server = false;
  Clock::time_point closed_at{};

  tcp::socket& socket() { return stream.next_layer(); }
  void close() {
    error_code ignored;
    socket().close(ignored);
    disarm();
  }
  void disarm() {
    ++generation;
    timer.cancel();
  }
  // Closes the socket if it is still waiting when `timeout` passes. The handler holds the
  // connection weakly: an expiry already queued may run after the attempt has ended.
  // `generation` makes an expiry queued before a later arm (or cancel) harmless.
  void arm(std::chrono::milliseconds timeout) {
    deadline_passed = false;
    timer.expires_after(timeout);
    timer.async_wait([weak = weak_from_this(), armed = ++generation](const error_code& ec) {
      auto self = weak.lock();
      if (!ec && self && self->generation == armed) {
        self->deadline_passed = true;
        error_code ignored;
        self->socket().close(ignored);
      }
    });
  }
};

struct ConnectionStorm::State {
  State(StormOptions o, std::atomic<std::size_t>& finished_count)
      : options(std::move(o)), tls(asio::ssl::context::tls_client), finished(finished_count) {}

  StormOptions options;
  asio::io_context io;
  asio::ssl::context tls;
  std::string hello;  // tls_trickle: the ClientHello trickled
  std::atomic<std::size_t>& finished;
  std::atomic<bool> stopping{false};
  std::set<std::shared_ptr<Connection>> open;  // io thread only
  StormReport report;                          // io thread only
  std::size_t started = 0;
  Clock::time_point end_at{};

  void local_error(const std::string& what) {
    ++report.local_errors;
    if (report.first_error.empty()) {
      report.first_error = what;
    }
  }

  // Whether a slot may start another attempt (see StormOptions: attempts, duration).
  bool more(bool first_of_slot) const {
    if (stopping || (options.attempts > 0 && started >= options.attempts)) {
      return false;
    }
    if (options.duration.count() > 0) {
      return first_of_slot || Clock::now() < end_at;
    }
    return first_of_slot || options.attempts > 0;
  }

  asio::ip::address_v4 source(std::size_t n) const {
    const auto span = static_cast<std::size_t>(options.last_source - options.first_source + 1);
    const auto host = static_cast<unsigned>(options.first_source) + n % span;
    return asio::ip::address_v4((127u << 24) | host);
  }

  asio::awaitable<void> slot() {
    for (bool first = true; more(first); first = false) {
      co_await attempt(started++);
      finished.fetch_add(1);
    }
  }

  asio::awaitable<void> attempt(std::size_t n);
  asio::awaitable<void> hold(std::shared_ptr<Connection> c, Clock::time_point since);
  asio::awaitable<void> read_until_closed(std::shared_ptr<Connection> c);
};

asio::awaitable<void> ConnectionStorm::State::attempt(std::size_t n) {
  ++report.attempts;
  auto c = std::make_shared<Connection>(io, tls);
  open.insert(c);
  struct Forget {
    State& s;
    std::shared_ptr<Connection> c;
    ~Forget() {
      c->close();
      s.open.erase(c);
    }
  } forget{*this, c};

  error_code ec;
  c->socket().open(tcp::v4(), ec);
  if (!ec) {
    // The port is chosen at connect() for the whole 4-tuple, not at bind() for the
    // address alone: thousands of attempts from one source address do not run out.
    const int yes = 1;
    ::setsockopt(c->socket().native_handle(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &yes,
                 sizeof yes);
    c->socket().bind({source(n), 0}, ec);
  }
  if (ec) {
    local_error("socket from " + source(n).to_string() + ": " + ec.message());
    co_return;
  }
  const tcp::endpoint server(asio::ip::make_address(options.server_address), options.port);
  const auto start = Clock::now();
  c->arm(options.attempt_timeout);
  if (auto [connect_error] = co_await c->socket().async_connect(server, kNoThrow); connect_error) {
    ++(stopping ? report.stopped : report.connect_failed);
    co_return;
  }
  const auto connected = Clock::now();
  if (options.mode == Mode::tcp_idle || options.mode == Mode::tls_trickle) {
    c->disarm();
    co_await hold(c, connected);
    co_return;
  }
  if (auto prepared = tls::prepare_client_stream(c->stream, options.server_name); !prepared) {
    local_error(prepared.error().message);
    co_return;
  }
  auto [handshake_error] =
      co_await c->stream.async_handshake(asio::ssl::stream_base::client, kNoThrow);
  if (handshake_error) {
    if (stopping) {
      ++report.stopped;
    } else if (c->deadline_passed) {
      ++report.timed_out;
    } else {
      ++report.refused;
    }
    co_return;
  }
  ++report.completed;
  report.handshake_ms.push_back(ms_since(start));
  if (options.mode == Mode::handshake) {
    if (options.linger.count() > 0) {
      // Anything from the server within the linger: an alert, or EOF. (It sends no data
      // first on either port: the federation waits for HELLO, the API for a request.)
      c->arm(options.linger);
      std::array<char, 256> chunk{};
      auto [read_error, got] = co_await c->stream.async_read_some(asio::buffer(chunk), kNoThrow);
      (void)got;
      if (read_error && !c->deadline_passed && !stopping) {
        ++report.rejected;
      }
    }
    co_return;  // closed by Forget, as an abrupt client would
  }
  if (options.mode == Mode::request) {
    // The deadline still runs from the start of the attempt.
    auto [write_error, written] =
        co_await asio::async_write(c->stream, asio::buffer(options.payload), kNoThrow);
    (void)written;
    std::string received;
    std::array<char, 1024> chunk{};
    while (!write_error && received.find("\r\n") == std::string::npos && received.size() < 4096) {
      auto [read_error, got] = co_await c->stream.async_read_some(asio::buffer(chunk), kNoThrow);
      received.append(chunk.data(), got);
      if (read_error) {
        break;
      }
    }
    // "HTTP/1.1 401 Unauthorized"
    if (received.rfind("HTTP/1.", 0) == 0 && received.size() >= 12) {
      ++report.answered;
      ++report.statuses[std::atoi(received.substr(9, 3).c_str())];
    } else if (c->deadline_passed) {
      ++report.timed_out;
    }
    co_return;
  }
  c->disarm();
  co_await hold(c, Clock::now());
}

asio::awaitable<void> ConnectionStorm::State::read_until_closed(std::shared_ptr<Connection> c) {
  std::array<char, 1024> chunk{};
  while (true) {
    error_code ec;
    if (uses_tls(options.mode)) {
      std::tie(ec, std::ignore) = co_await c->stream.async_read_some(asio::buffer(chunk), kNoThrow);
    } else {
      std::tie(ec, std::ignore) =
          co_await c->socket().async_read_some(asio::buffer(chunk), kNoThrow);
    }
    if (ec) {
      if (ec != asio::error::operation_aborted && ec != asio::error::bad_descriptor) {
        c->closed_by_server = true;  // EOF, reset, an alert: the server ended it
        c->closed_at = Clock::now();
      }
      c->timer.cancel();  // wakes the holder
      co_return;
    }
  }
}

// Holds the connection, trickling the mode's bytes, until the server closes it or
// hold_limit passes.
asio::awaitable<void> ConnectionStorm::State::hold(std::shared_ptr<Connection> c,
                                                   Clock::time_point since) {
  asio::co_spawn(io, read_until_closed(c), asio::detached);
  const std::string& bytes = options.mode == Mode::tls_trickle ? hello : options.payload;
  const bool trickles = options.mode == Mode::tls_trickle || options.mode == Mode::payload_trickle;
  const auto limit = since + options.hold_limit;
  std::size_t sent = 0;
  while (!c->closed_by_server && !stopping && Clock::now() < limit) {
    if (trickles && sent < bytes.size()) {
      error_code ec;
      const auto one = asio::buffer(bytes.data() + sent, 1);
      if (options.mode == Mode::tls_trickle) {
        std::tie(ec, std::ignore) = co_await asio::async_write(c->socket(), one, kNoThrow);
      } else {
        std::tie(ec, std::ignore) = co_await asio::async_write(c->stream, one, kNoThrow);
      }
      ++sent;
      if (ec) {
        break;  // the reader sees the close too
      }
    }
    const auto wait = trickles ? options.trickle_interval : options.hold_limit;
    c->timer.expires_at(std::min(Clock::now() + wait, limit));
    co_await c->timer.async_wait(kNoThrow);
  }
  if (!c->closed_by_server) {
    // One more look: a close that raced with the last wake-up.
    c->timer.expires_after(std::chrono::milliseconds(20));
    co_await c->timer.async_wait(kNoThrow);
  }
  if (c->closed_by_server) {
    ++report.closed_by_server;
    report.close_ms.push_back(
        std::chrono::duration<double, std::milli>(c->closed_at - since).count());
  } else if (stopping) {
    ++report.stopped;
  } else {
    ++report.still_open;
  }
}

ConnectionStorm::ConnectionStorm(StormOptions options)
    : options_(std::move(options)), state_(std::make_shared<State>(options_, finished_)) {}

ConnectionStorm::~ConnectionStorm() {
  stop();
  if (thread_.joinable()) {
    thread_.join();
  }
}

StormReport ConnectionStorm::run() {
  auto& s = *state_;
  const auto& o = s.options;
  // Thousands of sockets: the storm, not the default 1,024 descriptors, sets the limit.
  net::raise_open_file_limit();
  try {
    if (!o.cert_file.empty()) {
      auto context = tls::make_client_context({o.ca_file, o.cert_file, o.key_file, o.server_name});
      if (!context) {
        s.local_error(context.error().message);
        return s.report;
      }
      s.tls = std::move(*context);
    } else {
      s.tls = tls::testing::anonymous_client_context(o.ca_file);
    }
  } catch (const std::exception& e) {
    s.local_error(std::string("CA '") + o.ca_file + "': " + e.what());
    return s.report;
  }
  if (o.mode == Mode::tls_trickle) {
    s.hello = client_hello(s.tls, o.server_name);
  }
  if (o.first_source < 1 || o.last_source > 254 || o.first_source > o.last_source) {
    s.local_error("source addresses must lie in 127.0.0.1 .. 127.0.0.254");
    return s.report;
  }
  const auto start = Clock::now();
  s.end_at = start + o.duration;
  for (std::size_t i = 0; i < o.connections; ++i) {
    asio::co_spawn(s.io, s.slot(), asio::detached);
  }
  s.io.run();
  s.report.wall_ms = ms_since(start);
  return s.report;
}

void ConnectionStorm::start() {
  thread_ = std::thread([this] { report_ = run(); });
}

StormReport ConnectionStorm::wait() {
  if (thread_.joinable()) {
    thread_.join();
  }
  return report_;
}

void ConnectionStorm::stop() noexcept {
  auto s = state_;
  if (s->stopping.exchange(true)) {
    return;
  }
  asio::post(s->io, [s] {
    const auto open = s->open;  // closing ends attempts, which erase themselves
    for (const auto& c : open) {
      c->close();
    }
  });
}

}  // namespace fedcore::testing
