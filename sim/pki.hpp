// Throwaway certificates for a simulated federation over loopback TLS: a CA, the server
// certificate (CN fedcore-server, SAN localhost) and one client certificate per site,
// made by the project's real certs/fedcore-pki script in `<out>/certs` (git-ignored, as
// every *.key). The folder is recreated on every run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "shared/tls/context.hpp"
#include "shared/util/error.hpp"

namespace fedcore::sim {

class SimPki {
 public:
  // Creates the CA and the server certificate in `dir` with the script at `script`, and a
  // certificate for every id in `client_ids` in-process (sim/client_certificates.hpp).
  // Errors: failed_precondition when the script is missing; internal with the script's
  // output when a step fails, or the OpenSSL step that failed.
  static result<SimPki> create(const std::string& script, const std::string& dir,
                               const std::vector<std::string>& client_ids);

  // The PKI another process created in `dir` (a rank of a multi-process simulation reads
  // rank 0's); nothing is checked until a site uses its files.
  static SimPki existing(const std::string& dir) { return SimPki(dir); }

  tls::ServerTlsConfig server_config() const;
  tls::ClientTlsConfig client_config(const std::string& client_id) const;
  const std::string& dir() const noexcept { return dir_; }

 private:
  explicit SimPki(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// Where fedcore-pki is: $FEDCORE_PKI_SCRIPT if set, else the source tree's copy.
std::string default_pki_script();

}  // namespace fedcore::sim
