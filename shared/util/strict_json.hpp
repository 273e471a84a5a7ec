// Strict reading of operator-written JSON: configs (server, client, run, model specs) and
// API bodies (docs/config.md, "Strictness").
//
// Every key must be one the reader knows, every value must have the expected type and lie
// in its stated range, and nothing throws: each problem is an errc::invalid_argument whose
// message names the document and the full key path of the value,
//
//   run config: 'rounds' must be an integer in [1, 100000], got 1.5
//   run config: 'privacy.dp.epsilon' must be a number in [0, 10000], got -1
//   server config: unknown key 'databse'; did you mean 'database'?
//   client config: unknown key 'policy.colour' (known keys: allowed_model_types, ...)
//
// so that a typo or a wrong unit stops the program at start instead of being ignored
// (a misspelt key used to leave its default in place) or wrapping (a port of 70000).
//
// Integers: JSON integers, or numbers without a fraction ("5.0", "1e3"), within the field's
// range; values past int64 (parsed by nlohmann as floats) are out of range, never wrapped.
// Numbers: finite (a programmatically built document can hold inf or NaN) and in range.
// Strings: valid UTF-8 (the parser checks it), bounded length, no control characters
// unless the field allows them. A value's text in a message is bounded (strings are cut
// at 64 bytes, arrays and objects are described, not printed), so a hostile document
// cannot make a message large or its formatting deep.
//
// Typical use, one reader per JSON object:
//
//   StrictObject o(j, JsonPath("run config"), {"name", "rounds", "privacy"});
//   o.string("name", c.name, {.max_size = 128});
//   o.integer("rounds", c.rounds, {1, 100000});
//   if (o.has("privacy")) o.take(parse_privacy(*o.find("privacy"), o.at("privacy")));
//   if (auto done = o.status(); !done) return done.error();
//
// Thread safety: none needed; readers are short-lived values.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/util/assert.hpp"
#include "shared/util/error.hpp"

namespace fedcore {

// Where a value sits: the document's name ("run config") and the key path from its root
// ("privacy.dp.epsilon", "model.hidden[1]"; empty for the root itself).
class JsonPath {
 public:
  explicit JsonPath(std::string document, std::string path = {});

  JsonPath key(std::string_view key) const;  // "a" -> "a.key" (or "key" at the root)
  JsonPath index(std::size_t i) const;       // "a" -> "a[i]"

  const std::string& document() const noexcept { return document_; }
  const std::string& path() const noexcept { return path_; }

  // invalid_argument "<document>: '<path>' <problem>" ("<document>: <problem>" at the root).
  error bad(std::string_view problem) const;

 private:
  std::string document_;
  std::string path_;
};

// Closed interval of an integer field.
struct IntRange {
  std::int64_t low;
  std::int64_t high;
};

// Interval of a number field; each end is closed unless marked open.
struct NumberRange {
  double low;
  double high;
  bool low_open = false;
  bool high_open = false;
};

struct StringRule {
  std::size_t min_size = 0;     // bytes; 1 = non-empty
  std::size_t max_size = 4096;  // bytes
  bool allow_control = false;   // control characters (U+0000..U+001F, U+007F)
};

// ---- One value. Each returns the value or invalid_argument named by `at`.

// "must be an integer in [low, high], got <value>"
result<std::int64_t> json_integer(const nlohmann::json& v, const JsonPath& at, IntRange range);
// "must be a number in [low, high], got <value>" (parentheses for open ends)
result<double> json_number(const nlohmann::json& v, const JsonPath& at, NumberRange range);
// "must be true or false, got <value>"
result<bool> json_bool(const nlohmann::json& v, const JsonPath& at);
// "must be a string of at most N bytes, got <value>" and the like.
result<std::string> json_string(const nlohmann::json& v, const JsonPath& at, StringRule rule = {});
// One of `choices`: "must be one of \"a\", \"b\", got \"x\"" (plus "; did you mean \"a\"?"
// when one is close).
result<std::string> json_choice(const nlohmann::json& v, const JsonPath& at,
                                std::span<const std::string_view> choices);
// An object whose keys are all in `known`: "must be a JSON object, got <value>", or
// "unknown key '<path.key>'; did you mean '<path.known>'?" naming the closest known key,
// or listing the known keys when none is close.
result<void> json_object_keys(const nlohmann::json& v, const JsonPath& at,
                              std::span<const std::string_view> known);

// A bounded description of a value for messages: 1.5, "text", true, null, an array, an
// object; inf/nan for non-finite numbers; strings cut at 64 bytes.
std::string describe_json(const nlohmann::json& v);

// Optimal string alignment distance (insertions, deletions, substitutions and adjacent
// transpositions each cost 1), case-insensitive in ASCII.
std::size_t edit_distance(std::string_view a, std::string_view b);
// The entry of `candidates` closest to `word`, if it is close enough to be a likely typo
// (distance at most max(1, min(3, |word| / 3)), or equal ignoring case and '_' / '-').
std::optional<std::string_view> closest_match(std::string_view word,
                                              std::span<const std::string_view> candidates);

// Parses `text` as one JSON value. Errors (invalid_argument): "<document>: invalid JSON at
// byte N" (which includes invalid UTF-8), "<document>: invalid JSON: a number is too large
// for a double" (1e400),
// "<document>: duplicate key 'k'" (nlohmann would silently keep the last one) and
// "<document>: nested deeper than 64 levels" (no config needs more, and copying or printing
// a deeper value would recurse that deep).
result<nlohmann::json> parse_json_strict(std::string_view text, std::string_view document);

// Reads one JSON object: checks its keys at construction, then each typed read stores a
// present, valid value into its target and leaves the target alone when the key is
// absent. The first problem is kept (later reads do nothing) and returned by status().
class StrictObject {
 public:
  // `object` must outlive the reader.
  StrictObject(const nlohmann::json& object, JsonPath at,
               std::initializer_list<std::string_view> known);
  StrictObject(const nlohmann::json& object, JsonPath at, std::span<const std::string_view> known);
  // A temporary would be gone before the first read.
  StrictObject(const nlohmann::json&& object, JsonPath at,
               std::initializer_list<std::string_view> known) = delete;
  StrictObject(const nlohmann::json&& object, JsonPath at,
               std::span<const std::string_view> known) = delete;

  bool ok() const noexcept { return !error_.has_value(); }
  // Ok, or the first problem.
  [[nodiscard]] result<void> status() const;

  // Whether the object has `key` (false when it is not an object).
  bool has(std::string_view key) const;
  // The value of `key`, or nullptr.
  const nlohmann::json* find(std::string_view key) const;
  // The path of `key` below this object.
  JsonPath at(std::string_view key) const { return at_.key(key); }
  const JsonPath& path() const noexcept { return at_; }

  template <class T>
  void integer(std::string_view key, T& out, IntRange range);
  template <class T>
  void number(std::string_view key, T& out, NumberRange range);
  void boolean(std::string_view key, bool& out);
  void string(std::string_view key, std::string& out, StringRule rule = {});
  void choice(std::string_view key, std::string& out, std::span<const std::string_view> choices);
  void choice(std::string_view key, std::string& out,
              std::initializer_list<std::string_view> choices) {
    choice(key, out, std::span<const std::string_view>(choices.begin(), choices.size()));
  }

  // Records "<path.key> <problem>" unless a problem is recorded already.
  void reject(std::string_view key, std::string_view problem);
  // Records `e` unless a problem is recorded already.
  void fail(error e);
  // Records r's error, if any (and none is recorded yet); returns whether r holds a value.
  template <class T>
  bool take(const result<T>& r) {
    if (!r) {
      fail(r.error());
    }
    return r.has_value() && ok();
  }

 private:
  // The value of `key` when it should be read: present and no problem recorded yet.
  const nlohmann::json* readable(std::string_view key) const;
  // Check `v` (the value of `key`); record the problem or store the value.
  bool read_integer(const nlohmann::json& v, std::string_view key, IntRange range,
                    std::int64_t& out);
  bool read_number(const nlohmann::json& v, std::string_view key, NumberRange range, bool as_float,
                   double& out);

  const nlohmann::json& object_;
  JsonPath at_;
  std::optional<error> error_;
};

namespace detail {
template <class T>
struct unwrap_optional {
  using type = T;
};
template <class T>
struct unwrap_optional<std::optional<T>> {
  using type = T;
};
}  // namespace detail

// `T` is an integral type or std::optional of one; the range must fit it.
template <class T>
void StrictObject::integer(std::string_view key, T& out, IntRange range) {
  using V = typename detail::unwrap_optional<T>::type;
  static_assert(std::is_integral_v<V> && !std::is_same_v<V, bool>);
  FEDCORE_ASSERT(range.low <= range.high && (std::is_signed_v<V> || range.low >= 0) &&
                     static_cast<std::uint64_t>(range.high) <=
                         static_cast<std::uint64_t>(std::numeric_limits<V>::max()),
                 "the range of an integer field fits its type");
  std::int64_t value = 0;
  if (const auto* v = readable(key); v != nullptr && read_integer(*v, key, range, value)) {
    out = static_cast<V>(value);
  }
}

// `T` is float or double or std::optional of one. A float field also checks the value
// as rounded to float (0.99999999 becomes 1.0f, outside [0, 1)).
template <class T>
void StrictObject::number(std::string_view key, T& out, NumberRange range) {
  using V = typename detail::unwrap_optional<T>::type;
  static_assert(std::is_floating_point_v<V>);
  double value = 0;
  if (const auto* v = readable(key);
      v != nullptr && read_number(*v, key, range, std::is_same_v<V, float>, value)) {
    out = static_cast<V>(value);
  }
}

}  // namespace fedcore
