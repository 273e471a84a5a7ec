// The server config file (fedcore-server --config server.json), its `api` section, and the
// `token create` rewrite of it. Every key: docs/config.md.
//
//   {"listen": "127.0.0.1", "port": 7443,        // the federation listener
//    "database": "fedcore.db",                   // SQLite history
//    "checkpoint_dir": "checkpoints",
//    "max_connections": 1024,
//    "heartbeat_seconds": 5,                     // told to clients in WELCOME
//    "idle_timeout_s": 120,                      // must exceed 3 heartbeats
//    "handshake_timeout_s": 10, "hello_timeout_s": 10,  // a new connection's deadlines
//    "tls": {"ca": "ca.pem", "cert": "server.pem", "key": "server.key", "crl": "crl.pem"},
//    "api": {
//      "enabled": true,              // false: no admin listener
//      "listen": "127.0.0.1",        // address of the admin listener
//      "port": 8443,                 // 0 = any free port
//      "web_root": "web",            // the dashboard's files (docs/api.md)
//      "max_connections": 256,
//      "handshake_timeout_s": 10, "request_timeout_s": 10, "idle_timeout_s": 30,
//      "tokens": [{"name": "alice", "sha256": "<64 hex>", "created_ms": 1763700000000}]
//    }}
//
// Parsed strictly (shared/util/strict_json.hpp): an unknown key, a value of the wrong type
// or out of range stops the server at start with a message naming the key path and, for an
// unknown key, the closest known one ("server config: unknown key 'databse'; did you mean
// 'database'?").
//
// TLS: the admin listener presents the federation server's certificate and key (the
// config's `tls` section); it asks clients for no certificate.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "server/api/auth.hpp"
#include "server/federation/federation_server.hpp"
#include "shared/util/error.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::api {

struct ApiConfig {
  bool enabled = true;
  std::string listen_address = "127.0.0.1";
  std::uint16_t port = 8443;
  std::string web_root;  // empty: the server's default (./web, or beside the binary)
  std::size_t max_connections = 256;
  // Connections without a whole request header yet, in all and per address, and every
  // connection from one address (net/connection_table.hpp).
  std::size_t max_unauthenticated = 128;
  std::size_t max_unauthenticated_per_address = 16;
  std::size_t max_connections_per_address = 32;
  std::int64_t audit_max_rows = 100'000;  // the audit trail's retention (api/audit.hpp)
  std::vector<TokenEntry> tokens;
  // A connection's TLS handshake, its request (first byte to last header byte) and the
  // wait between keep-alive requests (api_server.hpp).
  std::chrono::seconds handshake_timeout{10};
  std::chrono::seconds request_timeout{10};
  std::chrono::seconds idle_timeout{30};
};

// Reads the `api` object (absent keys keep their defaults). Errors: invalid_argument
// naming the key path ("server config: 'api.port' must be an integer in [0, 65535], got
// 70000"), unknown keys and repeated token names included.
result<ApiConfig> parse_api_config(const nlohmann::json& api);
// The same with `at` naming the api object.
result<ApiConfig> parse_api_config(const nlohmann::json& api, const JsonPath& at);

// The whole server config file.
struct ServerConfig {
  ServerConfig() { federation.port = 7443; }

  federation::ServerOptions federation;  // listen, port, tls, checkpoint_dir, limits
  std::string database = "fedcore.db";
  ApiConfig api;
};

// Every key of `j` applied to the defaults of ServerConfig. Errors: invalid_argument
// naming the document ("server config") and the key path.
result<ServerConfig> parse_server_config(const nlohmann::json& j);
// The same from the file's text; also invalid_argument for invalid JSON, a duplicate key or
// nesting deeper than 64 levels.
result<ServerConfig> parse_server_config_text(std::string_view text);

// `fedcore-server token create`: generates a token, adds {"name","sha256","created_ms"}
// to `api.tokens` of the JSON config at `config_path` (creating `api` and `tokens` if
// needed, keeping every other key and the file's permissions), and replaces the file
// atomically (temp file, fsync, rename, fsync of the directory). Returns the token,
// which exists nowhere else afterwards.
// Errors: not_found / io_error (the file), invalid_argument (not a JSON object, a bad
// existing `api` section, an empty or over-long name), already_exists (a token of that
// name exists), internal (no randomness).
result<std::string> create_token_in_config(const std::string& config_path, const std::string& name,
                                           std::int64_t now_ms);

}  // namespace fedcore::api
