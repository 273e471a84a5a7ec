// The site policy and the audit log in a session and in a daemon, against a scripted fake
// server over a local socket pair; time from manual clocks.
#include <deque>
#include <fstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include "client/audit_log.hpp"
#include "client/daemon.hpp"
#include "client/session.hpp"
#include "client/site_policy.hpp"
#include "tests/client/client_test_support.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::client {
namespace {

namespace asio = boost::asio;
using nlohmann::json;
using protocol::MessageType;
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

// The server's end: records every frame it receives.
class FakeServer {
 public:
  FakeServer(asio::io_context& io, net::LocalStream stream) : link_(link_over(std::move(stream))) {
    asio::co_spawn(io, read_all(), asio::detached);
  }
  void welcome() {
    link_->send(MessageType::welcome, protocol::to_metadata(protocol::Welcome{"site-1", 15}));
  }
  void train(const protocol::TrainRequest& request, const std::vector<float>& global) {
    link_->send(MessageType::train, protocol::to_metadata(request),
                std::make_shared<const std::vector<float>>(global));
  }
  std::size_t count(MessageType type) const {
    return static_cast<std::size_t>(std::count_if(
        frames_.begin(), frames_.end(), [&](const protocol::Frame& f) { return f.type == type; }));
  }
  std::vector<const protocol::Frame*> answers() const {  // UPDATEs and ERRORs, in order
    std::vector<const protocol::Frame*> out;
    for (const auto& f : frames_) {
      if (f.type == MessageType::update || f.type == MessageType::error) {
        out.push_back(&f);
      }
    }
    return out;
  }

 private:
  asio::awaitable<void> read_all() {
    auto link = link_;
    while (true) {
      auto frame = co_await link->read_frame();
      if (!frame) {
        co_return;
      }
      frames_.push_back(std::move(*frame));
    }
  }

  std::shared_ptr<net::Link> link_;
  std::deque<protocol::Frame> frames_;
};

std::vector<json> audit_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(json::parse(line));
  }
  return lines;
}

std::vector<std::string> events_of(const std::vector<json>& lines) {
  std::vector<std::string> events;
  for (const auto& l : lines) {
    events.push_back(l["event"].get<std::string>());
  }
  return events;
}

protocol::ErrorMessage error_of(const protocol::Frame& frame) {
  auto e = protocol::parse_error_message(frame.metadata);
  EXPECT_TRUE(e);
  return e ? *e : protocol::ErrorMessage{};
}

class SiteSessionTest : public ::testing::Test {
 protected:
  SiteSessionTest() : sleeper_(io_, clock_), data_(tiny_data()) {}

  void start(const json& policy) {
    auto parsed = parse_site_policy(policy);
    ASSERT_TRUE(parsed) << parsed.error().message;
    gate_ = SitePolicyGate(*parsed);
    auto log = AuditLog::open(dir_.path("audit.jsonl"), clock_);
    ASSERT_TRUE(log) << log.error().message;
    audit_ = std::move(*log);
    auto [client_end, server_end] = socket_pair(io_);
    server_ = std::make_unique<FakeServer>(io_, std::move(server_end));
    SessionHooks hooks;
    hooks.train = [this](const protocol::TrainRequest& request, std::span<const float> global,
                         std::span<const float>) -> asio::awaitable<LocalResult> {
      ++trainings_;
      co_return train_locally(request, global, data_, 1);
    };
    hooks.admit = [this](const protocol::TrainRequest& request, std::size_t parameters) {
      parameter_counts_.push_back(parameters);
      return gate_.admit(request, parameters, clock_.steady());
    };
    hooks.audit = audit_.get();
    session_ = std::make_unique<ClientSession>(io_, link_over(std::move(client_end)), sleeper_,
                                               std::move(hooks), "fake-server:7443");
    protocol::Hello hello;
    hello.samples = data_.train.size();
    hello.input_shape = data_.train.sample_shape;
    hello.num_classes = data_.train.num_classes;
    asio::co_spawn(
        io_, [this, hello]() -> asio::awaitable<void> { ended_ = co_await session_->run(hello); },
        asio::detached);
    ASSERT_TRUE(run_until(io_, [&] { return server_->count(MessageType::hello) == 1; }));
    server_->welcome();
  }
  bool answered(std::size_t n) {
    return run_until(io_, [&] { return server_->answers().size() >= n; });
  }

  fedcore::testing::TempDir dir_;
  asio::io_context io_;
  ManualClock clock_;
  net::ManualSleeper sleeper_;
  data::TrainTest data_;
  SitePolicyGate gate_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<FakeServer> server_;
  std::unique_ptr<ClientSession> session_;
  std::optional<result<void>> ended_;
  int trainings_ = 0;
  std::vector<std::size_t> parameter_counts_;
};

TEST_F(SiteSessionTest, ARefusedRequestIsAnsweredPermissionDeniedUntrainedAndTheSessionGoesOn) {
  start({{"max_local_epochs", 1}});
  const auto model = announced_logreg();
  auto too_long = train_request(model, 1);
  too_long.settings.epochs = 2;
  server_->train(too_long, model.global);
  ASSERT_TRUE(answered(1));
  ASSERT_EQ(server_->answers()[0]->type, MessageType::error);
  const auto refusal = error_of(*server_->answers()[0]);
  EXPECT_EQ(refusal.code, "permission_denied");
  EXPECT_EQ(refusal.message, "site policy: 2 local epochs requested, at most 1 allowed");
  EXPECT_EQ(trainings_, 0);
  EXPECT_EQ(parameter_counts_, std::vector<std::size_t>{model.global.size()});

  auto fine = train_request(model, 2);
  fine.evaluate = true;
  server_->train(fine, model.global);
  ASSERT_TRUE(answered(2));
  const auto* update = server_->answers()[1];
  ASSERT_EQ(update->type, MessageType::update);
  EXPECT_EQ(trainings_, 1);
  EXPECT_FALSE(ended_.has_value());

  const auto lines = audit_lines(dir_.path("audit.jsonl"));
  EXPECT_EQ(events_of(lines),
            (std::vector<std::string>{"request_received", "refused", "request_received", "trained",
                                      "update_sent", "evaluation_sent"}));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0]["server"], "fake-server:7443");
  EXPECT_EQ(lines[0]["round"], 1);
  EXPECT_EQ(lines[0]["epochs"], 2);
  EXPECT_EQ(lines[0]["model_type"], "logreg");
  EXPECT_EQ(lines[0]["parameters"], model.global.size());
  EXPECT_EQ(lines[1]["reason"], "local_epochs");
  EXPECT_EQ(lines[3]["samples"], data_.train.size());
  EXPECT_EQ(lines[4]["round"], 2);
  EXPECT_EQ(lines[4]["bytes"], update->payload.size());  // what left the site, byte for byte
  EXPECT_EQ(lines[5]["samples"], data_.test.size());
  EXPECT_TRUE(verify_audit_log(dir_.path("audit.jsonl")));
}

TEST_F(SiteSessionTest, EveryRequestReasonReachesTheServerInWords) {
  start({{"allowed_model_types", {"mlp"}}});
  const auto model = announced_logreg();
  server_->train(train_request(model, 1), model.global);
  ASSERT_TRUE(answered(1));
  const auto refusal = error_of(*server_->answers()[0]);
  EXPECT_EQ(refusal.code, "permission_denied");
  EXPECT_EQ(refusal.message, "site policy: model type 'logreg' is not allowed (allowed: mlp)");
  EXPECT_EQ(trainings_, 0);
}

TEST_F(SiteSessionTest, APrivacyDemandIsCheckedAgainstTheTermsInTheRequest) {
  start({{"require_secure_aggregation", true}, {"max_epsilon", 2.0}});
  const auto model = announced_logreg();
  auto request = train_request(model, 1);
  request.privacy.secure_aggregation = true;
  request.privacy.dp = protocol::DpMode::client_distributed;
  request.privacy.epsilon = 3;
  server_->train(request, model.global);
  ASSERT_TRUE(answered(1));
  EXPECT_EQ(error_of(*server_->answers()[0]).message,
            "site policy: the run's privacy budget epsilon 3 is not within the allowed 2");
  const auto lines = audit_lines(dir_.path("audit.jsonl"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["privacy"]["dp"], "client_distributed");
  EXPECT_EQ(lines[0]["privacy"]["epsilon"], 3.0);
  EXPECT_EQ(lines[1]["reason"], "epsilon");
}

// The daemon wires its policy (with its injected clock) and its audit log into sessions.
class SiteDaemonTest : public ::testing::Test {
 protected:
  SiteDaemonTest()
      : clock_(std::make_shared<ManualClock>()),
        sleeper_(std::make_shared<net::ManualSleeper>(io_, *clock_)) {}

  result<std::unique_ptr<ClientDaemon>> make_daemon(const json& policy, std::string audit_path) {
    ClientOptions options;
    options.sleeper = sleeper_;
    options.clock = clock_;
    options.audit_log = std::move(audit_path);
    auto parsed = parse_site_policy(policy);
    EXPECT_TRUE(parsed);
    options.policy = *parsed;
    options.connect_local = [this]() -> result<std::unique_ptr<net::Link>> {
      auto [client_end, server_end] = socket_pair(io_);
      servers_.push_back(std::make_unique<FakeServer>(io_, std::move(server_end)));
      return std::unique_ptr<net::Link>(std::make_unique<net::StreamLink<net::LocalStream>>(
          std::move(client_end), net::ChannelOptions{}));
    };
    return ClientDaemon::create(io_, std::move(options), SiteData(tiny_data()));
  }

  fedcore::testing::TempDir dir_;
  asio::io_context io_;
  std::shared_ptr<ManualClock> clock_;
  std::shared_ptr<net::ManualSleeper> sleeper_;
  std::vector<std::unique_ptr<FakeServer>> servers_;
};

TEST_F(SiteDaemonTest, RoundsPerDayCountOnTheDaemonsClockAndEveryRoundIsAudited) {
  const auto audit_path = dir_.path("audit.jsonl");
  auto daemon = make_daemon({{"max_rounds_per_day", 1}}, audit_path);
  ASSERT_TRUE(daemon) << daemon.error().message;
  bool returned = false;
  asio::co_spawn(
      io_,
      [&]() -> asio::awaitable<void> {
        co_await (*daemon)->run();
        returned = true;
      },
      asio::detached);
  ASSERT_TRUE(run_until(
      io_, [&] { return !servers_.empty() && servers_[0]->count(MessageType::hello) == 1; }));
  auto& server = *servers_[0];
  server.welcome();
  const auto model = announced_logreg();
  auto answered = [&](std::size_t n) {
    return run_until(io_, [&] { return server.answers().size() >= n; });
  };
  server.train(train_request(model, 1), model.global);
  ASSERT_TRUE(answered(1));
  EXPECT_EQ(server.answers()[0]->type, MessageType::update);
  clock_->advance(23h);
  server.train(train_request(model, 2), model.global);
  ASSERT_TRUE(answered(2));
  ASSERT_EQ(server.answers()[1]->type, MessageType::error);
  const auto refusal = error_of(*server.answers()[1]);
  EXPECT_EQ(refusal.code, "permission_denied");
  EXPECT_EQ(refusal.message.rfind("site policy: already 1 rounds in the last 24 hours", 0), 0u)
      << refusal.message;
  clock_->advance(1h);  // round 1 leaves the window
  server.train(train_request(model, 3), model.global);
  ASSERT_TRUE(answered(3));
  EXPECT_EQ(server.answers()[2]->type, MessageType::update);
  EXPECT_EQ((*daemon)->rounds_trained(), 2u);
  (*daemon)->stop();
  ASSERT_TRUE(run_until(io_, [&] { return returned; }));

  auto verified = verify_audit_log(audit_path);
  ASSERT_TRUE(verified) << verified.error().message;
  const auto lines = audit_lines(audit_path);
  EXPECT_EQ(events_of(lines), (std::vector<std::string>{
                                  "request_received", "trained", "update_sent", "request_received",
                                  "refused", "request_received", "trained", "update_sent"}));
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[4]["reason"], "rounds_per_day");
  EXPECT_EQ(lines[7]["time_ms"].get<std::int64_t>() - lines[0]["time_ms"].get<std::int64_t>(),
            24 * 3600 * 1000);  // the audit log's time is the daemon's clock too
}

TEST_F(SiteDaemonTest, AnAuditLogThatCannotBeOpenedStopsTheDaemonFromStarting) {
  auto daemon = make_daemon(json::object(), dir_.path("no-such-folder/audit.jsonl"));
  ASSERT_FALSE(daemon);
  EXPECT_EQ(daemon.error().code, errc::io_error);
  EXPECT_NE(daemon.error().message.find("no-such-folder/audit.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace fedcore::client
