// RogueClient: a client with a valid certificate that misbehaves in one chosen way, built
// from the real transport (TLS stream + FrameChannel) so the server meets it exactly as
// it would meet a broken or hostile hospital. It claims the breast-cancer schema.
#pragma once

#include <atomic>
#include <limits>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "shared/net/frame_channel.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/tls/context.hpp"

namespace fedcore::testing {

enum class Misbehaviour {
  nan_update,        // answers with a NaN in the parameters
  wrong_layout,      // answers claiming another layout fingerprint
  silent,            // receives the model, never answers
  drop_on_train,     // closes the connection when asked to train
  replay,            // answers round r honestly, then replays that answer in round r + 1
  cannot_train,      // answers every TRAIN with an ERROR message (local training failed)
  inflated_samples,  // declares 100 samples at HELLO, claims 4 billion in its UPDATE
  stall_upload,      // announces its update (header and metadata), then sends nothing more
  nonfinite_loss,    // its UPDATE reports a NaN loss (its metadata does not parse)
  older_protocol,    // honest, but of protocol version 1: its HELLO has no "protocol"
  bad_encoding,      // claims a top-k payload announcing 5 entries and sends 8 bytes
};

class RogueClient {
 public:
  RogueClient(Misbehaviour how, tls::ClientTlsConfig tls, std::uint16_t port)
      : how_(how), port_(port) {
    auto context = tls::make_client_context(tls);
    if (!context) {
      ADD_FAILURE() << context.error().to_string();
      return;
    }
    context_.emplace(std::move(*context));
    server_name_ = tls.server_name;
    boost::asio::co_spawn(io_, run(), boost::asio::detached);
    thread_ = std::thread([this] { io_.run_for(std::chrono::seconds(120)); });
  }
  ~RogueClient() {
    boost::asio::post(io_, [this] {
      stopping_ = true;
      if (channel_) {
        channel_->close();
      }
    });
    thread_.join();
  }
  int trains_received() const { return trains_.load(); }
  // The version WELCOME named (0 before WELCOME).
  std::uint32_t welcomed_protocol() const { return welcomed_protocol_.load(); }

 private:
  using Channel = net::FrameChannel<net::TlsStream>;

  boost::asio::awaitable<void> run() {
    namespace asio = boost::asio;
    const auto no_throw = asio::as_tuple(asio::use_awaitable);
    net::TlsStream stream(io_, *context_);
    if (!tls::prepare_client_stream(stream, server_name_)) {
      co_return;
    }
    asio::ip::tcp::endpoint server(asio::ip::make_address("127.0.0.1"), port_);
    auto [connect_error] = co_await stream.next_layer().async_connect(server, no_throw);
    if (connect_error) {
      co_return;
    }
    auto [handshake_error] =
        co_await stream.async_handshake(asio::ssl::stream_base::client, no_throw);
    if (handshake_error) {
      co_return;
    }
    channel_ = std::make_shared<Channel>(std::move(stream), net::ChannelOptions{});
    protocol::Hello hello{100, 0, {30}, 2, {"train"}, "rogue"};
    auto hello_json = nlohmann::json::parse(protocol::to_metadata(hello));
    if (how_ == Misbehaviour::older_protocol) {
      hello_json.erase("protocol");  // what a client from before versions sent
    }
    const std::string hello_text = hello_json.dump();
    co_await channel_->write_frame(protocol::MessageType::hello, hello_text);
    std::optional<std::pair<std::string, std::vector<std::byte>>> saved;
    while (!stopping_) {
      auto frame = co_await channel_->read_frame();
      if (!frame) {
        co_return;
      }
      if (frame->type == protocol::MessageType::welcome) {
        if (auto welcome = protocol::parse_welcome(frame->metadata)) {
          welcomed_protocol_ = welcome->protocol_version;
        }
      }
      if (frame->type != protocol::MessageType::train) {
        continue;
      }
      ++trains_;
      auto request = protocol::parse_train_request(frame->metadata);
      if (!request) {
        continue;
      }
      // The "training" echoes the global model: a valid update unless we spoil it.
      protocol::UpdateReport report;
      report.run_id = request->run_id;
      report.round = request->round;
      report.nonce = request->nonce;
      report.layout_fingerprint = request->layout_fingerprint;
      report.samples = 100;
      report.loss = 0.5;
      report.accuracy = 0.5;
      std::vector<std::byte> payload = frame->payload;
      switch (how_) {
        case Misbehaviour::silent:
          continue;
        case Misbehaviour::drop_on_train:
          channel_->close();
          co_return;
        case Misbehaviour::cannot_train: {
          // Built before the co_await: GCC 12 mishandles temporaries inside co_await.
          const std::string failure = protocol::to_metadata(protocol::ErrorMessage{
              "resource_exhausted",
              "out of memory while training round " + std::to_string(request->round)});
          co_await channel_->write_frame(protocol::MessageType::error, failure);
          continue;
        }
        case Misbehaviour::nan_update: {
          const float nan = std::numeric_limits<float>::quiet_NaN();
          std::memcpy(payload.data(), &nan, sizeof nan);
          break;
        }
        case Misbehaviour::wrong_layout:
          report.layout_fingerprint = "0123456789abcdef";
          break;
        case Misbehaviour::inflated_samples:
          report.samples = 4'000'000'000;
          break;
        case Misbehaviour::stall_upload:
          break;  // below: the upload starts and stalls
        case Misbehaviour::older_protocol:
          break;  // an honest update
        case Misbehaviour::nonfinite_loss:
          report.loss = std::numeric_limits<double>::quiet_NaN();
          break;
        case Misbehaviour::bad_encoding: {
          report.encoding = protocol::UpdateEncoding::topk;
          const std::uint32_t entries[] = {5, 0};
          payload.assign(reinterpret_cast<const std::byte*>(entries),
                         reinterpret_cast<const std::byte*>(entries) + sizeof entries);
          break;
        }
        case Misbehaviour::replay:
          if (saved) {
            co_await channel_->write_frame(protocol::MessageType::update, saved->first,
                                           saved->second);
            continue;  // and never answer the current round honestly
          }
          break;
      }
      auto metadata = protocol::to_metadata(report);
      if (how_ == Misbehaviour::stall_upload) {
        // Header and metadata only: the server sees an upload start and then nothing.
        auto head = protocol::encode_header({protocol::MessageType::update,
                                             static_cast<std::uint32_t>(metadata.size()), 0,
                                             payload.size()});
        std::vector<std::byte> start(head.begin(), head.end());
        const auto* text = reinterpret_cast<const std::byte*>(metadata.data());
        start.insert(start.end(), text, text + metadata.size());
        co_await boost::asio::async_write(channel_->stream(), boost::asio::buffer(start),
                                          boost::asio::as_tuple(boost::asio::use_awaitable));
        continue;
      }
      if (how_ == Misbehaviour::replay) {
        saved.emplace(metadata, payload);
      }
      co_await channel_->write_frame(protocol::MessageType::update, metadata, payload);
    }
  }

  Misbehaviour how_;
  std::uint16_t port_;
  std::string server_name_;
  boost::asio::io_context io_;
  std::optional<boost::asio::ssl::context> context_;
  std::shared_ptr<Channel> channel_;
  std::thread thread_;
  std::atomic<int> trains_{0};
  std::atomic<std::uint32_t> welcomed_protocol_{0};
  bool stopping_ = false;
};

}  // namespace fedcore::testing
