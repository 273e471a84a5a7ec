// Test support for the TLS suite: a PKI made by the real certs/fedcore-pki script in a
// temporary folder, and one bounded TLS connection attempt over loopback.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include "shared/tls/context.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::tls::testing {

struct CommandResult {
  int status = -1;     // exit status; -1 when the command did not exit normally
  std::string output;  // stdout and stderr together
};

// Runs `command` with /bin/sh, capturing stdout and stderr.
CommandResult run_command(const std::string& command);

// Quotes one shell word.
std::string shell_quote(const std::string& word);

// certs/fedcore-pki operating on one folder.
class Pki {
 public:
  explicit Pki(std::string dir) : dir_(std::move(dir)) {}

  // Runs the script with `--dir <dir>` and the given (already shell-safe) arguments.
  CommandResult run(const std::string& args) const;

  const std::string& dir() const noexcept { return dir_; }
  std::string ca() const { return dir_ + "/ca.pem"; }
  std::string ca_key() const { return dir_ + "/ca.key"; }
  std::string crl() const { return dir_ + "/crl.pem"; }
  std::string server_cert(const std::string& name = "fedcore-server") const {
    return dir_ + "/server/" + name + ".pem";
  }
  std::string server_key(const std::string& name = "fedcore-server") const {
    return dir_ + "/server/" + name + ".key";
  }
  std::string client_cert(const std::string& id) const { return dir_ + "/clients/" + id + ".pem"; }
  std::string client_key(const std::string& id) const { return dir_ + "/clients/" + id + ".key"; }

  ServerTlsConfig server_config() const { return {ca(), server_cert(), server_key(), crl()}; }
  ClientTlsConfig client_config(const std::string& id,
                                const std::string& server_name = "localhost") const {
    return {ca(), client_cert(id), client_key(id), server_name};
  }

 private:
  std::string dir_;
};

// A folder with a federation made by the script: `init`, `server fedcore-server`, and one
// `client` per id. `log` collects the script's output; `ok` is false if any step failed.
struct Federation {
  fedcore::testing::TempDir temp;
  Pki pki{temp.path("pki")};
  bool ok = true;
  std::string log;

  using Ids = std::vector<std::string>;
  Federation() : Federation(Ids{"hospital-a", "hospital-b"}) {}
  explicit Federation(const Ids& client_ids);
  // Runs the script; records failures in ok/log. Returns the exit status.
  int step(const std::string& args);
};

// What happened on both ends of one connection attempt.
struct Attempt {
  boost::system::error_code server_handshake;
  boost::system::error_code client_handshake;
  boost::system::error_code client_read;       // reading the server's greeting after the handshake
  long server_verify = 0;                      // SSL_get_verify_result on the server's connection
  long client_verify = 0;                      // ... and on the client's
  std::optional<result<std::string>> peer_cn;  // set when the server handshake succeeded
  std::string greeting;                        // what the client read
  bool client_session_resumable = false;
  std::size_t server_num_tickets = 0;
  bool timed_out = false;

  // Connected: both handshakes passed and the client read the greeting.
  bool connected() const;
  // A one-line account for assertion messages.
  std::string describe() const;
};

struct AttemptOptions {
  // Passed to prepare_client_stream; std::nullopt skips the call.
  std::optional<std::string> server_name = "localhost";
  std::chrono::milliseconds deadline{10'000};
};

inline constexpr const char* kGreeting = "fedcore-hello";

// Accepts one connection on 127.0.0.1 (port 0) with `server_ctx` and connects to it with
// `client_ctx`, both as coroutines on one io_context that runs for at most the deadline.
// On success the server reads the peer CN and sends kGreeting. Either side, after its part
// or after an error, half-closes and drains the socket before closing, so the peer reads
// the alert rather than a reset.
Attempt attempt(boost::asio::ssl::context& server_ctx, boost::asio::ssl::context& client_ctx,
                const AttemptOptions& options = {});

// ERR_GET_REASON of an error from the Asio SSL category; -1 for any other category.
int ssl_reason(const boost::system::error_code& ec);

// A client context that trusts `ca_file` and presents no certificate.
boost::asio::ssl::context anonymous_client_context(const std::string& ca_file);

}  // namespace fedcore::tls::testing
