// The `api` section of the server config file, and the `token create` rewrite of it.
//
//   "api": {
//     "enabled": true,              // false: no admin listener
//     "listen": "127.0.0.1",        // address of the admin listener
//     "port": 8443,                 // 0 = any free port
//     "web_root": "web",            // the dashboard's files (docs/api.md)
//     "max_connections": 256,
//     "tokens": [{"name": "alice", "sha256": "<64 hex>", "created_ms": 1763700000000}]
//   }
//
// TLS: the admin listener presents the federation server's certificate and key (the
// config's `tls` section); it asks clients for no certificate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "server/api/auth.hpp"
#include "shared/util/error.hpp"

namespace fedcore::api {

struct ApiConfig {
  bool enabled = true;
  std::string listen_address = "127.0.0.1";
  std::uint16_t port = 8443;
  std::string web_root;  // empty: the server's default (./web, or beside the binary)
  std::size_t max_connections = 256;
  std::vector<TokenEntry> tokens;
};

// Reads the `api` object (absent keys keep their defaults). Errors: invalid_argument
// naming the key ("api.port: must be an integer in [0, 65535]"), unknown keys included.
result<ApiConfig> parse_api_config(const nlohmann::json& api);

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
