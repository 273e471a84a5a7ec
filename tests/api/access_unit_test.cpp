// Identity and access without a network: route roles, the failed-authentication limiter,
// config token roles and expiry, and the TokenStore over an in-memory history.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/api/audit.hpp"
#include "server/api/auth_limiter.hpp"
#include "server/api/router.hpp"
#include "server/api/token_store.hpp"

namespace fedcore::api {
namespace {

using namespace std::chrono_literals;

TEST(ApiRoles, ReadingNeedsReadEverythingElseAdminUnlessTheRouteSays) {
  Router router;
  const Handler none = [](const Request&, const PathParams&) { return Response{}; };
  router.add("GET", "/a", none);
  router.add("POST", "/a", none);
  router.add("DELETE", "/a/{id}", none);
  router.add("GET", "/secret", none, {.role = Role::admin});
  const auto routes = router.routes();
  EXPECT_EQ(routes[0].role, Role::read);
  EXPECT_EQ(routes[1].role, Role::admin);
  EXPECT_EQ(routes[2].role, Role::admin);
  EXPECT_EQ(routes[3].role, Role::admin);
  EXPECT_EQ(router.match("HEAD", "/a").route->role, Role::read);
  EXPECT_TRUE(allows(Role::admin, Role::admin));
  EXPECT_TRUE(allows(Role::admin, Role::read));
  EXPECT_TRUE(allows(Role::read, Role::read));
  EXPECT_FALSE(allows(Role::read, Role::admin));
  EXPECT_EQ(role_from_name("admin"), Role::admin);
  EXPECT_EQ(role_from_name("Admin"), std::nullopt);
}

TEST(ApiAuthLimiter, TenFailuresInAWindowBlockUntilTheOldestAgesOut) {
  ManualClock clock;
  AuthLimiter limiter(clock, {.max_failures = 3, .window = 60s, .max_addresses = 100});
  EXPECT_FALSE(limiter.retry_after("10.0.0.1"));
  limiter.failed("10.0.0.1");
  clock.advance(10s);
  limiter.failed("10.0.0.1");
  EXPECT_FALSE(limiter.retry_after("10.0.0.1"));
  clock.advance(10s);
  limiter.failed("10.0.0.1");
  ASSERT_TRUE(limiter.retry_after("10.0.0.1"));
  EXPECT_EQ(*limiter.retry_after("10.0.0.1"), 40s);
  EXPECT_FALSE(limiter.retry_after("10.0.0.2"));  // per address
  clock.advance(39500ms);
  EXPECT_EQ(*limiter.retry_after("10.0.0.1"), 1s);  // rounded up
  clock.advance(500ms);
  EXPECT_FALSE(limiter.retry_after("10.0.0.1"));
  // Two failures still in the window: one more blocks again, until the second ages out.
  limiter.failed("10.0.0.1");
  EXPECT_EQ(*limiter.retry_after("10.0.0.1"), 10s);
}

TEST(ApiAuthLimiter, TheTableOfAddressesIsBounded) {
  ManualClock clock;
  AuthLimiter limiter(clock, {.max_failures = 2, .window = 60s, .max_addresses = 3});
  for (int i = 0; i < 10; ++i) {
    limiter.failed("10.0.0." + std::to_string(i));
    clock.advance(1s);
  }
  EXPECT_LE(limiter.tracked(), 3u);
  clock.advance(120s);
  limiter.failed("10.0.1.1");
  EXPECT_EQ(limiter.tracked(), 1u);  // the aged-out ones made room
}

TEST(ApiConfigTokens, RoleAndExpiryAreOptionalAndChecked) {
  const auto hash = sha256_hex("t");
  auto parsed = tokens_from_json(nlohmann::json::parse(R"([{"name":"a","sha256":")" + hash + R"("},
          {"name":"b","sha256":")" + sha256_hex("u") + R"(","role":"read","expires_ms":5}])"));
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ((*parsed)[0].role, Role::admin);
  EXPECT_FALSE((*parsed)[0].expires_ms);
  EXPECT_EQ((*parsed)[1].role, Role::read);
  EXPECT_EQ((*parsed)[1].expires_ms, 5);
  auto bad = tokens_from_json(
      nlohmann::json::parse(R"([{"name":"a","sha256":")" + hash + R"(","role":"root"}])"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("api.tokens[0].role"), std::string::npos)
      << bad.error().message;
  EXPECT_FALSE(tokens_from_json(
      nlohmann::json::parse(R"([{"name":"a","sha256":")" + hash + R"(","expires_ms":-1}])")));
}

class ApiTokenStore : public ::testing::Test {
 protected:
  ApiTokenStore()
      : history_(std::move(store::HistoryStore::open(":memory:").value())),
        tokens_(TokenVerifier({{"boot", sha256_hex("boot-token"), 1, Role::admin, std::nullopt},
                               {"old", sha256_hex("old-token"), 1, Role::admin, 1000}}),
                history_) {}

  Authentication auth(const std::string& header, std::int64_t now_ms = 500) {
    auto a = tokens_.authenticate(header, now_ms);
    EXPECT_TRUE(a) << a.error().message;
    return a.value();
  }

  store::HistoryStore history_;
  TokenStore tokens_;
};

// Anyone can present a bad token, and every such attempt is audited: the trail keeps its
// newest rows only, pruned every min(max_rows, kAuditPruneEvery) rows.
TEST(ApiAuditRetention, TheTrailKeepsAboutItsNewestRowsWhateverComesIn) {
  auto history = std::move(store::HistoryStore::open(":memory:").value());
  store::AuditRecord row{0,      1,
                         "",     std::nullopt,
                         "",     "203.0.113.9",
                         "POST", "/api/v1/runs",
                         401,    R"({"reason":"unknown token"})"};
  constexpr std::int64_t kKeep = 100;
  std::size_t most = 0;
  for (int i = 1; i <= 1'000; ++i) {
    row.time_ms = i;
    record_audit(history, row, kKeep);
    most = std::max(most, history.list_audit(std::nullopt, 1000)->size());
  }
  EXPECT_LE(most, static_cast<std::size_t>(2 * kKeep - 1));
  const auto kept = history.list_audit(std::nullopt, 1000);
  EXPECT_EQ(kept->size(), static_cast<std::size_t>(kKeep)) << "1,000 is a multiple of 100";
  EXPECT_EQ(kept->front().time_ms, 1'000) << "the newest row stays";
  EXPECT_EQ(kept->back().time_ms, 901);
  // 0 keeps everything.
  auto all = std::move(store::HistoryStore::open(":memory:").value());
  for (int i = 1; i <= 300; ++i) {
    record_audit(all, row, 0);
  }
  EXPECT_EQ(all.list_audit(std::nullopt, 1000)->size(), 300u);
}

TEST_F(ApiTokenStore, ConfigTokensAreAdminsThatExpireOnlyIfTheConfigSays) {
  auto a = auth("Bearer boot-token", 1'000'000'000'000);
  ASSERT_TRUE(a.identity);
  EXPECT_EQ(a.identity->name, "boot");
  EXPECT_EQ(a.identity->role, Role::admin);
  EXPECT_FALSE(a.identity->token_id);
  EXPECT_TRUE(auth("Bearer old-token", 999).identity);
  a = auth("Bearer old-token", 1000);
  EXPECT_EQ(a.failure, AuthFailure::expired);
  EXPECT_EQ(a.token_name, "old");
  EXPECT_EQ(auth("").failure, AuthFailure::missing);
  EXPECT_EQ(auth("Bearer ").failure, AuthFailure::missing);
  EXPECT_EQ(auth("Basic Ym9vdA==").failure, AuthFailure::missing);
  EXPECT_EQ(auth("Bearer nope").failure, AuthFailure::unknown);
}

TEST_F(ApiTokenStore, ApiTokensLiveInTheHistoryAsHashes) {
  auto made = tokens_.create("viewer", Role::read, 60, "boot", 1000);
  ASSERT_TRUE(made) << made.error().message;
  EXPECT_EQ(made->info.expires_ms, 61'000);
  auto stored = history_.list_api_tokens();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].sha256_hex, sha256_hex(made->token));
  EXPECT_EQ((*stored)[0].created_by, "boot");

  auto a = auth("Bearer " + made->token, 2000);
  ASSERT_TRUE(a.identity);
  EXPECT_EQ(a.identity->role, Role::read);
  EXPECT_EQ(a.identity->token_id, made->info.id);
  EXPECT_EQ(auth("Bearer " + made->token, 61'000).failure, AuthFailure::expired);
  ASSERT_TRUE(tokens_.revoke(*made->info.id, 3000));
  EXPECT_EQ(auth("Bearer " + made->token, 3000).failure, AuthFailure::revoked);
  EXPECT_EQ(tokens_.revoke(99, 3000).error().code, errc::not_found);

  // Names: unique across config and API tokens, revoked ones included; checked charset.
  EXPECT_EQ(tokens_.create("viewer", Role::read, std::nullopt, "boot", 1).error().code,
            errc::already_exists);
  EXPECT_EQ(tokens_.create("boot", Role::read, std::nullopt, "boot", 1).error().code,
            errc::already_exists);
  for (const char* bad : {"", "has space", "quote\"", "\xc3\xa9"}) {
    EXPECT_EQ(tokens_.create(bad, Role::read, std::nullopt, "boot", 1).error().code,
              errc::invalid_argument)
        << bad;
  }
  EXPECT_EQ(tokens_.create("x", Role::read, 0, "boot", 1).error().code, errc::invalid_argument);
  EXPECT_EQ(tokens_.create("x", Role::read, kMaxTokenLifetimeS + 1, "boot", 1).error().code,
            errc::invalid_argument);

  auto all = tokens_.list();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].source, "config");
  EXPECT_EQ((*all)[1].expires_ms, 1000);
  EXPECT_EQ((*all)[2].revoked_ms, 3000);
}

}  // namespace
}  // namespace fedcore::api
