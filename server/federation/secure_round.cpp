#include "server/federation/secure_round.hpp"

#include <vector>

#include "shared/secagg/wire.hpp"

namespace fedcore::federation {
namespace {

using protocol::MessageType;

std::vector<std::string> ids(const std::map<std::string, std::string>& nonces) {
  std::vector<std::string> out;
  for (const auto& [id, nonce] : nonces) {
    out.push_back(id);
  }
  return out;
}

}  // namespace

SecureRound::SecureRound(std::int64_t run, std::int64_t round, secagg::RoundPlan plan,
                         std::map<std::string, std::string> nonces, std::size_t dimension)
    : run_(run),
      round_(round),
      nonces_(std::move(nonces)),
      server_(run, round, plan, ids(nonces_), dimension) {}

result<void> SecureRound::on_message(const std::string& client_id, const protocol::Frame& frame) {
  // The envelope first: a message from another round or with another client's nonce
  // must not reach the protocol at all.
  auto check = [&](const secagg::Envelope& e) -> result<void> {
    const auto nonce = nonces_.find(client_id);
    if (e.run != run_ || e.round != round_ || nonce == nonces_.end() || nonce->second != e.nonce) {
      return fail(errc::invalid_argument,
                  "secure aggregation: a message for run " + std::to_string(e.run) + " round " +
                      std::to_string(e.round) + " with a nonce not issued to '" + client_id +
                      "' for this round");
    }
    return {};
  };
  const std::uint64_t bytes =
      protocol::kFrameHeaderSize + frame.metadata.size() + frame.payload.size();
  result<void> outcome;
  switch (frame.type) {
    case MessageType::secagg_keys: {
      auto m = secagg::parse_advertised_keys(frame.metadata);
      if (!m) {
        return m.error();
      }
      if (auto ok = check(m->envelope); !ok) {
        return ok;
      }
      outcome = server_.on_advertise(client_id, std::move(m->body));
      break;
    }
    case MessageType::secagg_shares: {
      auto m = secagg::parse_shares_upload(frame.metadata);
      if (!m) {
        return m.error();
      }
      if (auto ok = check(m->envelope); !ok) {
        return ok;
      }
      outcome = server_.on_shares(client_id, m->body);
      break;
    }
    case MessageType::secagg_masked: {
      auto e = secagg::parse_masked_input(frame.metadata);
      if (!e) {
        return e.error();
      }
      if (auto ok = check(*e); !ok) {
        return ok;
      }
      auto words = protocol::payload_words(frame.payload);
      if (!words) {
        return words.error();
      }
      outcome = server_.on_masked(client_id, *words);
      break;
    }
    case MessageType::secagg_signed: {
      auto m = secagg::parse_survivor_signature(frame.metadata);
      if (!m) {
        return m.error();
      }
      if (auto ok = check(m->envelope); !ok) {
        return ok;
      }
      outcome = server_.on_signature(client_id, m->body);
      break;
    }
    case MessageType::secagg_revealed: {
      auto m = secagg::parse_unmask_response(frame.metadata);
      if (!m) {
        return m.error();
      }
      if (auto ok = check(m->envelope); !ok) {
        return ok;
      }
      outcome = server_.on_unmask(client_id, m->body);
      break;
    }
    default:
      return fail(errc::invalid_argument, "secure aggregation: a " +
                                              std::string(protocol::message_type_name(frame.type)) +
                                              " message is not for the server");
  }
  if (outcome) {
    bytes_up_[client_id] += bytes;
  }
  return outcome;
}

void SecureRound::on_dropped(const std::string& client_id) {
  dropped_.insert(client_id);
}

bool SecureRound::stage_complete() const {
  const auto& expected = server_.expected_now();
  const std::set<std::string>* done = nullptr;
  switch (server_.stage()) {
    case secagg::ServerStage::advertising:
      done = &server_.advertised();
      break;
    case secagg::ServerStage::sharing:
      done = &server_.shared();
      break;
    case secagg::ServerStage::masking:
      done = &server_.masked();
      break;
    case secagg::ServerStage::consistency:
      done = &server_.signed_survivors();
      break;
    case secagg::ServerStage::unmasking:
      done = &server_.unmasked();
      break;
    case secagg::ServerStage::finished:
    case secagg::ServerStage::failed:
      return true;
  }
  for (const auto& id : expected) {
    if (done->count(id) == 0 && dropped_.count(id) == 0) {
      return false;
    }
  }
  return true;
}

result<void> SecureRound::close_stage(SessionDirectory& sessions, Rng& graph_rng) {
  auto send = [&](const std::string& to, MessageType type, std::string metadata) {
    bytes_down_[to] += protocol::kFrameHeaderSize + metadata.size();
    sessions.send(to, type, std::move(metadata));
  };
  auto envelope = [&](const std::string& to) {
    return secagg::Envelope{run_, round_, nonces_.at(to)};
  };
  switch (server_.stage()) {
    case secagg::ServerStage::advertising: {
      auto keys = server_.close_advertising(graph_rng);
      if (!keys) {
        return keys.error();
      }
      for (const auto& [to, message] : *keys) {
        send(to, MessageType::secagg_neighbours, secagg::to_metadata(envelope(to), message));
      }
      return {};
    }
    case secagg::ServerStage::sharing: {
      auto relayed = server_.close_sharing();
      if (!relayed) {
        return relayed.error();
      }
      for (const auto& [to, message] : *relayed) {
        send(to, MessageType::secagg_relay, secagg::to_metadata(envelope(to), message));
      }
      return {};
    }
    case secagg::ServerStage::masking: {
      auto list = server_.close_masking();
      if (!list) {
        return list.error();
      }
      for (const auto& to : list->survivors) {
        send(to, MessageType::secagg_survivors, secagg::to_metadata(envelope(to), *list));
      }
      return {};
    }
    case secagg::ServerStage::consistency: {
      auto requests = server_.close_consistency();
      if (!requests) {
        return requests.error();
      }
      for (const auto& [to, request] : *requests) {
        send(to, MessageType::secagg_unmask, secagg::to_metadata(envelope(to), request));
      }
      return {};
    }
    case secagg::ServerStage::unmasking:
    case secagg::ServerStage::finished:
    case secagg::ServerStage::failed:
      break;
  }
  return fail(errc::failed_precondition, "secure aggregation: no stage to close");
}

result<secagg::SecAggResult> SecureRound::finish() {
  return server_.finish();
}

std::uint64_t SecureRound::bytes_down(const std::string& client_id) const {
  const auto it = bytes_down_.find(client_id);
  return it == bytes_down_.end() ? 0 : it->second;
}

std::string SecureRound::progress_of(const std::string& client_id) const {
  if (server_.unmasked().count(client_id)) {
    return "helped unmask";
  }
  if (server_.signed_survivors().count(client_id)) {
    return "signed the survivor list, then left before unmasking";
  }
  if (server_.masked().count(client_id)) {
    return "sent its masked update";
  }
  if (server_.shared().count(client_id)) {
    return "shared keys, then left before sending its masked update";
  }
  if (server_.advertised().count(client_id)) {
    return "advertised keys, then left before sharing them";
  }
  return "left before advertising keys";
}

}  // namespace fedcore::federation
