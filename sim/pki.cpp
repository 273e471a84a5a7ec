#include "sim/pki.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sys/wait.h>

#include "shared/util/source_tree.hpp"
#include "sim/client_certificates.hpp"

namespace fedcore::sim {
namespace {

std::string quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

// Runs one script step; its output is kept only to explain a failure.
result<void> step(const std::string& script, const std::string& dir, const std::string& args) {
  const std::string command = quote(script) + " --dir " + quote(dir) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return fail(errc::internal, "cannot run " + script);
  }
  std::string output;
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    output.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  if (status != 0) {
    return fail(errc::internal, "fedcore-pki " + args + " failed: " + output);
  }
  return {};
}

}  // namespace

std::string default_pki_script() {
  if (const char* env = std::getenv("FEDCORE_PKI_SCRIPT"); env != nullptr && *env != '\0') {
    return env;
  }
  return fedcore::source_path("certs/fedcore-pki");
}

result<SimPki> SimPki::create(const std::string& script, const std::string& dir,
                              const std::vector<std::string>& client_ids) {
  std::error_code ec;
  if (!std::filesystem::exists(script, ec)) {
    return fail(errc::failed_precondition,
                "the certificate script " + script + " is missing (set FEDCORE_PKI_SCRIPT)");
  }
  std::filesystem::remove_all(dir, ec);
  if (auto r = step(script, dir, "init --days 30 --crl-days 30"); !r) {
    return r.error();
  }
  if (auto r = step(script, dir, "server fedcore-server --days 30"); !r) {
    return r.error();
  }
  // The sites' certificates in-process: one script run each took 33 ms a site.
  if (auto issued = issue_client_certificates(dir, client_ids, 30); !issued) {
    return issued.error();
  }
  return SimPki(dir);
}

tls::ServerTlsConfig SimPki::server_config() const {
  return {dir_ + "/ca.pem", dir_ + "/server/fedcore-server.pem",
          dir_ + "/server/fedcore-server.key", dir_ + "/crl.pem"};
}

tls::ClientTlsConfig SimPki::client_config(const std::string& client_id) const {
  return {dir_ + "/ca.pem", dir_ + "/clients/" + client_id + ".pem",
          dir_ + "/clients/" + client_id + ".key", "localhost"};
}

}  // namespace fedcore::sim
