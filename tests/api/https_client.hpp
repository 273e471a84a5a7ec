// A small HTTPS client for the admin API tests: TLS 1.3 over loopback, verifying the
// server certificate against the test PKI's CA for the name "localhost". Every call
// runs on a private io_context with a deadline, so a test never hangs on the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <boost/system/error_code.hpp>
#include <nlohmann/json.hpp>

namespace fedcore::api::testing {

struct Reply {
  int status = 0;                              // 0 when no response was read
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  boost::system::error_code error;  // why no (complete) response was read
  bool timed_out = false;

  std::string header(const std::string& lower_case_name) const;
  // The body as JSON (discarded value when it is not JSON).
  nlohmann::json json() const;
  // "status 400, body ..." for assertion messages.
  std::string describe() const;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

class HttpsClient {
 public:
  HttpsClient(std::uint16_t port, std::string ca_file, std::string token = "")
      : port_(port), ca_file_(std::move(ca_file)), token_(std::move(token)) {}

  // One request on a fresh connection. The client's token is sent unless `headers`
  // carries an Authorization header (an empty value sends none).
  Reply request(const std::string& method, const std::string& target, const std::string& body = "",
                const Headers& headers = {},
                std::chrono::milliseconds deadline = std::chrono::seconds(20)) const;
  Reply get(const std::string& target, const Headers& headers = {}) const {
    return request("GET", target, "", headers);
  }
  Reply post_json(const std::string& target, const std::string& body,
                  const Headers& headers = {}) const;

  // Sends `bytes` verbatim after the TLS handshake (a hand-made request) and reads one
  // response, or until the server closes or `deadline` passes.
  Reply raw(const std::string& bytes,
            std::chrono::milliseconds deadline = std::chrono::seconds(20)) const;

  // Streams GET /api/v1/events, passing the body text received so far to `until` after
  // every chunk; returns when `until` returns true, the stream ends, or the deadline
  // passes. The reply holds the status, headers and everything read. `on_open` runs once
  // the response header has arrived (to trigger what should produce events).
  Reply stream_events(const std::function<bool(const std::string&)>& until,
                      std::chrono::milliseconds deadline,
                      const std::function<void()>& on_open = {}) const;

  // Opens a TLS connection, sends `bytes`, and reports how long until the server closed
  // it (or the deadline). For slow-client tests.
  struct Hold {
    bool closed_by_server = false;
    std::chrono::milliseconds after{0};
    std::string received;
  };
  Hold send_and_wait_for_close(const std::string& bytes, std::chrono::milliseconds deadline) const;

  std::uint16_t port() const noexcept { return port_; }
  const std::string& token() const noexcept { return token_; }

 private:
  std::uint16_t port_;
  std::string ca_file_;
  std::string token_;
};

}  // namespace fedcore::api::testing
