// Router and request helpers, without a network.
#include "server/api/router.hpp"

#include <gtest/gtest.h>

namespace fedcore::api {
namespace {

Response named(std::string name) {
  Response r;
  r.body = std::move(name);
  return r;
}

Router sample() {
  Router router;
  router.add("GET", "/api/v1/runs",
             [](const Request&, const PathParams&) { return named("list"); });
  router.add("POST", "/api/v1/runs",
             [](const Request&, const PathParams&) { return named("create"); },
             {.needs_token = true, .body_limit = 100});
  router.add("GET", "/api/v1/runs/{id}", [](const Request&, const PathParams& p) {
    return named("one " + p.find("id")->second);
  });
  router.add("GET", "/api/v1/runs/{id}/rounds/{round}/results",
             [](const Request&, const PathParams& p) {
               return named(p.find("id")->second + "/" + p.find("round")->second);
             });
  return router;
}

TEST(ApiRouter, MatchesLiteralAndParameterSegments) {
  const auto router = sample();
  auto m = router.match("GET", "/api/v1/runs/7/rounds/3/results");
  ASSERT_EQ(m.kind, Router::Match::Kind::found);
  EXPECT_EQ((*m.handler)(Request{}, m.params).body, "7/3");
  m = router.match("POST", "/api/v1/runs");
  ASSERT_EQ(m.kind, Router::Match::Kind::found);
  EXPECT_EQ(m.route->options.body_limit, 100u);
  m = router.match("GET", "/api/v1/runs/hospital%2Da");
  ASSERT_EQ(m.kind, Router::Match::Kind::found);
  EXPECT_EQ(m.params.at("id"), "hospital-a");
}

TEST(ApiRouter, UnknownPathsTrailingSlashesAndEmptySegmentsAreNotFound) {
  const auto router = sample();
  for (const char* path : {"/api/v1/run", "/api/v1/runs/", "/api/v1/runs//rounds/1/results",
                           "/api/v1/runs/1/2", "/", ""}) {
    EXPECT_EQ(router.match("GET", path).kind, Router::Match::Kind::no_such_path) << path;
  }
}

TEST(ApiRouter, AKnownPathWithAnotherMethodListsTheAllowedOnes) {
  const auto router = sample();
  auto m = router.match("DELETE", "/api/v1/runs");
  ASSERT_EQ(m.kind, Router::Match::Kind::wrong_method);
  EXPECT_EQ(m.allow, "GET, HEAD, POST");
  m = router.match("POST", "/api/v1/runs/5");
  ASSERT_EQ(m.kind, Router::Match::Kind::wrong_method);
  EXPECT_EQ(m.allow, "GET, HEAD");
  EXPECT_EQ(router.match("HEAD", "/api/v1/runs/5").kind, Router::Match::Kind::found);
}

TEST(ApiRouter, AMalformedEscapeInAParameterIsReported) {
  const auto router = sample();
  auto m = router.match("GET", "/api/v1/runs/%zz");
  ASSERT_EQ(m.kind, Router::Match::Kind::found);
  EXPECT_EQ(m.bad_param, "id");
}

TEST(ApiRouter, ListsItsRoutesInOrder) {
  const auto routes = sample().routes();
  ASSERT_EQ(routes.size(), 4u);
  EXPECT_EQ(routes[1].method, "POST");
  EXPECT_EQ(routes[3].pattern, "/api/v1/runs/{id}/rounds/{round}/results");
}

TEST(ApiQuery, IntegerParametersAreRangeCheckedAndNamed) {
  EXPECT_EQ(*int_param("limit=20&offset=3", "limit", 1, 500, 50), 20);
  EXPECT_EQ(*int_param("offset=3", "limit", 1, 500, 50), 50);
  for (const char* bad : {"limit=0", "limit=501", "limit=abc", "limit=", "limit=1e3", "limit=-1",
                          "limit=99999999999999999999", "limit=5&limit=6", "limit=%4"}) {
    auto r = int_param(bad, "limit", 1, 500, 50);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, errc::invalid_argument);
    EXPECT_EQ(r.error().message.rfind("limit", 0), 0u) << r.error().message;
  }
  auto r = int_param("limit=x", "limit", 1, 500, 50);
  EXPECT_EQ(r.error().message, "limit: must be an integer in [1, 500], got \"x\"");
}

TEST(ApiQuery, UnknownParametersAreRefusedByName) {
  EXPECT_TRUE(only_params("limit=1&offset=2", {"limit", "offset"}));
  auto r = only_params("limit=1&sort=name", {"limit", "offset"});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("'sort'"), std::string::npos);
  EXPECT_FALSE(only_params("x=1", {}));
}

TEST(ApiQuery, PercentDecoding) {
  EXPECT_EQ(*percent_decode("a%20b%2F"), "a b/");
  EXPECT_EQ(*percent_decode("a+b", true), "a b");
  EXPECT_EQ(*percent_decode("a+b"), "a+b");
  EXPECT_FALSE(percent_decode("%"));
  EXPECT_FALSE(percent_decode("%4"));
  EXPECT_FALSE(percent_decode("%g0"));
}

TEST(ApiErrors, OneShapeWithTheStatusOfTheCode) {
  auto r = error_response(fail(errc::not_found, "run 9 not found"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, R"({"error":{"code":"not_found","message":"run 9 not found"}})");
  EXPECT_EQ(error_response(fail(errc::failed_precondition, "x")).status, 409);
  EXPECT_EQ(http_error_code(errc::failed_precondition), "conflict");
  EXPECT_EQ(error_response(fail(errc::invalid_argument, "x")).status, 400);
  EXPECT_EQ(error_response(fail(errc::unauthenticated, "x")).status, 401);
  EXPECT_EQ(error_response(fail(errc::internal, "x")).status, 500);
  // A write the storage refused (full disk, failing device) is the server's temporary
  // trouble, not a bug: 503 with the storage's own words.
  auto full = error_response(fail(errc::io_error, "database or disk is full"));
  EXPECT_EQ(full.status, 503);
  EXPECT_EQ(full.body, R"({"error":{"code":"unavailable","message":"database or disk is full"}})");
  // Invalid UTF-8 from a client is replaced, not thrown on.
  EXPECT_EQ(error_response(400, "invalid_argument", "bad \xff byte").status, 400);
}

}  // namespace
}  // namespace fedcore::api
