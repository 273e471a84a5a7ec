// ClientDaemon: the hospital side of the federation.
//
// Loads the site's data once, then keeps a mutual-TLS session to the server: connect
// out, HELLO with the sample count and data schema, WELCOME, then for every TRAIN frame
// build the announced model, load the received global parameters (checking the layout
// fingerprint), optionally evaluate them on the local test split, train locally and send
// back an UPDATE with the new parameters, the sample count and metrics. Only parameters
// and metrics leave the site, never data.
//
// Heartbeats go out every `heartbeat_seconds` (as the server's WELCOME says) from their
// own coroutine, also while training runs on the worker thread. A lost connection is
// retried with exponential backoff (initial_backoff doubling up to max_backoff, times a
// random factor in [0.5, 1.5) so a restarted server is not hit by every hospital at the
// same instant); the daemon survives server restarts and picks up the next round.
//
// Thread safety: run() and stop() on the io_context's thread; training runs on an
// internal worker thread and never touches the connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "data/dataset.hpp"
#include "net/frame_channel.hpp"
#include "tls/context.hpp"
#include "util/error.hpp"

namespace fedcore::client {

struct DataSource {
  std::string format = "csv";  // "csv" | "fashion-mnist"
  std::string path;            // CSV file, or the Fashion-MNIST folder ("" = default)
  std::string label_column;    // CSV only ("" = last column)
  // For testing with a known data set: use only partition `index` of `clients` parts.
  std::string partition = "";  // "" = all data, else "iid", "dirichlet:0.5", "shards:2"
  std::size_t partition_clients = 1;
  std::size_t partition_index = 0;
  std::uint64_t partition_seed = 1;
  double test_fraction = 0.2;  // local test split (stratified), for federated evaluation
  std::uint64_t split_seed = 1;
};

// Simulation seam (fedcore-sim): what to do with an update once local training is done.
enum class UpdateAction {
  send,  // send it (the normal case)
  drop,  // close the connection instead, as a site that goes away mid-round would
};

// What the before_update seam is told about the round just trained.
struct TrainedRound {
  std::int64_t run_id = 0;
  std::int64_t round = 0;
  double train_seconds = 0;
};

struct ClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 7443;
  tls::ClientTlsConfig tls;  // tls.server_name: the name the server certificate must carry
  DataSource data;
  int threads = 1;  // compute threads for local training
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds initial_backoff{std::chrono::milliseconds(500)};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(30)};
  net::ChannelOptions channel;
  std::uint64_t seed = 0;  // for backoff jitter
  // Simulation only; empty in a real daemon. Awaited on the io_context's thread after a
  // round's local training succeeded and before its UPDATE is sent (heartbeats keep
  // flowing meanwhile): fedcore-sim delays slow clients, drops some, and releases updates
  // in a fixed order so that runs are reproducible. `drop` closes the session; the
  // daemon then reconnects as after any lost connection.
  std::function<boost::asio::awaitable<UpdateAction>(const TrainedRound&)> before_update;
  // Simulation only (fedcore-sim --transport inproc): when set, every session runs over
  // the connected local stream this returns instead of TCP + TLS to host:port (whose
  // other end the simulator hands to FederationServer::attach_local_session); `tls` is
  // then unused. Its errors are treated like a failed connection.
  std::function<result<net::LocalStream>()> connect_local;
};

class ClientDaemon {
 public:
  // Loads and splits the data and builds the TLS context. Errors: those of the loaders
  // (naming the file), the TLS context, or invalid_argument for a bad data source.
  static result<std::unique_ptr<ClientDaemon>> create(boost::asio::io_context& io,
                                                      ClientOptions options);
  // The same with data already loaded (fedcore-sim shares one load among many simulated
  // sites); options.data is then ignored. Errors: as above, minus the loaders'.
  static result<std::unique_ptr<ClientDaemon>> create(boost::asio::io_context& io,
                                                      ClientOptions options, data::TrainTest local);
  ~ClientDaemon();
  ClientDaemon(const ClientDaemon&) = delete;
  ClientDaemon& operator=(const ClientDaemon&) = delete;

  // Connects, serves rounds, reconnects; returns after stop().
  boost::asio::awaitable<void> run();
  // Sends GOODBYE if connected, closes, and makes run() return. Idempotent.
  void stop();

  std::size_t train_samples() const noexcept;
  std::size_t test_samples() const noexcept;
  std::uint64_t rounds_trained() const noexcept;
  std::uint64_t connections() const noexcept;

 private:
  struct Impl;
  explicit ClientDaemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Loads a DataSource into a training part and a local test part.
result<data::TrainTest> load_local_data(const DataSource& source);

}  // namespace fedcore::client
