#include "server/federation/session_registry.hpp"

#include <algorithm>

namespace fedcore::federation {

std::shared_ptr<Session> SessionRegistry::add(std::shared_ptr<Session> session) {
  auto& slot = sessions_[session->client_id];
  auto replaced = std::move(slot);
  slot = std::move(session);
  return replaced;
}

bool SessionRegistry::remove(const Session& session) {
  const auto it = sessions_.find(session.client_id);
  if (it == sessions_.end() || it->second.get() != &session) {
    return false;
  }
  sessions_.erase(it);
  return true;
}

std::vector<Candidate> SessionRegistry::online() const {
  std::vector<Candidate> out;
  out.reserve(sessions_.size());
  for (const auto& [id, session] : sessions_) {
    const auto& capabilities = session->hello.capabilities;
    const bool reports_feature_stats =
        std::find(capabilities.begin(), capabilities.end(), protocol::kFeatureStatsCapability) !=
        capabilities.end();
    const bool evaluates = std::find(capabilities.begin(), capabilities.end(),
                                     protocol::kEvaluateCapability) != capabilities.end();
    out.push_back({id, session->hello.input_shape, session->hello.num_classes,
                   session->hello.samples, reports_feature_stats, evaluates,
                   protocol::negotiated_protocol(session->hello.protocol_version)});
  }
  return out;
}

void SessionRegistry::send_train(const std::string& client_id, std::string metadata,
                                 std::shared_ptr<const std::vector<float>> global,
                                 std::function<void()> written) {
  const auto it = sessions_.find(client_id);
  if (it != sessions_.end()) {
    it->second->link->send(protocol::MessageType::train, std::move(metadata), std::move(global),
                           std::move(written));
  }
}

void SessionRegistry::send(const std::string& client_id, protocol::MessageType type,
                           std::string metadata,
                           std::shared_ptr<const std::vector<float>> payload) {
  const auto it = sessions_.find(client_id);
  if (it != sessions_.end()) {
    it->second->link->send(type, std::move(metadata), std::move(payload));
  }
}

}  // namespace fedcore::federation
