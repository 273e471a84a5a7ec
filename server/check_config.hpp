// `fedcore-server --check-config server.json`: is this config ready to start a server?
//
// Reads the config file as `fedcore-server --config` does (strictly; command-line overrides
// such as --database are not applied: the file is what is checked) and checks what it names,
// one report line each (shared/tls/check_config.hpp):
//   config            the file is readable and parses strictly
//   tls.*             CA, certificate, key and CRL (check_tls_files, role server, CRL
//                     required), then `tls context`: the server's TLS context builds as at
//                     start (make_server_context)
//   database          the SQLite file, if present, is a readable and writable file, and its
//                     folder is writable (SQLite writes its journal beside it)
//   checkpoint_dir    a writable folder, or one that can be created
//   listen            the federation and admin listeners do not claim the same port
//   api               the dashboard folder exists; warn when no admin token is configured
//
// Nothing is started, no port is opened, no file or folder is created or changed. Relative
// paths are taken from the current folder, as the server takes them: run the check where
// the server runs.
#pragma once

#include <string>

#include "shared/tls/check_config.hpp"

namespace fedcore::server {

tls::CheckReport check_server_config(const std::string& path,
                                     const tls::CheckOptions& options = {});

}  // namespace fedcore::server
