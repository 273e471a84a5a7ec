// The site's audit log: what each event line carries, the hash chain, its verification,
// and that changing, inserting, removing or tearing a line is found.
#include "client/audit_log.hpp"

#include <fstream>
#include <signal.h>
#include <sstream>
#include <sys/resource.h>

#include <gtest/gtest.h>

#include "tests/temp_dir.hpp"

namespace fedcore::client {
namespace {

using fedcore::testing::TempDir;
using nlohmann::json;
using namespace std::chrono_literals;

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path, std::ios::trunc);
  for (const auto& line : lines) {
    out << line << "\n";
  }
}

protocol::TrainRequest request() {
  protocol::TrainRequest r;
  r.run_id = 7;
  r.round = 3;
  r.model_spec = {{"type", "mlp"}, {"hidden", {16}}};
  r.settings.epochs = 2;
  r.settings.batch_size = 16;
  r.privacy.secure_aggregation = true;
  r.privacy.dp = protocol::DpMode::client_distributed;
  r.privacy.epsilon = 4;
  r.privacy.delta = 1e-5;
  return r;
}

// Writes one of every event; returns the log's head.
std::string write_every_event(const std::string& path, ManualClock& clock) {
  auto log = AuditLog::open(path, clock);
  EXPECT_TRUE(log) << log.error().message;
  const auto r = request();
  protocol::UpdateReport report;
  report.samples = 120;
  report.train_seconds = 1.5;
  report.loss = 0.25;
  EXPECT_TRUE((*log)->request_received("fl.example.org:7443", r, 1234));
  clock.advance(1500ms);
  EXPECT_TRUE((*log)->trained(r, report));
  EXPECT_TRUE((*log)->update_sent(r, report, 1234 * 4));
  EXPECT_TRUE((*log)->evaluation_sent(r, protocol::LocalEvaluation{0.5, 0.75, 30}));
  EXPECT_TRUE((*log)->refused(r, PolicyRefusal{RefusalReason::epsilon, "too weak"}));
  EXPECT_TRUE((*log)->not_trained(r, error{errc::failed_precondition, "layout differs"}));
  EXPECT_TRUE((*log)->server_refused("fl.example.org:7443",
                                     PolicyRefusal{RefusalReason::server_name, "wrong name"}));
  EXPECT_EQ((*log)->lines(), 7u);
  return (*log)->head();
}

TEST(AuditLog, EveryEventIsOneLineWithItsFields) {
  TempDir dir;
  ManualClock clock(1'714'641'243'120);
  const auto head = write_every_event(dir.path("audit.jsonl"), clock);
  const auto lines = read_lines(dir.path("audit.jsonl"));
  ASSERT_EQ(lines.size(), 7u);
  std::vector<json> j;
  for (const auto& line : lines) {
    j.push_back(json::parse(line));
  }
  EXPECT_EQ(j[0]["seq"], 1);
  EXPECT_EQ(j[0]["event"], "request_received");
  EXPECT_EQ(j[0]["time"], "2024-05-02T09:14:03.120Z");
  EXPECT_EQ(j[0]["time_ms"], 1'714'641'243'120);
  EXPECT_EQ(j[0]["server"], "fl.example.org:7443");
  EXPECT_EQ(j[0]["run"], 7);
  EXPECT_EQ(j[0]["round"], 3);
  EXPECT_EQ(j[0]["model_type"], "mlp");
  EXPECT_EQ(j[0]["model"], request().model_spec);
  EXPECT_EQ(j[0]["parameters"], 1234);
  EXPECT_EQ(j[0]["epochs"], 2);
  EXPECT_EQ(j[0]["privacy"]["secure_aggregation"], true);
  EXPECT_EQ(j[0]["privacy"]["dp"], "client_distributed");
  EXPECT_EQ(j[0]["privacy"]["epsilon"], 4.0);
  EXPECT_EQ(j[0]["privacy"]["delta"], 1e-5);
  EXPECT_EQ(j[0]["prev"], std::string(64, '0'));

  EXPECT_EQ(j[1]["event"], "trained");
  EXPECT_EQ(j[1]["time_ms"], 1'714'641'244'620);
  EXPECT_EQ(j[1]["samples"], 120);
  EXPECT_EQ(j[1]["seconds"], 1.5);
  EXPECT_EQ(j[2]["event"], "update_sent");
  EXPECT_EQ(j[2]["bytes"], 4936);
  EXPECT_EQ(j[3]["event"], "evaluation_sent");
  EXPECT_EQ(j[3]["samples"], 30);
  EXPECT_EQ(j[3]["accuracy"], 0.75);
  EXPECT_EQ(j[4]["event"], "refused");
  EXPECT_EQ(j[4]["reason"], "epsilon");
  EXPECT_EQ(j[4]["words"], "too weak");
  EXPECT_EQ(j[5]["event"], "not_trained");
  EXPECT_EQ(j[5]["code"], "failed_precondition");
  EXPECT_EQ(j[6]["event"], "server_refused");
  EXPECT_EQ(j[6]["reason"], "server_name");
  for (std::size_t i = 0; i < j.size(); ++i) {
    EXPECT_EQ(j[i]["seq"], i + 1);
    ASSERT_TRUE(j[i]["prev"].is_string());
    EXPECT_EQ(j[i]["prev"].get<std::string>().size(), 64u);
    if (i > 0) {
      EXPECT_NE(j[i]["prev"], j[i - 1]["prev"]);
    }
  }
  auto verified = verify_audit_log(dir.path("audit.jsonl"));
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_EQ(verified->lines, 7u);
  EXPECT_EQ(verified->head, head);
}

TEST(AuditLog, ReopeningContinuesTheChain) {
  TempDir dir;
  ManualClock clock;
  const auto path = dir.path("audit.jsonl");
  const auto first_head = write_every_event(path, clock);
  {
    auto log = AuditLog::open(path, clock);
    ASSERT_TRUE(log) << log.error().message;
    EXPECT_EQ((*log)->lines(), 7u);
    EXPECT_EQ((*log)->head(), first_head);
    ASSERT_TRUE((*log)->record("note", {{"text", "after a restart"}}));
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(json::parse(lines[7])["seq"], 8);
  EXPECT_EQ(json::parse(lines[7])["prev"], first_head);
  auto verified = verify_audit_log(path);
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_EQ(verified->lines, 8u);
}

TEST(AuditLog, AnEmptyOrNewLogVerifies) {
  TempDir dir;
  ManualClock clock;
  {
    auto log = AuditLog::open(dir.path("audit.jsonl"), clock);
    ASSERT_TRUE(log);
    EXPECT_EQ((*log)->lines(), 0u);
  }
  auto verified = verify_audit_log(dir.path("audit.jsonl"));
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_EQ(verified->lines, 0u);
  EXPECT_EQ(verified->head, std::string(64, '0'));
  EXPECT_EQ(verify_audit_log(dir.path("absent.jsonl")).error().code, errc::not_found);
}

// Each kind of tampering, and the line verification names.
TEST(AuditLog, TamperingIsFoundAtTheLineAfterIt) {
  TempDir dir;
  ManualClock clock;
  const auto path = dir.path("audit.jsonl");
  write_every_event(path, clock);
  const auto original = read_lines(path);
  struct Case {
    const char* what;
    std::function<void(std::vector<std::string>&)> tamper;
    const char* named;
  };
  const Case cases[] = {
      {"a changed byte count",
       [](auto& l) {
         auto pos = l[2].find("4936");
         ASSERT_NE(pos, std::string::npos);
         l[2].replace(pos, 4, "1000");
       },
       "line 4: the chain is broken"},
      {"a removed line", [](auto& l) { l.erase(l.begin() + 1); }, "line 2: the chain is broken"},
      {"an inserted line", [](auto& l) { l.insert(l.begin() + 3, l[2]); },
       "line 4: the chain is broken"},
      {"swapped lines", [](auto& l) { std::swap(l[4], l[5]); }, "line 5: the chain is broken"},
      {"a removed first line", [](auto& l) { l.erase(l.begin()); }, "line 1: the chain is broken"},
      {"a line that is not JSON", [](auto& l) { l[3] = "hello"; }, "line 4: not an audit line"},
  };
  for (const auto& c : cases) {
    auto lines = original;
    c.tamper(lines);
    write_lines(path, lines);
    auto verified = verify_audit_log(path);
    ASSERT_FALSE(verified) << c.what;
    EXPECT_EQ(verified.error().code, errc::data_loss) << c.what;
    EXPECT_NE(verified.error().message.find(c.named), std::string::npos)
        << c.what << ": " << verified.error().message;
  }
  write_lines(path, original);
  ASSERT_TRUE(verify_audit_log(path));
}

// The chain cannot see a line changed at the very end, but the head can.
TEST(AuditLog, ChangingTheLastLineChangesTheHead) {
  TempDir dir;
  ManualClock clock;
  const auto path = dir.path("audit.jsonl");
  const auto head = write_every_event(path, clock);
  auto lines = read_lines(path);
  lines.back().replace(lines.back().find("wrong name"), 10, "right name");
  write_lines(path, lines);
  auto verified = verify_audit_log(path);
  ASSERT_TRUE(verified);
  EXPECT_NE(verified->head, head);
}

TEST(AuditLog, ATornLastLineIsFoundAndTheLogIsNotContinued) {
  TempDir dir;
  ManualClock clock;
  const auto path = dir.path("audit.jsonl");
  write_every_event(path, clock);
  {
    std::ofstream out(path, std::ios::app);
    out << R"({"seq":8,"event":"tra)";
  }
  auto verified = verify_audit_log(path);
  ASSERT_FALSE(verified);
  EXPECT_EQ(verified.error().code, errc::data_loss);
  EXPECT_NE(verified.error().message.find("line 8: torn"), std::string::npos)
      << verified.error().message;
  auto log = AuditLog::open(path, clock);
  ASSERT_FALSE(log);
  EXPECT_EQ(log.error().code, errc::data_loss);
}

TEST(AuditLog, OneWriterAtATime) {
  TempDir dir;
  ManualClock clock;
  auto first = AuditLog::open(dir.path("audit.jsonl"), clock);
  ASSERT_TRUE(first);
  auto second = AuditLog::open(dir.path("audit.jsonl"), clock);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, errc::failed_precondition);
  first->reset();
  EXPECT_TRUE(AuditLog::open(dir.path("audit.jsonl"), clock));
}

// A write that fails halfway (the file size limit stands in for a full disk) breaks the log
// for good: no later line may claim a chain that the torn one interrupted.
TEST(AuditLog, AFailedWriteBreaksTheLogForGood) {
  TempDir dir;
  ManualClock clock;
  const auto path = dir.path("audit.jsonl");
  auto log = AuditLog::open(path, clock);
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->record("first", json::object()));
  const auto size = std::filesystem::file_size(path);

  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &previous), 0);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit limited = saved;
  limited.rlim_cur = static_cast<rlim_t>(size + 10);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  auto failed = (*log)->record("second", json::object());
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  ASSERT_EQ(::sigaction(SIGXFSZ, &previous, nullptr), 0);

  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, errc::io_error);
  auto later = (*log)->record("third", json::object());
  ASSERT_FALSE(later);
  EXPECT_NE(later.error().message.find("broken"), std::string::npos) << later.error().message;
  EXPECT_EQ((*log)->lines(), 1u);
  log->reset();
  EXPECT_EQ(verify_audit_log(path).error().code, errc::data_loss);  // the torn line
}

}  // namespace
}  // namespace fedcore::client
