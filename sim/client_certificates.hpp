// Client certificates for simulated sites, issued in this process with OpenSSL.
//
// certs/fedcore-pki issues one certificate per run of the script (several openssl
// processes each): about 33 ms a site, which made 10,000 sites spend 330 s of a
// simulation's setup making certificates. Here each is an EC P-256 key and an X.509 v3
// certificate signed by the PKI's CA in-process, with the script's client profile
// (subject CN=<site id>; basicConstraints critical CA:false; keyUsage critical
// digitalSignature; extendedKeyUsage clientAuth; subject and authority key identifiers;
// SHA-256), written where the script writes them (<dir>/clients/<id>.pem, and <id>.key
// with mode 0600). They are not entered in the CA's index, so `fedcore-pki list` does not
// show them and they cannot be revoked: right for a throwaway simulation PKI only.
#pragma once

#include <string>
#include <vector>

#include "shared/util/error.hpp"

namespace fedcore::sim {

// REQUIRES: `dir` holds a CA made by `fedcore-pki init` without --encrypt-ca-key
// (ca.pem, ca.key). Errors: io_error (a file cannot be read or written), internal (an
// OpenSSL step failed; the message names it).
result<void> issue_client_certificates(const std::string& dir, const std::vector<std::string>& ids,
                                       int days);

}  // namespace fedcore::sim
