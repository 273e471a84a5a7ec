// TlsStream over real loopback TLS 1.3 with certificates from certs/fedcore-pki: data in
// both directions at once arrives intact, and the ways a stream ends are told apart.
#include "shared/net/tls_stream.hpp"

#include <atomic>
#include <cstdio>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "shared/tls/context.hpp"
#include "shared/util/rng.hpp"
#include "shared/util/worker_pool.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tls/tls_support.hpp"

namespace fedcore::net {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

std::vector<unsigned char> random_bytes(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<unsigned char> out(n);
  for (auto& b : out) {
    b = static_cast<unsigned char>(rng.next_u64() >> 56);
  }
  return out;
}

// A server and a client stream, handshaken, each on its own io_context and thread.
class TlsPair {
 public:
  explicit TlsPair(const testing::TempDir& dir) : pki_(dir.path("pki")) {
    EXPECT_EQ(pki_.run("init").status, 0);
    EXPECT_EQ(pki_.run("server fedcore-server").status, 0);
    EXPECT_EQ(pki_.run("client site-1").status, 0);
    server_ctx_.emplace(std::move(*tls::make_server_context(pki_.server_config())));
    client_ctx_.emplace(std::move(*tls::make_client_context(pki_.client_config("site-1"))));
  }

  // Runs `server_side(stream)` and `client_side(stream)` after a handshake, to the end.
  // With pools, each stream hands its bulk record work to its pool from the handshake on.
  template <class ServerSide, class ClientSide>
  void run(ServerSide server_side, ClientSide client_side, WorkerPool* server_pool = nullptr,
           WorkerPool* client_pool = nullptr) {
    asio::io_context server_io, client_io;
    tcp::acceptor acceptor(server_io, {asio::ip::make_address("127.0.0.1"), 0});
    const auto port = acceptor.local_endpoint().port();
    asio::co_spawn(
        server_io,
        [&]() -> asio::awaitable<void> {
          auto [accept_error, socket] = co_await acceptor.async_accept(kNoThrow);
          EXPECT_FALSE(accept_error);
          TlsStream stream(std::move(socket), *server_ctx_);
          stream.offload_to(server_pool);
          auto [ec] = co_await stream.async_handshake(TlsStream::server, kNoThrow);
          EXPECT_FALSE(ec) << ec.message();
          co_await server_side(stream);
        },
        asio::detached);
    asio::co_spawn(
        client_io,
        [&]() -> asio::awaitable<void> {
          TlsStream stream(client_io, *client_ctx_);
          stream.offload_to(client_pool);
          EXPECT_TRUE(tls::prepare_client_stream(stream, "localhost"));
          auto [connect_error] = co_await stream.next_layer().async_connect(
              {asio::ip::make_address("127.0.0.1"), port}, kNoThrow);
          EXPECT_FALSE(connect_error);
          auto [ec] = co_await stream.async_handshake(TlsStream::client, kNoThrow);
          EXPECT_FALSE(ec) << ec.message();
          co_await client_side(stream);
        },
        asio::detached);
    std::thread server_thread([&] { server_io.run_for(std::chrono::seconds(60)); });
    client_io.run_for(std::chrono::seconds(60));
    server_thread.join();
  }

 private:
  tls::testing::Pki pki_;
  std::optional<asio::ssl::context> server_ctx_, client_ctx_;
};

// Writes `data` in three gather pieces, reads `expected.size()` bytes into `got`, both at
// once on the same stream.
asio::awaitable<void> exchange(TlsStream& stream, const std::vector<unsigned char>& data,
                               std::vector<unsigned char>& got) {
  bool wrote = false;
  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer write_finished(executor, asio::steady_timer::time_point::max());
  asio::co_spawn(
      executor,
      [&]() -> asio::awaitable<void> {
        const std::size_t a = 7, b = data.size() / 3;
        const std::array<asio::const_buffer, 3> pieces{
            asio::buffer(data.data(), a), asio::buffer(data.data() + a, b),
            asio::buffer(data.data() + a + b, data.size() - a - b)};
        auto [ec, n] = co_await asio::async_write(stream, pieces, kNoThrow);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_EQ(n, data.size());
        wrote = true;
        write_finished.cancel();
      },
      asio::detached);
  auto [ec, n] = co_await asio::async_read(stream, asio::buffer(got), kNoThrow);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(n, got.size());
  // Keep the stream alive until our own write is done too.
  if (!wrote) {
    co_await write_finished.async_wait(kNoThrow);
  }
}

TEST(TlsStream, FullDuplexTransfersOfManyRecordsArriveIntact) {
  testing::TempDir dir;
  TlsPair pair(dir);
  // Larger than the BIO pair and the socket buffers, in both directions at the same time.
  const auto to_client = random_bytes(9'000'001, 1);
  const auto to_server = random_bytes(7'654'321, 2);
  std::vector<unsigned char> at_client(to_client.size()), at_server(to_server.size());
  pair.run([&](TlsStream& s) { return exchange(s, to_client, at_server); },
           [&](TlsStream& s) { return exchange(s, to_server, at_client); });
  EXPECT_TRUE(at_client == to_client);
  EXPECT_TRUE(at_server == to_server);
}

// The same with the record work on pool threads at both ends: the bytes are the same, and
// both directions really went through the pools (while a job of one direction runs, the
// other direction's socket I/O goes on, and its OpenSSL calls wait).
TEST(TlsStream, OffloadedToPoolsFullDuplexTransfersArriveIntact) {
  testing::TempDir dir;
  TlsPair pair(dir);
  WorkerPool server_pool(2), client_pool(1);
  const auto to_client = random_bytes(9'000'001, 3);
  const auto to_server = random_bytes(7'654'321, 4);
  std::vector<unsigned char> at_client(to_client.size()), at_server(to_server.size());
  std::uint64_t server_jobs = 0, client_jobs = 0;
  std::atomic<std::uint64_t> by_pools{0};  // both ends add to it, each from its own thread
  pair.run(
      [&](TlsStream& s) -> asio::awaitable<void> {
        co_await exchange(s, to_client, at_server);
        server_jobs = s.offloaded_jobs();
        by_pools += s.jobs_run_by_pool();
        EXPECT_LE(s.jobs_run_by_pool(), server_jobs);
      },
      [&](TlsStream& s) -> asio::awaitable<void> {
        co_await exchange(s, to_server, at_client);
        client_jobs = s.offloaded_jobs();
        EXPECT_LE(s.jobs_run_by_pool(), client_jobs);
        by_pools += s.jobs_run_by_pool();
      },
      &server_pool, &client_pool);
  EXPECT_TRUE(at_client == to_client);
  EXPECT_TRUE(at_server == to_server);
  // At least one job per 4 MiB written and one per BIO-full of ciphertext decrypted, at most
  // one per kOffloadBytes of plaintext either way.
  const auto bytes = to_client.size() + to_server.size();
  EXPECT_GE(server_jobs, 4u);
  EXPECT_GE(client_jobs, 4u);
  EXPECT_LE(server_jobs + client_jobs, 2 * bytes / TlsStream::kOffloadBytes + 8);
  // Which side runs a job is a race (tls_stream.cpp, on_pool); say how it went.
  std::printf("jobs: %llu handed off, %llu of them run by the pools\n",
              static_cast<unsigned long long>(server_jobs + client_jobs),
              static_cast<unsigned long long>(by_pools.load()));
}

// A stream that ends while its pool job may still run: the close is seen as usual.
TEST(TlsStream, OffloadedReadSeesTheCloseNotifyAfterTheData) {
  testing::TempDir dir;
  TlsPair pair(dir);
  WorkerPool pool(1);
  const auto data = random_bytes(3'000'000, 5);
  std::vector<unsigned char> got(data.size());
  error_code after;
  pair.run(
      [&](TlsStream& s) -> asio::awaitable<void> {
        auto [ec, n] = co_await asio::async_read(s, asio::buffer(got), kNoThrow);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_EQ(n, got.size());
        std::array<unsigned char, 16> more{};
        std::tie(after, n) = co_await s.async_read_some(asio::buffer(more), kNoThrow);
        EXPECT_GT(s.offloaded_jobs(), 0u);
      },
      [&](TlsStream& s) -> asio::awaitable<void> {
        auto [ec, n] = co_await asio::async_write(s, asio::buffer(data), kNoThrow);
        EXPECT_FALSE(ec) << ec.message();
        auto [closed] = co_await s.async_shutdown(kNoThrow);
        EXPECT_FALSE(closed) << closed.message();
      },
      &pool, nullptr);
  EXPECT_TRUE(got == data);
  EXPECT_EQ(after, asio::error::eof) << after.message();
}

TEST(TlsStream, CloseNotifyReadsAsEofAndAnAbruptCloseAsTruncated) {
  testing::TempDir dir;
  TlsPair pair(dir);
  error_code after_close_notify, after_abrupt_close;
  pair.run(
      [&](TlsStream& s) -> asio::awaitable<void> {
        co_await asio::async_write(s, asio::buffer("hello", 5), kNoThrow);
        co_await s.async_shutdown(kNoThrow);
      },
      [&](TlsStream& s) -> asio::awaitable<void> {
        std::array<char, 5> hello{};
        auto [ec, n] = co_await asio::async_read(s, asio::buffer(hello), kNoThrow);
        EXPECT_FALSE(ec);
        EXPECT_EQ(std::string(hello.data(), n), "hello");
        std::array<char, 1> more{};
        std::tie(after_close_notify, n) = co_await s.async_read_some(asio::buffer(more), kNoThrow);
      });
  EXPECT_EQ(after_close_notify, asio::error::eof) << after_close_notify.message();

  pair.run(
      [&](TlsStream& s) -> asio::awaitable<void> {
        error_code ignored;
        s.next_layer().close(ignored);  // no close_notify
        co_return;
      },
      [&](TlsStream& s) -> asio::awaitable<void> {
        std::array<char, 1> byte{};
        auto [ec, n] = co_await s.async_read_some(asio::buffer(byte), kNoThrow);
        after_abrupt_close = ec;
      });
  EXPECT_EQ(after_abrupt_close, asio::ssl::error::stream_truncated) << after_abrupt_close.message();
}

TEST(TlsStream, AnEmptyReadOrWriteCompletesAtOnceWithZeroBytes) {
  testing::TempDir dir;
  TlsPair pair(dir);
  std::size_t read = 99, written = 99;
  pair.run(
      [&](TlsStream& s) -> asio::awaitable<void> {
        auto [ec, n] = co_await s.async_write_some(asio::const_buffer(), kNoThrow);
        EXPECT_FALSE(ec);
        written = n;
      },
      [&](TlsStream& s) -> asio::awaitable<void> {
        auto [ec, n] = co_await s.async_read_some(asio::mutable_buffer(), kNoThrow);
        EXPECT_FALSE(ec);
        read = n;
      });
  EXPECT_EQ(read, 0u);
  EXPECT_EQ(written, 0u);
}

}  // namespace
}  // namespace fedcore::net
