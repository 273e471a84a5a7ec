// The admin API over real HTTPS on loopback, against a real FederationServer and SQLite
// history, without federation clients: authentication, validation, errors, static files
// and the limits that protect the listener.
#include <fstream>
#include <set>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "server/api/api.hpp"
#include "server/api/config.hpp"
#include "server/api/openapi.hpp"
#include "tests/api/api_fixture.hpp"
#include "tests/api/metrics_parser.hpp"
#include "tests/support/build_outputs.hpp"

namespace fedcore::api {
namespace {

using testing::ApiFixture;
using testing::Headers;
using testing::Reply;

const char* kRun =
    R"({"name":"demo","model":{"type":"logreg"},"rounds":3,"clients_per_round":2,"min_clients":2,
        "round_timeout_s":30,"wait_for_clients_s":600,"seed":1})";

// Asserts the one error shape and returns its message.
std::string error_message(const Reply& r, int status, const std::string& code) {
  EXPECT_EQ(r.status, status) << r.describe();
  EXPECT_EQ(r.header("content-type"), "application/json") << r.describe();
  auto j = r.json();
  if (j.is_discarded() || !j.contains("error")) {
    ADD_FAILURE() << "not the error shape: " << r.describe();
    return {};
  }
  EXPECT_EQ(j["error"]["code"], code) << r.describe();
  EXPECT_EQ(j.size(), 1u);
  EXPECT_EQ(j["error"].size(), 2u);
  return j["error"]["message"].get<std::string>();
}

void expect_security_headers(const Reply& r) {
  EXPECT_NE(r.header("content-security-policy").find("default-src 'self'"), std::string::npos)
      << r.describe();
  EXPECT_EQ(r.header("content-security-policy").find("unsafe-inline"), std::string::npos);
  EXPECT_EQ(r.header("x-content-type-options"), "nosniff");
  EXPECT_EQ(r.header("x-frame-options"), "DENY");
  EXPECT_EQ(r.header("referrer-policy"), "no-referrer");
  EXPECT_EQ(r.header("strict-transport-security"), "max-age=31536000");
}

// A concrete path for a route pattern ({id} -> 1, {round} -> 1).
std::string concrete(std::string pattern) {
  for (const char* p : {"{id}", "{round}"}) {
    for (auto at = pattern.find(p); at != std::string::npos; at = pattern.find(p)) {
      pattern.replace(at, std::string(p).size(), "1");
    }
  }
  return pattern;
}

class ApiHttp : public ::testing::Test {
 protected:
  // These tests present many wrong tokens on purpose; the failed-authentication limit
  // has its own tests (access_http_test.cpp).
  ApiFixture fixture_{{.tune = [](ApiServerOptions& o) { o.auth_limits.max_failures = 100000; }}};
};

TEST_F(ApiHttp, HealthNeedsNoTokenAndCarriesSecurityHeaders) {
  auto r = fixture_.client("").get("/api/v1/health");
  ASSERT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.json(), nlohmann::json::parse(R"({"status":"ok","version":"0.1.0"})"));
  EXPECT_EQ(r.header("cache-control"), "no-store");
  expect_security_headers(r);
}

TEST_F(ApiHttp, EveryOtherRouteRefusesAMissingOrWrongToken) {
  const auto routes = fixture_.api().api().router().routes();
  ASSERT_GE(routes.size(), 14u);
  for (const auto& route : routes) {
    if (!route.options.needs_token) {
      EXPECT_EQ(route.pattern, "/api/v1/health");
      continue;
    }
    const auto path = concrete(route.pattern);
    for (const std::string& token : {std::string(), std::string("wrong"), testing::kToken + "0"}) {
      auto r =
          fixture_.client(token).request(route.method, path, route.method == "POST" ? "{}" : "",
                                         {{"Content-Type", "application/json"}});
      const auto message = error_message(r, 401, "unauthenticated");
      EXPECT_EQ(r.header("www-authenticate").rfind("Bearer", 0), 0u) << route.pattern;
      EXPECT_EQ(message.find(token.empty() ? "\x01" : token), std::string::npos);
      expect_security_headers(r);
    }
    // A Basic header is not a bearer token.
    auto basic = fixture_.client("").request(route.method, path, "",
                                             {{"Authorization", "Basic dGVzdGVyOnB3"}});
    EXPECT_EQ(basic.status, 401) << route.pattern;
  }
  // Both configured tokens work.
  EXPECT_EQ(fixture_.client(testing::kOtherToken).get("/api/v1/info").status, 200);
}

TEST_F(ApiHttp, InfoDescribesTheServer) {
  auto r = fixture_.client().get("/api/v1/info");
  ASSERT_EQ(r.status, 200) << r.describe();
  auto j = r.json();
  EXPECT_EQ(j["version"], "0.1.0");
  EXPECT_GE(j["uptime_s"].get<double>(), 0.0);
  EXPECT_EQ(j["listeners"]["api"], "127.0.0.1:" + std::to_string(fixture_.api_port()));
  EXPECT_EQ(j["listeners"]["federation"],
            "127.0.0.1:" + std::to_string(fixture_.federation_port()));
  EXPECT_EQ(j["run_active"], false);
  EXPECT_TRUE(j["active_run_id"].is_null());
  EXPECT_EQ(j["online_clients"], 0);
  EXPECT_EQ(r.header("cache-control"), "no-store");
}

TEST_F(ApiHttp, ListsArePagedAndTheirParametersValidated) {
  auto r = fixture_.client().get("/api/v1/clients");
  ASSERT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.json(), nlohmann::json::parse(R"({"items":[],"total":0,"limit":50,"offset":0})"));
  r = fixture_.client().get("/api/v1/runs?limit=500&offset=7");
  ASSERT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.json()["limit"], 500);
  EXPECT_EQ(r.json()["offset"], 7);
  const std::pair<const char*, const char*> bad[] = {
      {"/api/v1/clients?limit=0", "limit"},
      {"/api/v1/clients?limit=501", "limit"},
      {"/api/v1/clients?limit=ten", "limit"},
      {"/api/v1/runs?offset=-1", "offset"},
      {"/api/v1/runs?offset=1.5", "offset"},
      {"/api/v1/runs?state=sleeping", "state"},
      {"/api/v1/runs?limit=1&limit=2", "limit"},
      {"/api/v1/runs?sort=name", "unknown query parameter 'sort'"},
      {"/api/v1/runs/1/rounds?limit=-5", "limit"},
      {"/api/v1/info?verbose=1", "unknown query parameter 'verbose'"},
  };
  for (const auto& [target, field] : bad) {
    auto reply = fixture_.client().get(target);
    const auto message = error_message(reply, 400, "invalid_argument");
    EXPECT_EQ(message.rfind(field, 0), 0u) << target << " -> " << message;
  }
}

TEST_F(ApiHttp, UnknownIdsAreNotFoundAndMalformedIdsAreBadRequests) {
  for (const char* target :
       {"/api/v1/runs/999", "/api/v1/runs/999/rounds", "/api/v1/runs/999/rounds/1/results",
        "/api/v1/runs/999/model", "/api/v1/clients/nobody"}) {
    const auto message = error_message(fixture_.client().get(target), 404, "not_found");
    EXPECT_FALSE(message.empty()) << target;
  }
  for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/api/v1/runs/999/stop"}, {"POST", "/api/v1/runs/999/rounds"}}) {
    auto r = fixture_.client().request(method, target);
    const auto message = error_message(r, 404, "not_found");
    EXPECT_NE(message.find("999"), std::string::npos) << message;
  }
  const std::pair<const char*, const char*> bad[] = {
      {"/api/v1/runs/abc", "id"},
      {"/api/v1/runs/0", "id"},
      {"/api/v1/runs/-3", "id"},
      {"/api/v1/runs/99999999999999999999999", "id"},
      {"/api/v1/runs/1/rounds/x/results", "round"},
      {"/api/v1/runs/1/model?round=0", "round"},
      {"/api/v1/runs/1/model?format=zip", "format"},
      {"/api/v1/clients/bad%20id", "id"},
      {"/api/v1/runs/%zz", "id"},
  };
  for (const auto& [target, field] : bad) {
    const auto message = error_message(fixture_.client().get(target), 400, "invalid_argument");
    EXPECT_EQ(message.rfind(field, 0), 0u) << target << " -> " << message;
  }
}

TEST_F(ApiHttp, RunBodiesAreValidatedNamingTheField) {
  auto client = fixture_.client();
  const std::pair<std::string, std::string> bad[] = {
      {"{", "body: invalid JSON"},
      {R"({"model":{"type":"logreg"},)", "body: invalid JSON"},
      {"[1,2]", "body: must be a JSON object"},
      {"\"text\"", "body: must be a JSON object"},
      {R"({"model":{"type":"logreg"},"rounds":"ten"})", "'rounds'"},
      {R"({"model":{"type":"logreg"},"rounds":0})", "'rounds'"},
      {R"({"model":{"type":"logreg"},"rounds":100001})", "'rounds'"},
      {R"({"model":{"type":"logreg"},"rounds":2.5})", "'rounds'"},
      {R"({"model":{"type":"logreg"},"batch_size":-1})", "'batch_size'"},
      {R"({"model":{"type":"logreg"},"round_timeout_s":true})", "'round_timeout_s'"},
      {R"({"model":{"type":"logreg"},"strategy":"fedsgd"})", "'strategy'"},
      {R"({"model":{"type":"logreg"},"federated_evaluation":"yes"})", "'federated_evaluation'"},
      {R"({"model":{"type":"logreg"},"colour":"blue"})", "'colour'"},
      {R"({"rounds":1})", "'model'"},
      {R"({"model":{"type":"logreg"},"name":7})", "'name'"},
  };
  for (const auto& [body, field] : bad) {
    const auto message =
        error_message(client.post_json("/api/v1/runs", body), 400, "invalid_argument");
    EXPECT_NE(message.find(field), std::string::npos) << body << " -> " << message;
  }
  // Control routes take no fields.
  const auto message = error_message(client.post_json("/api/v1/runs/1/stop", R"({"force":true})"),
                                     400, "invalid_argument");
  EXPECT_NE(message.find("'force'"), std::string::npos) << message;
  // Nothing was created.
  EXPECT_EQ(client.get("/api/v1/runs").json()["total"], 0);
}

// Issue 19: no body is a 500. A table of hostile and mistaken bodies, each a 400 whose
// message says what is wrong; nothing is created, and the server carries on.
TEST_F(ApiHttp, NoBodyGivesA500) {
  auto client = fixture_.client();
  const std::string logreg = R"("model":{"type":"logreg"})";
  const std::string deep_array = std::string(30000, '[') + std::string(30000, ']');
  const std::string deep_value =
      "{" + logreg + R"(,"name":)" + std::string(100, '[') + std::string(100, ']') + "}";
  std::string deep_objects = "{" + logreg + R"(,"privacy":)";
  for (int i = 0; i < 2000; ++i) {
    deep_objects += R"({"dp":)";
  }
  deep_objects += "1" + std::string(2001, '}');
  const std::pair<std::string, std::string> bad[] = {
      // Not a JSON object, or not JSON.
      {"", "run config: 'model' is required"},
      {"   ", "body: invalid JSON"},
      {"null", "body: must be a JSON object"},
      {"42", "body: must be a JSON object"},
      {"true", "body: must be a JSON object"},
      {deep_array, "body: nested deeper than 64 levels"},
      {"{" + logreg + ",\"rounds\":NaN}", "body: invalid JSON"},
      {"{" + logreg + ",\"rounds\":Infinity}", "body: invalid JSON"},
      {"{" + logreg + ",\"rounds\":-1e400}", "body: invalid JSON: a number is too large"},
      {"{" + logreg + ",\"name\":\"\xff\"}", "body: invalid JSON"},
      {"{" + logreg + ",\"name\":\"\xc0\xaf\"}", "body: invalid JSON"},      // overlong '/'
      {"{" + logreg + ",\"name\":\"\xed\xa0\x80\"}", "body: invalid JSON"},  // UTF-8 surrogate
      {"{" + logreg + R"(,"name":"\ud800"})", "body: invalid JSON"},         // lone surrogate
      {"{" + logreg + ",\"na\xffme\":1}", "body: invalid JSON"},
      {"{" + logreg + "} trailing", "body: invalid JSON"},
      // Deep nesting.
      {deep_value, "body: nested deeper than 64 levels"},
      {deep_objects, "body: nested deeper than 64 levels"},
      // Unknown and duplicate keys.
      {"{" + logreg + R"(,"rouns":3})", "run config: unknown key 'rouns'; did you mean 'rounds'?"},
      {"{" + logreg + R"(,"privacy":{"dp":{"mode":"record","epsilom":1}}})",
       "run config: unknown key 'privacy.dp.epsilom'; did you mean 'privacy.dp.epsilon'?"},
      {"{" + logreg + R"(,")" + std::string(60000, 'k') + R"(":1})",
       "run config: unknown key 'kkk"},
      {"{" + logreg + R"(,"a\u0000b":1})", "run config: unknown key 'a?b'"},
      {"{" + logreg + R"(,"rounds":2,"rounds":3})", "body: duplicate key 'rounds'"},
      // Wrong types.
      {R"({"model":[]})", "run config: 'model' must be a JSON object, got an array"},
      {R"({"model":null})", "run config: 'model' must be a JSON object, got null"},
      {"{" + logreg + R"(,"optimizer":null})", "run config: 'optimizer' must be a JSON object"},
      {"{" + logreg + R"(,"privacy":"yes"})", "run config: 'privacy' must be a JSON object"},
      {"{" + logreg + R"(,"rounds":[3]})", "run config: 'rounds' must be an integer"},
      {"{" + logreg + R"(,"manual":"false"})", "run config: 'manual' must be true or false"},
      {"{" + logreg + R"(,"name":{"first":"a"}})", "run config: 'name' must be a string"},
      // Huge, tiny and overflowing numbers.
      {"{" + logreg + R"(,"rounds":1e308})", "run config: 'rounds' must be an integer"},
      {"{" + logreg + R"(,"rounds":18446744073709551616})",
       "run config: 'rounds' must be an integer"},
      {"{" + logreg + R"(,"seed":-9223372036854775809})", "run config: 'seed' must be an integer"},
      {"{" + logreg + R"(,"seed":9223372036854775807})", "run config: 'seed' must be an integer"},
      {"{" + logreg + R"(,"round_timeout_s":1e-320})", "run config: 'round_timeout_s' must be"},
      {"{" + logreg + R"(,"optimizer":{"lr":1e-300}})", "run config: 'optimizer.lr' must be"},
      {R"({"model":{"type":"mlp","hidden":[4294967297]}})", "run config: 'model.hidden[0]'"},
      {R"({"model":{"type":"cnn","kernel":-0.0}})", "run config: 'model.kernel'"},
      // Sizes.
      {"{" + logreg + R"(,"name":")" + std::string(60000, 'n') + R"("})",
       "run config: 'name' must be at most 128 bytes long, got 60000 bytes"},
      {"{" + logreg + R"(,"server_test_set":")" + std::string(5000, 'p') + R"("})",
       "run config: 'server_test_set' must be at most 4096 bytes long"},
  };
  for (const auto& [body, fragment] : bad) {
    const auto reply = client.post_json("/api/v1/runs", body);
    const auto message = error_message(reply, 400, "invalid_argument");
    EXPECT_NE(message.find(fragment), std::string::npos) << body.substr(0, 80) << " -> " << message;
    EXPECT_LT(message.size(), 1000u) << body.substr(0, 80);
  }
  // The control routes take no body but {}.
  const std::string control_bodies[] = {"[]",
                                        "null",
                                        "1",
                                        R"({"force":true})",
                                        "{\"\xff\":1}",
                                        std::string(20000, '[') + std::string(20000, ']')};
  for (const auto& body : control_bodies) {
    const auto reply = client.post_json("/api/v1/runs/1/stop", body);
    const auto message = error_message(reply, 400, "invalid_argument");
    EXPECT_EQ(message.rfind("body: ", 0), 0u) << body.substr(0, 40) << " -> " << message;
  }
  // Nothing was created, and the server still answers.
  EXPECT_EQ(client.get("/api/v1/runs").json()["total"], 0);
  EXPECT_EQ(client.get("/api/v1/health").status, 200);
}

TEST_F(ApiHttp, BodiesMustBeJsonAndWithinTheirLimit) {
  auto client = fixture_.client();
  for (const char* type :
       {"text/plain", "application/x-www-form-urlencoded", "", "application/jsonp"}) {
    auto r = client.request("POST", "/api/v1/runs", kRun, {{"Content-Type", type}});
    error_message(r, 415, "unsupported_media_type");
  }
  EXPECT_EQ(client
                .request("POST", "/api/v1/runs", "{}",
                         {{"Content-Type", "Application/JSON; charset=utf-8"}})
                .status,
            400);
  const std::string huge = "{\"name\":\"" + std::string(70 * 1024, 'x') + "\"}";
  error_message(client.post_json("/api/v1/runs", huge), 413, "payload_too_large");
  // Routes that take no body refuse one.
  error_message(client.request("GET", "/api/v1/runs", "{}", {{"Content-Type", "application/json"}}),
                413, "payload_too_large");
  // A chunked body over the limit is cut off as it arrives.
  std::string chunked = "POST /api/v1/runs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
                        testing::kToken +
                        "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) {
    chunked += "1000\r\n" + std::string(0x1000, ' ') + "\r\n";
  }
  chunked += "0\r\n\r\n";
  error_message(client.raw(chunked), 413, "payload_too_large");
}

TEST_F(ApiHttp, StartingStoppingAndConflicts) {
  auto client = fixture_.client();
  auto created = client.post_json("/api/v1/runs", kRun);
  ASSERT_EQ(created.status, 201) << created.describe();
  auto run = created.json();
  const auto id = run["id"].get<std::int64_t>();
  EXPECT_EQ(created.header("location"), "/api/v1/runs/" + std::to_string(id));
  EXPECT_EQ(run["name"], "demo");
  EXPECT_EQ(run["state"], "running");
  EXPECT_EQ(run["rounds_total"], 3);
  EXPECT_EQ(run["last_round"], 0);
  EXPECT_EQ(run["manual"], false);
  EXPECT_EQ(run["config"]["rounds"], 3);
  for (const char* key : {"reason", "created_ms", "updated_ms"}) {
    EXPECT_TRUE(run.contains(key)) << key;
  }

  error_message(client.post_json("/api/v1/runs", kRun), 409, "conflict");
  auto info = client.get("/api/v1/info").json();
  EXPECT_EQ(info["run_active"], true);
  EXPECT_EQ(info["active_run_id"], id);

  const auto path = "/api/v1/runs/" + std::to_string(id);
  EXPECT_EQ(client.get(path).json()["state"], "running");
  auto listed = client.get("/api/v1/runs?state=running").json();
  EXPECT_EQ(listed["total"], 1);
  EXPECT_EQ(client.get("/api/v1/runs?state=finished").json()["total"], 0);
  // Not a manual run: rounds cannot be requested.
  error_message(client.post_json(path + "/rounds", ""), 409, "conflict");
  // No rounds yet: empty list, no model.
  EXPECT_EQ(client.get(path + "/rounds").json()["total"], 0);
  error_message(client.get(path + "/model"), 404, "not_found");
  error_message(client.get(path + "/rounds/1/results"), 404, "not_found");

  auto stopped = client.post_json(path + "/stop", "");
  ASSERT_EQ(stopped.status, 200) << stopped.describe();
  EXPECT_EQ(stopped.json()["state"], "stopped");
  error_message(client.post_json(path + "/stop", "{}"), 409, "conflict");
  EXPECT_EQ(client.get("/api/v1/info").json()["run_active"], false);
  // The next run may start.
  EXPECT_EQ(client.post_json("/api/v1/runs", kRun).status, 201);
  EXPECT_EQ(client.get("/api/v1/runs").json()["items"][0]["id"], id + 1) << "newest first";
}

TEST_F(ApiHttp, UnknownRoutesAreNotFoundAndWrongMethodsListWhatIsAllowed) {
  auto client = fixture_.client();
  for (const char* target : {"/api/v1/nope", "/api/v2/runs", "/api/v1/runs/1/rounds/1",
                             "/api/v1/runs/", "/api", "/metrics/x"}) {
    error_message(client.get(target), 404, "not_found");
  }
  const std::tuple<const char*, const char*, const char*> cases[] = {
      {"DELETE", "/api/v1/runs", "GET, HEAD, POST"},
      {"PUT", "/api/v1/runs/1", "GET, HEAD"},
      {"GET", "/api/v1/runs/1/stop", "POST"},
      {"PATCH", "/api/v1/health", "GET, HEAD"},
      {"POST", "/metrics", "GET, HEAD"},
      {"POST", "/", "GET, HEAD"},
      {"DELETE", "/app.js", "GET, HEAD"},
  };
  for (const auto& [method, target, allow] : cases) {
    auto r = client.request(method, target);
    error_message(r, 405, "method_not_allowed");
    EXPECT_EQ(r.header("allow"), allow) << method << " " << target;
  }
}

TEST_F(ApiHttp, DashboardFilesAreServedWithTheirTypesAndHeaders) {
  auto anonymous = fixture_.client("");
  auto index = anonymous.get("/");
  ASSERT_EQ(index.status, 200) << index.describe();
  EXPECT_EQ(index.header("content-type"), "text/html; charset=utf-8");
  EXPECT_NE(index.body.find("<title>Fedcore</title>"), std::string::npos);
  expect_security_headers(index);
  EXPECT_EQ(anonymous.get("/index.html").body, index.body);
  const std::pair<const char*, const char*> files[] = {
      {"/app.js", "text/javascript; charset=utf-8"},
      {"/style.css", "text/css; charset=utf-8"},
      {"/icons/logo.svg", "image/svg+xml"},
      {"/node_modules/chart.js/dist/chart.umd.js", "text/javascript; charset=utf-8"},
      {"/alias.js", "text/javascript; charset=utf-8"},
  };
  for (const auto& [target, type] : files) {
    auto r = anonymous.get(target);
    EXPECT_EQ(r.status, 200) << target << " " << r.describe();
    EXPECT_EQ(r.header("content-type"), type) << target;
    expect_security_headers(r);
  }
  auto head = anonymous.request("HEAD", "/app.js");
  EXPECT_EQ(head.status, 200) << head.describe();
  EXPECT_EQ(head.header("content-length"), "26");
  EXPECT_TRUE(head.body.empty());
  error_message(anonymous.get("/missing.js"), 404, "not_found");
}

TEST_F(ApiHttp, TraversalAttemptsNeverReachFilesOutsideTheWebRoot) {
  auto anonymous = fixture_.client("");
  for (const char* target :
       {"/../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E/secret.txt", "/..%2fsecret.txt",
        "/..%2Fsecret.txt", "/icons/../../secret.txt", "/%252e%252e/secret.txt",
        "/%252e%252e%252fsecret.txt", "/..%5csecret.txt", "/index.html%00.txt", "/.hidden",
        "/%2ehidden", "/icons/%2e%2e/%2e%2e/secret.txt"}) {
    auto r = anonymous.get(target);
    error_message(r, 400, "invalid_argument");
    EXPECT_EQ(r.body.find("outside the web root"), std::string::npos) << target;
  }
  // A symlink out of the root looks like a missing file.
  auto link = anonymous.get("/escape.txt");
  error_message(link, 404, "not_found");
  EXPECT_EQ(link.body.find("outside the web root"), std::string::npos);
}

TEST_F(ApiHttp, OversizedAndMalformedRequestsAreRefusedAndTheServerCarriesOn) {
  auto client = fixture_.client();
  error_message(client.get("/api/v1/info", {{"X-Filler", std::string(10 * 1024, 'a')}}), 431,
                "request_header_fields_too_large");
  auto garbage = client.raw("NOT HTTP AT ALL\r\n\r\n");
  error_message(garbage, 400, "invalid_argument");
  auto bad_length =
      client.raw("POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n");
  EXPECT_EQ(bad_length.status, 400) << bad_length.describe();
  EXPECT_EQ(client.get("/api/v1/health").status, 200);
}

TEST(ApiLimits, ASlowHeaderClientIsCutOffAtTheRequestDeadline) {
  ApiFixture fixture({.tune = [](ApiServerOptions& o) {
    o.request_timeout = std::chrono::milliseconds(700);
    o.idle_timeout = std::chrono::milliseconds(700);
  }});
  auto client = fixture.client();
  // Half a request line, then silence.
  auto hold = client.send_and_wait_for_close("GET /api/v1/info HTTP/1.1\r\nHost: loc",
                                             std::chrono::seconds(10));
  ASSERT_TRUE(hold.closed_by_server) << "the server kept a silent client for 10 s";
  EXPECT_GE(hold.after.count(), 600);
  EXPECT_LT(hold.after.count(), 5000);
  // A complete request on a kept-alive connection, then idleness: closed after the idle
  // deadline, with the first answer delivered.
  auto idle = client.send_and_wait_for_close(
      "GET /api/v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n", std::chrono::seconds(10));
  ASSERT_TRUE(idle.closed_by_server);
  EXPECT_NE(idle.received.find("\"status\":\"ok\""), std::string::npos) << idle.received;
  EXPECT_LT(idle.after.count(), 5000);
  // The listener still serves others.
  EXPECT_EQ(client.get("/api/v1/health").status, 200);
}

TEST(ApiEventsHttp, AQuietStreamGetsKeepAliveCommentsAndEndsAtShutdown) {
  ApiFixture fixture(
      {.tune = [](ApiServerOptions& o) { o.event_keepalive = std::chrono::milliseconds(200); }});
  auto stream = fixture.client().stream_events(
      [](const std::string& body) { return ApiFixture::count(body, ": keep-alive\n\n") >= 2; },
      std::chrono::seconds(20));
  ASSERT_EQ(stream.status, 200) << stream.describe();
  EXPECT_EQ(stream.header("content-type"), "text/event-stream");
  EXPECT_EQ(stream.header("transfer-encoding"), "chunked");
  EXPECT_EQ(stream.body.rfind(": connected\n\n: keep-alive\n\n", 0), 0u) << stream.body;
  EXPECT_FALSE(stream.timed_out);
  // A stream open while the server stops does not hold it up (the fixture's stop is
  // bounded and fails the test otherwise).
  std::thread reader([&] {
    fixture.client().stream_events([](const std::string&) { return false; },
                                   std::chrono::seconds(20));
  });
  ASSERT_TRUE(ApiFixture::poll_until([&] { return fixture.api_connections() == 1; },
                                     std::chrono::seconds(10)));
  fixture.stop();
  reader.join();
}

// At the connection cap the listener stops accepting: a new connection waits in the
// kernel's backlog until the slot is given back and is then served, instead of being
// closed and left to reconnect (tests/federation/storm_test.cpp measured why).
TEST(ApiLimits, AConnectionOverTheCapWaitsForTheSlotAndIsServed) {
  ApiFixture fixture({.tune = [](ApiServerOptions& o) {
    o.max_connections = 1;
    o.request_timeout = std::chrono::milliseconds(3000);
  }});
  auto client = fixture.client();
  // One silent connection holds the only slot until its deadline.
  testing::HttpsClient::Hold held;
  std::thread holder([&] {
    held = client.send_and_wait_for_close("GET / HTTP/1.1\r\n", std::chrono::seconds(10));
  });
  ASSERT_TRUE(ApiFixture::poll_until([&] { return fixture.api_connections() == 1; },
                                     std::chrono::seconds(10)));
  const auto start = std::chrono::steady_clock::now();
  auto waited = client.get("/api/v1/health");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(waited.status, 200) << waited.describe();
  EXPECT_GE(took, std::chrono::milliseconds(1500)) << "served while the slot was held";
  holder.join();
  EXPECT_TRUE(held.closed_by_server);
  EXPECT_TRUE(ApiFixture::poll_until([&] { return fixture.api_connections() == 0; },
                                     std::chrono::seconds(10)));
}

// 260 silent TCP sockets (no TLS, no token) once kept the admin API unreachable. Now
// one host's sockets take at most its per-address share, and an admin elsewhere (here:
// 127.0.0.1 while the sockets come from 127.0.0.2) is answered at once.
TEST(ApiLimits, SilentSocketsFromOneHostDoNotKeepTheAdminOut) {
  ApiFixture fixture({.tune = [](ApiServerOptions& o) {
    o.max_connections = 64;
    o.max_unauthenticated = 48;
    o.max_unauthenticated_per_address = 8;
  }});
  boost::asio::io_context io;
  std::vector<boost::asio::ip::tcp::socket> silent;
  for (int i = 0; i < 300; ++i) {
    boost::asio::ip::tcp::socket socket(io);
    boost::system::error_code ec;
    socket.open(boost::asio::ip::tcp::v4(), ec);
    socket.bind({boost::asio::ip::make_address("127.0.0.2"), 0}, ec);
    ASSERT_FALSE(ec) << "cannot bind 127.0.0.2: " << ec.message();
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), fixture.api_port()}, ec);
    if (!ec) {
      silent.push_back(std::move(socket));
    }
  }
  EXPECT_GT(silent.size(), 8u);
  const auto start = std::chrono::steady_clock::now();
  auto health = fixture.client().get("/api/v1/health");
  EXPECT_EQ(health.status, 200) << health.describe();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_LE(fixture.api_connections(), 8u + 1u);
}

TEST_F(ApiHttp, TheOpenApiDocumentListsExactlyTheRoutesServed) {
  auto r = fixture_.client().get("/api/v1/openapi.json");
  ASSERT_EQ(r.status, 200) << r.describe();
  auto doc = r.json();
  ASSERT_FALSE(doc.is_discarded());
  EXPECT_EQ(doc["openapi"].get<std::string>().rfind("3.0", 0), 0u);
  EXPECT_EQ(doc, nlohmann::json::parse(openapi_document()));
  std::set<std::pair<std::string, std::string>> documented, served;
  std::set<std::tuple<std::string, std::string, std::string>> documented_roles, served_roles;
  for (const auto& [path, operations] : doc["paths"].items()) {
    for (const auto& [method, operation] : operations.items()) {
      std::string upper = method;
      for (auto& c : upper) {
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      }
      documented.emplace(upper, path);
      // The role each route needs is documented as x-fedcore-role.
      documented_roles.emplace(upper, path, operation.value("x-fedcore-role", ""));
      // Public routes say so; every other route needs the bearer scheme.
      const bool open = operation.contains("security") && operation["security"].empty();
      EXPECT_EQ(open, path == "/api/v1/health") << method << " " << path;
    }
  }
  for (const auto& route : fixture_.api().api().router().routes()) {
    served.emplace(route.method, route.pattern);
    served_roles.emplace(route.method, route.pattern, std::string(to_string(route.role)));
  }
  EXPECT_EQ(documented, served);
  EXPECT_EQ(documented_roles, served_roles);
}

TEST_F(ApiHttp, MetricsNeedATokenAndParse) {
  EXPECT_EQ(fixture_.client("").get("/metrics").status, 401);
  auto r = fixture_.client().get("/metrics");
  ASSERT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.header("content-type").rfind("text/plain; version=0.0.4", 0), 0u);
  auto parsed = testing::parse_prometheus(r.body);
  ASSERT_TRUE(parsed.ok) << parsed.problem;
  EXPECT_EQ(parsed.value("fedcore_clients_online"), 0);
  for (const char* state : {"pending", "running", "paused", "finished", "failed", "stopped"}) {
    EXPECT_EQ(parsed.value("fedcore_runs{state=\"" + std::string(state) + "\"}"), 0) << state;
  }
  EXPECT_EQ(parsed.value("fedcore_rounds_total{state=\"committed\"}"), 0);
  EXPECT_EQ(parsed.value("fedcore_round_duration_seconds_count"), 0);
  EXPECT_GE(parsed.value("fedcore_bytes_received_total"), 0);
  EXPECT_GE(parsed.value("fedcore_uptime_seconds"), 0);
}

TEST(ApiTokens, TokenCreateRoundTripThroughTheServerBinary) {
  fedcore::testing::TempDir dir;
  const auto config = dir.path("server.json");
  std::ofstream(config) << R"({"database": "x.db", "api": {"port": 0}})";
  auto created =
      tls::testing::run_command(fedcore::testing::server_binary() + " token create --config " +
                                tls::testing::shell_quote(config) + " --name alice");
  ASSERT_EQ(created.status, 0) << created.output;
  // stdout holds the token alone on the first line; the note for the admin follows on
  // stderr (run_command captures both).
  const std::string token = created.output.substr(0, created.output.find('\n'));
  ASSERT_EQ(token.size(), 64u) << created.output;
  std::ifstream in(config);
  auto stored = nlohmann::json::parse(in);
  EXPECT_EQ(stored["database"], "x.db");
  auto api = parse_api_config(stored["api"]);
  ASSERT_TRUE(api) << api.error().message;
  ASSERT_EQ(api->tokens.size(), 1u);
  EXPECT_EQ(api->tokens[0].name, "alice");
  EXPECT_EQ(stored.dump().find(token), std::string::npos);
  // The same name again is refused, and the file keeps its one token.
  auto again =
      tls::testing::run_command(fedcore::testing::server_binary() + " token create --config " +
                                tls::testing::shell_quote(config) + " --name alice");
  EXPECT_NE(again.status, 0);
  // A server configured from that file accepts the printed token.
  ApiFixture fixture({.tune = [&](ApiServerOptions& o) { o.tokens = api->tokens; }});
  EXPECT_EQ(fixture.client(token).get("/api/v1/info").status, 200);
  EXPECT_EQ(fixture.client(testing::kToken).get("/api/v1/info").status, 401);
}

}  // namespace
}  // namespace fedcore::api
