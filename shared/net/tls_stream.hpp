// TlsStream: TLS over a TCP socket, built for bulk transfer of model parameters.
//
// Why not asio::ssl::stream. Asio moves ciphertext between OpenSSL and the socket
// through 17 KiB buffers, so every 16 KiB TLS record costs a system call and a trip
// through the reactor; on loopback that, not AES-GCM, bounded our channel at about a
// fifth of `openssl speed`. This stream gives OpenSSL a BIO pair of a few hundred KiB
// (tls_stream.cpp): a write encrypts up to that much straight from the caller's memory and hands it
// to the kernel in one send; a read takes whatever the kernel has (up to that much) in one receive
// and decrypts record after record straight into the caller's buffer. (Letting OpenSSL
// receive into its own record buffer instead, with read-ahead, saves the pair's copy on
// receipt but was measured slower on OpenSSL 3.0: docs/results.md, "OpenSSL reading the
// socket itself".)
//
// It is a drop-in AsyncStream for the ways Fedcore uses TLS: async_handshake,
// async_read_some, async_write_some (any completion token, so asio::async_read and
// asio::async_write work), async_shutdown, next_layer(), native_handle() for the SSL*.
// Errors use Asio's conventions: OpenSSL errors in asio::error::get_ssl_category() (so
// ERR_GET_REASON works on them), asio::ssl::error::stream_truncated when the peer closes
// the socket without close_notify, asio::error::eof after a close_notify.
//
// Concurrency: as asio::ssl::stream, at most one read and one write in flight at a time,
// from one thread (or strand). Both may be in flight together; the ciphertext they
// produce goes to the socket through one writer at a time. The stream must outlive its
// operations; moving it while an operation is in flight is not allowed.
//
// Offload (offload_to). A stream given a WorkerPool hands bulk record work to it: a read
// that finds at least kOffloadBytes of ciphertext received decrypts it on a pool thread, and
// a write of at least that much plaintext encrypts it there, while the stream's own thread
// serves other streams. So a server's sessions decrypt on several cores at once. (When no
// pool thread gets to a job before the stream's own thread has nothing else to do, that
// thread runs it itself: a busy machine loses nothing waiting for the pool.) The SSL
// object and its BIO pair are touched by one thread at a time: while a job of this stream
// runs, its other operation waits before its next OpenSSL call (and the socket I/O of both
// goes on). Results and errors are the same as without a pool.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>

#include "shared/util/worker_pool.hpp"

using SSL = struct ssl_st;

namespace fedcore::net {

class TlsStream : public boost::asio::ssl::stream_base {
 public:
  using executor_type = boost::asio::any_io_executor;
  using next_layer_type = boost::asio::ip::tcp::socket;
  using lowest_layer_type = boost::asio::ip::tcp::socket;

  // A stream over a connected (server side) or not yet connected socket; `context`
  // supplies the TLS policy and must outlive the stream.
  TlsStream(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& context);
  TlsStream(const executor_type& executor, boost::asio::ssl::context& context);
  template <class ExecutionContext>
  requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&> TlsStream(
      ExecutionContext& io, boost::asio::ssl::context& context)
      : TlsStream(executor_type(io.get_executor()), context) {}
  ~TlsStream();
  TlsStream(TlsStream&&) noexcept;
  TlsStream& operator=(TlsStream&&) noexcept;
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  executor_type get_executor() noexcept;
  next_layer_type& next_layer() noexcept;
  lowest_layer_type& lowest_layer() noexcept { return next_layer(); }
  SSL* native_handle() noexcept;

  // Bulk record work of at least this many bytes goes to the pool, when there is one.
  static constexpr std::size_t kOffloadBytes = std::size_t{64} << 10;
  // From the next operation on. `pool` (null: none) must outlive every operation of this
  // stream, and the stream's executor must stay alive while a job runs (a job holds work on
  // it until its completion has been posted back).
  void offload_to(WorkerPool* pool) noexcept;
  // How many jobs this stream has handed off, and how many of them a pool thread ran (the
  // stream's own thread runs a job the pool has not started by the time the job's turn in
  // the executor's queue comes: tls_stream.cpp, on_pool). For tests and benchmarks.
  std::uint64_t offloaded_jobs() const noexcept;
  std::uint64_t jobs_run_by_pool() const noexcept;

  struct IoResult {
    boost::system::error_code ec;
    std::size_t bytes = 0;
  };

  template <class Token>
  auto async_handshake(handshake_type type, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler, handshake_type t) {
          spawn(handshake(t), [h = std::move(handler)](IoResult r) mutable { std::move(h)(r.ec); });
        },
        token, type);
  }

  // Reads into the first non-empty buffer of the sequence (as asio::ssl::stream does).
  template <class MutableBufferSequence, class Token>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
    boost::asio::mutable_buffer first;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      if (boost::asio::mutable_buffer b(*it); b.size() > 0) {
        first = b;
        break;
      }
    }
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, boost::asio::mutable_buffer b) {
          spawn(read_some(b),
                [h = std::move(handler)](IoResult r) mutable { std::move(h)(r.ec, r.bytes); });
        },
        token, first);
  }

  // Encrypts from up to kMaxGather buffers of the sequence, at most 4 MiB of
  // plaintext, and completes once the ciphertext is with the kernel.
  template <class ConstBufferSequence, class Token>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
    Gather gather{};
    std::size_t count = 0;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && count < kMaxGather; ++it) {
      if (boost::asio::const_buffer b(*it); b.size() > 0) {
        gather[count++] = b;
      }
    }
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, Gather g, std::size_t n) {
          spawn(write_some(g, n),
                [h = std::move(handler)](IoResult r) mutable { std::move(h)(r.ec, r.bytes); });
        },
        token, gather, count);
  }

  // Sends close_notify. Does not wait for the peer's.
  template <class Token>
  auto async_shutdown(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler) {
          spawn(shutdown(), [h = std::move(handler)](IoResult r) mutable { std::move(h)(r.ec); });
        },
        token);
  }

 private:
  static constexpr std::size_t kMaxGather = 8;
  using Gather = std::array<boost::asio::const_buffer, kMaxGather>;
  struct Core;

  // The operations work on the Core, whose address does not change when the stream moves.
  boost::asio::awaitable<IoResult> handshake(handshake_type type) {
    return handshake(*core_, type);
  }
  boost::asio::awaitable<IoResult> read_some(boost::asio::mutable_buffer buffer) {
    return read_some(*core_, buffer);
  }
  boost::asio::awaitable<IoResult> write_some(Gather buffers, std::size_t count) {
    return write_some(*core_, buffers, count);
  }
  boost::asio::awaitable<IoResult> shutdown() { return shutdown(*core_); }
  static boost::asio::awaitable<IoResult> handshake(Core& core, handshake_type type);
  static boost::asio::awaitable<IoResult> read_some(Core& core, boost::asio::mutable_buffer buffer);
  static boost::asio::awaitable<IoResult> write_some(Core& core, Gather buffers, std::size_t count);
  static boost::asio::awaitable<IoResult> shutdown(Core& core);
  static boost::asio::awaitable<boost::system::error_code> flush(Core& core);
  static boost::asio::awaitable<boost::system::error_code> receive(Core& core);
  static IoResult failed_by_exception() noexcept;
  static boost::asio::awaitable<void> settle(Core& core);
  template <class Result, class Job>
  static boost::asio::awaitable<Result> on_pool(Core& core, Job job);

  // Runs `operation` on the socket's executor and passes its result to `complete`.
  template <class Complete>
  void spawn(boost::asio::awaitable<IoResult> operation, Complete complete) {
    boost::asio::co_spawn(get_executor(), std::move(operation),
                          [c = std::move(complete)](std::exception_ptr e, IoResult r) mutable {
                            std::move(c)(e ? failed_by_exception() : r);
                          });
  }

  std::shared_ptr<Core> core_;  // shared: a pool job keeps it alive until it is back
};

}  // namespace fedcore::net
