// SecureParticipation: a site's part in one secure-aggregated round (SecAgg+), between
// the session's frames and shared/secagg's client steps.
//
// After local training the session starts one with the round's request, the global
// model it trained from and its result: the update that will be masked is the difference
// (trained - global), weighted min(samples, cap) / cap with the cap the server announces.
// Then every secagg_* frame from the server is answered with the next message; the
// masked update is the only form in which the update leaves the site, and no loss or
// accuracy is sent (per-client metrics would leak what secure aggregation hides). With
// client-level DP the update is clipped (and, distributed, noised) here, before masking.
//
// Thread safety: none; the session's coroutine.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "client/local_trainer.hpp"
#include "shared/protocol/frame.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/secagg/client.hpp"
#include "shared/secagg/key_binding.hpp"
#include "shared/secagg/wire.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// How a site proves and checks identities in secure aggregation (both or neither).
struct SecureIdentity {
  std::shared_ptr<const secagg::Signer> signer;      // our TLS key and certificate
  std::shared_ptr<const secagg::TrustAnchor> trust;  // the federation CA
};

struct OutgoingFrame {
  protocol::MessageType type = protocol::MessageType::heartbeat;
  std::string metadata;
  std::shared_ptr<const std::vector<float>> payload;  // the masked words, bit for bit
  std::uint64_t bytes() const;
};

class SecureParticipation {
 public:
  // Errors: invalid_argument when the trained parameters do not match the global model's
  // size; internal when keys cannot be made.
  static result<SecureParticipation> begin(const protocol::TrainRequest& request,
                                           const std::string& identity,
                                           std::span<const float> global, LocalResult local,
                                           const SecureIdentity& keys);

  // The first message: our signed keys.
  OutgoingFrame advertise();
  // The answer to secagg_neighbours, secagg_relay, secagg_survivors or secagg_unmask. Errors: the
  // step's (a neighbour's key binding does not verify, too few survivors, a tampered share, a
  // message for another round) -- the session then tells the server it leaves the round.
  result<OutgoingFrame> on_message(const protocol::Frame& frame);

  std::int64_t round() const noexcept { return envelope_.round; }
  bool finished() const noexcept { return finished_; }
  bool sent_masked_update() const noexcept { return masked_sent_; }
  const protocol::TrainRequest& request() const noexcept { return request_; }
  const protocol::UpdateReport& report() const noexcept { return report_; }

 private:
  SecureParticipation(protocol::TrainRequest request, secagg::SecAggClient client,
                      std::vector<float> delta, protocol::UpdateReport report);

  protocol::TrainRequest request_;
  secagg::Envelope envelope_;
  secagg::SecAggClient client_;
  std::vector<float> delta_;
  protocol::UpdateReport report_;
  // Clips (and with distributed DP noises) the update for client-level DP; true when
  // the run has client-level DP (the update then weighs 1).
  result<bool> apply_client_dp();

  // Adaptive clipping (count_stddev > 0): this site's centred unclipped bit, with its share
  // of the count noise under distributed DP, divided by the slot's public scale.
  result<double> clip_report(double update_norm);

  std::uint64_t weight_cap_ = 1;  // from the plan, with the neighbours' keys
  std::uint32_t threshold_ = 1;   // max(t, min_survivors): distributed DP sizes each share for it
  std::optional<double> clip_slot_;  // adaptive clipping: the last metric slot's value
  bool masked_sent_ = false;
  bool finished_ = false;
};

}  // namespace fedcore::client
