#include "tests/tls/tls_support.hpp"

#include <array>
#include <cstdio>
#include <sys/wait.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include "shared/net/tls_stream.hpp"
#include "tests/support/build_outputs.hpp"

namespace fedcore::tls::testing {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Stream = net::TlsStream;  // the stream the product uses
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// Sends FIN, then reads until the peer closes too, then closes: closing with unread bytes
// would send a reset that can overtake the TLS alert the peer is about to read.
asio::awaitable<void> close_gracefully(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_send, ignored);
  std::array<char, 4096> sink;
  for (;;) {
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(sink), kTuple);
    if (ec) {
      break;
    }
  }
  socket.close(ignored);
}

asio::awaitable<void> serve(tcp::acceptor& acceptor, Stream& stream, Attempt& out) {
  auto [accept_ec] = co_await acceptor.async_accept(stream.next_layer(), kTuple);
  if (accept_ec) {
    out.server_handshake = accept_ec;
    co_return;
  }
  auto [ec] = co_await stream.async_handshake(Stream::server, kTuple);
  out.server_handshake = ec;
  out.server_verify = SSL_get_verify_result(stream.native_handle());
  out.server_num_tickets = SSL_get_num_tickets(stream.native_handle());
  if (!ec) {
    out.peer_cn = peer_common_name(stream.native_handle());
    const std::string greeting = kGreeting;
    co_await asio::async_write(stream, asio::buffer(greeting), kTuple);
  }
  co_await close_gracefully(stream.next_layer());
}

asio::awaitable<void> connect(tcp::endpoint endpoint, Stream& stream, Attempt& out) {
  auto [connect_ec] = co_await stream.next_layer().async_connect(endpoint, kTuple);
  if (connect_ec) {
    out.client_handshake = connect_ec;
    co_return;
  }
  auto [ec] = co_await stream.async_handshake(Stream::client, kTuple);
  out.client_handshake = ec;
  out.client_verify = SSL_get_verify_result(stream.native_handle());
  if (!ec) {
    std::string buffer(std::char_traits<char>::length(kGreeting), '\0');
    auto [read_ec, n] = co_await asio::async_read(stream, asio::buffer(buffer), kTuple);
    out.client_read = read_ec;
    out.greeting = buffer.substr(0, n);
    const SSL_SESSION* session = SSL_get_session(stream.native_handle());
    out.client_session_resumable = session != nullptr && SSL_SESSION_is_resumable(session) == 1;
  }
  co_await close_gracefully(stream.next_layer());
}

std::string describe_ec(const boost::system::error_code& ec) {
  if (!ec) {
    return "ok";
  }
  return ec.category().name() + std::string(":") + std::to_string(ec.value()) + " (" +
         ec.message() + ")";
}

}  // namespace

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    result.output = "popen failed";
    return result;
  }
  std::array<char, 4096> buffer;
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    result.output.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  result.status = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

CommandResult Pki::run(const std::string& args) const {
  return run_command(shell_quote(fedcore::testing::pki_script()) + " --dir " + shell_quote(dir_) +
                     " " + args);
}

Federation::Federation(const Ids& client_ids) {
  step("init");
  step("server fedcore-server");
  for (const auto& id : client_ids) {
    step("client " + id);
  }
}

int Federation::step(const std::string& args) {
  const CommandResult result = pki.run(args);
  log += "$ fedcore-pki " + args + " -> " + std::to_string(result.status) + "\n" + result.output;
  if (result.status != 0) {
    ok = false;
  }
  return result.status;
}

bool Attempt::connected() const {
  return !timed_out && !server_handshake && !client_handshake && !client_read &&
         greeting == kGreeting;
}

std::string Attempt::describe() const {
  std::string out = "server handshake " + describe_ec(server_handshake) + ", server verify " +
                    X509_verify_cert_error_string(server_verify) + "; client handshake " +
                    describe_ec(client_handshake) + ", client verify " +
                    X509_verify_cert_error_string(client_verify) + ", client read " +
                    describe_ec(client_read);
  if (peer_cn) {
    out += *peer_cn ? ", peer CN '" + **peer_cn + "'"
                    : ", peer CN error " + peer_cn->error().to_string();
  }
  return timed_out ? out + "; TIMED OUT" : out;
}

Attempt attempt(asio::ssl::context& server_ctx, asio::ssl::context& client_ctx,
                const AttemptOptions& options) {
  Attempt out;
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  Stream server(io, server_ctx);
  Stream client(io, client_ctx);
  if (options.server_name) {
    if (auto prepared = prepare_client_stream(client, *options.server_name); !prepared) {
      out.client_handshake = make_error_code(prepared.error().code);
      return out;
    }
  }
  asio::co_spawn(io, serve(acceptor, server, out), asio::detached);
  asio::co_spawn(io, connect(acceptor.local_endpoint(), client, out), asio::detached);
  io.run_for(options.deadline);
  if (!io.stopped()) {
    // Closing everything completes every pending operation, so the coroutines finish.
    out.timed_out = true;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    server.next_layer().close(ignored);
    client.next_layer().close(ignored);
    io.restart();
    io.run_for(std::chrono::seconds(2));
  }
  return out;
}

int ssl_reason(const boost::system::error_code& ec) {
  if (ec.category() != asio::error::get_ssl_category()) {
    return -1;
  }
  return ERR_GET_REASON(static_cast<unsigned long>(ec.value()));
}

asio::ssl::context anonymous_client_context(const std::string& ca_file) {
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_3_VERSION);
  ctx.load_verify_file(ca_file);
  ctx.set_verify_mode(asio::ssl::verify_peer);
  return ctx;
}

}  // namespace fedcore::tls::testing
