#include "shared/util/log_format.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <limits>
#include <utility>

#include <spdlog/spdlog.h>

#include "shared/util/client_id.hpp"

namespace fedcore {
namespace {

thread_local LogFields t_context;

// --- the message's leading phrases ----------------------------------------------------------

bool consume(std::string_view text, std::size_t& pos, std::string_view word) {
  if (text.substr(pos, word.size()) != word) {
    return false;
  }
  pos += word.size();
  return true;
}

bool is_word_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c == '.';
}

// A run or round number: digits that fit an int64 and end a word ("run 12abc" and "round
// 3.5" are not numbers here; a guess would be worse than no field).
std::optional<std::int64_t> read_number(std::string_view text, std::size_t& pos) {
  std::size_t at = pos;
  std::int64_t value = 0;
  while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
    const int digit = text[at] - '0';
    if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
      return std::nullopt;
    }
    value = value * 10 + digit;
    ++at;
  }
  if (at == pos || (at < text.size() && is_word_char(text[at]))) {
    return std::nullopt;
  }
  pos = at;
  return value;
}

// 'X' with X a valid client id; the id rule keeps quotes, spaces and escapes out of it.
std::optional<std::string> read_quoted_id(std::string_view text, std::size_t& pos) {
  if (pos >= text.size() || text[pos] != '\'') {
    return std::nullopt;
  }
  const std::size_t close = text.find('\'', pos + 1);
  if (close == std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view id = text.substr(pos + 1, close - pos - 1);
  if (!is_valid_client_id(id)) {
    return std::nullopt;
  }
  pos = close + 1;
  return std::string(id);
}

// --- JSON -----------------------------------------------------------------------------------

// Length of the well-formed UTF-8 sequence at text[pos] (RFC 3629, table 3-7 of the Unicode
// standard: no overlong forms, no surrogates, nothing past U+10FFFF), 0 when it is not one.
std::size_t utf8_sequence_length(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) -> unsigned {
    return pos + i < text.size() ? static_cast<unsigned char>(text[pos + i]) : 0x100u;
  };
  const auto in = [](unsigned b, unsigned lo, unsigned hi) { return b >= lo && b <= hi; };
  const unsigned b0 = byte(0);
  if (b0 < 0x80) {
    return 1;
  }
  if (in(b0, 0xC2, 0xDF)) {
    return in(byte(1), 0x80, 0xBF) ? 2 : 0;
  }
  if (in(b0, 0xE0, 0xEF)) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned hi = b0 == 0xED ? 0x9F : 0xBF;
    return in(byte(1), lo, hi) && in(byte(2), 0x80, 0xBF) ? 3 : 0;
  }
  if (in(b0, 0xF0, 0xF4)) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return in(byte(1), lo, hi) && in(byte(2), 0x80, 0xBF) && in(byte(3), 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

void append_field(std::string& out, std::string_view name) {
  out += ",\"";
  out += name;
  out += "\":";
}

std::string_view level_name(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

// "2025-11-21T09:14:03.127Z". Milliseconds are floored, so a line never claims a later
// time than it was written at.
void append_time(std::string& out, spdlog::log_clock::time_point time) {
  using namespace std::chrono;
  const auto ms = floor<milliseconds>(time.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  const auto millis = static_cast<int>(ms - static_cast<std::int64_t>(seconds) * 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[40];
  const int n = std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                              utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                              utc.tm_min, utc.tm_sec, millis);
  out += '"';
  out.append(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
  out += '"';
}

class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(JsonLogOptions options) : options_(std::move(options)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string_view message(msg.payload.data(), msg.payload.size());
    const LogFields context = current_log_context();
    const LogFields parsed = parse_log_fields(message);
    // A context with run or round owns both (see the header): never half of each.
    const bool context_owns_numbers = context.run || context.round;
    const auto run = context_owns_numbers ? context.run : parsed.run;
    const auto round = context_owns_numbers ? context.round : parsed.round;
    const auto& client = context.client  ? context.client
                         : parsed.client ? parsed.client
                                         : options_.client;

    std::string line;
    line.reserve(message.size() + 160);
    line += "{\"time\":";
    append_time(line, msg.time);
    append_field(line, "level");
    append_json_string(line, level_name(msg.level));
    append_field(line, "component");
    append_json_string(line, options_.component);
    append_field(line, "message");
    append_json_string(line, message);
    if (run) {
      append_field(line, "run");
      line += std::to_string(*run);
    }
    if (round) {
      append_field(line, "round");
      line += std::to_string(*round);
    }
    if (client) {
      append_field(line, "client");
      append_json_string(line, *client);
    }
    line += "}\n";
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(options_);
  }

 private:
  JsonLogOptions options_;
};

}  // namespace

result<LogFormat> parse_log_format(std::string_view name) {
  if (name == "text") {
    return LogFormat::text;
  }
  if (name == "json") {
    return LogFormat::json;
  }
  return fail(errc::invalid_argument,
              "log format '" + std::string(name.substr(0, 32)) + "': expected text or json");
}

result<std::optional<LogFormat>> take_log_format_flag(std::vector<std::string>& args) {
  constexpr std::string_view kFlag = "--log-format";
  std::optional<LogFormat> format;
  for (auto it = args.begin(); it != args.end();) {
    std::string value;
    if (*it == kFlag) {
      if (it + 1 == args.end()) {
        return fail(errc::invalid_argument, "--log-format needs a value: text or json");
      }
      value = *(it + 1);
      it = args.erase(it, it + 2);
    } else if (it->starts_with(std::string(kFlag) + "=")) {
      value = it->substr(kFlag.size() + 1);
      it = args.erase(it);
    } else {
      ++it;
      continue;
    }
    auto parsed = parse_log_format(value);
    if (!parsed) {
      return parsed.error();
    }
    format = *parsed;
  }
  return format;
}

LogContext::LogContext(LogFields fields) : saved_(t_context) {
  if (fields.run || fields.round) {
    // The inner context owns both numbers, like a context over parsed text.
    t_context.run = fields.run;
    t_context.round = fields.round;
  }
  if (fields.client) {
    t_context.client = std::move(fields.client);
  }
}

LogContext::~LogContext() {
  t_context = std::move(saved_);
}

LogFields current_log_context() {
  return t_context;
}

LogFields parse_log_fields(std::string_view message) {
  LogFields fields;
  std::size_t pos = 0;
  if (consume(message, pos, "run ")) {
    fields.run = read_number(message, pos);
    if (!fields.run) {
      return {};
    }
    const std::size_t before_round = pos;
    if (consume(message, pos, " round ")) {
      fields.round = read_number(message, pos);
      if (!fields.round) {
        pos = before_round;
      }
    }
  } else if (consume(message, pos, "round ")) {
    fields.round = read_number(message, pos);
    if (!fields.round) {
      return {};
    }
  }
  // A client named right after the numbers' ": ", or at the very start; not further in, where
  // a quoted name may be anything ("model type 'x'").
  if ((fields.run || fields.round) && !consume(message, pos, ": ")) {
    return fields;
  }
  if (consume(message, pos, "client ") || consume(message, pos, "update from ")) {
    fields.client = read_quoted_id(message, pos);
  }
  return fields;
}

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto c = static_cast<unsigned char>(text[pos]);
    if (c >= 0x80) {
      const std::size_t length = utf8_sequence_length(text, pos);
      if (length == 0) {
        out += "\\ufffd";  // one replacement character per byte that is not UTF-8
        ++pos;
      } else {
        out.append(text.substr(pos, length));
        pos += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xf];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++pos;
  }
  out += '"';
}

std::unique_ptr<spdlog::formatter> make_json_log_formatter(JsonLogOptions options) {
  return std::make_unique<JsonFormatter>(std::move(options));
}

void install_log_format(LogFormat format, JsonLogOptions options) {
  if (format == LogFormat::json) {
    spdlog::set_formatter(make_json_log_formatter(std::move(options)));
  }
}

}  // namespace fedcore
