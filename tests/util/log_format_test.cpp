#include "shared/util/log_format.hpp"

#include <algorithm>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

namespace fedcore {
namespace {

// A logger writing JSON lines into a string, as install_log_format makes the real ones.
struct CapturedLog {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> logger;

  explicit CapturedLog(JsonLogOptions options = {"server", std::nullopt}) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
    sink->set_formatter(make_json_log_formatter(std::move(options)));
    logger = std::make_shared<spdlog::logger>("test", sink);
    logger->set_level(spdlog::level::trace);
  }

  // Every line parsed back; a line that is not one JSON object fails the test.
  std::vector<nlohmann::json> lines() const {
    std::vector<nlohmann::json> parsed;
    std::istringstream in(out.str());
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      EXPECT_TRUE(j.is_object()) << "not a JSON object: " << line;
      parsed.push_back(std::move(j));
    }
    return parsed;
  }
};

TEST(LogFormat, ParsesTheFlagValue) {
  EXPECT_EQ(*parse_log_format("text"), LogFormat::text);
  EXPECT_EQ(*parse_log_format("json"), LogFormat::json);
  auto bad = parse_log_format("xml");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  EXPECT_NE(bad.error().message.find("'xml'"), std::string::npos);
}

TEST(LogFormat, TakesTheFlagOutOfAnArgumentList) {
  std::vector<std::string> args = {"--clients", "4", "--log-format", "json", "--rounds", "2"};
  auto taken = take_log_format_flag(args);
  ASSERT_TRUE(taken);
  EXPECT_EQ(*taken, LogFormat::json);
  EXPECT_EQ(args, (std::vector<std::string>{"--clients", "4", "--rounds", "2"}));
  args = {"--log-format=json", "x", "--log-format", "text"};
  EXPECT_EQ(**take_log_format_flag(args), LogFormat::text);  // the last one counts
  EXPECT_EQ(args, std::vector<std::string>{"x"});
  EXPECT_FALSE(take_log_format_flag(args)->has_value());
  args = {"--log-format"};
  EXPECT_FALSE(take_log_format_flag(args));
  args = {"--log-format=yaml"};
  EXPECT_FALSE(take_log_format_flag(args));
}

TEST(LogFormat, OneObjectPerLineWithTheFixedFields) {
  CapturedLog log({"client", std::nullopt});
  log.logger->info("stopped after {} round(s)", 3);
  log.logger->warn("second");
  log.logger->error("third");
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 3u);
  const std::regex rfc3339(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)");
  for (const auto& j : lines) {
    ASSERT_TRUE(j["time"].is_string());
    EXPECT_TRUE(std::regex_match(j["time"].get<std::string>(), rfc3339)) << j["time"];
    EXPECT_EQ(j["component"], "client");
    EXPECT_FALSE(j.contains("run"));
    EXPECT_FALSE(j.contains("round"));
    EXPECT_FALSE(j.contains("client"));
  }
  EXPECT_EQ(lines[0]["level"], "info");
  EXPECT_EQ(lines[0]["message"], "stopped after 3 round(s)");
  EXPECT_EQ(lines[1]["level"], "warn");
  EXPECT_EQ(lines[2]["level"], "error");
}

TEST(LogFormat, EscapesQuotesNewlinesAndControlCharacters) {
  CapturedLog log;
  const std::string nasty =
      std::string("say \"hi\"\\ \n{\"forged\":1}\r\t\b\f") + '\0' + "\x01\x1f\x7f end";
  log.logger->info("{}", nasty);
  const auto out = log.out.str();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;  // the newline is escaped
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["message"], nasty);
  EXPECT_FALSE(lines[0].contains("forged"));
  EXPECT_NE(out.find("\\u0000"), std::string::npos);
  EXPECT_NE(out.find("\\u001f"), std::string::npos);
}

TEST(LogFormat, ReplacesInvalidUtf8AndKeepsValidUtf8) {
  CapturedLog log;
  const std::string valid = "Zürich \xe2\x82\xac \xf0\x9f\x98\x80";  // ü, €, an emoji
  log.logger->info("{}", valid);
  // A stray continuation byte, an overlong '/', a surrogate, past U+10FFFF, a cut sequence.
  log.logger->info("{}", std::string("a\x80 b\xc0\xaf c\xed\xa0\x80 d\xf4\x90\x80\x80 e\xe2\x82"));
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["message"], valid);
  // One U+FFFD per byte that is not part of a well-formed sequence.
  const std::string r = "\xef\xbf\xbd";
  EXPECT_EQ(lines[1]["message"],
            "a" + r + " b" + r + r + " c" + r + r + r + " d" + r + r + r + r + " e" + r + r);
  // Re-serialising succeeds only for valid UTF-8 (nlohmann throws otherwise).
  EXPECT_NO_THROW((void)lines[1].dump());
}

TEST(LogFormat, ReadsRunRoundAndClientFromTheLeadingPhrases) {
  CapturedLog log;
  log.logger->info("run 3 round 7 committed: 4 of 4 updates accepted");
  log.logger->warn("run 3 round 7: update from 'hospital-a' rejected: bad");
  log.logger->warn("run 12 round 2: client 'site.b_2' could not train: x");
  log.logger->info("run 5 'demo' started: 10 rounds of logreg");
  log.logger->info("run 5 resumes after round 4");
  log.logger->info("client 'hospital-c' online from 10.0.0.1:5555 (120 samples)");
  log.logger->info("round 9: trained 100 samples in 0.2 s");
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[0]["run"], 3);
  EXPECT_EQ(lines[0]["round"], 7);
  EXPECT_FALSE(lines[0].contains("client"));
  EXPECT_EQ(lines[1]["client"], "hospital-a");
  EXPECT_EQ(lines[2]["run"], 12);
  EXPECT_EQ(lines[2]["client"], "site.b_2");
  EXPECT_EQ(lines[3]["run"], 5);
  EXPECT_FALSE(lines[3].contains("round"));
  EXPECT_FALSE(lines[4].contains("round")) << "'resumes after round 4' is not this line's round";
  EXPECT_EQ(lines[5]["client"], "hospital-c");
  EXPECT_FALSE(lines[5].contains("run"));
  EXPECT_EQ(lines[6]["round"], 9);
  EXPECT_FALSE(lines[6].contains("run"));
}

TEST(LogFormat, DoesNotGuessFromAmbiguousText) {
  for (const char* text : {"running 3 rounds", "run 3x round 2", "run 99999999999999999999 round 1",
                           "round 3.5: x", "model type 'cnn' is not allowed", "the client 'a' said",
                           "client 'has space' left", "client 'unterminated", "run 1: model 'x'"}) {
    const LogFields f = parse_log_fields(text);
    EXPECT_FALSE(f.client) << text;
    if (std::string_view(text) != "run 1: model 'x'") {
      EXPECT_FALSE(f.run) << text;
      EXPECT_FALSE(f.round) << text;
    }
  }
  EXPECT_EQ(parse_log_fields("run 4 round x").run, 4);
  EXPECT_FALSE(parse_log_fields("run 4 round x").round);
}

TEST(LogFormat, ContextFieldsWinAndNest) {
  CapturedLog log;
  {
    LogContext outer({.run = 8, .round = 2, .client = std::nullopt});
    log.logger->info("secure sum unmasked");
    log.logger->info("run 3 round 7: client 'hospital-a' left");  // context owns run/round
    {
      LogContext inner({.run = std::nullopt, .round = std::nullopt, .client = "hospital-z"});
      log.logger->info("inner");
    }
    log.logger->info("after inner");
  }
  log.logger->info("outside");
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0]["run"], 8);
  EXPECT_EQ(lines[0]["round"], 2);
  EXPECT_EQ(lines[1]["run"], 8);
  EXPECT_EQ(lines[1]["round"], 2);
  EXPECT_EQ(lines[1]["client"], "hospital-a");  // the context set none: parsed
  EXPECT_EQ(lines[2]["run"], 8);
  EXPECT_EQ(lines[2]["client"], "hospital-z");
  EXPECT_FALSE(lines[3].contains("client"));
  EXPECT_EQ(lines[3]["round"], 2);
  EXPECT_FALSE(lines[4].contains("run"));
  EXPECT_FALSE(current_log_context().run);
}

TEST(LogFormat, DefaultClientFillsInLast) {
  CapturedLog log({"client", std::string("hospital-3")});
  log.logger->info("round 4: trained");
  log.logger->info("run 1 round 4: client 'other' x");
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["client"], "hospital-3");
  EXPECT_EQ(lines[1]["client"], "other");
}

TEST(LogFormat, AppendJsonStringRoundTrips) {
  std::string out;
  append_json_string(out, "a\"b\\c\x02");
  EXPECT_EQ(out, R"("a\"b\\c\u0002")");
  EXPECT_EQ(nlohmann::json::parse(out), "a\"b\\c\x02");
}

}  // namespace
}  // namespace fedcore
