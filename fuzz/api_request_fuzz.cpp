// The admin API's request parsing (server/api): JSON bodies, query strings, path segments,
// the Authorization header and static file paths -- everything of a request that reaches
// Fedcore code once Boost.Beast has split it (Beast's own HTTP parser is not fuzzed here).
// The handlers need a live server and store, so this target calls the parsing functions
// they call, in the order a request meets them. The first input byte picks which.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unistd.h>

#include "fuzz/support/fuzz_support.hpp"
#include "server/api/auth.hpp"
#include "server/api/handlers.hpp"
#include "server/api/http_types.hpp"
#include "server/api/router.hpp"
#include "server/api/static_files.hpp"
#include "server/federation/run_config.hpp"

namespace {

using namespace fedcore;
using namespace fedcore::api;

// POST /api/v1/runs: the body, strictly, then the run config in it.
void run_body(std::string_view text) {
  Request request;
  request.method = "POST";
  request.content_type = "application/json";
  request.body = std::string(text);
  auto body = api::detail::json_object_body(request);
  if (body) {
    (void)federation::run_config_from_json(*body);
  }
}

// The query helpers of the list routes (GET /api/v1/runs?limit=&offset=&state=).
void query(std::string_view q) {
  (void)only_params(q, {"limit", "offset", "state"});
  (void)api::detail::page_params(q);
  (void)query_param(q, "state");
  (void)int_param(q, "since", 0, INT64_MAX, 0);
  (void)percent_decode(q, true);
  (void)percent_decode(q, false);
  (void)parse_int(q, INT64_MIN, INT64_MAX);
}

Response no_op(const Request&, const PathParams&) {
  return {};
}

// Route matching with the API's pattern shapes (literal and {id} segments).
const Router& router() {
  static const Router r = [] {
    Router built;
    built.add("GET", "/api/v1/runs", no_op);
    built.add("POST", "/api/v1/runs", no_op);
    built.add("GET", "/api/v1/runs/{id}", no_op);
    built.add("POST", "/api/v1/runs/{id}/stop", no_op);
    built.add("GET", "/api/v1/runs/{id}/rounds/{round}/results", no_op);
    built.add("GET", "/api/v1/clients/{client_id}", no_op);
    return built;
  }();
  return r;
}

void route(std::string_view path) {
  auto match = router().match("GET", path);
  if (match.kind == Router::Match::Kind::found) {
    (void)api::detail::id_param(match.params, "id");
  }
  (void)router().match("POST", path);
}

void authorization(std::string_view header) {
  // A verifier holding one token (its hash); the fuzzer tries headers against it.
  static const TokenVerifier verifier(
      {{.name = "ops", .sha256_hex = sha256_hex("fuzz-token"), .created_ms = 0}});
  (void)verifier.verify(header);
}

// A web root with two files, made once per process and removed at exit.
const std::string& web_root() {
  static const std::string root = "/tmp/fedcore-fuzz-web-" + std::to_string(::getpid());
  return root;
}

void remove_web_root() {
  std::error_code ignored;  // best effort: /tmp is cleaned eventually anyway
  std::filesystem::remove_all(web_root(), ignored);
}

const StaticFiles& static_files() {
  static const StaticFiles files = [] {
    std::filesystem::create_directories(web_root() + "/assets");
    std::ofstream(web_root() + "/index.html") << "<html></html>";
    std::ofstream(web_root() + "/assets/app.js") << "1";
    std::atexit(remove_web_root);
    return StaticFiles(web_root());
  }();
  return files;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const auto text = fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      run_body(text);
      break;
    case 1:
      query(text);
      break;
    case 2:
      route(text);
      break;
    case 3:
      authorization(text);
      break;
    default:
      (void)static_files().resolve(text);
      break;
  }
  return 0;
}
