// Builds a model from a spec, trains it one step, frames its parameters for the wire and
// draws a reconnect wait, through the installed headers and libraries only.
#include <cstdio>
#include <span>
#include <string_view>

#include "client/backoff.hpp"
#include "shared/model/model.hpp"
#include "shared/model/spec.hpp"
#include "shared/protocol/frame.hpp"

int main() {
  using namespace fedcore;
  auto spec = model::parse_model_spec(std::string_view(R"({"type":"mlp","hidden":[16]})"));
  if (!spec) {
    std::fprintf(stderr, "spec: %s\n", spec.error().message.c_str());
    return 1;
  }
  auto complete = model::complete_spec(*spec, {4}, 3);
  if (!complete) {
    std::fprintf(stderr, "complete_spec: %s\n", complete.error().message.c_str());
    return 1;
  }
  auto built = model::build_model(*complete);
  if (!built) {
    std::fprintf(stderr, "build_model: %s\n", built.error().message.c_str());
    return 1;
  }
  const auto header = protocol::encode_header(
      {protocol::MessageType::update, 0, 0, built->param_count() * sizeof(float)});
  client::Backoff backoff(std::chrono::milliseconds(100), std::chrono::milliseconds(1000), 7);
  const auto wait = backoff.next();
  std::printf(
      "fedcore consumer: mlp with %zu parameters, a %zu-byte frame header, first wait %lld ms\n",
      built->param_count(), header.size(), static_cast<long long>(wait.count()));
  return built->param_count() == 4 * 16 + 16 + 16 * 3 + 3 && wait.count() >= 100 ? 0 : 1;
}
