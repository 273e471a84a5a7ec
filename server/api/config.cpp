#include "server/api/config.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace fedcore::api {
namespace {

using nlohmann::json;

const JsonPath kRoot("server config");

// Paths of files: non-empty, bounded, no control characters.
constexpr StringRule kPath{.min_size = 1, .max_size = 4096};

result<tls::ServerTlsConfig> parse_tls(const json& j, const JsonPath& at) {
  StrictObject o(j, at, {"ca", "cert", "key", "crl"});
  tls::ServerTlsConfig tls;
  for (auto [key, target] : {std::pair{"ca", &tls.ca_file}, std::pair{"cert", &tls.cert_file},
                             std::pair{"key", &tls.key_file}, std::pair{"crl", &tls.crl_file}}) {
    if (o.ok() && !o.has(key)) {
      o.reject(key, "is required (a PEM file)");
    }
    o.string(key, *target, kPath);
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return tls;
}

result<void> write_all(int fd, const std::string& text, const std::string& path) {
  std::size_t done = 0;
  while (done < text.size()) {
    const auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return fail(errc::io_error, "cannot write '" + path + "': " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

// Replaces `path` by `text` so that a crash leaves the old file or the new one. The
// new file gets the old one's permission bits: configs hold token hashes and paths to
// keys, and an admin who made the file 0600 expects it to stay so.
result<void> replace_file(const std::string& path, const std::string& text, mode_t mode) {
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 07777);
  if (fd < 0) {
    return fail(errc::io_error, "cannot create '" + temp + "': " + std::strerror(errno));
  }
  auto written = write_all(fd, text, temp);
  if (written && ::fchmod(fd, mode & 07777) != 0) {
    written = fail(errc::io_error, "cannot chmod '" + temp + "': " + std::strerror(errno));
  }
  if (written && ::fsync(fd) != 0) {
    written = fail(errc::io_error, "cannot fsync '" + temp + "': " + std::strerror(errno));
  }
  ::close(fd);
  if (!written) {
    ::unlink(temp.c_str());
    return written;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temp.c_str());
    return fail(errc::io_error, "cannot replace '" + path + "': " + std::strerror(saved));
  }
  auto dir = std::filesystem::path(path).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

// A deadline for one step of a new connection, in whole seconds (1 s .. 1 h).
template <class Duration>
void seconds(StrictObject& o, const char* key, Duration& target) {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(target).count();
  o.integer(key, s, {1, 3600});
  target = std::chrono::seconds(s);
}

}  // namespace

result<ApiConfig> parse_api_config(const json& j) {
  return parse_api_config(j, kRoot.key("api"));
}

result<ApiConfig> parse_api_config(const json& j, const JsonPath& at) {
  StrictObject o(
      j, at,
      {"enabled", "listen", "port", "web_root", "max_connections", "max_unauthenticated",
       "max_unauthenticated_per_address", "max_connections_per_address", "audit_max_rows", "tokens",
       "handshake_timeout_s", "request_timeout_s", "idle_timeout_s"});
  ApiConfig c;
  o.boolean("enabled", c.enabled);
  o.string("listen", c.listen_address, {.min_size = 1, .max_size = 255});
  o.integer("port", c.port, {0, 65535});
  o.string("web_root", c.web_root, kPath);
  o.integer("max_connections", c.max_connections, {1, 100000});
  o.integer("max_unauthenticated", c.max_unauthenticated, {1, 100000});
  o.integer("max_unauthenticated_per_address", c.max_unauthenticated_per_address, {1, 100000});
  o.integer("max_connections_per_address", c.max_connections_per_address, {1, 100000});
  o.integer("audit_max_rows", c.audit_max_rows, {100, 100'000'000});
  seconds(o, "handshake_timeout_s", c.handshake_timeout);
  seconds(o, "request_timeout_s", c.request_timeout);
  seconds(o, "idle_timeout_s", c.idle_timeout);
  if (o.ok() && o.has("tokens")) {
    auto tokens = tokens_from_json(*o.find("tokens"), o.at("tokens"));
    if (o.take(tokens)) {
      c.tokens = std::move(*tokens);
    }
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return c;
}

result<ServerConfig> parse_server_config(const json& j) {
  StrictObject o(j, kRoot,
                 {"listen",
                  "port",
                  "database",
                  "checkpoint_dir",
                  "max_connections",
                  "max_unauthenticated",
                  "max_unauthenticated_per_address",
                  "max_inflight_updates",
                  "upload_memory_mb",
                  "crl_poll_s",
                  "heartbeat_seconds",
                  "idle_timeout_s",
                  "handshake_timeout_s",
                  "hello_timeout_s",
                  "storage_probe_first_s",
                  "storage_probe_max_s",
                  "overlap_checkpoints",
                  "keep_checkpoints",
                  "worker_threads",
                  "tls",
                  "api"});
  ServerConfig c;
  auto& f = c.federation;
  o.string("listen", f.listen_address, {.min_size = 1, .max_size = 255});
  o.integer("port", f.port, {0, 65535});
  o.string("database", c.database, kPath);
  o.string("checkpoint_dir", f.checkpoint_dir, kPath);
  o.integer("max_connections", f.max_connections, {1, 1000000});
  o.integer("max_unauthenticated", f.max_unauthenticated, {1, 1000000});
  o.integer("max_unauthenticated_per_address", f.max_unauthenticated_per_address, {1, 1000000});
  o.integer("max_inflight_updates", f.max_inflight_updates, {1, 1024});
  o.boolean("overlap_checkpoints", f.overlap_checkpoints);
  o.integer("keep_checkpoints", f.keep_checkpoints, {0, 1000000});  // 0: every round's
  o.integer("worker_threads", f.worker_threads, {0, 64});           // absent: automatic
  auto upload_memory_mb = static_cast<std::int64_t>(f.upload_memory_bytes >> 20);
  o.integer("upload_memory_mb", upload_memory_mb, {0, 1 << 20});
  f.upload_memory_bytes = static_cast<std::uint64_t>(upload_memory_mb) << 20;
  // How a run paused by a full or read-only disk probes for room (storage_fault.hpp).
  auto probe_first_s =
      std::chrono::duration_cast<std::chrono::seconds>(f.storage_retry.first_probe).count();
  auto probe_max_s =
      std::chrono::duration_cast<std::chrono::seconds>(f.storage_retry.max_interval).count();
  o.integer("storage_probe_first_s", probe_first_s, {1, 3600});
  o.integer("storage_probe_max_s", probe_max_s, {1, 86400});
  f.storage_retry.first_probe = std::chrono::seconds(probe_first_s);
  f.storage_retry.max_interval = std::chrono::seconds(probe_max_s);
  auto crl_poll_s = std::chrono::duration_cast<std::chrono::seconds>(f.crl_poll_interval).count();
  o.integer("crl_poll_s", crl_poll_s, {0, 86400});
  f.crl_poll_interval = std::chrono::seconds(crl_poll_s);
  o.integer("heartbeat_seconds", f.heartbeat_seconds, {1, 3600});
  auto idle_s = std::chrono::duration_cast<std::chrono::seconds>(f.channel.idle_timeout).count();
  o.integer("idle_timeout_s", idle_s, {1, 86400});
  f.channel.idle_timeout = std::chrono::seconds(idle_s);
  seconds(o, "handshake_timeout_s", f.handshake_timeout);
  seconds(o, "hello_timeout_s", f.hello_timeout);
  // Clients send a heartbeat every heartbeat_seconds; a read that gives up sooner than
  // three of them drops healthy sessions.
  if (o.ok() && idle_s <= 3 * static_cast<std::int64_t>(f.heartbeat_seconds)) {
    o.reject("idle_timeout_s", "(" + std::to_string(idle_s) +
                                   ") must exceed 3 heartbeats (3 x 'heartbeat_seconds' = " +
                                   std::to_string(3 * f.heartbeat_seconds) + ")");
  }
  if (o.ok() && probe_first_s > probe_max_s) {
    o.reject("storage_probe_first_s", "(" + std::to_string(probe_first_s) +
                                          ") must not exceed 'storage_probe_max_s' (" +
                                          std::to_string(probe_max_s) + ")");
  }
  if (o.ok() && o.has("tls")) {
    auto tls = parse_tls(*o.find("tls"), o.at("tls"));
    if (o.take(tls)) {
      f.tls = std::move(*tls);
    }
  }
  if (o.ok() && o.has("api")) {
    auto api = parse_api_config(*o.find("api"), o.at("api"));
    if (o.take(api)) {
      c.api = std::move(*api);
    }
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return c;
}

result<ServerConfig> parse_server_config_text(std::string_view text) {
  auto j = parse_json_strict(text, "server config");
  if (!j) {
    return j.error();
  }
  return parse_server_config(*j);
}

result<std::string> create_token_in_config(const std::string& config_path, const std::string& name,
                                           std::int64_t now_ms) {
  if (name.empty() || name.size() > 64) {
    return fail(errc::invalid_argument, "--name: must be 1 to 64 characters");
  }
  struct stat st {};
  if (::stat(config_path.c_str(), &st) != 0) {
    return fail(errno == ENOENT ? errc::not_found : errc::io_error,
                "config file '" + config_path + "': " + std::strerror(errno));
  }
  std::ifstream in(config_path);
  if (!in) {
    return fail(errc::io_error, "cannot read config file '" + config_path + "'");
  }
  std::stringstream text;
  text << in.rdbuf();
  // ordered_json keeps the admin's key order in the rewritten file.
  auto config = nlohmann::ordered_json::parse(text.str(), nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return fail(errc::invalid_argument, "config file '" + config_path + "' is not a JSON object");
  }
  auto& api = config["api"];
  if (api.is_null()) {
    api = nlohmann::ordered_json::object();
  }
  auto parsed = parse_api_config(nlohmann::json::parse(api.dump()));
  if (!parsed) {
    return fail(errc::invalid_argument,
                "config file '" + config_path + "': " + parsed.error().message);
  }
  for (const auto& t : parsed->tokens) {
    if (t.name == name) {
      return fail(errc::already_exists, "a token named '" + name + "' exists already");
    }
  }
  auto token = generate_token();
  if (!token) {
    return token.error();
  }
  auto& tokens = api["tokens"];
  if (tokens.is_null()) {
    tokens = nlohmann::ordered_json::array();
  }
  tokens.push_back({{"name", name}, {"sha256", sha256_hex(*token)}, {"created_ms", now_ms}});
  if (auto replaced = replace_file(config_path, config.dump(2) + "\n", st.st_mode); !replaced) {
    return replaced.error();
  }
  return token;
}

}  // namespace fedcore::api
