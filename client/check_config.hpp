// `fedcore-client --check-config client.json`: is this site ready to join the federation?
//
// Reads the config file as `fedcore-client --config` does (strictly) and checks what it
// names, one report line each (shared/tls/check_config.hpp):
//   config       the file is readable and parses strictly
//   tls.*        CA, certificate and key (check_tls_files, role client; a client has no CRL)
//   tls.cert id  the certificate's CN is a valid client id (the server refuses others)
//   tls context  the client's TLS context builds as at start (make_client_context)
//   data         the data source loads and splits (load_local_data: the same code as the
//                daemon, no training); warn when the local test part is empty
//   audit_log    none, or a log whose chain verifies and whose folder is writable
//   policy       the site policy (validated by the parser) in one line; warn when max_epsilon
//                is above 10, where DP's guarantee is weak
//
// Nothing connects to the server and nothing is written. Loading the data can take a few
// seconds for a large data set; it is the only way to know the daemon could.
#pragma once

#include <string>

#include "shared/tls/check_config.hpp"

namespace fedcore::client {

tls::CheckReport check_client_config(const std::string& path,
                                     const tls::CheckOptions& options = {});

}  // namespace fedcore::client
