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

error bad(const std::string& key, const std::string& problem) {
  return fail(errc::invalid_argument, "api." + key + ": " + problem);
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

}  // namespace

result<ApiConfig> parse_api_config(const nlohmann::json& j) {
  ApiConfig c;
  if (!j.is_object()) {
    return fail(errc::invalid_argument, "api: must be an object");
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "enabled") {
      if (!value.is_boolean()) {
        return bad(key, "must be true or false");
      }
      c.enabled = value.get<bool>();
    } else if (key == "listen") {
      if (!value.is_string() || value.get<std::string>().empty()) {
        return bad(key, "must be an address string, e.g. \"127.0.0.1\"");
      }
      c.listen_address = value.get<std::string>();
    } else if (key == "port") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
          value.get<std::int64_t>() > 65535) {
        return bad(key, "must be an integer in [0, 65535]");
      }
      c.port = static_cast<std::uint16_t>(value.get<std::int64_t>());
    } else if (key == "web_root") {
      if (!value.is_string()) {
        return bad(key, "must be a path string");
      }
      c.web_root = value.get<std::string>();
    } else if (key == "max_connections") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 1 ||
          value.get<std::int64_t>() > 100000) {
        return bad(key, "must be an integer in [1, 100000]");
      }
      c.max_connections = value.get<std::size_t>();
    } else if (key == "tokens") {
      auto tokens = tokens_from_json(value);
      if (!tokens) {
        return tokens.error();
      }
      c.tokens = std::move(*tokens);
    } else {
      return bad(key,
                 "unknown key (known: enabled, listen, port, web_root, max_connections, "
                 "tokens)");
    }
  }
  return c;
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
