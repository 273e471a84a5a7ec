// ClientSession and ClientDaemon against a scripted fake server over a local socket pair:
// no TLS, no network, no sleeping — time is a ManualSleeper the test advances.
#include "client/session.hpp"

#include <deque>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include "client/backoff.hpp"
#include "client/daemon.hpp"
#include "tests/client/client_test_support.hpp"

namespace fedcore::client {
namespace {

namespace asio = boost::asio;
using protocol::MessageType;
using testing::Announced;
using testing::announced_logreg;
using testing::run_until;
using testing::socket_pair;
using testing::tiny_data;
using testing::train_request;
using namespace std::chrono_literals;

std::shared_ptr<net::Link> link_over(net::LocalStream stream) {
  return std::make_shared<net::StreamLink<net::LocalStream>>(std::move(stream),
                                                             net::ChannelOptions{});
}

protocol::Hello hello_for(const data::TrainTest& data) {
  protocol::Hello h;
  h.samples = data.train.size();
  h.test_samples = data.test.size();
  h.input_shape = data.train.sample_shape;
  h.num_classes = data.train.num_classes;
  h.capabilities = {"train", "evaluate"};
  h.software = "test";
  return h;
}

net::SharedPayload payload_of(const std::vector<float>& v) {
  return std::make_shared<const std::vector<float>>(v);
}

// The server's end: frames it received, in order, read by a coroutine of its own.
class FakeServer {
 public:
  FakeServer(asio::io_context& io, net::LocalStream stream) : link_(link_over(std::move(stream))) {
    asio::co_spawn(io, read_all(), asio::detached);
  }
  void send(MessageType type, std::string metadata, net::SharedPayload payload = nullptr) {
    link_->send(type, std::move(metadata), std::move(payload));
  }
  void welcome(std::uint32_t heartbeat_seconds = 15) {
    send(MessageType::welcome,
         protocol::to_metadata(protocol::Welcome{"site-1", heartbeat_seconds}));
  }
  void close() { link_->close(); }
  std::size_t count(MessageType type) const {
    return static_cast<std::size_t>(std::count_if(
        frames_.begin(), frames_.end(), [&](const protocol::Frame& f) { return f.type == type; }));
  }
  const protocol::Frame* last(MessageType type) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      if (it->type == type) {
        return &*it;
      }
    }
    return nullptr;
  }
  bool closed() const noexcept { return closed_; }

 private:
  asio::awaitable<void> read_all() {
    auto link = link_;
    while (true) {
      auto frame = co_await link->read_frame();
      if (!frame) {
        closed_ = true;
        co_return;
      }
      frames_.push_back(std::move(*frame));
    }
  }

  std::shared_ptr<net::Link> link_;
  std::deque<protocol::Frame> frames_;
  bool closed_ = false;
};

// The session's link, noting the capacity of the memory each read is handed to receive
// into (Link::read_frame's spare).
class SpareNotingLink final : public net::Link {
 public:
  explicit SpareNotingLink(std::shared_ptr<net::Link> inner) : inner_(std::move(inner)) {}
  asio::awaitable<result<protocol::Frame>> read_frame(std::vector<std::byte> spare) override {
    spare_capacities.push_back(spare.capacity());
    return inner_->read_frame(std::move(spare));
  }
  void set_admission(net::AdmissionPolicy policy) override {
    inner_->set_admission(std::move(policy));
  }
  void set_timeouts(std::chrono::milliseconds idle,
                    std::chrono::milliseconds transfer) noexcept override {
    inner_->set_timeouts(idle, transfer);
  }
  void send(MessageType type, std::string metadata, net::SharedPayload payload,
            net::WrittenCallback written) override {
    inner_->send(type, std::move(metadata), std::move(payload), std::move(written));
  }
  void close() noexcept override { inner_->close(); }
  bool is_open() const noexcept override { return inner_->is_open(); }
  std::uint64_t bytes_read() const noexcept override { return inner_->bytes_read(); }
  std::uint64_t bytes_written() const noexcept override { return inner_->bytes_written(); }

  std::vector<std::size_t> spare_capacities;

 private:
  std::shared_ptr<net::Link> inner_;
};

// A session on one end of a socket pair, the fake server on the other, a manual clock.
class SessionTest : public ::testing::Test {
 protected:
  SessionTest() : sleeper_(io_, clock_), data_(tiny_data()) {
    auto [client_end, server_end] = socket_pair(io_);
    server_ = std::make_unique<FakeServer>(io_, std::move(server_end));
    SessionHooks hooks;
    hooks.train = [this](const protocol::TrainRequest& request, std::span<const float> global,
                         std::span<const float>) -> asio::awaitable<LocalResult> {
      co_return train_locally(request, global, data_, 1);
    };
    hooks.before_update = [this](const TrainedRound& r) -> asio::awaitable<UpdateAction> {
      trained_.push_back(r);
      co_return drop_updates_ ? UpdateAction::drop : UpdateAction::send;
    };
    link_ = std::make_shared<SpareNotingLink>(link_over(std::move(client_end)));
    hooks_ = hooks;
    session_ =
        std::make_unique<ClientSession>(io_, link_, sleeper_, std::move(hooks), "fake-server");
  }
  // Before start(): the session is made again with `change` applied to its hooks.
  void remake_session(const std::function<void(SessionHooks&)>& change) {
    SessionHooks hooks = hooks_;
    change(hooks);
    session_ =
        std::make_unique<ClientSession>(io_, link_, sleeper_, std::move(hooks), "fake-server");
  }

  void start() {
    asio::co_spawn(
        io_,
        [this]() -> asio::awaitable<void> { ended_ = co_await session_->run(hello_for(data_)); },
        asio::detached);
  }
  bool frames_arrived(MessageType type, std::size_t n) {
    return run_until(io_, [&] { return server_->count(type) >= n; });
  }
  // Starts the session, WELCOMEs it and sends TRAIN for rounds 1..rounds of `model`, each
  // after the UPDATE of the one before. False when a frame does not come.
  bool welcome_and_train(const Announced& model, std::int64_t rounds) {
    start();
    if (!frames_arrived(MessageType::hello, 1)) {
      return false;
    }
    server_->welcome();
    for (std::int64_t round = 1; round <= rounds; ++round) {
      server_->send(MessageType::train, protocol::to_metadata(train_request(model, round)),
                    payload_of(model.global));
      if (!frames_arrived(MessageType::update, static_cast<std::size_t>(round))) {
        return false;
      }
    }
    return trained_.size() == static_cast<std::size_t>(rounds);
  }
  bool session_ended() {
    return run_until(io_, [&] { return ended_.has_value(); });
  }

  asio::io_context io_;
  ManualClock clock_;
  net::ManualSleeper sleeper_;
  data::TrainTest data_;
  std::unique_ptr<FakeServer> server_;
  std::shared_ptr<SpareNotingLink> link_;
  SessionHooks hooks_;
  std::unique_ptr<ClientSession> session_;
  std::vector<TrainedRound> trained_;
  bool drop_updates_ = false;
  std::optional<result<void>> ended_;
};

TEST_F(SessionTest, HelloTrainUpdateEchoesTheRoundThenGoodbyeEndsIt) {
  start();
  ASSERT_TRUE(frames_arrived(MessageType::hello, 1));
  auto hello = protocol::parse_hello(server_->last(MessageType::hello)->metadata);
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->samples, 24u);
  EXPECT_EQ(hello->test_samples, 4u);
  EXPECT_EQ(hello->input_shape, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(hello->num_classes, 2);

  server_->welcome();
  const auto model = announced_logreg();
  const auto request = train_request(model, 1);
  server_->send(MessageType::train, protocol::to_metadata(request), payload_of(model.global));
  ASSERT_TRUE(frames_arrived(MessageType::update, 1));
  const auto* update = server_->last(MessageType::update);
  auto report = protocol::parse_update_report(update->metadata);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->run_id, 3);
  EXPECT_EQ(report->round, 1);
  EXPECT_EQ(report->nonce, request.nonce);
  EXPECT_EQ(report->layout_fingerprint, model.fingerprint);
  EXPECT_EQ(report->samples, 24u);
  auto params = protocol::payload_floats(update->payload);
  ASSERT_TRUE(params);
  ASSERT_EQ(params->size(), model.global.size());
  EXPECT_NE(std::vector<float>(params->begin(), params->end()), model.global);  // it trained
  ASSERT_EQ(trained_.size(), 1u);
  EXPECT_EQ(trained_[0].round, 1);
  EXPECT_EQ(session_->identity(), "site-1");

  server_->send(MessageType::goodbye, "{}");
  ASSERT_TRUE(session_ended());
  EXPECT_TRUE(*ended_) << ended_->error().message;
  EXPECT_EQ(session_->rounds_trained(), 1u);
}

// Each frame is received into the payload of the one before, once the session is done
// with it: a site on a large model maps and zeroes no fresh pages for every TRAIN.
TEST_F(SessionTest, TheNextFrameIsReceivedIntoThePayloadOfTheTrainBefore) {
  const auto model = announced_logreg();
  ASSERT_TRUE(welcome_and_train(model, 2));
  EXPECT_EQ(trained_[1].round, 2);
  // Reads: WELCOME, TRAIN 1 (into nothing: WELCOME had no payload), TRAIN 2 (into TRAIN
  // 1's payload), and the one waiting now (into TRAIN 2's).
  ASSERT_EQ(link_->spare_capacities.size(), 4u);
  const std::size_t model_bytes = model.global.size() * sizeof(float);
  EXPECT_EQ(link_->spare_capacities[1], 0u);
  EXPECT_GE(link_->spare_capacities[2], model_bytes);
  EXPECT_GE(link_->spare_capacities[3], model_bytes);
}

TEST_F(SessionTest, WithoutAReceiveBufferNoPayloadIsHeldWhileWaiting) {
  remake_session([](SessionHooks& hooks) { hooks.keep_receive_buffer = false; });
  const auto model = announced_logreg();
  ASSERT_TRUE(welcome_and_train(model, 2));
  ASSERT_EQ(link_->spare_capacities.size(), 4u);
  for (const std::size_t capacity : link_->spare_capacities) {
    EXPECT_EQ(capacity, 0u);
  }
}

TEST_F(SessionTest, HeartbeatsGoOutEveryIntervalThroughAnIdleHour) {
  start();
  ASSERT_TRUE(frames_arrived(MessageType::hello, 1));
  server_->welcome(15);
  ASSERT_TRUE(run_until(io_, [&] { return sleeper_.sleeping() == 1; }));
  EXPECT_EQ(sleeper_.next_wake(), 15s);
  sleeper_.advance(14s);  // not yet
  EXPECT_EQ(sleeper_.next_wake(), 1s);
  EXPECT_EQ(server_->count(MessageType::heartbeat), 0u);
  sleeper_.advance(1s);
  ASSERT_TRUE(frames_arrived(MessageType::heartbeat, 1));
  for (std::size_t beat = 2; beat <= 240; ++beat) {  // one hour at 15 s
    ASSERT_TRUE(run_until(io_, [&] { return sleeper_.next_wake() == 15s; })) << beat;
    sleeper_.advance(15s);
    ASSERT_TRUE(frames_arrived(MessageType::heartbeat, beat)) << beat;
  }
  EXPECT_EQ(server_->count(MessageType::heartbeat), 240u);
  EXPECT_FALSE(ended_.has_value());  // the session is still up
  session_->stop();
  ASSERT_TRUE(session_ended());
  EXPECT_TRUE(*ended_);
}

TEST_F(SessionTest, AMalformedTrainIsIgnoredAndTheSessionGoesOn) {
  start();
  ASSERT_TRUE(frames_arrived(MessageType::hello, 1));
  server_->welcome();
  const auto model = announced_logreg();
  server_->send(MessageType::train, "not json", payload_of(model.global));
  server_->send(MessageType::train, R"({"run":3})", payload_of(model.global));
  server_->send(MessageType::train, protocol::to_metadata(train_request(model, 2)),
                payload_of(model.global));
  ASSERT_TRUE(frames_arrived(MessageType::update, 1));
  auto report = protocol::parse_update_report(server_->last(MessageType::update)->metadata);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->round, 2);
  EXPECT_EQ(server_->count(MessageType::error), 0u);
  EXPECT_EQ(trained_.size(), 1u);
}

TEST_F(SessionTest, ARequestItCannotHonourIsAnsweredWithAnErrorAndTheSessionStays) {
  start();
  ASSERT_TRUE(frames_arrived(MessageType::hello, 1));
  server_->welcome();
  const auto model = announced_logreg();
  auto wrong = train_request(model, 1);
  wrong.layout_fingerprint = std::string(16, 'a');
  server_->send(MessageType::train, protocol::to_metadata(wrong), payload_of(model.global));
  ASSERT_TRUE(frames_arrived(MessageType::error, 1));
  auto error = protocol::parse_error_message(server_->last(MessageType::error)->metadata);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "failed_precondition");
  EXPECT_NE(error->message.find("does not match"), std::string::npos) << error->message;
  server_->send(MessageType::train, protocol::to_metadata(train_request(model, 2)),
                payload_of(model.global));
  ASSERT_TRUE(frames_arrived(MessageType::update, 1));
  EXPECT_FALSE(ended_.has_value());
}

TEST_F(SessionTest, RefusedAtHelloEndsWithTheServersWords) {
  start();
  ASSERT_TRUE(frames_arrived(MessageType::hello, 1));
  server_->send(MessageType::error, protocol::to_metadata(protocol::ErrorMessage{
                                        "permission_denied", "certificate revoked"}));
  ASSERT_TRUE(session_ended());
  ASSERT_FALSE(*ended_);
  EXPECT_EQ(ended_->error().code, errc::permission_denied);
  EXPECT_NE(ended_->error().message.find("certificate revoked"), std::string::npos);
}

TEST_F(SessionTest, ADroppedUpdateClosesTheLinkAndSaysSo) {
  drop_updates_ = true;
  start();
  ASSERT_TRUE(frames_arrived(MessageType::hello, 1));
  server_->welcome();
  const auto model = announced_logreg();
  server_->send(MessageType::train, protocol::to_metadata(train_request(model, 4)),
                payload_of(model.global));
  ASSERT_TRUE(session_ended());
  ASSERT_FALSE(*ended_);
  EXPECT_EQ(ended_->error().code, errc::aborted);
  ASSERT_TRUE(run_until(io_, [&] { return server_->closed(); }));
  EXPECT_EQ(server_->count(MessageType::update), 0u);
}

TEST_F(SessionTest, ALostLinkEndsTheSessionWithAnError) {
  start();
  ASSERT_TRUE(frames_arrived(MessageType::hello, 1));
  server_->welcome();
  ASSERT_TRUE(run_until(io_, [&] { return sleeper_.sleeping() == 1; }));
  server_->close();
  ASSERT_TRUE(session_ended());
  EXPECT_FALSE(*ended_);
}

// The daemon around sessions: reconnects after a backoff that the test's clock drives.
class DaemonTest : public ::testing::Test {
 protected:
  DaemonTest() : sleeper_(std::make_shared<net::ManualSleeper>(io_, clock_)) {}

  std::unique_ptr<ClientDaemon> make_daemon(std::optional<std::uint64_t> seed = 11) {
    ClientOptions options;
    options.sleeper = sleeper_;
    // The session lengths that decide a healthy session are read from the test's clock
    // (non-owning: the fixture outlives the daemon).
    options.clock = std::shared_ptr<const Clock>(std::shared_ptr<const Clock>(), &clock_);
    options.seed = seed;
    options.initial_backoff = 500ms;
    options.max_backoff = 4s;
    options.connect_local = [this]() -> result<std::unique_ptr<net::Link>> {
      ++attempts_;
      if (!server_up_) {
        return fail(errc::unavailable, "server is down");
      }
      auto [client_end, server_end] = socket_pair(io_);
      servers_.push_back(std::make_unique<FakeServer>(io_, std::move(server_end)));
      return std::unique_ptr<net::Link>(std::make_unique<net::StreamLink<net::LocalStream>>(
          std::move(client_end), net::ChannelOptions{}));
    };
    auto daemon = ClientDaemon::create(io_, std::move(options), SiteData(tiny_data()));
    EXPECT_TRUE(daemon) << daemon.error().message;
    return std::move(*daemon);
  }
  void start(ClientDaemon& daemon) {
    asio::co_spawn(
        io_,
        [this, &daemon]() -> asio::awaitable<void> {
          co_await daemon.run();
          returned_ = true;
        },
        asio::detached);
  }

  // Runs until the daemon waits out a backoff (its only sleep, still ahead, and shorter
  // than any heartbeat interval) and returns that wait.
  std::chrono::milliseconds backoff_wait() {
    EXPECT_TRUE(run_until(io_, [&] {
      const auto wake = sleeper_->next_wake();
      return sleeper_->sleeping() == 1 && wake > 0ms && wake <= 4s;
    }));
    return sleeper_->next_wake();
  }
  // With the server down: the daemon's next `n` waits, each one waited out.
  std::vector<std::chrono::milliseconds> waits_while_down(int n) {
    std::vector<std::chrono::milliseconds> waits;
    for (int i = 0; i < n; ++i) {
      const int attempt = attempts_ + 1;
      EXPECT_TRUE(
          run_until(io_, [&] { return attempts_ == attempt && sleeper_->sleeping() == 1; }));
      waits.push_back(sleeper_->next_wake());
      sleeper_->advance(waits.back());
    }
    return waits;
  }
  // Brings the server up and serves the next connection: WELCOME, `lasting` of manual
  // time (heartbeats flow), then the end `how` says. Returns that connection's server.
  enum class End { lost_link, goodbye, no_welcome };
  FakeServer& serve_session(std::chrono::milliseconds lasting, End how) {
    server_up_ = true;
    const std::size_t n = servers_.size() + 1;
    EXPECT_TRUE(run_until(io_, [&] {
      return servers_.size() == n && servers_.back()->count(MessageType::hello) == 1;
    }));
    FakeServer& server = *servers_.back();
    if (how == End::no_welcome) {
      server.close();
      return server;
    }
    server.welcome();
    EXPECT_TRUE(run_until(io_, [&] { return sleeper_->sleeping() == 1; }));  // heartbeats
    sleeper_->advance(lasting);
    // The woken heartbeat went out and the next one sleeps (a full interval ahead).
    EXPECT_TRUE(run_until(io_, [&] {
      return server.count(MessageType::heartbeat) == 1 && sleeper_->sleeping() == 1 &&
             sleeper_->next_wake() > 4s;
    }));
    if (how == End::goodbye) {
      server.send(MessageType::goodbye, "{}");
    } else {
      server.close();
    }
    return server;
  }

  asio::io_context io_;
  ManualClock clock_;
  std::shared_ptr<net::ManualSleeper> sleeper_;
  std::vector<std::unique_ptr<FakeServer>> servers_;
  bool server_up_ = true;
  int attempts_ = 0;
  bool returned_ = false;
};

TEST_F(DaemonTest, ReconnectsAfterABackoffWhenTheServerCloses) {
  auto daemon = make_daemon();
  start(*daemon);
  ASSERT_TRUE(run_until(
      io_, [&] { return !servers_.empty() && servers_[0]->count(MessageType::hello) == 1; }));
  servers_[0]->welcome();
  ASSERT_TRUE(run_until(io_, [&] { return sleeper_->sleeping() == 1; }));  // heartbeats
  servers_[0]->close();
  // The first wait is drawn from [min, 3 min] (decorrelated jitter, client/backoff.hpp).
  ASSERT_TRUE(run_until(io_, [&] {
    return sleeper_->sleeping() == 1 && sleeper_->next_wake() < 15s;  // the backoff alone
  }));
  const auto wait = sleeper_->next_wake();
  EXPECT_GE(wait, 500ms);
  EXPECT_LE(wait, 1500ms);
  EXPECT_EQ(daemon->connections(), 1u);
  sleeper_->advance(wait);
  ASSERT_TRUE(run_until(io_, [&] { return servers_.size() == 2; }));
  ASSERT_TRUE(run_until(io_, [&] { return servers_[1]->count(MessageType::hello) == 1; }));
  EXPECT_EQ(daemon->connections(), 2u);
  daemon->stop();
  ASSERT_TRUE(run_until(io_, [&] { return returned_; }));
}

TEST_F(DaemonTest, BackoffGrowsWithinItsBoundsWhileTheServerIsAwayAndStopEndsTheWait) {
  server_up_ = false;
  auto daemon = make_daemon();
  start(*daemon);
  std::vector<std::chrono::milliseconds> waits;
  for (int attempt = 1; attempt <= 6; ++attempt) {
    ASSERT_TRUE(run_until(io_, [&] { return attempts_ == attempt && sleeper_->sleeping() == 1; }));
    waits.push_back(sleeper_->next_wake());
    if (attempt < 6) {
      sleeper_->advance(waits.back());
    }
  }
  // Exactly the schedule of a Backoff with the daemon's bounds and injected seed.
  Backoff reference(500ms, 4s, 11);
  auto previous = 500ms;
  for (std::size_t i = 0; i < waits.size(); ++i) {
    EXPECT_EQ(waits[i], reference.next()) << i;
    EXPECT_GE(waits[i], 500ms) << i;
    EXPECT_LE(waits[i], std::min<std::chrono::milliseconds>(4s, previous * 3)) << i;
    previous = waits[i];
  }
  EXPECT_EQ(daemon->connections(), 0u);
  daemon->stop();  // during a backoff wait
  ASSERT_TRUE(run_until(io_, [&] { return returned_; }));
  EXPECT_EQ(attempts_, 6);
}

// Issue 19: the backoff never started over while sessions ended by a lost link, so waits
// grew across good sessions (0.6 -> 1.2 -> 3.7 -> 9.9 -> 24 s). Now a healthy session
// (WELCOMEd, then a minute on the daemon's clock) resets it however it ended.
TEST_F(DaemonTest, AHealthySessionStartsTheBackoffOverEvenWhenItsLinkIsLost) {
  server_up_ = false;
  auto daemon = make_daemon();
  start(*daemon);
  Backoff reference(500ms, 4s, 11);
  for (int outage = 0; outage < 3; ++outage) {
    for (auto wait : waits_while_down(4)) {
      EXPECT_EQ(wait, reference.next()) << "outage " << outage;
    }
    serve_session(kHealthySession, End::lost_link);
    server_up_ = false;
    reference.reset();
    const auto wait = backoff_wait();
    EXPECT_EQ(wait, reference.next()) << "outage " << outage;
    EXPECT_LE(wait, 1500ms) << "outage " << outage;  // the first draw: [min, 3 min]
    sleeper_->advance(wait);
  }
  EXPECT_EQ(daemon->connections(), 3u);
  daemon->stop();
  ASSERT_TRUE(run_until(io_, [&] { return returned_; }));
}

// A server that drops its clients within the minute, or never WELCOMEs them, is not
// healthy: the waits go on growing from where they were, also after a GOODBYE.
TEST_F(DaemonTest, AShortOrUnwelcomedSessionLeavesTheBackoffWhereItWas) {
  server_up_ = false;
  auto daemon = make_daemon();
  start(*daemon);
  Backoff reference(500ms, 4s, 11);
  for (auto wait : waits_while_down(3)) {
    EXPECT_EQ(wait, reference.next());
  }
  const std::pair<std::chrono::milliseconds, End> sessions[] = {
      {kHealthySession - 1ms, End::lost_link},
      {kHealthySession - 1ms, End::goodbye},
      {0ms, End::no_welcome},
  };
  for (const auto& [lasting, how] : sessions) {
    serve_session(lasting, how);
    server_up_ = false;
    const auto wait = backoff_wait();
    EXPECT_EQ(wait, reference.next()) << static_cast<int>(how);
    sleeper_->advance(wait);
  }
  EXPECT_EQ(daemon->connections(), 3u);
  daemon->stop();
  ASSERT_TRUE(run_until(io_, [&] { return returned_; }));
}

// Without an injected seed every daemon draws its own (OS randomness and the site's id):
// two of them, as two sites or one site restarted, wait differently.
TEST_F(DaemonTest, DaemonsWithoutAnInjectedSeedWaitDifferently) {
  server_up_ = false;
  std::vector<std::vector<std::chrono::milliseconds>> waits;
  for (int i = 0; i < 2; ++i) {
    auto daemon = make_daemon(std::nullopt);
    returned_ = false;
    start(*daemon);
    waits.push_back(waits_while_down(4));
    daemon->stop();
    ASSERT_TRUE(run_until(io_, [&] { return returned_; }));
  }
  for (const auto& w : waits) {
    for (auto wait : w) {
      EXPECT_GE(wait, 500ms);
      EXPECT_LE(wait, 4s);
    }
  }
  // Equal only if four draws collide, about one chance in 10^11.
  EXPECT_NE(waits[0], waits[1]);
}

}  // namespace
}  // namespace fedcore::client
