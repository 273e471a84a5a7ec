// Log line formats: `--log-format text|json` of every Fedcore binary.
//
// text (the default) keeps spdlog's usual pattern. json makes every line one JSON object
// (JSON Lines), for a site's log shipper:
//
//   {"time":"2025-11-21T09:14:03.127Z","level":"info","component":"server",
//    "message":"run 3 round 7 committed: ...","run":3,"round":7}
//
//   time       RFC 3339, UTC, milliseconds
//   level      trace | debug | info | warn | error | critical
//   component  the binary: "server", "client", "sim", "dist"
//   message    the line as the code wrote it
//   run, round integers; client a string -- present only when known
//
// Where run/round/client come from, in order:
//   1. a LogContext the code set on the logging thread (RAII, below);
//   2. otherwise a conservative reading of the phrases the code's log lines begin with:
//      "run N", "run N round M", "round M", then (at the start, or right after "run N
//      round M: ") "client 'X'" or "update from 'X'" where X is a valid client id
//      (shared/util/client_id.hpp). Anything else yields no field rather than a guess;
//   3. for `client` only, the installation's default (fedcore-client: the site's own id).
//   A context that sets run or round owns both: the message's numbers are then ignored, so
//   a line never mixes the context's run with a round read from the text.
//
// Escaping: the output is always valid JSON in UTF-8, whatever the message holds: quotes and
// backslashes escaped, control characters as \n, \t or \u00XX, and bytes that are not
// well-formed UTF-8 (stray continuation bytes, overlong forms, surrogates, code points past
// U+10FFFF, truncated sequences) each replaced by U+FFFD.
//
// Secrets: nothing here filters them. The rule is upstream -- tokens, private keys and
// Authorization headers are never passed to the logger (the admin API logs a token's
// name only, and a request's path without its query string).
//
// Thread safety: install_log_format() once at start, before other threads log. LogContext
// is per thread; it must not be held across a co_await (another coroutine on the same
// thread would log with it), and with an asynchronous spdlog logger the formatter runs on
// the logger's thread and would not see it (Fedcore's loggers are synchronous).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/formatter.h>

#include "shared/util/error.hpp"

namespace fedcore {

enum class LogFormat { text, json };

// "text" or "json". Errors: invalid_argument naming the value.
result<LogFormat> parse_log_format(std::string_view name);

// For binaries whose own option parser must not see it (fedcore-sim, fedcore-dist): removes
// every "--log-format X" and "--log-format=X" from `args` and returns the last X, nullopt
// when there is none. Errors: invalid_argument for a missing or unknown value.
result<std::optional<LogFormat>> take_log_format_flag(std::vector<std::string>& args);

// The structured fields of one line; unset = unknown.
struct LogFields {
  std::optional<std::int64_t> run;
  std::optional<std::int64_t> round;
  std::optional<std::string> client;
};

// Sets fields for every line logged on this thread while it lives; nests (an inner context
// overrides the fields it sets and restores the outer ones when it ends). Not copyable or
// movable: it restores exactly what it replaced, in scope order.
class LogContext {
 public:
  explicit LogContext(LogFields fields);
  ~LogContext();
  LogContext(const LogContext&) = delete;
  LogContext& operator=(const LogContext&) = delete;

 private:
  LogFields saved_;
};

// The fields LogContexts on this thread currently set.
LogFields current_log_context();

// The fields the message's leading phrases name (rule 2 above).
LogFields parse_log_fields(std::string_view message);

// Appends `text` as a JSON string literal (quotes included), escaped as described above.
void append_json_string(std::string& out, std::string_view text);

struct JsonLogOptions {
  std::string component;              // "server", "client", ...
  std::optional<std::string> client;  // default `client` field (rule 3)
};

// A spdlog formatter writing one JSON object and a '\n' per message.
std::unique_ptr<spdlog::formatter> make_json_log_formatter(JsonLogOptions options);

// Applies `format` to every spdlog logger, present and future: json installs
// make_json_log_formatter(options); text leaves spdlog's pattern alone.
void install_log_format(LogFormat format, JsonLogOptions options);

}  // namespace fedcore
