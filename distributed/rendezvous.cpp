#include "distributed/rendezvous.hpp"

#include <optional>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "shared/net/frame_channel.hpp"
#include "shared/net/listener.hpp"

namespace fedcore::distributed {

namespace asio = boost::asio;
using asio::ip::tcp;
using protocol::MessageType;
using Channel = net::FrameChannel<net::TcpStream>;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

result<std::pair<std::string, int>> split_host_port(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return fail(errc::invalid_argument, "'" + address + "' is not HOST:PORT");
  }
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(address.substr(colon + 1), &used);
    if (used != address.size() - colon - 1)
      port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535)
    return fail(errc::invalid_argument, "'" + address + "': bad port");
  return std::pair{address.substr(0, colon), port};
}

namespace {

std::string json_text(const nlohmann::json& j) {
  return j.dump();
}

net::ChannelOptions options_for(std::chrono::milliseconds timeout) {
  net::ChannelOptions o;
  o.limits.max_payload_bytes = 0;
  o.idle_timeout = timeout;
  o.transfer_timeout = timeout;
  return o;
}

}  // namespace

struct RendezvousServer::State {
  asio::io_context io;
  std::string job;
  int world = 0;
  std::chrono::milliseconds join_timeout{0};
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::optional<Channel>> members;
  std::vector<std::string> addresses;
  int joined = 0;
};

namespace {

asio::awaitable<void> answer_all(std::shared_ptr<RendezvousServer::State> s) {
  const std::string table = json_text(nlohmann::json{{"addresses", s->addresses}});
  for (auto& member : s->members) {
    if (member)
      (void)co_await member->write_frame(MessageType::roster, table);
  }
  for (auto& member : s->members) {
    if (member)
      member->close();
  }
  if (s->acceptor)
    s->acceptor->close();
}

asio::awaitable<void> admit(std::shared_ptr<RendezvousServer::State> s, tcp::socket socket) {
  net::set_no_delay(socket);
  Channel channel(std::move(socket), options_for(s->join_timeout));
  auto hello = co_await channel.read_frame();
  if (!hello || hello->type != MessageType::join)
    co_return;
  auto j = nlohmann::json::parse(hello->metadata, nullptr, false);
  std::string refusal;
  int rank = -1;
  if (!j.is_object() || !j.contains("job") || !j["job"].is_string() || !j.contains("rank") ||
      !j["rank"].is_number_integer() || !j.contains("world") || !j["world"].is_number_integer() ||
      !j.contains("address") || !j["address"].is_string()) {
    refusal = "malformed hello";
  } else if (j["job"].get<std::string>() != s->job) {
    refusal = "this rendezvous is for job '" + s->job + "'";
  } else if (j["world"].get<int>() != s->world) {
    refusal = "this rendezvous is for a world of " + std::to_string(s->world);
  } else {
    rank = j["rank"].get<int>();
    if (rank < 0 || rank >= s->world || s->members[rank]) {
      refusal = "rank " + std::to_string(rank) + " is out of range or already joined";
    }
  }
  if (!refusal.empty()) {
    const std::string text = json_text(nlohmann::json{{"message", refusal}});
    (void)co_await channel.write_frame(MessageType::error, text);
    co_return;
  }
  s->addresses[rank] = j["address"].get<std::string>();
  s->members[rank].emplace(std::move(channel));
  if (++s->joined == s->world)
    co_await answer_all(s);
}

asio::awaitable<void> accept_all(std::shared_ptr<RendezvousServer::State> s) {
  while (s->joined < s->world) {
    auto [ec, socket] = co_await s->acceptor->async_accept(kNoThrow);
    if (ec)
      co_return;
    asio::co_spawn(s->io, admit(s, std::move(socket)), asio::detached);
  }
}

}  // namespace

result<std::unique_ptr<RendezvousServer>> RendezvousServer::start(
    const std::string& host, int port, std::string job, int world,
    std::chrono::milliseconds join_timeout) {
  auto s = std::make_shared<State>();
  s->job = std::move(job);
  s->world = world;
  s->join_timeout = join_timeout;
  s->members.resize(world);
  s->addresses.resize(world);
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(host, ec);
  if (ec)
    return fail(errc::invalid_argument, "rendezvous host '" + host + "': " + ec.message());
  s->acceptor.emplace(s->io);
  s->acceptor->open(ip.is_v4() ? tcp::v4() : tcp::v6(), ec);
  if (!ec)
    s->acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec)
    s->acceptor->bind(tcp::endpoint(ip, static_cast<unsigned short>(port)), ec);
  if (!ec)
    s->acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return fail(errc::unavailable, "rendezvous cannot listen on " + host + ":" +
                                       std::to_string(port) + ": " + ec.message());
  }
  std::unique_ptr<RendezvousServer> server(new RendezvousServer);
  server->port_ = s->acceptor->local_endpoint().port();
  server->state_ = s;
  asio::co_spawn(s->io, accept_all(s), asio::detached);
  server->thread_ = std::thread([s] {
    s->io.run_for(s->join_timeout + std::chrono::seconds(1));
    // Whatever is left (ranks that never joined) is dropped; waiting ranks see the close.
    if (s->acceptor)
      s->acceptor->close();
    for (auto& m : s->members) {
      if (m)
        m->close();
    }
    s->io.restart();
    s->io.poll();
  });
  return server;
}

RendezvousServer::~RendezvousServer() {
  if (thread_.joinable())
    thread_.join();
}

result<std::vector<std::string>> TcpRendezvous::exchange(int rank, int size,
                                                         const std::string& address,
                                                         collective::Clock::time_point deadline) {
  auto hp = split_host_port(server_);
  if (!hp)
    return hp.error();
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(hp->first, ec);
  if (ec)
    return fail(errc::invalid_argument, "rendezvous host '" + hp->first + "': " + ec.message());
  const tcp::endpoint endpoint(ip, static_cast<unsigned short>(hp->second));

  asio::io_context io;
  std::optional<result<std::vector<std::string>>> outcome;
  const std::string hello = json_text(
      nlohmann::json{{"job", job_}, {"rank", rank}, {"world", size}, {"address", address}});
  auto session = [&]() -> asio::awaitable<void> {
    // Rank 0 may not be listening yet: retry refused connections until the deadline.
    tcp::socket socket(io);
    for (;;) {
      auto [err] = co_await socket.async_connect(endpoint, kNoThrow);
      if (!err)
        break;
      socket.close();
      if (collective::Clock::now() >= deadline) {
        outcome = fail(errc::deadline_exceeded,
                       "rendezvous " + server_ + " unreachable: " + err.message());
        co_return;
      }
      asio::steady_timer pause(io, std::chrono::milliseconds(50));
      co_await pause.async_wait(kNoThrow);
    }
    net::set_no_delay(socket);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - collective::Clock::now());
    Channel channel(std::move(socket), options_for(std::max(left, std::chrono::milliseconds(1))));
    if (auto w = co_await channel.write_frame(MessageType::join, hello); !w) {
      outcome = w.error();
      co_return;
    }
    auto answer = co_await channel.read_frame();
    if (!answer) {
      outcome = answer.error().code == errc::deadline_exceeded
                    ? fail(errc::deadline_exceeded, "not every rank joined the rendezvous in time")
                    : fail(errc::unavailable, "rendezvous closed: " + answer.error().message);
      co_return;
    }
    auto j = nlohmann::json::parse(answer->metadata, nullptr, false);
    if (answer->type == MessageType::error) {
      outcome = fail(errc::permission_denied,
                     "rendezvous refused rank " + std::to_string(rank) + ": " + answer->metadata);
      co_return;
    }
    if (answer->type != MessageType::roster || !j.is_object() || !j.contains("addresses") ||
        !j["addresses"].is_array() || j["addresses"].size() != static_cast<std::size_t>(size)) {
      outcome = fail(errc::data_loss, "malformed rendezvous answer");
      co_return;
    }
    std::vector<std::string> table;
    for (const auto& a : j["addresses"]) {
      if (!a.is_string()) {
        outcome = fail(errc::data_loss, "malformed rendezvous answer");
        co_return;
      }
      table.push_back(a.get<std::string>());
    }
    outcome = std::move(table);
  };
  asio::co_spawn(io, session(), asio::detached);
  io.run_until(deadline + std::chrono::milliseconds(200));
  if (!outcome)
    return fail(errc::deadline_exceeded, "not every rank joined the rendezvous in time");
  return std::move(*outcome);
}

}  // namespace fedcore::distributed
