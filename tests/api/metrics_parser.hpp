// A strict reader of the Prometheus text format (0.0.4) for tests: every sample line must
// be `name{label="value",...} number`, belong to a family declared by a preceding
// `# TYPE`, and carry a valid metric name and label syntax.
#pragma once

#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>
#include <string>

namespace fedcore::api::testing {

struct ParsedMetrics {
  bool ok = true;
  std::string problem;
  std::map<std::string, std::string> types;  // family -> counter|gauge|histogram|...
  std::map<std::string, double> samples;     // "name{labels}" as written -> value

  // The value of a sample, or -1 when absent.
  double value(const std::string& key) const {
    auto it = samples.find(key);
    return it == samples.end() ? -1 : it->second;
  }
};

inline ParsedMetrics parse_prometheus(const std::string& text) {
  ParsedMetrics out;
  static const std::regex kType(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*")(,[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*")*\})? ([-+]?([0-9.eE+-]+|Inf)|NaN))");
  std::istringstream in(text);
  std::string line;
  int number = 0;
  auto bad = [&](const std::string& why) {
    out.ok = false;
    out.problem = "line " + std::to_string(number) + ": " + why + ": " + line;
  };
  while (out.ok && std::getline(in, line)) {
    ++number;
    std::smatch m;
    if (line.empty()) {
      continue;
    }
    if (line[0] == '#') {
      if (std::regex_match(line, m, kType)) {
        out.types[m[1]] = m[2];
      } else if (!std::regex_match(line, kHelp)) {
        bad("malformed comment");
      }
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      bad("malformed sample");
      continue;
    }
    std::string name = m[1];
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (!out.types.count(family) && name.size() > s.size() &&
          name.compare(name.size() - s.size(), s.size(), s) == 0 &&
          out.types.count(name.substr(0, name.size() - s.size()))) {
        family = name.substr(0, name.size() - s.size());
      }
    }
    if (!out.types.count(family)) {
      bad("sample without a # TYPE");
      continue;
    }
    const std::string value = m[7];
    const auto key = line.substr(0, line.rfind(' '));
    if (out.samples.count(key)) {
      bad("duplicate sample");
      continue;
    }
    out.samples[key] =
        value == "+Inf" || value == "Inf" ? 1e308 : std::strtod(value.c_str(), nullptr);
  }
  return out;
}

}  // namespace fedcore::api::testing
