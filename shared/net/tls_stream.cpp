#include "shared/net/tls_stream.hpp"

#include <algorithm>
#include <new>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace fedcore::net {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
// Ciphertext buffered per direction; one socket send or receive moves up to this much.
// Larger means fewer system calls per byte but more memory per connection (2 x this).
constexpr std::size_t kBioBytes = std::size_t{256} << 10;
// Plaintext one async_write_some takes at most; the ciphertext leaves in kBioBytes steps.
constexpr std::size_t kWriteBudget = std::size_t{4} << 20;

// OpenSSL's view of a failed call, in Asio's conventions (see the header).
error_code ssl_failure(int reason) {
  const unsigned long queued = ERR_get_error();
  if (reason == SSL_ERROR_SYSCALL && queued == 0) {
    return asio::ssl::error::stream_truncated;  // the socket ended under the record layer
  }
  if (queued == 0) {
    return asio::error::fault;  // OpenSSL failed without saying why
  }
  return {static_cast<int>(queued), asio::error::get_ssl_category()};
}

void wait_forever(asio::steady_timer& timer) {
  timer.expires_at(asio::steady_timer::time_point::max());
}

}  // namespace

// The SSL object talks to `internal`, one end of a BIO pair; `network` is the other end,
// whose bytes we move to and from the socket ourselves. `flushing` and `writing` keep
// ciphertext going out through one writer at a time: a read that needs to send (rare in
// TLS 1.3 after the handshake) leaves it to a write in flight, and a write that starts
// while a read is sending waits for `flush_done`.
struct TlsStream::Core {
  Core(tcp::socket s, asio::ssl::context& context)
      : socket(std::move(s)), flush_done(socket.get_executor()), write_done(socket.get_executor()) {
    ssl = SSL_new(context.native_handle());
    BIO* internal = nullptr;
    if (ssl == nullptr || BIO_new_bio_pair(&internal, kBioBytes, &network, kBioBytes) != 1) {
      SSL_free(ssl);
      throw std::bad_alloc();  // out of memory while opening a connection
    }
    SSL_set_bio(ssl, internal, internal);  // the SSL owns `internal` from here
    // Partial writes let a large SSL_write stop when the BIO is full; the buffer may move
    // between retries because our retries pass the same bytes from the same span.
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  }
  ~Core() {
    SSL_free(ssl);
    BIO_free(network);
  }
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  tcp::socket socket;
  SSL* ssl = nullptr;
  BIO* network = nullptr;
  bool flushing = false;
  bool writing = false;
  asio::steady_timer flush_done;  // cancelled when a flush ends
  asio::steady_timer write_done;  // cancelled when a write ends
};

TlsStream::TlsStream(tcp::socket socket, asio::ssl::context& context)
    : core_(std::make_unique<Core>(std::move(socket), context)) {}
TlsStream::TlsStream(const executor_type& executor, asio::ssl::context& context)
    : core_(std::make_unique<Core>(tcp::socket(executor), context)) {}
TlsStream::~TlsStream() = default;
TlsStream::TlsStream(TlsStream&&) noexcept = default;
TlsStream& TlsStream::operator=(TlsStream&&) noexcept = default;

TlsStream::executor_type TlsStream::get_executor() noexcept {
  return core_->socket.get_executor();
}
TlsStream::next_layer_type& TlsStream::next_layer() noexcept {
  return core_->socket;
}
SSL* TlsStream::native_handle() noexcept {
  return core_->ssl;
}

TlsStream::IoResult TlsStream::failed_by_exception() noexcept {
  return {asio::error::no_memory, 0};
}

// Sends all ciphertext waiting in the BIO pair. The caller makes sure nobody else is
// flushing.
asio::awaitable<error_code> TlsStream::flush(Core& c) {
  c.flushing = true;
  error_code ec;
  while (!ec && BIO_ctrl_pending(c.network) > 0) {
    char* data = nullptr;
    const int available = BIO_nread0(c.network, &data);
    if (available <= 0) {
      break;
    }
    auto [e, sent] = co_await asio::async_write(
        c.socket, asio::buffer(data, static_cast<std::size_t>(available)), kNoThrow);
    ec = e;
    if (sent > 0) {
      BIO_nread(c.network, &data, static_cast<int>(sent));
    }
  }
  c.flushing = false;
  c.flush_done.cancel();
  co_return ec;
}

// Moves what the kernel has (up to the BIO's free space) into the BIO pair.
asio::awaitable<error_code> TlsStream::receive(Core& c) {
  char* space = nullptr;
  const int room = BIO_nwrite0(c.network, &space);
  if (room <= 0) {
    // OpenSSL asked for more input while its input buffer is full: a record larger than
    // the BIO, which TLS does not allow.
    co_return asio::error::no_buffer_space;
  }
  auto [ec, got] = co_await c.socket.async_read_some(
      asio::buffer(space, static_cast<std::size_t>(room)), kNoThrow);
  if (ec) {
    co_return ec == asio::error::eof ? error_code(asio::ssl::error::stream_truncated) : ec;
  }
  BIO_nwrite(c.network, &space, static_cast<int>(got));
  co_return error_code{};
}

asio::awaitable<TlsStream::IoResult> TlsStream::handshake(Core& c, handshake_type type) {
  if (type == client) {
    SSL_set_connect_state(c.ssl);
  } else {
    SSL_set_accept_state(c.ssl);
  }
  while (true) {
    ERR_clear_error();
    const int r = SSL_do_handshake(c.ssl);
    const int reason = r == 1 ? SSL_ERROR_NONE : SSL_get_error(c.ssl, r);
    const bool failed =
        reason != SSL_ERROR_NONE && reason != SSL_ERROR_WANT_READ && reason != SSL_ERROR_WANT_WRITE;
    const error_code failure = failed ? ssl_failure(reason) : error_code{};
    // Whatever OpenSSL produced goes out: the next flight, or the alert that tells the
    // peer why the handshake failed.
    const error_code sent = co_await flush(c);
    if (failed) {
      co_return IoResult{failure, 0};
    }
    if (sent) {
      co_return IoResult{sent, 0};
    }
    if (r == 1) {
      co_return IoResult{};
    }
    if (reason == SSL_ERROR_WANT_READ) {
      if (auto ec = co_await receive(c)) {
        co_return IoResult{ec, 0};
      }
    }
  }
}

asio::awaitable<TlsStream::IoResult> TlsStream::read_some(Core& c, asio::mutable_buffer buffer) {
  if (buffer.size() == 0) {
    co_return IoResult{};
  }
  auto* out = static_cast<unsigned char*>(buffer.data());
  std::size_t total = 0;
  // Decrypt every whole record already received, straight into the caller's buffer;
  // go to the socket only when there is nothing to hand over yet.
  while (total < buffer.size()) {
    ERR_clear_error();
    std::size_t n = 0;
    const int r = SSL_read_ex(c.ssl, out + total, buffer.size() - total, &n);
    if (r == 1) {
      total += n;
      continue;
    }
    const int reason = SSL_get_error(c.ssl, r);
    if (total > 0) {
      break;  // deliver what we have; an error, if any, repeats on the next call
    }
    if (reason == SSL_ERROR_ZERO_RETURN) {
      co_return IoResult{asio::error::eof, 0};  // the peer sent close_notify
    }
    if (reason == SSL_ERROR_WANT_READ || reason == SSL_ERROR_WANT_WRITE) {
      // Output the read produced (an alert, a key update) goes now unless a write in
      // flight will take it along.
      if (BIO_ctrl_pending(c.network) > 0 && !c.writing && !c.flushing) {
        if (auto ec = co_await flush(c)) {
          co_return IoResult{ec, 0};
        }
      } else if (reason == SSL_ERROR_WANT_WRITE && c.writing) {
        wait_forever(c.write_done);
        co_await c.write_done.async_wait(kNoThrow);
        continue;
      }
      if (reason == SSL_ERROR_WANT_READ) {
        if (auto ec = co_await receive(c)) {
          co_return IoResult{ec, 0};
        }
      }
      continue;
    }
    co_return IoResult{ssl_failure(reason), 0};
  }
  co_return IoResult{{}, total};
}

asio::awaitable<TlsStream::IoResult> TlsStream::write_some(Core& c, Gather buffers,
                                                           std::size_t count) {
  if (count == 0) {
    co_return IoResult{};
  }
  c.writing = true;
  struct Done {
    Core& c;
    ~Done() {
      c.writing = false;
      c.write_done.cancel();
    }
  } done{c};
  while (c.flushing) {  // a read is sending something; we go after it
    wait_forever(c.flush_done);
    co_await c.flush_done.async_wait(kNoThrow);
  }
  std::size_t total = 0;
  for (std::size_t i = 0; i < count && total < kWriteBudget; ++i) {
    const auto* data = static_cast<const unsigned char*>(buffers[i].data());
    std::size_t left = buffers[i].size();
    while (left > 0 && total < kWriteBudget) {
      // A flush that finished just before the socket was closed resumes us without an
      // error; the caller may already have given up on the operation and freed the
      // buffer, so nothing more is read from it once the socket is gone.
      if (!c.socket.is_open()) {
        co_return IoResult{asio::error::operation_aborted, 0};
      }
      ERR_clear_error();
      // After WANT_WRITE, OpenSSL wants the same bytes again: `data`, `left` and `total`
      // are unchanged, so `want` is too.
      const std::size_t want = std::min(left, kWriteBudget - total);
      std::size_t n = 0;
      const int r = SSL_write_ex(c.ssl, data, want, &n);
      if (r == 1) {
        data += n;
        left -= n;
        total += n;
        continue;
      }
      const int reason = SSL_get_error(c.ssl, r);
      if (reason != SSL_ERROR_WANT_WRITE) {
        co_return IoResult{ssl_failure(reason), 0};
      }
      if (auto ec = co_await flush(c)) {  // the BIO is full: send, then go on
        co_return IoResult{ec, 0};
      }
    }
  }
  if (auto ec = co_await flush(c)) {
    co_return IoResult{ec, 0};
  }
  co_return IoResult{{}, total};
}

asio::awaitable<TlsStream::IoResult> TlsStream::shutdown(Core& c) {
  ERR_clear_error();
  const int r = SSL_shutdown(c.ssl);
  const error_code failure = r < 0 ? ssl_failure(SSL_get_error(c.ssl, r)) : error_code{};
  const error_code sent = co_await flush(c);
  co_return IoResult{failure ? failure : sent, 0};
}

}  // namespace fedcore::net
