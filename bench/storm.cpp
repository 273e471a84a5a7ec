// storm: a connection storm against a running fedcore-server (issue 19), by hand.
//
//   storm --port 7443 --ca ca.pem --mode handshake --connections 1000 --duration-s 10
//   storm --port 7443 --ca ca.pem --cert c.pem --key c.key --mode payload-trickle --frame-header
//   storm --port 8443 --ca ca.pem --mode request --http-get /api/v1/runs --attempts 5000
//   storm --port 8443 --ca ca.pem --mode payload-trickle --http-get /api/v1/health
//
// Connections come from 127.0.0.2..200 in turn (--first-source/--last-source). Modes and
// outcomes: tests/support/connection_storm.hpp. Prints one summary line per storm:
// counts, handshake latency p50/p99, and when the server closed held connections.
#include <iostream>

#include <CLI/CLI.hpp>

#include "tests/support/connection_storm.hpp"

int main(int argc, char** argv) {
  using fedcore::testing::StormOptions;
  CLI::App app{"storm: many concurrent TLS handshakes, or slow and idle sockets, against one port"};
  StormOptions o;
  std::string mode = "handshake";
  std::string http_path;
  bool frame_header = false;
  long duration_s = 0, hold_s = 30, trickle_ms = 500, timeout_ms = 10000;
  app.add_option("--port", o.port, "the server's port")->required();
  app.add_option("--address", o.server_address, "the server's address (default 127.0.0.1)");
  app.add_option("--ca", o.ca_file, "the CA that signed the server's certificate")->required();
  app.add_option("--server-name", o.server_name, "name to verify (default localhost)");
  app.add_option("--cert", o.cert_file, "client certificate (none: no certificate)");
  app.add_option("--key", o.key_file, "its private key");
  app.add_option("--mode", mode,
                 "handshake, request, tcp-idle, tls-trickle, tls-idle, payload-trickle")
      ->check(CLI::IsMember(
          {"handshake", "request", "tcp-idle", "tls-trickle", "tls-idle", "payload-trickle"}));
  app.add_option("--connections", o.connections, "connections in flight at once (default 1000)")
      ->check(CLI::Range(1, 20000));
  app.add_option("--attempts", o.attempts,
                 "attempts in all (0: one per connection, or --duration-s)");
  app.add_option("--duration-s", duration_s, "keep attempting for this long")
      ->check(CLI::Range(0, 3600));
  app.add_option("--http-get", http_path,
                 "request: GET this path; payload-trickle: the same request, never finished");
  app.add_flag("--frame-header", frame_header,
               "payload-trickle: a HELLO frame header whose metadata never comes");
  app.add_option("--trickle-ms", trickle_ms, "one byte every this many ms (default 500)")
      ->check(CLI::Range(1, 60000));
  app.add_option("--hold-s", hold_s, "give up holding a connection after (default 30)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--timeout-ms", timeout_ms, "connect + handshake deadline (default 10000)")
      ->check(CLI::Range(1, 600000));
  app.add_option("--first-source", o.first_source, "first source address 127.0.0.N (default 2)")
      ->check(CLI::Range(1, 254));
  app.add_option("--last-source", o.last_source, "last source address 127.0.0.N (default 200)")
      ->check(CLI::Range(1, 254));
  CLI11_PARSE(app, argc, argv);

  using Mode = StormOptions::Mode;
  o.mode = mode == "request"           ? Mode::request
           : mode == "tcp-idle"        ? Mode::tcp_idle
           : mode == "tls-trickle"     ? Mode::tls_trickle
           : mode == "tls-idle"        ? Mode::tls_idle
           : mode == "payload-trickle" ? Mode::payload_trickle
                                       : Mode::handshake;
  o.duration = std::chrono::seconds(duration_s);
  o.hold_limit = std::chrono::seconds(hold_s);
  o.trickle_interval = std::chrono::milliseconds(trickle_ms);
  o.attempt_timeout = std::chrono::milliseconds(timeout_ms);
  if (frame_header) {
    o.payload = fedcore::testing::hello_frame_header(200);
  } else if (!http_path.empty()) {
    o.payload = fedcore::testing::http_get(http_path, o.mode == Mode::request);
  }
  if ((o.mode == Mode::request || o.mode == Mode::payload_trickle) && o.payload.empty()) {
    std::cerr << "storm: --mode " << mode << " needs --http-get or --frame-header\n";
    return 2;
  }
  fedcore::testing::ConnectionStorm storm(o);
  const auto report = storm.run();
  std::cout << mode << " on port " << o.port << ": " << report.summary() << std::endl;
  return report.local_errors > 0 ? 1 : 0;
}
