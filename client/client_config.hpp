// The fedcore-client config file, parsed strictly into ClientOptions (docs/config.md).
//
//   {"server": "fl.example.org",             // host to connect to (default 127.0.0.1)
//    "port": 7443,                           // 1..65535
//    "server_name": "fl.example.org",        // name the server certificate carries (default:
//    server) "tls": {"ca": "ca.pem", "cert": "hospital-3.pem", "key": "hospital-3.key"},   //
//    required "data": {                               // required
//      "format": "csv",                      // csv | fashion-mnist | cifar10
//      "path": "/srv/data/cohort.csv",       // required for csv and cifar10
//      "label_column": "benign",             // csv only ("" = last column)
//      "test_fraction": 0.2, "split_seed": 1,            // csv only: the local test split
//      "partition": "dirichlet:0.5",         // testing with a public set: use one part of it
//      "partition_clients": 8, "partition_index": 3, "partition_seed": 1},  // with partition only
//    "threads": 2,                           // compute threads, 0 = all (0..1024)
//    "audit_log": "/var/lib/fedcore/audit.jsonl",         // client/audit_log.hpp
//    "site_state": "/var/lib/fedcore/site",  // kept across restarts (FedBN's BatchNorm)
//    "policy": {...}}                        // client/site_policy.hpp
//
// Unknown keys, wrong types and out-of-range values are errors naming the key path and,
// for an unknown key, the closest known one ("client config: unknown key 'data.lable_column';
// did you mean 'data.label_column'?"); so are keys that would be ignored (label_column on
// fashion-mnist, partition_index without partition). Nothing is read from the files named.
#pragma once

#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "client/daemon.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// Who reads the file: fedcore-client, which loads the data the file names, or a site whose
// own code holds the data (the Python SDK: fedcore.run_client), whose file must not name any.
enum class DataSection { required, forbidden };

// Options with every key of `j` applied to the defaults of ClientOptions. Errors:
// invalid_argument naming the document ("client config") and the key path.
result<ClientOptions> parse_client_config(const nlohmann::json& j,
                                          DataSection data = DataSection::required);
// The same from the file's text; also invalid_argument for invalid JSON, a duplicate key or
// nesting deeper than 64 levels.
result<ClientOptions> parse_client_config_text(std::string_view text,
                                               DataSection data = DataSection::required);

}  // namespace fedcore::client
