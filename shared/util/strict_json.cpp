#include "shared/util/strict_json.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

namespace fedcore {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxQuoted = 64;  // bytes of a key or string echoed in a message
constexpr int kMaxDepth = 64;           // configs need a handful of levels

// At most kMaxQuoted bytes of `text`, not cutting a UTF-8 sequence, "..." when cut, and
// control characters shown as '?' (a key is echoed into logs and terminals).
std::string cut(std::string_view text) {
  std::size_t end = text.size();
  if (end > kMaxQuoted) {
    end = kMaxQuoted;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
      --end;
    }
  }
  std::string out(text.substr(0, end));
  for (auto& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      c = '?';
    }
  }
  return end < text.size() ? out + "..." : out;
}

// Shortest readable form of a range bound: integers as integers, else %g with 15 digits.
std::string bound(double x) {
  char text[40];
  if (std::isfinite(x) && x == std::trunc(x) && std::fabs(x) < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", x);
  } else {
    std::snprintf(text, sizeof text, "%.15g", x);
  }
  return text;
}

std::string interval(const NumberRange& r) {
  return std::string(r.low_open ? "(" : "[") + bound(r.low) + ", " + bound(r.high) +
         (r.high_open ? ")" : "]");
}

bool within(double x, const NumberRange& r) {
  return (r.low_open ? x > r.low : x >= r.low) && (r.high_open ? x < r.high : x <= r.high);
}

std::string normalized(std::string_view word) {
  std::string out(word);
  for (auto& c : out) {
    c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string quoted_list(std::span<const std::string_view> items, const char* quote) {
  std::string out;
  for (auto item : items) {
    out += (out.empty() ? "" : ", ") + std::string(quote) + std::string(item) + quote;
  }
  return out;
}

}  // namespace

JsonPath::JsonPath(std::string document, std::string path)
    : document_(std::move(document)), path_(std::move(path)) {}

JsonPath JsonPath::key(std::string_view key) const {
  const auto name = cut(key);
  return JsonPath(document_, path_.empty() ? name : path_ + "." + name);
}

JsonPath JsonPath::index(std::size_t i) const {
  return JsonPath(document_, path_ + "[" + std::to_string(i) + "]");
}

error JsonPath::bad(std::string_view problem) const {
  if (path_.empty()) {
    return fail(errc::invalid_argument, document_ + ": " + std::string(problem));
  }
  return fail(errc::invalid_argument, document_ + ": '" + path_ + "' " + std::string(problem));
}

std::string describe_json(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return v.dump();
    case json::value_t::number_float: {
      const double x = v.get<double>();
      if (std::isnan(x)) {
        return "nan";
      }
      if (std::isinf(x)) {
        return x > 0 ? "inf" : "-inf";
      }
      return v.dump();
    }
    case json::value_t::string:
      return json(cut(v.get_ref<const std::string&>()))
          .dump(-1, ' ', false, json::error_handler_t::replace);
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      return "invalid JSON";
  }
  return "a value";
}

result<std::int64_t> json_integer(const json& v, const JsonPath& at, IntRange range) {
  auto refuse = [&] {
    return at.bad("must be an integer in [" + std::to_string(range.low) + ", " +
                  std::to_string(range.high) + "], got " + describe_json(v));
  };
  std::int64_t x = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return refuse();
    }
    x = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<std::int64_t>();
  } else if (v.is_number_float()) {
    // A number without a fraction is an integer ("5.0", "1e3"); past ±2^63 it cannot be one
    // of ours, and the cast below would be undefined.
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::trunc(d) || d < -9.2233720368547758e18 ||
        d >= 9.2233720368547758e18) {
      return refuse();
    }
    x = static_cast<std::int64_t>(d);
  } else {
    return refuse();
  }
  if (x < range.low || x > range.high) {
    return refuse();
  }
  return x;
}

result<double> json_number(const json& v, const JsonPath& at, NumberRange range) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !within(v.get<double>(), range)) {
    return at.bad("must be a number in " + interval(range) + ", got " + describe_json(v));
  }
  return v.get<double>();
}

result<bool> json_bool(const json& v, const JsonPath& at) {
  if (!v.is_boolean()) {
    return at.bad("must be true or false, got " + describe_json(v));
  }
  return v.get<bool>();
}

result<std::string> json_string(const json& v, const JsonPath& at, StringRule rule) {
  if (!v.is_string()) {
    return at.bad("must be a string, got " + describe_json(v));
  }
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() < rule.min_size) {
    return at.bad(rule.min_size == 1 ? std::string("must not be empty")
                                     : "must be at least " + std::to_string(rule.min_size) +
                                           " bytes long, got " + describe_json(v));
  }
  if (s.size() > rule.max_size) {
    return at.bad("must be at most " + std::to_string(rule.max_size) + " bytes long, got " +
                  std::to_string(s.size()) + " bytes");
  }
  if (!rule.allow_control && std::any_of(s.begin(), s.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7F;
      })) {
    return at.bad("must not contain control characters, got " + describe_json(v));
  }
  return s;
}

result<std::string> json_choice(const json& v, const JsonPath& at,
                                std::span<const std::string_view> choices) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (std::find(choices.begin(), choices.end(), s) != choices.end()) {
      return s;
    }
  }
  std::string problem =
      "must be one of " + quoted_list(choices, "\"") + ", got " + describe_json(v);
  if (v.is_string()) {
    if (auto close = closest_match(v.get_ref<const std::string&>(), choices)) {
      problem += "; did you mean \"" + std::string(*close) + "\"?";
    }
  }
  return at.bad(problem);
}

result<void> json_object_keys(const json& v, const JsonPath& at,
                              std::span<const std::string_view> known) {
  if (!v.is_object()) {
    return at.bad("must be a JSON object, got " + describe_json(v));
  }
  for (const auto& [key, value] : v.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) {
      continue;
    }
    std::string message = at.document() + ": unknown key '" + at.key(key).path() + "'";
    if (known.empty()) {
      message += " (this object takes no keys)";
    } else if (auto close = closest_match(key, known)) {
      message += "; did you mean '" + at.key(*close).path() + "'?";
    } else {
      message += " (known keys: " + quoted_list(known, "") + ")";
    }
    return fail(errc::invalid_argument, std::move(message));
  }
  return {};
}

std::size_t edit_distance(std::string_view a_text, std::string_view b_text) {
  const auto a = normalized(a_text);
  const auto b = normalized(b_text);
  // Three rows of the optimal string alignment table: i-2, i-1, i.
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    previous[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    before.swap(previous);
    previous.swap(current);
  }
  return previous[b.size()];
}

std::optional<std::string_view> closest_match(std::string_view word,
                                              std::span<const std::string_view> candidates) {
  if (word.size() > kMaxQuoted) {
    return std::nullopt;  // not a typo of a key, and quadratic work to find out
  }
  const std::size_t limit = std::max<std::size_t>(1, std::min<std::size_t>(3, word.size() / 3));
  std::optional<std::string_view> best;
  std::size_t best_distance = limit + 1;
  for (auto candidate : candidates) {
    const auto d = edit_distance(word, candidate);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

result<json> parse_json_strict(std::string_view text, std::string_view document) {
  // Keys seen in each object still open, innermost last: nlohmann keeps the last of two
  // equal keys without a word, so a duplicate is caught here, while parsing.
  std::vector<std::set<std::string>> open;
  std::optional<std::string> problem;
  auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (!problem && depth > kMaxDepth) {
      problem = "nested deeper than " + std::to_string(kMaxDepth) + " levels";
    }
    if (event == json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (event == json::parse_event_t::object_end && !open.empty()) {
      open.pop_back();
    } else if (event == json::parse_event_t::key && !open.empty() && parsed.is_string()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open.back().insert(key).second && !problem) {
        problem = "duplicate key '" + cut(key) + "'";
      }
    }
    return true;
  };
  try {
    auto j = json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true);
    if (problem) {
      return fail(errc::invalid_argument, std::string(document) + ": " + *problem);
    }
    // in_place_value: a json converts from anything, an error included.
    return result<json>(boost::system::in_place_value, std::move(j));
  } catch (const json::parse_error& e) {
    return fail(errc::invalid_argument,
                std::string(document) + ": invalid JSON at byte " + std::to_string(e.byte));
  } catch (const json::out_of_range&) {
    // nlohmann reports a literal past a double's range (1e400) this way, without a position.
    return fail(errc::invalid_argument,
                std::string(document) + ": invalid JSON: a number is too large for a double");
  } catch (const json::exception&) {
    return fail(errc::invalid_argument, std::string(document) + ": invalid JSON");
  }
}

StrictObject::StrictObject(const json& object, JsonPath at,
                           std::initializer_list<std::string_view> known)
    : StrictObject(object, std::move(at),
                   std::span<const std::string_view>(known.begin(), known.size())) {}

StrictObject::StrictObject(const json& object, JsonPath at, std::span<const std::string_view> known)
    : object_(object), at_(std::move(at)) {
  if (auto keys = json_object_keys(object_, at_, known); !keys) {
    error_ = keys.error();
  }
}

result<void> StrictObject::status() const {
  if (error_) {
    return *error_;
  }
  return {};
}

bool StrictObject::has(std::string_view key) const {
  return find(key) != nullptr;
}

const json* StrictObject::find(std::string_view key) const {
  if (!object_.is_object()) {
    return nullptr;
  }
  const auto it = object_.find(std::string(key));
  return it == object_.end() ? nullptr : &*it;
}

const json* StrictObject::readable(std::string_view key) const {
  return error_ ? nullptr : find(key);
}

bool StrictObject::read_integer(const json& v, std::string_view key, IntRange range,
                                std::int64_t& out) {
  auto x = json_integer(v, at(key), range);
  if (!x) {
    fail(x.error());
    return false;
  }
  out = *x;
  return true;
}

bool StrictObject::read_number(const json& v, std::string_view key, NumberRange range,
                               bool as_float, double& out) {
  auto x = json_number(v, at(key), range);
  if (!x) {
    fail(x.error());
    return false;
  }
  if (as_float && !within(static_cast<double>(static_cast<float>(*x)), range)) {
    fail(at(key).bad("must be a number in " + interval(range) + ", got " + describe_json(v) + " (" +
                     bound(static_cast<float>(*x)) + " as a 32-bit float)"));
    return false;
  }
  out = *x;
  return true;
}

void StrictObject::boolean(std::string_view key, bool& out) {
  if (const auto* v = readable(key)) {
    auto x = json_bool(*v, at(key));
    if (take(x)) {
      out = *x;
    }
  }
}

void StrictObject::string(std::string_view key, std::string& out, StringRule rule) {
  if (const auto* v = readable(key)) {
    auto x = json_string(*v, at(key), rule);
    if (take(x)) {
      out = std::move(*x);
    }
  }
}

void StrictObject::choice(std::string_view key, std::string& out,
                          std::span<const std::string_view> choices) {
  if (const auto* v = readable(key)) {
    auto x = json_choice(*v, at(key), choices);
    if (take(x)) {
      out = std::move(*x);
    }
  }
}

void StrictObject::reject(std::string_view key, std::string_view problem) {
  fail(at(key).bad(problem));
}

void StrictObject::fail(error e) {
  if (!error_) {
    error_ = std::move(e);
  }
}

}  // namespace fedcore
