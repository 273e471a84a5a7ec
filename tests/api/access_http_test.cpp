// Identity and access over real HTTPS (issue 19): tokens created, listed and revoked
// through the API, roles, expiry, the failed-authentication limit and the audit trail.
// Time is a ManualClock the server reads; the tests advance it on the server's thread,
// so nothing sleeps.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/api/api_fixture.hpp"

namespace fedcore::api {
namespace {

using testing::ApiFixture;
using testing::Reply;

class ApiAccess : public ::testing::Test {
 protected:
  ApiAccess() : fixture_({.tune = [this](ApiServerOptions& o) { o.clock = &clock_; }}) {}

  // Advances the server's clock on the server's thread (ManualClock is not synchronised).
  void advance(std::chrono::milliseconds by) {
    fixture_.on_server([&] {
      clock_.advance(by);
      return 0;
    });
  }

  // POST /api/v1/tokens as the config admin; returns the 201 answer's JSON.
  nlohmann::json create(const std::string& name, const std::string& role,
                        std::optional<std::int64_t> expires_in_s = std::nullopt) {
    nlohmann::json body{{"name", name}, {"role", role}};
    if (expires_in_s) {
      body["expires_in_s"] = *expires_in_s;
    }
    auto r = fixture_.client().post_json("/api/v1/tokens", body.dump());
    EXPECT_EQ(r.status, 201) << r.describe();
    EXPECT_EQ(r.header("cache-control"), "no-store");
    return r.json();
  }

  // The audit trail, newest first (one page of up to 500).
  nlohmann::json audit() {
    auto r = fixture_.client().get("/api/v1/audit?limit=500");
    EXPECT_EQ(r.status, 200) << r.describe();
    return r.json()["items"];
  }

  // Every byte of the history database and its WAL, as one string.
  std::string database_bytes() {
    std::string all;
    for (const auto& entry : std::filesystem::directory_iterator(fixture_.dir().root())) {
      if (entry.path().filename().string().rfind("fedcore.db", 0) == 0) {
        std::ifstream in(entry.path(), std::ios::binary);
        std::stringstream s;
        s << in.rdbuf();
        all += s.str();
      }
    }
    return all;
  }

  ManualClock clock_;
  ApiFixture fixture_;
};

TEST_F(ApiAccess, TokensMadeThroughTheApiWorkAtOnceWithTheirRoles) {
  const auto reader = create("dashboard-viewer", "read");
  const auto admin = create("ci-bot", "admin");
  ASSERT_TRUE(reader.contains("token") && admin.contains("token"));
  const std::string read_token = reader["token"];
  const std::string admin_token = admin["token"];
  EXPECT_EQ(read_token.size(), 64u);
  EXPECT_GE(reader["id"].get<std::int64_t>(), 1);
  EXPECT_EQ(reader["role"], "read");
  EXPECT_EQ(reader["created_by"], "tester");
  EXPECT_TRUE(reader["expires_ms"].is_null());
  EXPECT_FALSE(reader.contains("sha256"));

  // The read token reads...
  EXPECT_EQ(fixture_.client(read_token).get("/api/v1/info").status, 200);
  EXPECT_EQ(fixture_.client(read_token).get("/api/v1/runs").status, 200);
  // ...and is refused every change, and the admin-only reads, with 403 in the error shape.
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"POST", "/api/v1/runs"},
                                                        {"POST", "/api/v1/runs/1/stop"},
                                                        {"POST", "/api/v1/tokens"},
                                                        {"DELETE", "/api/v1/tokens/1"},
                                                        {"GET", "/api/v1/tokens"},
                                                        {"GET", "/api/v1/audit"}}) {
    auto r = fixture_.client(read_token)
                 .request(method, path, method == "POST" ? "{}" : "",
                          {{"Content-Type", "application/json"}});
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.describe();
    auto j = r.json();
    EXPECT_EQ(j["error"]["code"], "permission_denied") << r.describe();
    EXPECT_NE(j["error"]["message"].get<std::string>().find("admin role"), std::string::npos);
  }
  // The admin token made through the API may make tokens itself.
  auto r = fixture_.client(admin_token)
               .post_json("/api/v1/tokens", R"({"name":"made-by-bot","role":"read"})");
  ASSERT_EQ(r.status, 201) << r.describe();
  EXPECT_EQ(r.json()["created_by"], "ci-bot");
  EXPECT_EQ(r.header("location"), "/api/v1/tokens/" + std::to_string(r.json()["id"].get<int>()));
}

TEST_F(ApiAccess, CreationIsValidatedAndNamesAreUnique) {
  auto client = fixture_.client();
  for (const char* bad : {R"({"role":"read"})", R"({"name":"x"})", R"({"name":"x","role":"root"})",
                          R"({"name":"","role":"read"})", R"({"name":"a b","role":"read"})",
                          R"({"name":"x","role":"read","expires_in_s":0})",
                          R"({"name":"x","role":"read","expires_in_s":1.5})",
                          R"({"name":"x","role":"read","expires_in_s":1e30})",
                          R"({"name":"x","role":"read","scope":"all"})", R"([1])", R"(nope)"}) {
    auto r = client.post_json("/api/v1/tokens", bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.describe();
  }
  create("alice-2", "read");
  // Taken: an API token's name, and a config token's name.
  EXPECT_EQ(client.post_json("/api/v1/tokens", R"({"name":"alice-2","role":"admin"})").status, 409);
  EXPECT_EQ(client.post_json("/api/v1/tokens", R"({"name":"tester","role":"admin"})").status, 409);
}

TEST_F(ApiAccess, TheListShowsNoSecrets) {
  const auto made = create("viewer", "read", 3600);
  auto r = fixture_.client().get("/api/v1/tokens");
  ASSERT_EQ(r.status, 200) << r.describe();
  const auto list = r.json();
  ASSERT_EQ(list["total"], 3);  // two config tokens, one API token
  EXPECT_EQ(list["items"][0]["name"], "tester");
  EXPECT_EQ(list["items"][0]["source"], "config");
  EXPECT_EQ(list["items"][0]["role"], "admin");
  EXPECT_TRUE(list["items"][0]["id"].is_null());
  const auto& api_token = list["items"][2];
  EXPECT_EQ(api_token["name"], "viewer");
  EXPECT_EQ(api_token["source"], "api");
  EXPECT_EQ(api_token["expires_ms"], clock_.wall_ms() + 3600 * 1000);
  for (const auto& item : list["items"]) {
    EXPECT_FALSE(item.contains("token"));
    EXPECT_FALSE(item.contains("sha256"));
  }
  const std::string token = made["token"];
  EXPECT_EQ(r.body.find(token), std::string::npos);
  EXPECT_EQ(r.body.find(sha256_hex(token)), std::string::npos);
  EXPECT_EQ(r.body.find(sha256_hex(testing::kToken)), std::string::npos);
}

TEST_F(ApiAccess, ARevokedTokenIsRefusedAtTheNextRequest) {
  const auto made = create("short-lived", "admin");
  const std::string token = made["token"];
  const auto id = made["id"].get<std::int64_t>();
  auto client = fixture_.client(token);
  ASSERT_EQ(client.get("/api/v1/info").status, 200);
  // Revoking the token one is using is allowed; the answer is still given.
  auto revoked = client.request("DELETE", "/api/v1/tokens/" + std::to_string(id));
  ASSERT_EQ(revoked.status, 200) << revoked.describe();
  EXPECT_EQ(revoked.json()["revoked_ms"], clock_.wall_ms());
  auto after = client.get("/api/v1/info");
  EXPECT_EQ(after.status, 401) << after.describe();
  // The same answer as for a token that never existed: nothing says "revoked".
  auto unknown = fixture_.client(std::string(64, 'a')).get("/api/v1/info");
  EXPECT_EQ(after.body, unknown.body);
  EXPECT_EQ(after.body.find("revoked"), std::string::npos);
  // Unknown ids, and ids that are not ids.
  EXPECT_EQ(fixture_.client().request("DELETE", "/api/v1/tokens/999").status, 404);
  EXPECT_EQ(fixture_.client().request("DELETE", "/api/v1/tokens/x").status, 400);
  // Revoking again changes nothing.
  advance(std::chrono::seconds(5));
  auto again = fixture_.client().request("DELETE", "/api/v1/tokens/" + std::to_string(id));
  EXPECT_EQ(again.json()["revoked_ms"], revoked.json()["revoked_ms"]);
}

TEST_F(ApiAccess, ATokenExpiresOnTheClock) {
  const std::string token = create("for-an-hour", "read", 3600)["token"];
  auto client = fixture_.client(token);
  EXPECT_EQ(client.get("/api/v1/info").status, 200);
  advance(std::chrono::seconds(3599));
  EXPECT_EQ(client.get("/api/v1/info").status, 200);
  advance(std::chrono::seconds(1));
  auto r = client.get("/api/v1/info");
  EXPECT_EQ(r.status, 401) << r.describe();
  EXPECT_EQ(r.body.find("expired"), std::string::npos);
  // The audit trail knows why (the client does not).
  const auto rows = audit();
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0]["status"], 401);
  EXPECT_EQ(rows[0]["detail"]["reason"], "expired");
  EXPECT_EQ(rows[0]["detail"]["token_name"], "for-an-hour");
  EXPECT_TRUE(rows[0]["token_name"].is_null());
}

TEST_F(ApiAccess, RepeatedFailuresFromOneAddressAreLimitedUntilTheWindowPasses) {
  auto wrong = fixture_.client(std::string(64, 'b'));
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(wrong.get("/api/v1/info").status, 401) << i;
    advance(std::chrono::seconds(1));
  }
  // The 11th attempt within 60 s: refused before the token is looked at, even a good one.
  auto limited = wrong.get("/api/v1/info");
  ASSERT_EQ(limited.status, 429) << limited.describe();
  EXPECT_EQ(limited.json()["error"]["code"], "too_many_requests");
  // The first failure was at t=0, now is t=10 s: free at t=60 s.
  EXPECT_EQ(limited.header("retry-after"), "50");
  EXPECT_EQ(fixture_.client().get("/api/v1/info").status, 429);
  // Routes without a token are not limited.
  EXPECT_EQ(fixture_.client("").get("/api/v1/health").status, 200);
  advance(std::chrono::seconds(49));
  EXPECT_EQ(fixture_.client().get("/api/v1/info").status, 429);
  advance(std::chrono::seconds(1));
  EXPECT_EQ(fixture_.client().get("/api/v1/info").status, 200);
  // Successes neither count nor are limited.
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(fixture_.client().get("/api/v1/info").status, 200) << i;
  }
  // A missing token is not a guess: not counted.
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(fixture_.client("").get("/api/v1/info").status, 401) << i;
  }
  EXPECT_EQ(fixture_.client().get("/api/v1/info").status, 200);
}

TEST_F(ApiAccess, TokensInTheQueryStringAreRefused) {
  for (const std::string& target : std::vector<std::string>{
           "/api/v1/info?token=" + testing::kToken, "/api/v1/runs?limit=5&access_token=abc",
           "/api/v1/info?Access_Token=x", "/index.html?token=x", "/api/v1/health?token=x"}) {
    auto r = fixture_.client("").get(target);
    EXPECT_EQ(r.status, 400) << target << ": " << r.describe();
    const std::string message = r.json()["error"]["message"];
    EXPECT_NE(message.find("Authorization"), std::string::npos) << message;
    EXPECT_EQ(r.body.find(testing::kToken), std::string::npos);
  }
  // Even with a good header: the URL has leaked already and must be fixed.
  EXPECT_EQ(fixture_.client().get("/api/v1/info?token=x").status, 400);
}

TEST_F(ApiAccess, EveryAdminActionIsAuditedAndNoTokenReachesTheDatabase) {
  const auto made = create("auditor", "admin", 600);
  const std::string token = made["token"];
  const auto id = made["id"].get<std::int64_t>();
  const std::string reader = create("reader", "read")["token"];
  // A refused change, a failed start, a revocation, a failed authentication.
  EXPECT_EQ(fixture_.client(reader).post_json("/api/v1/runs", "{}").status, 403);
  EXPECT_EQ(fixture_.client(token).post_json("/api/v1/runs?x=1", "{}").status, 400);
  EXPECT_EQ(fixture_.client(token).request("DELETE", "/api/v1/tokens/" + std::to_string(id)).status,
            200);
  EXPECT_EQ(fixture_.client(token).get("/api/v1/info").status, 401);
  // Reads are not audited.
  EXPECT_EQ(fixture_.client(reader).get("/api/v1/runs").status, 200);

  const auto rows = audit();
  ASSERT_EQ(rows.size(), 6u) << rows.dump(1);
  // Newest first.
  EXPECT_EQ(rows[0]["status"], 401);
  EXPECT_EQ(rows[0]["method"], "GET");
  EXPECT_EQ(rows[0]["path"], "/api/v1/info");
  EXPECT_EQ(rows[0]["detail"]["reason"], "revoked");
  EXPECT_EQ(rows[1]["method"], "DELETE");
  EXPECT_EQ(rows[1]["path"], "/api/v1/tokens/" + std::to_string(id));
  EXPECT_EQ(rows[1]["status"], 200);
  EXPECT_EQ(rows[1]["token_name"], "auditor");
  EXPECT_EQ(rows[1]["token_id"], id);
  EXPECT_EQ(rows[1]["role"], "admin");
  EXPECT_EQ(rows[1]["detail"]["token_id"], id);
  EXPECT_EQ(rows[2]["path"], "/api/v1/runs");  // without its query string
  EXPECT_EQ(rows[2]["status"], 400);
  EXPECT_TRUE(rows[2]["detail"].contains("error"));
  EXPECT_EQ(rows[3]["token_name"], "reader");
  EXPECT_EQ(rows[3]["role"], "read");
  EXPECT_EQ(rows[3]["status"], 403);
  EXPECT_EQ(rows[4]["method"], "POST");
  EXPECT_EQ(rows[4]["path"], "/api/v1/tokens");
  EXPECT_EQ(rows[4]["status"], 201);
  EXPECT_EQ(rows[4]["token_name"], "tester");
  EXPECT_TRUE(rows[4]["token_id"].is_null());
  EXPECT_EQ(rows[4]["detail"]["name"], "reader");
  EXPECT_EQ(rows[5]["detail"]["name"], "auditor");
  for (const auto& row : rows) {
    EXPECT_EQ(row["remote"], "127.0.0.1");
    EXPECT_EQ(row["time_ms"], clock_.wall_ms());
    EXPECT_GT(row["id"].get<std::int64_t>(), 0);
  }
  // Paging: two at a time, then on from the last id seen.
  auto page = fixture_.client().get("/api/v1/audit?limit=2").json();
  ASSERT_EQ(page["items"].size(), 2u);
  EXPECT_EQ(page["items"][0]["id"], rows[0]["id"]);
  const auto next = page["next_before"].get<std::int64_t>();
  page = fixture_.client().get("/api/v1/audit?limit=2&before=" + std::to_string(next)).json();
  EXPECT_EQ(page["items"][0]["id"], rows[2]["id"]);
  EXPECT_EQ(fixture_.client().get("/api/v1/audit?limit=501").status, 400);
  EXPECT_EQ(fixture_.client().get("/api/v1/audit?before=0").status, 400);
  EXPECT_EQ(fixture_.client().get("/api/v1/audit?offset=3").status, 400);

  // No token, in any form an attacker could use, anywhere in the database's bytes.
  const auto bytes = database_bytes();
  ASSERT_FALSE(bytes.empty());
  for (const auto& secret : {token, reader, testing::kToken, testing::kOtherToken}) {
    EXPECT_EQ(bytes.find(secret), std::string::npos);
  }
  // Only hashes: the API tokens' are there (the config ones live in the config).
  EXPECT_NE(bytes.find(sha256_hex(token)), std::string::npos);
}

}  // namespace
}  // namespace fedcore::api
