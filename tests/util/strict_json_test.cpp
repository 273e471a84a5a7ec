#include "shared/util/strict_json.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fedcore {
namespace {

using nlohmann::json;

const JsonPath kRoot("test config");

std::string message_of(const error& e) {
  EXPECT_EQ(e.code, errc::invalid_argument) << e.message;
  return e.message;
}

TEST(StrictJson, PathsNameTheDocumentAndTheKey) {
  const auto at = kRoot.key("privacy").key("dp").key("epsilon");
  EXPECT_EQ(at.path(), "privacy.dp.epsilon");
  EXPECT_EQ(kRoot.key("hidden").index(2).path(), "hidden[2]");
  EXPECT_EQ(at.bad("is wrong").message, "test config: 'privacy.dp.epsilon' is wrong");
  EXPECT_EQ(kRoot.bad("is wrong").message, "test config: is wrong");
}

TEST(StrictJson, EditDistanceCountsTyposOnceEach) {
  EXPECT_EQ(edit_distance("database", "database"), 0u);
  EXPECT_EQ(edit_distance("databse", "database"), 1u);  // a letter missing
  EXPECT_EQ(edit_distance("prot", "port"), 1u);         // two letters swapped
  EXPECT_EQ(edit_distance("roundz", "rounds"), 1u);     // one wrong
  EXPECT_EQ(edit_distance("Port", "port"), 0u);         // case is not a typo
  EXPECT_EQ(edit_distance("idle-timeout_s", "idle_timeout_s"), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(StrictJson, ClosestMatchSuggestsOnlyLikelyTypos) {
  const std::string_view keys[] = {"listen", "port", "database", "checkpoint_dir", "tls"};
  EXPECT_EQ(closest_match("databse", keys), "database");
  EXPECT_EQ(closest_match("prot", keys), "port");
  EXPECT_EQ(closest_match("checkpointDir", keys), "checkpoint_dir");
  EXPECT_EQ(closest_match("colour", keys), std::nullopt);
  EXPECT_EQ(closest_match("x", keys), std::nullopt);
  EXPECT_EQ(closest_match(std::string(100, 'p'), keys), std::nullopt);
}

TEST(StrictJson, UnknownKeysAreNamedWithTheClosestKnownOne) {
  const std::string_view known[] = {"database", "port"};
  auto typo = json_object_keys(json::parse(R"({"port":1,"databse":"x"})"), kRoot, known);
  ASSERT_FALSE(typo);
  EXPECT_EQ(message_of(typo.error()),
            "test config: unknown key 'databse'; did you mean 'database'?");
  auto nested = json_object_keys(json::parse(R"({"colour":1})"), kRoot.key("api"), known);
  ASSERT_FALSE(nested);
  EXPECT_EQ(message_of(nested.error()),
            "test config: unknown key 'api.colour' (known keys: database, port)");
  auto none = json_object_keys(json::parse(R"({"force":true})"), JsonPath("body"), {});
  ASSERT_FALSE(none);
  EXPECT_EQ(message_of(none.error()), "body: unknown key 'force' (this object takes no keys)");
  auto not_object = json_object_keys(json::parse("[1]"), kRoot, known);
  ASSERT_FALSE(not_object);
  EXPECT_EQ(message_of(not_object.error()), "test config: must be a JSON object, got an array");
  EXPECT_TRUE(json_object_keys(json::parse(R"({"port":1})"), kRoot, known));
}

TEST(StrictJson, IntegersAreCheckedForTypeFractionAndRange) {
  const IntRange range{1, 100000};
  const auto at = kRoot.key("rounds");
  EXPECT_EQ(*json_integer(json(5), at, range), 5);
  EXPECT_EQ(*json_integer(json::parse("5.0"), at, range), 5);  // no fraction: an integer
  EXPECT_EQ(*json_integer(json::parse("1e3"), at, range), 1000);
  EXPECT_EQ(*json_integer(json(100000), at, range), 100000);
  const std::pair<json, std::string> bad[] = {
      {json::parse("1.5"), "1.5"},
      {json(0), "0"},
      {json(100001), "100001"},
      {json(-1), "-1"},
      {json("5"), "\"5\""},
      {json(true), "true"},
      {json(nullptr), "null"},
      {json::array({5}), "an array"},
      {json::parse("18446744073709551615"), "18446744073709551615"},    // uint64 max
      {json::parse("18446744073709551616"), "1.8446744073709552e+19"},  // past uint64
      {json::parse("-9223372036854775809"), "-9.223372036854776e+18"},  // past int64
      {json(std::numeric_limits<double>::infinity()), "inf"},
      {json(std::nan("")), "nan"},
  };
  for (const auto& [value, shown] : bad) {
    auto r = json_integer(value, at, range);
    ASSERT_FALSE(r) << value.dump();
    EXPECT_EQ(message_of(r.error()),
              "test config: 'rounds' must be an integer in [1, 100000], got " + shown);
  }
  // The whole int64 range is reachable, and nothing wraps at its ends.
  const IntRange all{std::numeric_limits<std::int64_t>::min(),
                     std::numeric_limits<std::int64_t>::max()};
  EXPECT_EQ(*json_integer(json::parse("9223372036854775807"), at, all),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(*json_integer(json::parse("-9223372036854775808"), at, all),
            std::numeric_limits<std::int64_t>::min());
  EXPECT_FALSE(json_integer(json::parse("9223372036854775808"), at, all));
  EXPECT_FALSE(json_integer(json::parse("9.3e18"), at, all));
}

TEST(StrictJson, NumbersMustBeFiniteAndWithinTheirInterval) {
  const auto at = kRoot.key("lr");
  const NumberRange range{0, 100, true, false};
  EXPECT_DOUBLE_EQ(*json_number(json(0.5), at, range), 0.5);
  EXPECT_DOUBLE_EQ(*json_number(json(100), at, range), 100.0);
  for (const json& value :
       {json(0), json(-1e-300), json(100.5), json(std::numeric_limits<double>::infinity()),
        json(-std::numeric_limits<double>::infinity()), json(std::nan("")), json("0.5"),
        json(nullptr)}) {
    auto r = json_number(value, at, range);
    ASSERT_FALSE(r) << value.dump();
    EXPECT_EQ(
        message_of(r.error()).rfind("test config: 'lr' must be a number in (0, 100], got ", 0), 0u)
        << r.error().message;
  }
  auto small = json_number(json(-1), kRoot.key("delta"), {1e-6, 0.1});
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error().message, "test config: 'delta' must be a number in [1e-06, 0.1], got -1");
}

TEST(StrictJson, StringsBooleansAndChoices) {
  const auto at = kRoot.key("name");
  EXPECT_EQ(*json_string(json("bc"), at, {.min_size = 1, .max_size = 4}), "bc");
  EXPECT_EQ(message_of(json_string(json(7), at).error()),
            "test config: 'name' must be a string, got 7");
  EXPECT_EQ(message_of(json_string(json(""), at, {.min_size = 1}).error()),
            "test config: 'name' must not be empty");
  EXPECT_EQ(message_of(json_string(json("abcde"), at, {.max_size = 4}).error()),
            "test config: 'name' must be at most 4 bytes long, got 5 bytes");
  EXPECT_EQ(message_of(json_string(json("a\nb"), at).error()),
            "test config: 'name' must not contain control characters, got \"a?b\"");
  EXPECT_TRUE(json_string(json("a\nb"), at, {.allow_control = true}));

  EXPECT_EQ(*json_bool(json(false), at), false);
  EXPECT_EQ(message_of(json_bool(json("yes"), at).error()),
            "test config: 'name' must be true or false, got \"yes\"");

  const std::string_view strategies[] = {"fedavg", "fedprox"};
  EXPECT_EQ(*json_choice(json("fedprox"), kRoot.key("strategy"), strategies), "fedprox");
  EXPECT_EQ(message_of(json_choice(json("fedavgg"), kRoot.key("strategy"), strategies).error()),
            "test config: 'strategy' must be one of \"fedavg\", \"fedprox\", got \"fedavgg\"; "
            "did you mean \"fedavg\"?");
  EXPECT_EQ(message_of(json_choice(json(1), kRoot.key("strategy"), strategies).error()),
            "test config: 'strategy' must be one of \"fedavg\", \"fedprox\", got 1");
}

TEST(StrictJson, MessagesStayBoundedWhateverTheInput) {
  const std::string long_text(100000, 'x');
  auto r = json_string(json(long_text), kRoot.key("name"), {.max_size = 10});
  ASSERT_FALSE(r);
  EXPECT_LT(r.error().message.size(), 200u);
  auto choice = json_bool(json(long_text), kRoot.key("flag"));
  ASSERT_FALSE(choice);
  EXPECT_LT(choice.error().message.size(), 200u);
  EXPECT_NE(choice.error().message.find("xxx...\""), std::string::npos) << choice.error().message;
  const std::string_view known[] = {"a"};
  auto key = json_object_keys(json{{long_text, 1}}, kRoot, known);
  ASSERT_FALSE(key);
  EXPECT_LT(key.error().message.size(), 200u);
  // A cut never splits a UTF-8 sequence: 63 ASCII bytes, then a two-byte letter.
  const std::string utf8 = std::string(63, 'a') + "\xC3\xA9" + "tail";
  auto cut = json_bool(json(utf8), kRoot.key("flag"));
  ASSERT_FALSE(cut);
  EXPECT_NE(cut.error().message.find(std::string(63, 'a') + "...\""), std::string::npos)
      << cut.error().message;
}

TEST(StrictJson, StrictParsingRefusesDuplicatesDepthAndBadText) {
  auto ok = parse_json_strict(R"({"a":{"b":1,"c":[{"b":2},{"b":3}]},"b":4})", "test config");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ((*ok)["a"]["c"][1]["b"], 3);
  const std::pair<std::string, std::string> bad[] = {
      {R"({"rounds":1,"rounds":2})", "test config: duplicate key 'rounds'"},
      {R"({"a":{"x":1,"y":2,"x":3}})", "test config: duplicate key 'x'"},
      {"", "test config: invalid JSON at byte 1"},
      {"{", "test config: invalid JSON at byte 2"},
      {"{\"a\":\"\xff\"}", "test config: invalid JSON at byte 7"},
      {R"({"a":1e400})", "test config: invalid JSON: a number is too large for a double"},
      {R"({"a":NaN})", "test config: invalid JSON at byte 6"},
      {std::string(100, '[') + std::string(100, ']'), "test config: nested deeper than 64 levels"},
  };
  for (const auto& [text, expected] : bad) {
    auto r = parse_json_strict(text, "test config");
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(message_of(r.error()), expected) << text;
  }
  EXPECT_TRUE(parse_json_strict(std::string(64, '[') + std::string(64, ']'), "x"));
}

TEST(StrictJson, AnObjectReaderKeepsTheFirstProblemAndLeavesAbsentKeysAlone) {
  struct Config {
    std::int64_t rounds = 1;
    std::uint16_t port = 7443;
    std::optional<std::uint32_t> limit;
    float lr = 0.01f;
    double timeout = 60;
    bool manual = false;
    std::string name = "default";
    std::string strategy = "fedavg";
  };
  auto read = [](const json& j, Config& c) {
    StrictObject o(j, kRoot,
                   {"rounds", "port", "limit", "lr", "timeout", "manual", "name", "strategy"});
    o.integer("rounds", c.rounds, {1, 100000});
    o.integer("port", c.port, {0, 65535});
    o.integer("limit", c.limit, {1, 1000});
    o.number("lr", c.lr, {0, 100, true});
    o.number("timeout", c.timeout, {0.1, 86400});
    o.boolean("manual", c.manual);
    o.string("name", c.name, {.min_size = 1, .max_size = 128});
    o.choice("strategy", c.strategy, {"fedavg", "fedprox"});
    return o.status();
  };
  Config c;
  ASSERT_TRUE(read(json::parse(R"({"rounds":5,"limit":3,"manual":true,"strategy":"fedprox"})"), c));
  EXPECT_EQ(c.rounds, 5);
  EXPECT_EQ(c.port, 7443);  // absent: kept
  EXPECT_EQ(c.limit, 3u);
  EXPECT_FLOAT_EQ(c.lr, 0.01f);
  EXPECT_TRUE(c.manual);
  EXPECT_EQ(c.name, "default");
  EXPECT_EQ(c.strategy, "fedprox");

  Config d;
  auto bad = read(json::parse(R"({"port":70000,"rounds":0})"), d);
  ASSERT_FALSE(bad);
  // Keys are read in the reader's order, so 'rounds' is the first problem found.
  EXPECT_EQ(bad.error().message, "test config: 'rounds' must be an integer in [1, 100000], got 0");
  EXPECT_EQ(d.port, 7443);
  auto unknown = read(json::parse(R"({"rounds":5,"prot":1})"), d);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message, "test config: unknown key 'prot'; did you mean 'port'?");
  EXPECT_EQ(d.rounds, 1) << "nothing is read from an object with an unknown key";
}

TEST(StrictJson, FloatFieldsAreCheckedAfterRoundingToFloat) {
  float dropout = 0;
  const auto j = json::parse(R"({"dropout":0.99999999})");
  StrictObject o(j, kRoot, {"dropout"});
  o.number("dropout", dropout, {0, 1, false, true});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().error().message,
            "test config: 'dropout' must be a number in [0, 1), got 0.99999999 (1 as a 32-bit "
            "float)");
  EXPECT_EQ(dropout, 0.0f);
  double wide = 0;
  StrictObject p(j, kRoot, {"dropout"});
  p.number("dropout", wide, {0, 1, false, true});
  EXPECT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(wide, 0.99999999);
}

}  // namespace
}  // namespace fedcore
