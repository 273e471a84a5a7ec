#include "shared/net/tls_stream.hpp"

#include <algorithm>
#include <atomic>
#include <new>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "shared/util/worker_pool.hpp"

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
//
// With a pool, `offloaded` is true while a job of this stream runs on a pool thread; every
// coroutine of the stream calls settle() before touching `ssl` or either BIO, and the job's
// end cancels `offload_done`.
struct TlsStream::Core : std::enable_shared_from_this<TlsStream::Core> {
  Core(tcp::socket s, asio::ssl::context& context)
      : socket(std::move(s)),
        flush_done(socket.get_executor()),
        write_done(socket.get_executor()),
        offload_done(socket.get_executor()) {
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
  WorkerPool* pool = nullptr;
  bool offloaded = false;
  std::uint64_t jobs = 0;
  std::atomic<std::uint64_t> pool_jobs{0};  // of `jobs`, those a pool thread ran
  asio::steady_timer offload_done;          // cancelled when a job is back
};

// Waits until no job of this stream is running on a pool thread. Only then may the caller
// touch the SSL object or the BIO pair, up to its next co_await.
asio::awaitable<void> TlsStream::settle(Core& c) {
  while (c.offloaded) {
    wait_forever(c.offload_done);
    co_await c.offload_done.async_wait(kNoThrow);
  }
}

// Runs `job` away from the caller's coroutine and resumes the caller on the stream's
// executor with its result; `offloaded` is cleared there just before.
//
// Who runs it is a race, settled by `claimed`: the pool (a thread that is free picks it up
// at once), or the stream's own thread, which finds the job at the back of its queue after
// the events that were ready before it. On a machine whose other cores are busy, a woken
// pool thread may wait a scheduler slice for a core, longer than the job takes (256 KiB of
// AES-GCM is about 50 us); then the io thread, which would otherwise sit idle, does the
// job itself, and nothing waits for the pool. Whichever side loses finds the job taken.
//
// The Core and the executor's work stay held until the caller resumes, so a stream closed
// meanwhile is still there; the handler and the Core are only ever released on the stream's
// executor. Not a coroutine itself: GCC 12 destroys a temporary with a destructor inside a
// co_await expression twice, and the initiation holds a shared_ptr.
template <class Result, class Job>
asio::awaitable<Result> TlsStream::on_pool(Core& c, Job job) {
  c.offloaded = true;
  ++c.jobs;
  auto initiation = [keep = c.shared_from_this(), job = std::move(job)](auto handler) mutable {
    using Handler = decltype(handler);
    struct Race {
      Race(Job j, Handler h, std::shared_ptr<Core> k)
          : job(std::move(j)),
            handler(std::move(h)),
            keep(std::move(k)),
            work(asio::make_work_guard(keep->socket.get_executor())) {}
      Job job;
      Handler handler;             // touched on the stream's executor only
      std::shared_ptr<Core> keep;  // likewise
      asio::executor_work_guard<asio::any_io_executor> work;
      std::atomic<bool> claimed{false};

      // On the stream's executor: the caller goes on.
      void resume(const Result& r) {
        auto core = std::move(keep);
        auto h = std::move(handler);
        core->offloaded = false;
        core->offload_done.cancel();
        std::move(h)(r);
      }
    };
    auto race = std::make_shared<Race>(std::move(job), std::move(handler), std::move(keep));
    const auto executor = race->work.get_executor();
    race->keep->pool->post([race] {
      if (race->claimed.exchange(true)) {
        return;
      }
      const Result r = race->job();
      ++race->keep->pool_jobs;  // atomic: read by tests on the stream's thread afterwards
      const auto executor = race->work.get_executor();
      asio::post(executor, [race = std::move(race), r]() mutable { race->resume(r); });
    });
    asio::post(executor, [race = std::move(race)] {
      if (race->claimed.exchange(true)) {
        return;
      }
      race->resume(race->job());
    });
  };
  return asio::async_initiate<decltype(asio::use_awaitable), void(Result)>(std::move(initiation),
                                                                           asio::use_awaitable);
}

TlsStream::TlsStream(tcp::socket socket, asio::ssl::context& context)
    : core_(std::make_shared<Core>(std::move(socket), context)) {}
TlsStream::TlsStream(const executor_type& executor, asio::ssl::context& context)
    : core_(std::make_shared<Core>(tcp::socket(executor), context)) {}
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
void TlsStream::offload_to(WorkerPool* pool) noexcept {
  core_->pool = pool;
}
std::uint64_t TlsStream::offloaded_jobs() const noexcept {
  return core_->jobs;
}
std::uint64_t TlsStream::jobs_run_by_pool() const noexcept {
  return core_->pool_jobs.load();
}

TlsStream::IoResult TlsStream::failed_by_exception() noexcept {
  return {asio::error::no_memory, 0};
}

// Sends all ciphertext waiting in the BIO pair. The caller makes sure nobody else is
// flushing.
asio::awaitable<error_code> TlsStream::flush(Core& c) {
  c.flushing = true;
  error_code ec;
  while (!ec) {
    co_await settle(c);
    if (BIO_ctrl_pending(c.network) == 0) {
      break;
    }
    char* data = nullptr;
    const int available = BIO_nread0(c.network, &data);
    if (available <= 0) {
      break;
    }
    // A job of the read side may run meanwhile: it appends to the BIO's free space at most
    // (an alert), never to the bytes being sent, and we settle before consuming them.
    auto [e, sent] = co_await asio::async_write(
        c.socket, asio::buffer(data, static_cast<std::size_t>(available)), kNoThrow);
    ec = e;
    if (sent > 0) {
      co_await settle(c);
      BIO_nread(c.network, &data, static_cast<int>(sent));
    }
  }
  c.flushing = false;
  c.flush_done.cancel();
  co_return ec;
}

// Moves what the kernel has (up to the BIO's free space) into the BIO pair.
asio::awaitable<error_code> TlsStream::receive(Core& c) {
  co_await settle(c);
  char* space = nullptr;
  const int room = BIO_nwrite0(c.network, &space);
  if (room <= 0) {
    // OpenSSL asked for more input while its input buffer is full: a record larger than
    // the BIO, which TLS does not allow.
    co_return asio::error::no_buffer_space;
  }
  // A job of the write side may run meanwhile; it writes the other half of the pair.
  auto [ec, got] = co_await c.socket.async_read_some(
      asio::buffer(space, static_cast<std::size_t>(room)), kNoThrow);
  if (ec) {
    co_return ec == asio::error::eof ? error_code(asio::ssl::error::stream_truncated) : ec;
  }
  co_await settle(c);
  BIO_nwrite(c.network, &space, static_cast<int>(got));
  co_return error_code{};
}

asio::awaitable<TlsStream::IoResult> TlsStream::handshake(Core& c, handshake_type type) {
  co_await settle(c);
  if (type == client) {
    SSL_set_connect_state(c.ssl);
  } else {
    SSL_set_accept_state(c.ssl);
  }
  while (true) {
    co_await settle(c);
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

namespace {

// What one pass of SSL_read_ex over the records received so far gave. `failure` is read
// from the OpenSSL error queue of the thread that ran the pass (the queue is per thread).
struct Decrypted {
  std::size_t total = 0;
  int reason = SSL_ERROR_NONE;
  error_code failure;
};

// Decrypts whole records already in the BIO pair into out[total, size), until the buffer
// is full or OpenSSL stops.
Decrypted decrypt_received(SSL* ssl, unsigned char* out, std::size_t size, std::size_t total) {
  while (total < size) {
    ERR_clear_error();
    std::size_t n = 0;
    const int r = SSL_read_ex(ssl, out + total, size - total, &n);
    if (r == 1) {
      total += n;
      continue;
    }
    const int reason = SSL_get_error(ssl, r);
    const bool expected = reason == SSL_ERROR_ZERO_RETURN || reason == SSL_ERROR_WANT_READ ||
                          reason == SSL_ERROR_WANT_WRITE;
    return {total, reason, expected ? error_code{} : ssl_failure(reason)};
  }
  return {total, SSL_ERROR_NONE, {}};
}

// Where a write stands in its gather list, and how much plaintext OpenSSL has taken.
struct WriteProgress {
  std::size_t index = 0;
  std::size_t offset = 0;
  std::size_t total = 0;
};

struct Encrypted {
  bool bio_full = false;  // OpenSSL wants the BIO flushed before it takes more
  error_code failure;
};

// Encrypts into the BIO pair from where `p` stands until the plaintext or the budget is
// used up, or the BIO is full. After WANT_WRITE OpenSSL wants the same bytes again:
// `p` is then unchanged, so the next call passes them.
template <class Gather>
Encrypted encrypt_some(SSL* ssl, const Gather& buffers, std::size_t count, WriteProgress& p,
                       std::size_t budget) {
  while (p.index < count && p.total < budget) {
    const auto* data = static_cast<const unsigned char*>(buffers[p.index].data()) + p.offset;
    const std::size_t left = buffers[p.index].size() - p.offset;
    if (left == 0) {
      ++p.index;
      p.offset = 0;
      continue;
    }
    ERR_clear_error();
    const std::size_t want = std::min(left, budget - p.total);
    std::size_t n = 0;
    const int r = SSL_write_ex(ssl, data, want, &n);
    if (r == 1) {
      p.offset += n;
      p.total += n;
      continue;
    }
    const int reason = SSL_get_error(ssl, r);
    if (reason != SSL_ERROR_WANT_WRITE) {
      return {false, ssl_failure(reason)};
    }
    return {true, {}};
  }
  return {};
}

}  // namespace

asio::awaitable<TlsStream::IoResult> TlsStream::read_some(Core& c, asio::mutable_buffer buffer) {
  if (buffer.size() == 0) {
    co_return IoResult{};
  }
  auto* out = static_cast<unsigned char*>(buffer.data());
  const std::size_t size = buffer.size();
  std::size_t total = 0;
  // Decrypt every whole record already received, straight into the caller's buffer;
  // go to the socket only when there is nothing to hand over yet.
  while (true) {
    co_await settle(c);
    const bool bulk = c.pool != nullptr && size - total >= kOffloadBytes &&
                      BIO_ctrl_pending(SSL_get_rbio(c.ssl)) >= kOffloadBytes;
    // Not `bulk ? co_await ... : ...`: GCC 12 miscompiles a co_await inside a conditional
    // expression.
    Decrypted d;
    if (bulk) {
      d = co_await on_pool<Decrypted>(
          c, [ssl = c.ssl, out, size, total] { return decrypt_received(ssl, out, size, total); });
    } else {
      d = decrypt_received(c.ssl, out, size, total);
    }
    total = d.total;
    if (total == size) {
      break;
    }
    if (total > 0) {
      break;  // deliver what we have; an error, if any, repeats on the next call
    }
    if (d.reason == SSL_ERROR_ZERO_RETURN) {
      co_return IoResult{asio::error::eof, 0};  // the peer sent close_notify
    }
    if (d.reason == SSL_ERROR_WANT_READ || d.reason == SSL_ERROR_WANT_WRITE) {
      // Output the read produced (an alert, a key update) goes now unless a write in
      // flight will take it along.
      if (BIO_ctrl_pending(c.network) > 0 && !c.writing && !c.flushing) {
        if (auto ec = co_await flush(c)) {
          co_return IoResult{ec, 0};
        }
      } else if (d.reason == SSL_ERROR_WANT_WRITE && c.writing) {
        wait_forever(c.write_done);
        co_await c.write_done.async_wait(kNoThrow);
        continue;
      }
      if (d.reason == SSL_ERROR_WANT_READ) {
        if (auto ec = co_await receive(c)) {
          co_return IoResult{ec, 0};
        }
      }
      continue;
    }
    co_return IoResult{d.failure, 0};
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
  std::size_t plaintext = 0;
  for (std::size_t i = 0; i < count; ++i) {
    plaintext += buffers[i].size();
  }
  const std::size_t budget = std::min(plaintext, kWriteBudget);
  WriteProgress progress;
  while (progress.total < budget) {
    // A flush that finished just before the socket was closed resumes us without an
    // error; the caller may already have given up on the operation and freed the
    // buffer, so nothing more is read from it once the socket is gone.
    if (!c.socket.is_open()) {
      co_return IoResult{asio::error::operation_aborted, 0};
    }
    co_await settle(c);
    const bool bulk = c.pool != nullptr && budget - progress.total >= kOffloadBytes;
    Encrypted e;
    if (bulk) {  // (see read_some: no co_await in a conditional expression)
      e = co_await on_pool<Encrypted>(c, [ssl = c.ssl, &buffers, count, &progress, budget] {
        return encrypt_some(ssl, buffers, count, progress, budget);
      });
    } else {
      e = encrypt_some(c.ssl, buffers, count, progress, budget);
    }
    if (e.failure) {
      co_return IoResult{e.failure, 0};
    }
    if (!e.bio_full) {
      break;
    }
    if (auto ec = co_await flush(c)) {  // the BIO is full: send, then go on
      co_return IoResult{ec, 0};
    }
  }
  if (auto ec = co_await flush(c)) {
    co_return IoResult{ec, 0};
  }
  co_return IoResult{{}, progress.total};
}

asio::awaitable<TlsStream::IoResult> TlsStream::shutdown(Core& c) {
  co_await settle(c);
  ERR_clear_error();
  const int r = SSL_shutdown(c.ssl);
  const error_code failure = r < 0 ? ssl_failure(SSL_get_error(c.ssl, r)) : error_code{};
  const error_code sent = co_await flush(c);
  co_return IoResult{failure ? failure : sent, 0};
}

}  // namespace fedcore::net
