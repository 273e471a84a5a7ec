#include "server/api/api_server.hpp"

// GCC 12 inlines Asio's recycling allocator for coroutine frames (operator new of
// awaitable_frame_base, then aligned_delete) and reports a -Wmismatched-new-delete that
// is not one: both ends are Asio's own pair. GCC 13 no longer does.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <spdlog/spdlog.h>

#include "server/api/api.hpp"
#include "server/api/events.hpp"
#include "shared/net/connection_table.hpp"
#include "shared/net/listener.hpp"
#include "shared/tls/context.hpp"
#include "shared/util/log_throttle.hpp"

namespace fedcore::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Stream = beast::ssl_stream<beast::tcp_stream>;
using boost::system::error_code;

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
// Connections taken from the backlog per accept completion (net::accept_waiting).
constexpr std::size_t kAcceptBatch = 64;

// No inline script or style, nothing from elsewhere, no framing (docs/api.md).
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'";

template <class Message>
void set_common_headers(Message& m, bool cacheable) {
  m.set("Content-Security-Policy", kContentSecurityPolicy);
  m.set("X-Content-Type-Options", "nosniff");
  m.set("X-Frame-Options", "DENY");
  m.set("Referrer-Policy", "no-referrer");
  // The API is HTTPS only: a browser that has seen it once never tries plain HTTP again.
  m.set("Strict-Transport-Security", "max-age=31536000");
  m.set(http::field::cache_control, cacheable ? "no-cache" : "no-store");
}

bool is_quiet_end(const error_code& ec) {
  // The peer went away or we closed the socket: nothing to log.
  return ec == http::error::end_of_stream || ec == beast::error::timeout ||
         ec == asio::error::operation_aborted || ec == asio::error::eof ||
         ec == asio::ssl::error::stream_truncated || ec == asio::error::connection_reset ||
         ec == asio::error::bad_descriptor || ec == asio::error::broken_pipe;
}

}  // namespace

struct ApiServer::Impl : std::enable_shared_from_this<ApiServer::Impl> {
  Impl(asio::io_context& io_context, ApiServerOptions o, asio::ssl::context tls,
       federation::FederationServer& federation, store::HistoryStore& store)
      : io(io_context),
        options(std::move(o)),
        tls_context(std::move(tls)),
        federation(federation),
        acceptor(io_context),
        hub(options.event_queue_limit),
        api(ApiContext{.federation = federation,
                       .store = store,
                       .federation_listener = options.federation_listener,
                       .api_listener = "",
                       .clock = options.clock,
                       .audit_max_rows = options.audit_max_rows},
            TokenVerifier(options.tokens), StaticFiles(options.web_root), options.auth_limits),
        table(net::ConnectionLimits{options.max_connections, options.max_unauthenticated,
                                    options.max_unauthenticated_per_address,
                                    options.max_connections_per_address}),
        room(io_context) {
    table.set_room_callback([this] { room.cancel(); });
  }

  struct Connection {
    beast::tcp_stream* socket = nullptr;
    asio::steady_timer* wake = nullptr;  // set while streaming events
  };

  asio::io_context& io;
  ApiServerOptions options;
  asio::ssl::context tls_context;
  federation::FederationServer& federation;
  tcp::acceptor acceptor;
  EventHub hub;
  Api api;
  std::optional<std::uint64_t> subscription;
  net::ConnectionTable table;
  asio::steady_timer room;  // the accept loop's wait while `table` is full
  LogThrottle throttle{std::chrono::seconds(10)};
  std::map<std::uint64_t, Connection> connections;
  std::uint64_t next_connection = 1;
  bool stopping = false;

  asio::awaitable<void> accept_loop();
  // A slot in `table` and a serving coroutine, or closed at once.
  void admit(tcp::socket socket, std::chrono::steady_clock::time_point now);
  asio::awaitable<void> serve(tcp::socket socket, std::uint64_t id,
                              net::ConnectionTable::Ticket ticket);
  asio::awaitable<bool> write_response(Stream& stream, Response r, unsigned version,
                                       bool keep_alive, bool head);
  asio::awaitable<void> stream_events(Stream& stream, unsigned version, std::uint64_t id);
  void close_all();
};

asio::awaitable<void> ApiServer::Impl::accept_loop() {
  auto self = shared_from_this();
  std::chrono::milliseconds pause{0};
  asio::steady_timer pause_timer(io);
  while (!stopping) {
    if (!table.has_room()) {
      // At the connection limits new connections wait in the backlog, in arrival order,
      // until a slot is given back (net/connection_table.hpp); bounded, for shutdown.
      room.expires_after(std::chrono::milliseconds(250));
      co_await room.async_wait(kNoThrow);
      continue;
    }
    auto [ec, socket] = co_await acceptor.async_accept(kNoThrow);
    const auto now = std::chrono::steady_clock::now();
    if (ec) {
      if (stopping || ec == asio::error::operation_aborted) {
        co_return;
      }
      // Out of descriptors and the like: back off (10 ms doubling to 1 s) instead of
      // spinning, and say so once per 10 s, not once per failure.
      if (auto suppressed = throttle.admit("accept:" + ec.message(), now)) {
        spdlog::warn("admin API: accept failed: {}{}", ec.message(),
                     suppressed_suffix(*suppressed));
      }
      pause = net::is_resource_shortage(ec) ? std::clamp(pause * 2, std::chrono::milliseconds(10),
                                                         std::chrono::milliseconds(1000))
                                            : std::chrono::milliseconds(10);
      pause_timer.expires_after(pause);
      co_await pause_timer.async_wait(kNoThrow);
      continue;
    }
    pause = std::chrono::milliseconds(0);
    admit(std::move(socket), now);
    net::accept_waiting(
        acceptor, kAcceptBatch, [this] { return table.has_room(); },
        [this, now](tcp::socket more) { admit(std::move(more), now); });
  }
}

void ApiServer::Impl::admit(tcp::socket socket, std::chrono::steady_clock::time_point now) {
  net::set_no_delay(socket);
  error_code ignored;
  const auto address = socket.remote_endpoint(ignored).address().to_string();
  auto ticket = table.admit(address);
  if (!ticket) {
    if (auto suppressed = throttle.admit("refused:" + address, now)) {
      spdlog::warn("admin API: refusing a connection from {}: {}{}", address,
                   ticket.error().message, suppressed_suffix(*suppressed));
    }
    socket.close(ignored);
    return;
  }
  const auto id = next_connection++;
  connections[id] = Connection{};
  asio::co_spawn(io, serve(std::move(socket), id, std::move(*ticket)),
                 [self = shared_from_this(), id](std::exception_ptr e) {
                   self->connections.erase(id);
                   if (e) {
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::exception& ex) {
                       spdlog::error("admin API connection {}: {}", id, ex.what());
                     }
                   }
                 });
}

asio::awaitable<bool> ApiServer::Impl::write_response(Stream& stream, Response r, unsigned version,
                                                      bool keep_alive, bool head) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), version};
  res.set(http::field::content_type, r.content_type);
  set_common_headers(res, r.cacheable);
  for (auto& [name, value] : r.headers) {
    res.set(name, value);
  }
  res.keep_alive(keep_alive);
  res.body() = std::move(r.body);
  res.prepare_payload();
  if (head) {
    // Content-Length stays that of the full answer; no body follows.
    res.body().clear();
  }
  beast::get_lowest_layer(stream).expires_after(options.write_timeout);
  auto [ec, n] = co_await http::async_write(stream, res, kNoThrow);
  (void)n;
  co_return !ec;
}

asio::awaitable<void> ApiServer::Impl::serve(tcp::socket socket, std::uint64_t id,
                                             net::ConnectionTable::Ticket ticket) {
  auto self = shared_from_this();
  error_code no_address;
  // For the failed-authentication limit and the audit trail.
  const std::string remote = socket.remote_endpoint(no_address).address().to_string();
  Stream stream(std::move(socket), tls_context);
  auto& lowest = beast::get_lowest_layer(stream);
  connections[id].socket = &lowest;
  // Unregister the raw pointer before the stream dies, whatever way this frame ends.
  struct Forget {
    Impl* impl;
    std::uint64_t id;
    ~Forget() {
      if (auto it = impl->connections.find(id); it != impl->connections.end()) {
        it->second = Connection{};
      }
    }
  } forget{this, id};

  lowest.expires_after(options.handshake_timeout);
  if (auto [ec] = co_await stream.async_handshake(asio::ssl::stream_base::server, kNoThrow); ec) {
    spdlog::debug("admin API connection {}: handshake failed: {}", id, ec.message());
    co_return;
  }

  // Room for one request's header and largest body, plus what a pipelining client
  // sent after it; more is refused (the buffer's max_size) rather than grown.
  beast::flat_buffer buffer(options.header_limit + kMaxJsonBody + 16 * 1024);
  bool first = true;
  while (!stopping) {
    if (!first && buffer.size() == 0) {
      // Keep-alive: wait for the next request's first bytes at most idle_timeout.
      lowest.expires_after(options.idle_timeout);
      auto [ec, n] = co_await stream.async_read_some(buffer.prepare(4096), kNoThrow);
      if (ec) {
        break;
      }
      buffer.commit(n);
    }
    first = false;
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options.header_limit));
    parser.body_limit(kMaxJsonBody);
    // One deadline covers the whole request, so trickling bytes does not extend it.
    lowest.expires_after(options.request_timeout);
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, kNoThrow);
    (void)n;
    // Refusals are built into a named Response before any co_await: GCC 12 destroys
    // string temporaries of a co_await operand twice (a heap corruption seen here).
    std::optional<Response> refusal;
    unsigned version = 11;
    bool head = false;
    if (ec == http::error::header_limit) {
      refusal = error_response(
          431, "request_header_fields_too_large",
          "request headers exceed " + std::to_string(options.header_limit) + " bytes");
    } else if (ec == http::error::body_limit) {
      refusal = error_response(413, "payload_too_large",
                               "body: larger than " + std::to_string(kMaxJsonBody) + " bytes");
    } else if (ec) {
      if (is_quiet_end(ec) || ec == http::error::buffer_overflow) {
        break;
      }
      refusal = error_response(400, "invalid_argument", "malformed HTTP request: " + ec.message());
    }
    if (refusal) {
      co_await write_response(stream, std::move(*refusal), version, false, head);
      break;
    }
    // A whole request header arrived in time: this connection is no longer one of the
    // anonymous sockets the per-address limit is for.
    ticket.authenticated();
    auto& header = parser.get();
    const std::string method(header.method_string());
    const std::string target(header.target());
    const auto question = target.find('?');
    const std::string path = target.substr(0, question);
    version = header.version();
    head = method == "HEAD";

    // The route's own body limit, checked before any of the body is read.
    const auto limit = api.body_limit(method, path);
    const auto declared = parser.content_length();
    const std::string too_large = limit == 0
                                      ? std::string("body: this route takes none")
                                      : "body: larger than " + std::to_string(limit) + " bytes";
    if ((declared && *declared > limit) || (!declared && parser.chunked() && limit == 0)) {
      refusal = error_response(413, "payload_too_large", too_large);
    } else if (!parser.is_done()) {
      auto [body_ec, m] = co_await http::async_read(stream, buffer, parser, kNoThrow);
      (void)m;
      if (body_ec == http::error::body_limit) {
        refusal = error_response(413, "payload_too_large", too_large);
      } else if (body_ec) {
        break;
      }
    }
    if (refusal) {
      co_await write_response(stream, std::move(*refusal), version, false, head);
      break;
    }
    auto message = parser.release();
    Request request;
    request.method = method;
    request.path = path;
    request.query = question == std::string::npos ? std::string() : target.substr(question + 1);
    request.content_type = std::string(message[http::field::content_type]);
    request.authorization = std::string(message[http::field::authorization]);
    request.body = std::move(message.body());
    request.remote = remote;

    Response response = api.handle(request);
    if (response.event_stream && !head) {
      co_await stream_events(stream, version, id);
      break;
    }
    const bool keep_alive = message.keep_alive() && !stopping;
    const bool written =
        co_await write_response(stream, std::move(response), version, keep_alive, head);
    if (!written || !keep_alive) {
      break;
    }
  }
  if (!stopping) {
    // Close TLS politely, but never wait long for the peer's half.
    lowest.expires_after(std::chrono::seconds(2));
    co_await stream.async_shutdown(kNoThrow);
  }
}

asio::awaitable<void> ApiServer::Impl::stream_events(Stream& stream, unsigned version,
                                                     std::uint64_t id) {
  auto& lowest = beast::get_lowest_layer(stream);
  asio::steady_timer wake(io);
  auto subscription = hub.subscribe();
  subscription->wake = [&wake] { wake.cancel(); };
  connections[id].wake = &wake;
  struct Leave {
    Impl* impl;
    std::shared_ptr<Subscription> s;
    std::uint64_t id;
    ~Leave() {
      s->wake = nullptr;
      impl->hub.unsubscribe(s);
      if (auto it = impl->connections.find(id); it != impl->connections.end()) {
        it->second.wake = nullptr;
      }
    }
  } leave{this, subscription, id};

  http::response<http::empty_body> res{http::status::ok, version};
  res.set(http::field::content_type, "text/event-stream");
  set_common_headers(res, false);
  res.keep_alive(true);
  res.chunked(true);
  http::response_serializer<http::empty_body> serializer(res);
  lowest.expires_after(options.write_timeout);
  if (auto [ec, n] = co_await http::async_write_header(stream, serializer, kNoThrow); ec) {
    co_return;
  }
  // A first comment, so the client sees the stream open before any event happens.
  std::string pending = ": connected\n\n";
  while (!stopping) {
    if (subscription->overflowed) {
      spdlog::warn("admin API connection {}: event subscriber fell {} events behind; closing", id,
                   options.event_queue_limit);
      break;
    }
    while (!subscription->frames.empty()) {
      pending += subscription->frames.front();
      subscription->frames.pop_front();
    }
    if (!pending.empty()) {
      lowest.expires_after(options.write_timeout);
      auto [ec, n] =
          co_await asio::async_write(stream, http::make_chunk(asio::buffer(pending)), kNoThrow);
      if (ec) {
        co_return;
      }
      pending.clear();
      continue;
    }
    // Sleep until an event is queued (the hub cancels the timer) or a keep-alive is due.
    wake.expires_after(options.event_keepalive);
    auto [ec] = co_await wake.async_wait(kNoThrow);
    if (!ec) {
      pending = ": keep-alive\n\n";
    }
  }
  if (!stopping) {
    lowest.expires_after(options.write_timeout);
    co_await asio::async_write(stream, http::make_chunk_last(), kNoThrow);
  }
}

void ApiServer::Impl::close_all() {
  // Copy first: closing completes operations that erase entries.
  const auto open = connections;
  for (const auto& [id, c] : open) {
    if (c.wake != nullptr) {
      c.wake->cancel();
    }
    if (c.socket != nullptr) {
      error_code ignored;
      c.socket->socket().shutdown(tcp::socket::shutdown_both, ignored);
      c.socket->socket().close(ignored);
    }
  }
}

ApiServer::ApiServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

ApiServer::~ApiServer() {
  shutdown();
}

result<std::unique_ptr<ApiServer>> ApiServer::create(asio::io_context& io, ApiServerOptions options,
                                                     federation::FederationServer& federation,
                                                     store::HistoryStore& store) {
  tls::ServerTlsConfig tls_config;
  tls_config.cert_file = options.cert_file;
  tls_config.key_file = options.key_file;
  tls_config.require_client_cert = false;  // admins authenticate with bearer tokens
  auto tls = tls::make_server_context(tls_config);
  if (!tls) {
    return fail(tls.error().code, "admin API TLS: " + tls.error().message);
  }
  auto impl = std::make_shared<Impl>(io, std::move(options), std::move(*tls), federation, store);
  if (std::error_code ec; !std::filesystem::is_directory(impl->options.web_root, ec)) {
    spdlog::warn("admin API: web root '{}' is not a folder; the dashboard will not be served",
                 impl->options.web_root);
  }
  if (impl->options.tokens.empty()) {
    spdlog::warn(
        "admin API: no tokens configured; create one with "
        "'fedcore-server token create --config <file> --name <name>'");
  }
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

result<std::uint16_t> ApiServer::listen() {
  auto& s = *impl_;
  auto bound = net::open_listener(s.acceptor, s.options.listen_address, s.options.port);
  if (!bound) {
    return fail(bound.error().code, "admin API: " + bound.error().message);
  }
  const auto port = *bound;
  s.api.context().api_listener = s.options.listen_address + ":" + std::to_string(port);
  Impl* raw = impl_.get();
  s.subscription = s.federation.subscribe_events([raw](const store::EventRecord& e) {
    raw->api.context().updates.on_event(e);
    raw->hub.publish(e);
  });
  asio::co_spawn(s.io, s.accept_loop(), asio::detached);
  spdlog::info("admin API on https://{}:{}/ (web root '{}')", s.options.listen_address, port,
               s.options.web_root);
  return port;
}

void ApiServer::shutdown() {
  auto& s = *impl_;
  if (s.stopping) {
    return;
  }
  s.stopping = true;
  if (s.subscription) {
    s.federation.unsubscribe_events(*s.subscription);
    s.subscription.reset();
  }
  error_code ignored;
  s.acceptor.close(ignored);
  s.room.cancel();
  s.close_all();
}

Api& ApiServer::api() noexcept {
  return impl_->api;
}

std::size_t ApiServer::connections() const noexcept {
  return impl_->connections.size();
}

}  // namespace fedcore::api
