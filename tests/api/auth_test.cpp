// Bearer tokens and the `api` config section, including the token-create rewrite of a
// real config file.
#include "server/api/auth.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/api/config.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::api {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ApiAuth, Sha256OfAKnownString) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ApiAuth, GeneratedTokensAre64HexDigitsAndDiffer) {
  auto a = generate_token();
  auto b = generate_token();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*a, *b);
}

TEST(ApiAuth, VerifierAcceptsOnlyStoredTokensAsBearer) {
  TokenVerifier verifier({{"alice", sha256_hex("secret-a"), 1, Role::admin, std::nullopt},
                          {"bob", sha256_hex("secret-b"), 2, Role::read, std::nullopt}});
  EXPECT_EQ(*verifier.verify("Bearer secret-a"), "alice");
  EXPECT_EQ(*verifier.verify("bearer secret-b"), "bob");
  EXPECT_EQ(*verifier.verify("Bearer  secret-b "), "bob");
  for (const char* bad :
       {"", "Bearer", "Bearer ", "Basic c2VjcmV0LWE=", "secret-a", "Bearer secret-c",
        "Bearer secret-a2",
        "Bearer ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}) {
    auto r = verifier.verify(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, errc::unauthenticated);
    EXPECT_EQ(r.error().message.find("secret"), std::string::npos) << "a message echoes the token";
  }
  // The stored hash itself is not a token.
  EXPECT_FALSE(verifier.verify("Bearer " + sha256_hex("secret-a")));
}

TEST(ApiConfig, ParsesTheSectionAndNamesBadKeys) {
  auto ok = parse_api_config(nlohmann::json::parse(
      R"({"listen":"0.0.0.0","port":9443,"web_root":"/srv/web","max_connections":10,
          "tokens":[{"name":"a","sha256":")" +
      sha256_hex("t") + R"(","created_ms":5}]})"));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->listen_address, "0.0.0.0");
  EXPECT_EQ(ok->port, 9443);
  EXPECT_EQ(ok->web_root, "/srv/web");
  ASSERT_EQ(ok->tokens.size(), 1u);
  EXPECT_EQ(ok->tokens[0].created_ms, 5);
  const std::pair<const char*, const char*> cases[] = {
      {R"({"port":70000})",
       "server config: 'api.port' must be an integer in [0, 65535], got 70000"},
      {R"({"port":"8443"})",
       "server config: 'api.port' must be an integer in [0, 65535], got \"8443\""},
      {R"({"port":18446744073709551617})",
       "server config: 'api.port' must be an integer in [0, 65535], got 1.8446744073709552e+19"},
      {R"({"listen":5})", "server config: 'api.listen' must be a string, got 5"},
      {R"({"enabled":"no"})", "server config: 'api.enabled' must be true or false, got \"no\""},
      {R"({"max_connections":0})",
       "server config: 'api.max_connections' must be an integer in [1, 100000], got 0"},
      {R"({"tokens":{}})",
       "server config: 'api.tokens' must be an array of {\"name\", \"sha256\", \"created_ms\"}, "
       "got an object"},
      {R"({"tokens":[{"name":"a","sha256":"xyz"}]})",
       "server config: 'api.tokens[0].sha256' must be 64 lower-case hex digits (a SHA-256)"},
      {R"({"tokens":[{"sha256":"xyz"}]})", "server config: 'api.tokens[0].name' is required"},
      {R"({"tokens":[{"name":"a","sha256":"xyz","admin":true}]})",
       "server config: unknown key 'api.tokens[0].admin' (known keys: name, sha256, created_ms, "
       "role, expires_ms)"},
      {R"({"prot":8443})", "server config: unknown key 'api.prot'; did you mean 'api.port'?"},
  };
  for (const auto& [text, message] : cases) {
    auto r = parse_api_config(nlohmann::json::parse(text));
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().message, message) << text;
  }
  // Two tokens of one name could not be told apart in the audit trail.
  const auto hash = sha256_hex("t");
  auto twice = parse_api_config(nlohmann::json{
      {"tokens", {{{"name", "a"}, {"sha256", hash}}, {{"name", "a"}, {"sha256", hash}}}}});
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().message,
            "server config: 'api.tokens[1].name' repeats the name of an earlier token, 'a'");
}

TEST(ApiTokenCreate, AddsTheHashKeepsEverythingElseAndTheTokenVerifies) {
  fedcore::testing::TempDir dir;
  const auto path = dir.path("server.json");
  std::ofstream(path) << R"({"port": 7443, "tls": {"ca": "ca.pem"}, "api": {"port": 9443}})";
  ::chmod(path.c_str(), 0600);
  auto token = create_token_in_config(path, "alice", 1234);
  ASSERT_TRUE(token) << token.error().message;
  auto second = create_token_in_config(path, "bob", 1235);
  ASSERT_TRUE(second) << second.error().message;

  const auto text = read(path);
  EXPECT_EQ(text.find(*token), std::string::npos) << "the token itself was stored";
  auto config = nlohmann::json::parse(text);
  EXPECT_EQ(config["port"], 7443);
  EXPECT_EQ(config["tls"]["ca"], "ca.pem");
  EXPECT_EQ(config["api"]["port"], 9443);
  auto parsed = parse_api_config(config["api"]);
  ASSERT_TRUE(parsed) << parsed.error().message;
  ASSERT_EQ(parsed->tokens.size(), 2u);
  EXPECT_EQ(parsed->tokens[0].name, "alice");
  EXPECT_EQ(parsed->tokens[0].created_ms, 1234);
  TokenVerifier verifier(parsed->tokens);
  EXPECT_EQ(*verifier.verify("Bearer " + *token), "alice");
  EXPECT_EQ(*verifier.verify("Bearer " + *second), "bob");

  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the rewrite loosened the file's permissions";
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(ApiTokenCreate, RefusesDuplicateNamesMissingFilesAndNonObjects) {
  fedcore::testing::TempDir dir;
  const auto path = dir.path("server.json");
  std::ofstream(path) << "{}";
  ASSERT_TRUE(create_token_in_config(path, "alice", 1));
  const auto before = read(path);
  auto dup = create_token_in_config(path, "alice", 2);
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, errc::already_exists);
  EXPECT_EQ(read(path), before);
  EXPECT_EQ(create_token_in_config(dir.path("none.json"), "x", 1).error().code, errc::not_found);
  EXPECT_EQ(create_token_in_config(path, "", 1).error().code, errc::invalid_argument);
  std::ofstream(dir.path("list.json")) << "[1,2]";
  EXPECT_EQ(create_token_in_config(dir.path("list.json"), "x", 1).error().code,
            errc::invalid_argument);
}

}  // namespace
}  // namespace fedcore::api
