#include "tests/api/https_client.hpp"

#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>

namespace fedcore::api::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Stream = beast::ssl_stream<beast::tcp_stream>;
using boost::system::error_code;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

asio::ssl::context client_context(const std::string& ca_file) {
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_3_VERSION);
  ctx.load_verify_file(ca_file);
  ctx.set_verify_mode(asio::ssl::verify_peer);
  return ctx;
}

asio::awaitable<error_code> connect(Stream& s, std::uint16_t port) {
  const tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), port);
  if (auto [ec] = co_await beast::get_lowest_layer(s).async_connect(endpoint, kNoThrow); ec) {
    co_return ec;
  }
  SSL_set_tlsext_host_name(s.native_handle(), "localhost");
  SSL_set1_host(s.native_handle(), "localhost");
  auto [ec] = co_await s.async_handshake(asio::ssl::stream_base::client, kNoThrow);
  co_return ec;
}

void copy_response(const http::response<http::string_body>& m, Reply& out) {
  out.status = static_cast<int>(m.result_int());
  for (const auto& f : m) {
    std::string name(f.name_string());
    for (auto& c : name) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    out.headers[name] = std::string(f.value());
  }
  out.body = m.body();
}

// Reads one response into `out`, keeping what arrived even if the read then fails.
asio::awaitable<void> read_response(Stream& s, Reply& out) {
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::uint64_t{256} << 20);
  auto [ec, n] = co_await http::async_read(s, buffer, parser, kNoThrow);
  (void)n;
  if (parser.is_header_done()) {
    copy_response(parser.get(), out);
  }
  if (ec) {
    out.error = ec;
  }
}

// Runs `task` on `io` for at most `deadline`.
void run_bounded(asio::io_context& io, asio::awaitable<void> task,
                 std::chrono::milliseconds deadline, Reply& out) {
  bool done = false;
  asio::co_spawn(io, std::move(task), [&done](std::exception_ptr) { done = true; });
  io.run_for(deadline);
  if (!done) {
    out.timed_out = true;
  }
}

}  // namespace

std::string Reply::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

nlohmann::json Reply::json() const {
  return nlohmann::json::parse(body, nullptr, false);
}

std::string Reply::describe() const {
  std::string text = "status " + std::to_string(status);
  if (error) {
    text += ", error " + error.message();
  }
  if (timed_out) {
    text += ", timed out";
  }
  return text + ", body: " + body.substr(0, 600);
}

Reply HttpsClient::request(const std::string& method, const std::string& target,
                           const std::string& body, const Headers& headers,
                           std::chrono::milliseconds deadline) const {
  auto ctx = client_context(ca_file_);
  Reply out;
  asio::io_context io;
  http::request<http::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, "localhost:" + std::to_string(port_));
  bool has_auth = false;
  for (const auto& [name, value] : headers) {
    if (beast::iequals(name, "authorization")) {
      has_auth = true;
      if (value.empty()) {
        continue;
      }
    }
    req.insert(name, value);
  }
  if (!has_auth && !token_.empty()) {
    req.set(http::field::authorization, "Bearer " + token_);
  }
  req.body() = body;
  if (!body.empty() || method == "POST") {
    req.prepare_payload();
  }
  req.keep_alive(false);
  auto task = [&]() -> asio::awaitable<void> {
    Stream s(io, ctx);
    if (auto ec = co_await connect(s, port_); ec) {
      out.error = ec;
      co_return;
    }
    auto [ec, n] = co_await http::async_write(s, req, kNoThrow);
    (void)n;
    // Read even after a failed write: the server may answer (413) before taking it all.
    co_await read_response(s, out);
    if (out.status == 0 && ec) {
      out.error = ec;
    }
  };
  run_bounded(io, task(), deadline, out);
  return out;
}

Reply HttpsClient::post_json(const std::string& target, const std::string& body,
                             const Headers& headers) const {
  Headers all = headers;
  bool has_type = false;
  for (const auto& h : headers) {
    has_type = has_type || beast::iequals(h.first, "content-type");
  }
  if (!has_type) {
    all.emplace_back("Content-Type", "application/json");
  }
  return request("POST", target, body, all);
}

Reply HttpsClient::raw(const std::string& bytes, std::chrono::milliseconds deadline) const {
  auto ctx = client_context(ca_file_);
  Reply out;
  asio::io_context io;
  auto task = [&]() -> asio::awaitable<void> {
    Stream s(io, ctx);
    if (auto ec = co_await connect(s, port_); ec) {
      out.error = ec;
      co_return;
    }
    auto [ec, n] = co_await asio::async_write(s, asio::buffer(bytes), kNoThrow);
    (void)n;
    co_await read_response(s, out);
    if (out.status == 0 && ec) {
      out.error = ec;
    }
  };
  run_bounded(io, task(), deadline, out);
  return out;
}

Reply HttpsClient::stream_events(const std::function<bool(const std::string&)>& until,
                                 std::chrono::milliseconds deadline,
                                 const std::function<void()>& on_open) const {
  auto ctx = client_context(ca_file_);
  Reply out;
  asio::io_context io;
  auto task = [&]() -> asio::awaitable<void> {
    Stream s(io, ctx);
    if (auto ec = co_await connect(s, port_); ec) {
      out.error = ec;
      co_return;
    }
    http::request<http::empty_body> req{http::verb::get, "/api/v1/events", 11};
    req.set(http::field::host, "localhost");
    req.set(http::field::authorization, "Bearer " + token_);
    req.set(http::field::accept, "text/event-stream");
    if (auto [ec, n] = co_await http::async_write(s, req, kNoThrow); ec) {
      out.error = ec;
      co_return;
    }
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    if (auto [ec, n] = co_await http::async_read_header(s, buffer, parser, kNoThrow); ec) {
      out.error = ec;
      co_return;
    }
    copy_response(parser.get(), out);
    if (on_open) {
      on_open();
    }
    while (!parser.is_done()) {
      auto [ec, n] = co_await http::async_read_some(s, buffer, parser, kNoThrow);
      (void)n;
      out.body = parser.get().body();
      if (ec) {
        out.error = ec;
        co_return;
      }
      if (until(out.body)) {
        co_return;
      }
    }
  };
  run_bounded(io, task(), deadline, out);
  return out;
}

HttpsClient::Hold HttpsClient::send_and_wait_for_close(const std::string& bytes,
                                                       std::chrono::milliseconds deadline) const {
  auto ctx = client_context(ca_file_);
  Hold hold;
  Reply ignored;
  asio::io_context io;
  const auto start = std::chrono::steady_clock::now();
  auto task = [&]() -> asio::awaitable<void> {
    Stream s(io, ctx);
    if (auto ec = co_await connect(s, port_); ec) {
      co_return;
    }
    if (auto [ec, n] = co_await asio::async_write(s, asio::buffer(bytes), kNoThrow); ec) {
      co_return;
    }
    char chunk[4096];
    while (true) {
      auto [ec, n] = co_await s.async_read_some(asio::buffer(chunk), kNoThrow);
      hold.received.append(chunk, n);
      if (ec) {
        hold.closed_by_server = true;
        hold.after = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start);
        co_return;
      }
    }
  };
  run_bounded(io, task(), deadline, ignored);
  return hold;
}

}  // namespace fedcore::api::testing
