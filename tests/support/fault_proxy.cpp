#include "tests/support/fault_proxy.hpp"

// GCC 12 inlines Asio's recycling allocator for coroutine frames and reports a
// -Wmismatched-new-delete that is not one (see server/api/api_server.cpp).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <linux/sockios.h>
#include <mutex>
#include <optional>
#include <string>
#include <sys/ioctl.h>
#include <thread>
#include <unordered_map>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "shared/util/assert.hpp"
#include "shared/util/error.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::testing {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kReadBytes = std::size_t{16} << 10;
constexpr std::size_t kMaxPacedPiece = std::size_t{16} << 10;
// How long a reset waits for the kernel to hand the last forwarded bytes to the receiver
// (a reset discards whatever is still in the send queue), and how often it looks.
constexpr auto kFlushLimit = 1s;
constexpr auto kFlushPoll = 1ms;
constexpr auto kStopLimit = 5s;

std::size_t index(Direction d) {
  return d == Direction::upstream ? 0 : 1;
}

// Empty when the toxics are within their documented bounds.
std::string invalid_toxics(const Toxics& t) {
  if (!(t.reset.fraction >= 0 && t.reset.fraction <= 1)) {
    return "reset fraction " + std::to_string(t.reset.fraction) + " is outside [0, 1]";
  }
  if (t.reset.max_bytes < t.reset.min_bytes) {
    return "reset max_bytes " + std::to_string(t.reset.max_bytes) + " < min_bytes " +
           std::to_string(t.reset.min_bytes);
  }
  if (t.latency.count() < 0 || t.jitter.count() < 0 || t.segment_delay.count() < 0) {
    return "negative latency, jitter or segment delay";
  }
  return {};
}

// Bytes the kernel still holds for this socket: unsent, or sent and not yet acknowledged.
// On loopback an acknowledged byte is in the receiver's buffer.
int unsent_bytes(tcp::socket& socket) {
  int pending = 0;
  if (::ioctl(socket.native_handle(), SIOCOUTQ, &pending) != 0) {
    return 0;
  }
  return pending;
}

struct Chunk {
  std::vector<std::uint8_t> bytes;
  SteadyClock::time_point release;
};

// One direction of one connection: a reader that queues chunks with their release time and
// a writer that applies the toxics on the way out. Both run on the proxy thread.
struct Pipe {
  Pipe(Direction d, tcp::socket& source, tcp::socket& sink, const asio::any_io_executor& ex)
      : direction(d), from(source), to(sink), signal(ex), delay(ex) {
    signal.expires_at(SteadyClock::time_point::max());
  }
  Direction direction;
  tcp::socket& from;
  tcp::socket& to;
  std::deque<Chunk> queue;
  std::size_t queued = 0;
  bool eof = false;   // the sender sent its FIN
  bool done = false;  // the writer has finished (FIN passed on, or swallowed by a blackhole)
  std::optional<std::uint64_t> reset_at;
  std::uint64_t forwarded = 0;
  SteadyClock::time_point last_release{};
  SteadyClock::time_point next_slot{};
  std::optional<SteadyClock::time_point> last_segment;
  // Never expires: cancel() wakes whoever waits on it (the reader for room or the end of
  // half_open, the writer for data, EOF or the end of half_open) to look again.
  asio::steady_timer signal;
  asio::steady_timer delay;  // the writer's own waits: latency, pacing, segment gaps
};

}  // namespace

struct FaultProxy::Impl {
  struct Connection;  // nested: it reaches into the proxy it belongs to
  explicit Impl(FaultProxyOptions o);

  Toxics snapshot(Direction d) const {
    std::lock_guard lock(mutex);
    return toxics[index(d)];
  }
  template <class F>
  void record(F change) {
    {
      std::lock_guard lock(mutex);
      change(stats);
    }
    changed.notify_all();
  }
  std::vector<std::shared_ptr<Connection>> live() const;
  void wake_all();
  void stop();

  asio::awaitable<void> accept_loop();
  asio::awaitable<void> run_connection(std::shared_ptr<Connection> c);
  asio::awaitable<void> read_side(std::shared_ptr<Connection> c, Direction d);
  asio::awaitable<void> write_side(std::shared_ptr<Connection> c, Direction d);
  asio::awaitable<void> reset(std::shared_ptr<Connection> c, Direction d);

  FaultProxyOptions options;
  mutable std::mutex mutex;
  mutable std::condition_variable changed;
  Toxics toxics[2];       // guarded by mutex
  FaultProxyStats stats;  // guarded by mutex
  // The proxy thread's own state.
  Rng reset_rng;
  Rng jitter_rng;
  std::unordered_map<std::uint64_t, std::weak_ptr<Connection>> connections;
  std::uint64_t next_id = 0;
  bool stopping = false;
  // Declared after everything a connection's destructor touches: destroying the
  // io_context destroys any coroutine frame still pending, and with it its Connection.
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::uint16_t port = 0;
  std::promise<void> finished;
  std::thread thread;
};

struct FaultProxy::Impl::Connection {
  Connection(FaultProxy::Impl& p, std::uint64_t i, tcp::socket accepted)
      : proxy(p),
        id(i),
        client(std::move(accepted)),
        server(p.io),
        up(Direction::upstream, client, server, p.io.get_executor()),
        down(Direction::downstream, server, client, p.io.get_executor()) {}
  ~Connection() {
    proxy.connections.erase(id);
    proxy.record([](FaultProxyStats& s) { --s.connections_open; });
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Pipe& pipe(Direction d) { return d == Direction::upstream ? up : down; }
  Pipe& other(Direction d) { return d == Direction::upstream ? down : up; }

  // Closes both sockets, with a RST when `reset` (SO_LINGER 0), and wakes every waiting
  // coroutine, which then sees `closed` and ends. Idempotent.
  void close(bool reset) {
    if (closed) {
      return;
    }
    closed = true;
    for (tcp::socket* s : {&client, &server}) {
      error_code ignored;
      if (s->is_open()) {
        if (reset) {
          s->set_option(asio::socket_base::linger(true, 0), ignored);
        }
        s->close(ignored);
      }
    }
    for (Pipe* p : {&up, &down}) {
      p->signal.cancel();
      p->delay.cancel();
    }
  }

  FaultProxy::Impl& proxy;
  std::uint64_t id;
  tcp::socket client;
  tcp::socket server;
  Pipe up;
  Pipe down;
  bool closed = false;
  bool blackholed = false;
};

namespace {

// Waits on `timer` until `when`; false when the connection closed meanwhile (close()
// cancels the timer, and a connection already closed does not wait at all). `closed` is
// the connection's flag.
asio::awaitable<bool> pause_until(const bool& closed, asio::steady_timer& timer,
                                  SteadyClock::time_point when) {
  if (closed) {
    co_return false;
  }
  if (when > SteadyClock::now()) {
    timer.expires_at(when);
    auto [ec] = co_await timer.async_wait(kNoThrow);
    (void)ec;  // cancelled only by close(), which `closed` reports
  }
  co_return !closed;
}

// Waits for the pipe's signal; false when the connection closed.
asio::awaitable<bool> wait_signal(const bool& closed, Pipe& p) {
  if (closed) {
    co_return false;
  }
  auto [ec] = co_await p.signal.async_wait(kNoThrow);
  (void)ec;  // the signal only ever ends by cancel()
  co_return !closed;
}

}  // namespace

FaultProxy::Impl::Impl(FaultProxyOptions o)
    : options(std::move(o)),
      reset_rng(options.seed),
      jitter_rng(options.seed ^ 0x6a09e667f3bcc908) {
  if (options.upstream_port == 0) {
    throw error_exception(fail(errc::invalid_argument, "FaultProxy: upstream_port is 0"));
  }
  for (const Toxics* t : {&options.upstream, &options.downstream}) {
    if (auto why = invalid_toxics(*t); !why.empty()) {
      throw error_exception(fail(errc::invalid_argument, "FaultProxy: " + why));
    }
  }
  toxics[0] = options.upstream;
  toxics[1] = options.downstream;
  const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), 0);
  error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) {
    acceptor.bind(endpoint, ec);
  }
  if (!ec) {
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    throw error_exception(
        fail(errc::unavailable, "FaultProxy: cannot listen on 127.0.0.1: " + ec.message()));
  }
  port = acceptor.local_endpoint().port();
}

auto FaultProxy::Impl::live() const -> std::vector<std::shared_ptr<Connection>> {
  std::vector<std::shared_ptr<Connection>> out;
  for (const auto& [id, weak] : connections) {
    if (auto c = weak.lock()) {
      out.push_back(std::move(c));
    }
  }
  return out;
}

void FaultProxy::Impl::wake_all() {
  for (auto& c : live()) {
    c->up.signal.cancel();
    c->down.signal.cancel();
  }
}

void FaultProxy::Impl::stop() {
  stopping = true;
  error_code ignored;
  acceptor.close(ignored);
  for (auto& c : live()) {
    c->close(false);
  }
}

asio::awaitable<void> FaultProxy::Impl::accept_loop() {
  asio::steady_timer backoff(io);
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kNoThrow);
    if (stopping || !acceptor.is_open()) {
      co_return;
    }
    if (ec) {
      // Out of descriptors or memory: accepting again at once would only spin.
      backoff.expires_after(10ms);
      auto [waited] = co_await backoff.async_wait(kNoThrow);
      (void)waited;
      continue;
    }
    if (connections.size() >= options.max_connections) {
      // Counted first: a test that saw the close may read the stats at once.
      record([](FaultProxyStats& s) { ++s.connections_refused; });
      error_code ignored;
      socket.close(ignored);
      continue;
    }
    const std::uint64_t id = next_id++;
    auto c = std::make_shared<Connection>(*this, id, std::move(socket));
    // Both directions draw the same values whatever the outcome, so the n-th accepted
    // connection's fate depends only on the seed and n (and the toxics in force).
    for (Direction d : {Direction::upstream, Direction::downstream}) {
      const ResetToxic r = snapshot(d).reset;
      const double u = reset_rng.uniform_double();
      const std::uint64_t span = r.max_bytes - r.min_bytes;
      const std::uint64_t n =
          r.min_bytes + (span == UINT64_MAX ? reset_rng.next_u64() : reset_rng.below(span + 1));
      if (r.fraction > 0 && u < r.fraction) {
        c->pipe(d).reset_at = n;
      }
    }
    connections[id] = c;
    record([](FaultProxyStats& s) {
      ++s.connections_accepted;
      ++s.connections_open;
    });
    asio::co_spawn(io, run_connection(std::move(c)), asio::detached);
  }
}

asio::awaitable<void> FaultProxy::Impl::run_connection(std::shared_ptr<Connection> c) {
  error_code ignored;
  // The proxy must not add Nagle delays of its own, and slicing needs every segment to
  // leave as it is written.
  c->client.set_option(tcp::no_delay(true), ignored);
  asio::steady_timer deadline(io);
  deadline.expires_after(options.connect_timeout);
  deadline.async_wait([c](const error_code& ec) {
    if (!ec) {
      error_code closing;
      c->server.close(closing);
    }
  });
  const tcp::endpoint upstream(asio::ip::address_v4::loopback(), options.upstream_port);
  auto [ec] = co_await c->server.async_connect(upstream, kNoThrow);
  deadline.cancel();
  if (c->closed) {
    co_return;
  }
  if (ec) {
    record([](FaultProxyStats& s) { ++s.upstream_failures; });
    c->close(false);
    co_return;
  }
  c->server.set_option(tcp::no_delay(true), ignored);
  for (Direction d : {Direction::upstream, Direction::downstream}) {
    asio::co_spawn(io, read_side(c, d), asio::detached);
    asio::co_spawn(io, write_side(c, d), asio::detached);
  }
}

asio::awaitable<void> FaultProxy::Impl::read_side(std::shared_ptr<Connection> c, Direction d) {
  Pipe& p = c->pipe(d);
  for (;;) {
    // A half-open direction reads nothing, so its sender's data backs up in the kernel;
    // a full queue waits for the writer to make room.
    for (;;) {
      if (c->closed) {
        co_return;
      }
      const bool half_open = snapshot(d).half_open;
      if (!half_open && p.queued < options.max_buffered_bytes) {
        break;
      }
      const bool open = co_await wait_signal(c->closed, p);
      if (!open) {
        co_return;
      }
    }
    std::vector<std::uint8_t> bytes(kReadBytes);
    auto buffer = asio::buffer(bytes);
    auto [ec, n] = co_await p.from.async_read_some(buffer, kNoThrow);
    if (c->closed) {
      co_return;
    }
    if (ec == asio::error::eof) {
      p.eof = true;
      p.signal.cancel();
      co_return;
    }
    if (ec) {
      c->close(true);  // a reset (or any failure) on one side resets the other
      co_return;
    }
    bytes.resize(n);
    const Toxics t = snapshot(d);
    std::chrono::microseconds delay = t.latency;
    if (t.jitter.count() > 0) {
      const auto jitter_us = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(t.jitter).count());
      delay += std::chrono::microseconds(jitter_rng.below(jitter_us + 1));
    }
    // Never before the chunk read before it: latency must not reorder bytes.
    const auto release = std::max(SteadyClock::now() + delay, p.last_release);
    p.last_release = release;
    p.queued += n;
    p.queue.push_back(Chunk{std::move(bytes), release});
    p.signal.cancel();
  }
}

asio::awaitable<void> FaultProxy::Impl::write_side(std::shared_ptr<Connection> c, Direction d) {
  Pipe& p = c->pipe(d);
  if (p.reset_at && *p.reset_at == 0) {
    co_await reset(c, d);
    co_return;
  }
  for (;;) {
    // Wait for a chunk or the sender's EOF, and for half_open to be off.
    for (;;) {
      if (c->closed) {
        co_return;
      }
      const bool half_open = snapshot(d).half_open;
      if (!half_open && (!p.queue.empty() || p.eof)) {
        break;
      }
      const bool open = co_await wait_signal(c->closed, p);
      if (!open) {
        co_return;
      }
    }
    if (p.queue.empty()) {
      // The sender is done and everything it sent has gone: pass its FIN on, unless a
      // blackhole swallows it. A connection ends when both directions have.
      if (!snapshot(d).blackhole) {
        error_code ignored;
        p.to.shutdown(tcp::socket::shutdown_send, ignored);
      }
      p.done = true;
      if (c->other(d).done) {
        c->close(false);
      }
      co_return;
    }
    const auto release = p.queue.front().release;
    if (release > SteadyClock::now()) {
      const bool open = co_await pause_until(c->closed, p.delay, release);
      if (!open) {
        co_return;
      }
      continue;  // half_open may have been set meanwhile
    }
    Chunk chunk = std::move(p.queue.front());
    p.queue.pop_front();
    p.queued -= chunk.bytes.size();
    p.signal.cancel();  // room for the reader

    if (snapshot(d).blackhole) {
      const bool first = !c->blackholed;
      c->blackholed = true;
      record([&](FaultProxyStats& s) {
        s.blackholed_bytes += chunk.bytes.size();
        s.blackholed_connections += first ? 1 : 0;
      });
      continue;
    }

    std::size_t offset = 0;
    while (offset < chunk.bytes.size()) {
      const Toxics t = snapshot(d);
      std::size_t piece = chunk.bytes.size() - offset;
      if (t.segment_bytes > 0) {
        piece = std::min(piece, t.segment_bytes);
      }
      if (t.bandwidth > 0) {
        // 5 ms worth per piece keeps the pacing smooth without a write per byte.
        piece = std::min(piece, std::clamp<std::size_t>(t.bandwidth / 200, 1, kMaxPacedPiece));
      }
      if (p.reset_at) {
        piece = std::min<std::uint64_t>(piece, *p.reset_at - p.forwarded);
      }
      if (t.segment_bytes > 0 && t.segment_delay.count() > 0 && p.last_segment) {
        const bool open =
            co_await pause_until(c->closed, p.delay, *p.last_segment + t.segment_delay);
        if (!open) {
          co_return;
        }
      }
      if (t.bandwidth > 0) {
        // Idle time earns no credit: a piece starts no earlier than now.
        const auto start = std::max(SteadyClock::now(), p.next_slot);
        const bool open = co_await pause_until(c->closed, p.delay, start);
        if (!open) {
          co_return;
        }
        p.next_slot =
            start + std::chrono::nanoseconds(static_cast<std::int64_t>(
                        static_cast<double>(piece) * 1e9 / static_cast<double>(t.bandwidth)));
      }
      auto out = asio::buffer(chunk.bytes.data() + offset, piece);
      auto [ec, written] = co_await asio::async_write(p.to, out, kNoThrow);
      if (c->closed) {
        co_return;
      }
      if (ec) {
        c->close(true);
        co_return;
      }
      const std::size_t sent = written;
      offset += sent;
      p.forwarded += sent;
      p.last_segment = SteadyClock::now();
      record([d, sent](FaultProxyStats& s) {
        (d == Direction::upstream ? s.bytes_upstream : s.bytes_downstream) += sent;
      });
      if (p.reset_at && p.forwarded == *p.reset_at) {
        co_await reset(c, d);
        co_return;
      }
    }
  }
}

asio::awaitable<void> FaultProxy::Impl::reset(std::shared_ptr<Connection> c, Direction d) {
  Pipe& p = c->pipe(d);
  // A RST discards what the kernel has not yet delivered; the contract is that exactly N
  // bytes arrive, so let them reach the receiver first (bounded).
  const auto limit = SteadyClock::now() + kFlushLimit;
  while (!c->closed && unsent_bytes(p.to) > 0 && SteadyClock::now() < limit) {
    const bool open = co_await pause_until(c->closed, p.delay, SteadyClock::now() + kFlushPoll);
    if (!open) {
      co_return;
    }
  }
  if (c->closed) {
    co_return;
  }
  const std::uint64_t id = c->id;
  record([id](FaultProxyStats& s) {
    ++s.resets;
    s.reset_ids.push_back(id);
  });
  c->close(true);
}

FaultProxy::FaultProxy(FaultProxyOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  impl_->thread = std::thread([impl = impl_.get()] {
    impl->io.run();
    impl->finished.set_value();
  });
}

FaultProxy::~FaultProxy() {
  asio::post(impl_->io, [impl = impl_.get()] { impl->stop(); });
  // Every coroutine ends once its sockets and timers are closed; if one did not within
  // the bound, stopping the io_context destroys what is left with it.
  if (impl_->finished.get_future().wait_for(kStopLimit) != std::future_status::ready) {
    impl_->io.stop();
  }
  impl_->thread.join();
}

std::uint16_t FaultProxy::port() const noexcept {
  return impl_->port;
}

void FaultProxy::set_toxics(Direction direction, const Toxics& toxics) {
  update_toxics(direction, [&](Toxics& t) { t = toxics; });
}

void FaultProxy::update_toxics(Direction direction, const std::function<void(Toxics&)>& edit) {
  {
    std::lock_guard lock(impl_->mutex);
    Toxics edited = impl_->toxics[index(direction)];
    edit(edited);
    FEDCORE_ASSERT(invalid_toxics(edited).empty(), "FaultProxy: toxics out of bounds");
    impl_->toxics[index(direction)] = edited;
  }
  // Waiting readers and writers look again (half_open ended, a blackhole began, ...).
  asio::post(impl_->io, [impl = impl_.get()] { impl->wake_all(); });
}

Toxics FaultProxy::toxics(Direction direction) const {
  return impl_->snapshot(direction);
}

void FaultProxy::set_latency(Direction direction, std::chrono::milliseconds latency,
                             std::chrono::milliseconds jitter) {
  update_toxics(direction, [&](Toxics& t) {
    t.latency = latency;
    t.jitter = jitter;
  });
}

void FaultProxy::set_bandwidth(Direction direction, std::uint64_t bytes_per_second) {
  update_toxics(direction, [&](Toxics& t) { t.bandwidth = bytes_per_second; });
}

void FaultProxy::set_reset(Direction direction, ResetToxic reset) {
  update_toxics(direction, [&](Toxics& t) { t.reset = reset; });
}

void FaultProxy::set_half_open(Direction direction, bool on) {
  update_toxics(direction, [&](Toxics& t) { t.half_open = on; });
}

void FaultProxy::set_blackhole(Direction direction, bool on) {
  update_toxics(direction, [&](Toxics& t) { t.blackhole = on; });
}

void FaultProxy::set_slicing(Direction direction, std::size_t segment_bytes,
                             std::chrono::microseconds segment_delay) {
  update_toxics(direction, [&](Toxics& t) {
    t.segment_bytes = segment_bytes;
    t.segment_delay = segment_delay;
  });
}

std::size_t FaultProxy::reset_connections() {
  auto done = std::make_shared<std::promise<std::size_t>>();
  auto count = done->get_future();
  asio::post(impl_->io, [impl = impl_.get(), done] {
    std::size_t n = 0;
    for (auto& c : impl->live()) {
      if (!c->closed) {
        c->close(true);
        ++n;
      }
    }
    impl->record([n](FaultProxyStats& s) { s.resets_requested += n; });
    done->set_value(n);
  });
  if (count.wait_for(kStopLimit) != std::future_status::ready) {
    return 0;
  }
  return count.get();
}

FaultProxyStats FaultProxy::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

bool FaultProxy::wait_for(const std::function<bool(const FaultProxyStats&)>& done,
                          std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex);
  return impl_->changed.wait_for(lock, timeout, [&] { return done(impl_->stats); });
}

}  // namespace fedcore::testing
