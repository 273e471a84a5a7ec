// A site answering EVALUATE: the session against a scripted fake server over a local socket
// pair (the real local evaluator, the real policy gate and audit log), and the policy's
// evaluation checks on their own.
#include <deque>
#include <fstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include "client/audit_log.hpp"
#include "client/local_evaluator.hpp"
#include "client/session.hpp"
#include "client/site_policy.hpp"
#include "shared/model/trainer.hpp"
#include "tests/client/client_test_support.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::client {
namespace {

namespace asio = boost::asio;
using protocol::MessageType;
using testing::announced_logreg;
using testing::run_until;
using testing::socket_pair;
using testing::tiny_data;

std::shared_ptr<net::Link> link_over(net::LocalStream stream) {
  return std::make_shared<net::StreamLink<net::LocalStream>>(std::move(stream),
                                                             net::ChannelOptions{});
}

protocol::EvaluateRequest evaluate_request(const testing::Announced& a, std::int64_t round) {
  protocol::EvaluateRequest r;
  r.run_id = 3;
  r.round = round;
  r.nonce = std::string(31, 'a') + std::to_string(round % 10);
  r.model_spec = a.spec;
  r.layout_fingerprint = a.fingerprint;
  return r;
}

class EvaluationSessionTest : public ::testing::Test {
 protected:
  EvaluationSessionTest() : sleeper_(io_, clock_), data_(tiny_data()) {}

  void start(SitePolicy policy) {
    gate_.emplace(std::move(policy));
    auto opened = AuditLog::open(dir_.path("audit.jsonl"), clock_);
    ASSERT_TRUE(opened) << opened.error().to_string();
    audit_ = std::move(*opened);
    auto [client_end, server_end] = socket_pair(io_);
    server_ = link_over(std::move(server_end));
    asio::co_spawn(io_, read_all(), asio::detached);
    SessionHooks hooks;
    hooks.train = [](const protocol::TrainRequest&, std::span<const float>,
                     std::span<const float>) -> asio::awaitable<LocalResult> {
      ADD_FAILURE() << "an evaluation must not train";
      co_return LocalResult{};
    };
    hooks.evaluate = [this](const protocol::EvaluateRequest& request, std::span<const float> params)
        -> asio::awaitable<result<protocol::LocalEvaluation>> {
      co_return evaluate_locally(request, params, data_, 1);
    };
    hooks.admit_evaluation = [this](const protocol::EvaluateRequest& request, std::size_t n) {
      return gate_->admit_evaluation(request, n, clock_.steady());
    };
    hooks.audit = audit_.get();
    session_ = std::make_unique<ClientSession>(io_, link_over(std::move(client_end)), sleeper_,
                                               std::move(hooks), "fake-server");
    protocol::Hello hello;
    hello.samples = 24;
    hello.input_shape = {4};
    hello.num_classes = 2;
    hello.capabilities = {"train", "evaluate"};
    asio::co_spawn(
        io_, [this, hello]() -> asio::awaitable<void> { (void)co_await session_->run(hello); },
        asio::detached);
    ASSERT_TRUE(run_until(io_, [&] { return count(MessageType::hello) == 1; }));
    server_->send(MessageType::welcome, protocol::to_metadata(protocol::Welcome{"site-1", 15}));
  }

  asio::awaitable<void> read_all() {
    auto link = server_;
    while (true) {
      auto frame = co_await link->read_frame();
      if (!frame) {
        co_return;
      }
      frames_.push_back(std::move(*frame));
    }
  }
  std::size_t count(MessageType type) const {
    return static_cast<std::size_t>(std::count_if(
        frames_.begin(), frames_.end(), [&](const protocol::Frame& f) { return f.type == type; }));
  }
  // Sends an EVALUATE and returns the EVALUATION it got.
  protocol::EvaluationReport ask(const protocol::EvaluateRequest& request,
                                 const std::vector<float>& params) {
    const auto before = count(MessageType::evaluation);
    server_->send(MessageType::evaluate, protocol::to_metadata(request),
                  std::make_shared<const std::vector<float>>(params));
    EXPECT_TRUE(run_until(io_, [&] { return count(MessageType::evaluation) > before; }));
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      if (it->type == MessageType::evaluation) {
        auto report = protocol::parse_evaluation_report(it->metadata);
        EXPECT_TRUE(report) << report.error().message;
        EXPECT_TRUE(it->payload.empty());
        return report ? *report : protocol::EvaluationReport{};
      }
    }
    return {};
  }
  std::vector<std::string> audit_events() const {
    std::vector<std::string> out;
    std::ifstream in(dir_.path("audit.jsonl"));
    for (std::string line; std::getline(in, line);) {
      out.push_back(nlohmann::json::parse(line)["event"].get<std::string>());
    }
    return out;
  }

  fedcore::testing::TempDir dir_;
  asio::io_context io_;
  ManualClock clock_;
  net::ManualSleeper sleeper_;
  data::TrainTest data_;
  std::optional<SitePolicyGate> gate_;
  std::unique_ptr<AuditLog> audit_;
  std::shared_ptr<net::Link> server_;
  std::deque<protocol::Frame> frames_;
  std::unique_ptr<ClientSession> session_;
};

TEST_F(EvaluationSessionTest, AnEvaluateIsAnsweredWithTheModelsMetricsOnTheTestSplit) {
  start({});
  const auto model = announced_logreg();
  const auto request = evaluate_request(model, 4);
  const auto report = ask(request, model.global);
  EXPECT_EQ(report.run_id, 3);
  EXPECT_EQ(report.round, 4);
  EXPECT_EQ(report.nonce, request.nonce);
  ASSERT_EQ(report.status, protocol::EvaluationStatus::ok) << report.message;
  // Exactly the received parameters on the 4 test samples: nothing was trained.
  auto spec = model::complete_spec(*model::parse_model_spec(model.spec), {4}, 2);
  auto built = model::build_model(*spec);
  std::copy(model.global.begin(), model.global.end(), built->params().begin());
  const auto expected = model::evaluate(*built, model::loss_for(*spec), data_.test);
  EXPECT_EQ(report.samples, 4u);
  EXPECT_DOUBLE_EQ(report.loss, expected.loss);
  EXPECT_DOUBLE_EQ(report.accuracy, expected.accuracy);
  EXPECT_EQ(count(MessageType::update), 0u);
  EXPECT_EQ(session_->evaluations_sent(), 1u);
  EXPECT_EQ(audit_events(), (std::vector<std::string>{"evaluation_requested", "evaluation_sent"}));
  ASSERT_TRUE(verify_audit_log(dir_.path("audit.jsonl")));
}

TEST_F(EvaluationSessionTest, APolicyThatForbidsEvaluationRefusesInWords) {
  SitePolicy policy;
  policy.allow_evaluation = false;
  start(policy);
  const auto model = announced_logreg();
  const auto report = ask(evaluate_request(model, 1), model.global);
  EXPECT_EQ(report.status, protocol::EvaluationStatus::refused);
  EXPECT_EQ(report.message.rfind("site policy: ", 0), 0u) << report.message;
  EXPECT_NE(report.message.find("allow_evaluation"), std::string::npos);
  EXPECT_EQ(report.samples, 0u);
  EXPECT_EQ(session_->evaluations_sent(), 0u);
  EXPECT_EQ(audit_events(),
            (std::vector<std::string>{"evaluation_requested", "evaluation_refused"}));
}

TEST_F(EvaluationSessionTest, APerDayLimitRefusesTheEvaluationsPastIt) {
  SitePolicy policy;
  policy.max_evaluations_per_day = 2;
  start(policy);
  const auto model = announced_logreg();
  EXPECT_EQ(ask(evaluate_request(model, 1), model.global).status, protocol::EvaluationStatus::ok);
  EXPECT_EQ(ask(evaluate_request(model, 2), model.global).status, protocol::EvaluationStatus::ok);
  const auto third = ask(evaluate_request(model, 3), model.global);
  EXPECT_EQ(third.status, protocol::EvaluationStatus::refused);
  EXPECT_NE(third.message.find("already 2 evaluations in the last 24 hours"), std::string::npos)
      << third.message;
  clock_.advance(std::chrono::hours(24));  // the window rolls on
  EXPECT_EQ(ask(evaluate_request(model, 4), model.global).status, protocol::EvaluationStatus::ok);
}

TEST_F(EvaluationSessionTest, AModelThatDoesNotFitIsAFailureNotASilence) {
  start({});
  const auto model = announced_logreg();
  auto request = evaluate_request(model, 1);
  request.layout_fingerprint = "0123456789abcdef";
  const auto report = ask(request, model.global);
  EXPECT_EQ(report.status, protocol::EvaluationStatus::failed);
  EXPECT_NE(report.message.find("does not match"), std::string::npos) << report.message;
  // Too few parameters for the announced layout.
  const std::vector<float> short_params(model.global.begin(), model.global.end() - 1);
  EXPECT_EQ(ask(evaluate_request(model, 2), short_params).status,
            protocol::EvaluationStatus::failed);
  // A malformed EVALUATE is ignored, and the session goes on.
  server_->send(MessageType::evaluate, R"({"run":3})",
                std::make_shared<const std::vector<float>>(model.global));
  EXPECT_EQ(ask(evaluate_request(model, 3), model.global).status, protocol::EvaluationStatus::ok);
  EXPECT_EQ(count(MessageType::evaluation), 3u);
  const auto events = audit_events();
  EXPECT_EQ(std::count(events.begin(), events.end(), "not_evaluated"), 2);
}

TEST(SitePolicyEvaluation, EveryEvaluationRefusalReasonIsReported) {
  const auto model = announced_logreg();
  const auto request = evaluate_request(model, 1);
  const auto now = Clock::steady_time{};
  const auto reason = [&](SitePolicy p, std::size_t params = 5) {
    SitePolicyGate gate(std::move(p));
    auto refused = gate.check_evaluation(request, params, now);
    return refused ? std::optional(refused->reason) : std::nullopt;
  };
  EXPECT_EQ(reason({}), std::nullopt);
  SitePolicy p;
  p.allow_evaluation = false;
  EXPECT_EQ(reason(p), RefusalReason::evaluation);
  p = {};
  p.allowed_model_types = {"mlp"};
  EXPECT_EQ(reason(p), RefusalReason::model_type);
  p = {};
  p.max_parameters = 4;
  EXPECT_EQ(reason(p), RefusalReason::parameter_count);
  p = {};
  p.max_epsilon = 8;  // a site that requires DP: metrics would leave outside any budget
  EXPECT_EQ(reason(p), RefusalReason::dp_required);
  p = {};
  p.max_local_epochs = 1;
  p.max_rounds_per_day = 1;
  p.require_secure_aggregation = true;  // training limits: not about evaluation
  EXPECT_EQ(reason(p), std::nullopt);
  EXPECT_EQ(refusal_reason_name(RefusalReason::evaluation), "evaluation");
  EXPECT_EQ(refusal_reason_name(RefusalReason::evaluations_per_day), "evaluations_per_day");
}

TEST(SitePolicyEvaluation, TheConfigKeysAreReadStrictly) {
  auto parsed = parse_site_policy(
      nlohmann::json{{"allow_evaluation", false}, {"max_evaluations_per_day", 12}});
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_FALSE(parsed->allow_evaluation);
  EXPECT_EQ(parsed->max_evaluations_per_day, 12u);
  EXPECT_TRUE(parse_site_policy(nlohmann::json::object())->allow_evaluation);
  auto bad = parse_site_policy(nlohmann::json{{"max_evaluations_per_day", 0}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("max_evaluations_per_day"), std::string::npos);
  auto typo = parse_site_policy(nlohmann::json{{"allow_evaluations", true}});
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("did you mean 'policy.allow_evaluation'"), std::string::npos)
      << typo.error().message;
}

}  // namespace
}  // namespace fedcore::client
