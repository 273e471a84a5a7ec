// Longer than our ~500-line guideline, on purpose: one class whose handshake (with the
// shared-memory ring negotiation), per-link reader and writer and progress engine share
// private state; splitting them would expose that state in a header.
#include "shared/collective/net_transport.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <iterator>
#include <mutex>
#include <optional>
#include <string_view>
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

#include "shared/collective/envelope_codec.hpp"
#include "shared/collective/shm_ring.hpp"
#include "shared/net/frame_channel.hpp"
#include "shared/net/listener.hpp"
#include "shared/tls/context.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/threads.hpp"

namespace fedcore::collective {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using protocol::MessageType;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
// Readers wait between operations for as long as the job lives; operation deadlines
// are enforced by recv and wait_sends, not by the channel's idle timer.
constexpr std::chrono::milliseconds kReaderIdle = std::chrono::hours(24 * 365);

// A peer's ring offer larger than this is refused (it would be mapped here).
constexpr std::size_t kRingMaxBytes = std::size_t{1} << 30;

// The head of a message sent through the shared-memory ring: the envelope without its job
// (a ring belongs to one link of one job) and the message's number, in native byte order
// (both ends are on one host).
struct RingHead {
  std::uint64_t seq;
  std::uint64_t bytes;
  std::uint64_t length;
  std::uint64_t n;
  std::uint32_t tag;
  std::uint32_t segment;
  std::uint32_t op;
};
static_assert(sizeof(RingHead) <= ShmRing::kMaxHead);

RingHead ring_head(const Envelope& e, std::uint64_t n) {
  return {e.seq, e.bytes, e.length, n, e.tag, e.segment, static_cast<std::uint32_t>(e.op)};
}

result<DecodedMetadata> decode_ring_head(std::span<const std::byte> head, const std::string& job,
                                         std::uint64_t payload_length) {
  RingHead h;
  if (head.size() != sizeof(h))
    return fail(errc::data_loss, "shared-memory record head of " + std::to_string(head.size()) +
                                     " bytes, expected " + std::to_string(sizeof(h)));
  std::memcpy(&h, head.data(), sizeof(h));
  if (h.length != payload_length)
    return fail(errc::data_loss, "payload length differs from the envelope's");
  DecodedMetadata d;
  d.envelope = {job, h.seq, static_cast<OpType>(h.op), h.tag, h.bytes, h.segment, h.length};
  d.n = h.n;
  return d;
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
    close_gracefully();
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
    const std::uint64_t n = link.next_out++;
    // The ring carries the whole message when it has room: no system call, and a peer
    // that polls sees it at once. A message of another job's envelope keeps to the socket,
    // whose metadata carries the job (a ring's records do not), so that desync is caught.
    if (link.out_ring && envelope.job == options_.job) {
      const RingHead head = ring_head(envelope, n);
      if (link.out_ring->try_write(std::as_bytes(std::span(&head, 1)), payload)) {
        ring_sent_ += payload.size();
        sent_ += payload.size() + ShmRing::kAlignment;
        if (link.out_ring->receiver_sleeping())
          post_frame(peer, {std::string(kDoorbellMetadata), {}, true});
        return;
      }
    }
    post_frame(peer, {encode_envelope(envelope, n), payload, false});
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
        run_until([&] { return link.next_ready() || link.failed || send_error_; }, deadline);
    if (auto f = aborted())
      return *f;
    if (link.next_ready()) {
      // The previous message's bytes are no longer the caller's.
      release(peer);
      if (link.current.payload.capacity() > 0)
        link.spare = std::move(link.current.payload);
      link.current = std::move(link.inbox.front());
      link.inbox.pop_front();
      ++link.next_in;
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

  void release(int peer) noexcept override {
    FEDCORE_ASSERT(peer >= 0 && peer < size() && peer != rank(), "bad peer");
    Incoming& current = links_[peer]->current;
    if (current.ring_end > 0) {
      links_[peer]->in_ring->release(current.ring_end);
      current.ring_end = 0;
      current.ring_bytes = {};
    }
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
        if (link.next_ready()) {
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
      has_failure_.store(true, std::memory_order_release);
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
  std::size_t shared_memory_link_bytes(int peer) const noexcept override {
    const Link& link = *links_[peer];
    if (!link.in_ring || !link.out_ring)
      return 0;
    return std::min(link.in_ring->capacity(), link.out_ring->capacity());
  }

 private:
  struct Incoming {
    Envelope envelope;
    std::vector<std::byte> payload;         // inline payload, or empty
    std::span<const std::byte> ring_bytes;  // or the payload in the link's ring,
    std::uint64_t ring_end = 0;             // up to this ring position (0: inline)
    std::uint64_t n = 0;                    // the message's number on its link
    std::uint64_t arrival = 0;              // messages read so far on all links, for wait_any

    std::span<const std::byte> bytes() const {
      return ring_end > 0 ? ring_bytes : std::span<const std::byte>(payload);
    }
  };
  struct Outgoing {
    std::string metadata;
    std::span<const std::byte> payload;  // the caller's bytes, or empty
    bool doorbell = false;               // a wake-up, no message (see post_send)
  };
  struct Link {
    std::optional<net::FrameChannel<Stream>> channel;
    std::optional<ShmRing> out_ring;  // messages to this peer, when it shares our memory
    std::optional<ShmRing> in_ring;   // messages from this peer
    // Messages read from the socket or the ring and not yet received, ordered by number.
    // The two lanes each keep their order, so the next message is always at the front
    // once it has arrived, whichever lane it took.
    std::deque<Incoming> inbox;
    std::uint64_t next_in = 0;   // number of the next message recv hands out
    std::uint64_t next_out = 0;  // number of the next message posted to this peer
    bool ring_broken = false;    // in_ring held a malformed record: read no more of it
    std::deque<Outgoing> outbox;
    bool writing = false;
    std::optional<error> failed;
    Incoming current;
    // The payload of the message before `current`, which the next read receives into:
    // a ring's chunks arrive one after another at the same sizes, so they reuse warm memory.
    std::vector<std::byte> spare;

    bool next_ready() const noexcept { return !inbox.empty() && inbox.front().n == next_in; }
    // Files `in` among the waiting messages by its number.
    void file(Incoming in) {
      auto at = inbox.end();
      while (at != inbox.begin() && std::prev(at)->n > in.n)
        --at;
      inbox.insert(at, std::move(in));
    }
  };

  // Queues one frame on the link to `peer` and starts its writer if idle.
  void post_frame(int peer, Outgoing out) {
    Link& link = *links_[peer];
    link.outbox.push_back(std::move(out));
    ++pending_sends_;
    if (!link.writing) {
      link.writing = true;
      asio::co_spawn(io_, write_loop(peer), asio::detached);
    }
  }

  static error peer_error(int peer, const error& e) {
    return fail(errc::unavailable,
                "link to rank " + std::to_string(peer) + " failed: " + e.to_string());
  }

  std::optional<error> aborted() {
    // Asked on every turn of a polling wait: the lock only once there is something to read.
    if (!has_failure_.load(std::memory_order_acquire))
      return std::nullopt;
    std::lock_guard lock(failure_mutex_);
    return failure_;
  }

  // Before the sockets close: finish the sends, say this rank is done sending (shut the
  // send side), then keep reading until every peer has said the same, for at most
  // kCloseGrace. A socket closed with bytes still unread (a doorbell, a message nobody
  // asked for) makes the kernel reset the connection, and a reset throws away what the
  // peer has not read yet: the last messages this rank sent, which a peer still finishing
  // its allreduce needs (it failed with "peer closed the connection inside a frame").
  // Not after abort(): an aborted transport closes at once.
  void close_gracefully() noexcept {
    if (aborted())
      return;
    const auto deadline = Clock::now() + kCloseGrace;
    run_until([&] { return pending_sends_ == 0 || send_error_.has_value(); }, deadline);
    bool reading = false;
    for (auto& link : links_) {
      if (!link->channel || !link->channel->is_open() || link->failed)
        continue;
      boost::system::error_code ec;
      socket_of(link->channel->stream()).shutdown(tcp::socket::shutdown_send, ec);
      reading = true;
    }
    if (!reading)
      return;
    run_until(
        [&] {
          return std::all_of(links_.begin(), links_.end(), [](const std::unique_ptr<Link>& link) {
            return !link->channel || !link->channel->is_open() || link->failed.has_value();
          });
        },
        deadline);
  }
  // How long a closing transport waits for its sends and its peers' ends (above).
  static constexpr std::chrono::seconds kCloseGrace{2};

  void close_all() noexcept {
    for (auto& link : links_) {
      if (link->channel)
        link->channel->close();
    }
  }

  // Runs the io_context on this thread until `condition()` or the deadline. Returns
  // whether the condition holds.
  template <class Pred>
  bool run_until(Pred condition, Clock::time_point deadline) {
    running_.store(true);
    struct Reset {
      std::atomic<bool>& flag;
      ~Reset() { flag.store(false); }
    } reset{running_};
    // The rings are read before every look at the condition: a condition that a closed
    // link makes true ("the peer is gone") must not be taken while the last messages that
    // peer published still wait in its ring.
    auto done = [&] {
      drain_rings();
      return condition();
    };
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
      // About to sleep in the kernel: tell the senders of our rings, then look once more
      // (shm_ring.hpp, "Sleeping"). A record published after that look rings the doorbell.
      set_sleeping(true);
      if (done()) {
        set_sleeping(false);
        return true;
      }
      const std::size_t ran = io_.run_one_until(deadline);
      set_sleeping(false);
      if (ran == 0 && io_.stopped() && Clock::now() < deadline) {
        // Nothing left that could make progress (every link is down).
        return done();
      }
    }
  }

  void set_sleeping(bool sleeping) noexcept {
    for (auto& link : links_) {
      if (link->in_ring && !link->failed)
        link->in_ring->set_sleeping(sleeping);
    }
  }

  // Moves every record the peers published in their rings into the links' inboxes.
  void drain_rings() {
    for (auto& link : links_) {
      // A link whose socket closed is still drained: its peer published those records
      // before it closed, and they are the last messages it sent.
      if (!link->in_ring || link->ring_broken)
        continue;
      for (;;) {
        auto record = link->in_ring->read();
        if (record && !*record)
          break;
        auto decoded =
            record ? decode_ring_head((*record)->head, options_.job, (*record)->payload.size())
                   : result<DecodedMetadata>(record.error());
        if (!decoded) {
          link->ring_broken = true;
          if (!link->failed)
            link->failed = decoded.error();
          link->channel->close();
          break;
        }
        Incoming in;
        in.envelope = std::move(decoded->envelope);
        in.ring_bytes = (*record)->payload;
        in.ring_end = (*record)->end;
        in.n = decoded->n;
        in.arrival = ++arrivals_;
        received_ += in.ring_bytes.size() + ShmRing::kAlignment;
        link->file(std::move(in));
      }
    }
  }

  // Polls the io_context (and, through `done`, the rings) without sleeping for up to
  // options_.spin, until `done()`.
  // Returns done(). A sleeping wait costs a wake-up (tens of microseconds on a VM) per
  // message; a rank with a core of its own loses nothing by polling for a while first.
  //
  // A look at the sockets (the reactor's poll) and a yield are two system calls, a
  // microsecond or two on a VM, while a look at the rings is a load from shared memory.
  // So where rings are open, each round of the loop also looks at them alone, with a
  // pause between looks, for about as long as those two calls take: a ring message
  // published just after the reactor's poll is then found in tens of nanoseconds instead
  // of after the next two system calls (OpenMPI's progress loop likewise polls its
  // shared-memory queues on every turn and its sockets less often). Only while this
  // host's ranks have a CPU each (ring_looks_, set in connect): with more ranks than
  // CPUs the rank a waiter waits for may need the waiter's CPU, which the yield gives
  // and the looks would hold back (measured: 4 ranks on 2 CPUs, 2 on 1, both slower).
  // Ranks bound to a CPU each (fedcore-dist launch's default) look too.
  template <class Pred>
  bool spin_until(Pred& done) {
    const auto until = Clock::now() + options_.spin;
    const int ring_looks = has_open_in_ring() ? ring_looks_ : 0;
    do {
      if (io_.stopped())
        io_.restart();
      while (io_.poll_one() > 0) {
        if (done())
          return true;
      }
      if (done())
        return true;
      if (aborted())
        return false;
      for (int i = 0; i < ring_looks; ++i) {
        cpu_pause();
        if (done())
          return true;
      }
      // Give the core away between polls when someone else wants it: free with a core
      // of one's own, and what keeps more ranks than cores (4 on 2) from spinning while
      // the rank they wait for cannot run (OpenMPI's yield_when_idle does the same).
      std::this_thread::yield();
    } while (Clock::now() < until);
    return done();
  }

  // Ring looks between two polls of the reactor: with a pause of 10–40 ns each (it
  // depends on the CPU), about the time of the poll and the yield they sit between.
  static constexpr int kRingLooksPerPoll = 64;

  // kRingLooksPerPoll when this host's ranks of the job (this one and those it shares
  // rings with) seem to have a CPU each, else 0: when this process may run on as many CPUs
  // as there are such ranks (they float), or when it is bound to fewer and the machine
  // has room for every rank to have a block of that size of its own (the launcher and
  // mpirun bind ranks to disjoint equal blocks, and only when there are enough CPUs). A
  // process sees only its own mask, so ranks bound by hand to overlapping CPUs, or a
  // container's cpuset smaller than the ranks, pass the second test; polling itself
  // (NetOptions::spin) is documented as for ranks with a CPU of their own.
  int ring_looks_per_poll() const {
    const auto ringed =
        std::count_if(links_.begin(), links_.end(),
                      [](const std::unique_ptr<Link>& link) { return link->in_ring.has_value(); });
    if (ringed == 0)
      return 0;
    const auto local_ranks = 1 + ringed;
    const auto mine = usable_cpus();
    const bool own_cpus = mine >= local_ranks || mine * local_ranks <= online_cpus();
    return own_cpus ? kRingLooksPerPoll : 0;
  }

  static void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  bool has_open_in_ring() const noexcept {
    return std::any_of(links_.begin(), links_.end(), [](const std::unique_ptr<Link>& link) {
      return link->in_ring && !link->ring_broken;
    });
  }

  net::ChannelOptions channel_options() const {
    net::ChannelOptions o;
    o.limits = options_.limits;
    o.idle_timeout = options_.connect_timeout;
    o.transfer_timeout = options_.connect_timeout;
    o.lazy_deadline_timers = true;  // this transport polls its io_context; never run()
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
      if (decoded && decoded->doorbell)
        continue;  // its arrival woke the reactor; the message is in the ring
      if (decoded && decoded->envelope.length != frame->payload.size())
        decoded = fail(errc::data_loss, "payload length differs from the envelope's");
      if (!decoded) {
        link.failed = decoded.error();
        link.channel->close();
        co_return;
      }
      received_ += decoded->envelope.length + protocol::kFrameHeaderSize + frame->metadata.size();
      Incoming in;
      in.envelope = std::move(decoded->envelope);
      in.payload = std::move(frame->payload);
      in.n = decoded->n;
      in.arrival = ++arrivals_;
      link.file(std::move(in));
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
        if (!link.failed)
          link.failed = written.error();
        // A doorbell that finds its peer gone is no failure of this rank's sends: the peer
        // read what it needed from the ring and finished. A message that does is one.
        const bool only_doorbells = std::all_of(link.outbox.begin(), link.outbox.end(),
                                                [](const Outgoing& o) { return o.doorbell; });
        if (!send_error_ && !only_doorbells)
          send_error_ = peer_error(peer, written.error());
        pending_sends_ -= link.outbox.size();
        link.outbox.clear();
        break;
      }
      sent_ += out.payload.size() + protocol::kFrameHeaderSize + out.metadata.size();
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
  int ring_looks_ = 0;  // see spin_until
  std::vector<std::unique_ptr<Link>> links_;
  std::size_t pending_sends_ = 0;
  std::optional<error> send_error_;
  std::optional<error> setup_error_;
  int links_missing_ = 0;
  std::mutex failure_mutex_;
  std::optional<error> failure_;          // guarded by failure_mutex_
  std::atomic<bool> has_failure_{false};  // set (after failure_) once, never cleared
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
  ring_looks_ = ring_looks_per_poll();
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
