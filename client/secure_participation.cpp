#include "client/secure_participation.hpp"

#include <algorithm>
#include <cstring>

#include "shared/privacy/adaptive_clip.hpp"
#include "shared/privacy/distributed_dp.hpp"
#include "shared/privacy/gaussian.hpp"
#include "shared/privacy/noise_source.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::client {

std::uint64_t OutgoingFrame::bytes() const {
  return protocol::kFrameHeaderSize + metadata.size() +
         (payload ? payload->size() * sizeof(float) : 0);
}

SecureParticipation::SecureParticipation(protocol::TrainRequest request,
                                         secagg::SecAggClient client, std::vector<float> delta,
                                         protocol::UpdateReport report)
    : request_(std::move(request)),
      envelope_{request_.run_id, request_.round, request_.nonce},
      client_(std::move(client)),
      delta_(std::move(delta)),
      report_(std::move(report)) {}

result<SecureParticipation> SecureParticipation::begin(const protocol::TrainRequest& request,
                                                       const std::string& identity,
                                                       std::span<const float> global,
                                                       LocalResult local,
                                                       const SecureIdentity& keys) {
  if (local.params.size() != global.size()) {
    return fail(errc::invalid_argument,
                "secure aggregation: trained " + std::to_string(local.params.size()) +
                    " parameters for a model of " + std::to_string(global.size()));
  }
  // The update is what training changed; it is masked as (trained - global).
  std::vector<float> delta(std::move(local.params));
  for (std::size_t i = 0; i < delta.size(); ++i) {
    delta[i] -= global[i];
  }
  auto client = secagg::SecAggClient::start(
      {request.run_id, request.round, identity, keys.signer, keys.trust});
  if (!client) {
    return client.error();
  }
  return SecureParticipation(request, std::move(*client), std::move(delta), local.report);
}

OutgoingFrame SecureParticipation::advertise() {
  return {protocol::MessageType::secagg_keys, secagg::to_metadata(envelope_, client_.advertise()),
          nullptr};
}

result<OutgoingFrame> SecureParticipation::on_message(const protocol::Frame& frame) {
  auto same_round = [&](const secagg::Envelope& e) -> result<void> {
    if (e.run != envelope_.run || e.round != envelope_.round || e.nonce != envelope_.nonce) {
      return fail(errc::invalid_argument, "secure aggregation: a message for run " +
                                              std::to_string(e.run) + " round " +
                                              std::to_string(e.round) + ", not our round " +
                                              std::to_string(envelope_.round));
    }
    return {};
  };
  switch (frame.type) {
    case protocol::MessageType::secagg_neighbours: {
      auto m = secagg::parse_neighbour_keys(frame.metadata);
      if (!m) {
        return m.error();
      }
      if (auto ok = same_round(m->envelope); !ok) {
        return ok.error();
      }
      auto upload = client_.share_keys(m->body);
      if (!upload) {
        return upload.error();
      }
      weight_cap_ = m->body.plan.weight_cap;
      // Noise shares are sized for the fewest survivors the round can be unmasked with.
      threshold_ = secagg::required_survivors(m->body.plan);
      return OutgoingFrame{protocol::MessageType::secagg_shares,
                           secagg::to_metadata(envelope_, *upload), nullptr};
    }
    case protocol::MessageType::secagg_relay: {
      auto m = secagg::parse_relayed_shares(frame.metadata);
      if (!m) {
        return m.error();
      }
      if (auto ok = same_round(m->envelope); !ok) {
        return ok.error();
      }
      // min(samples, cap) / cap: a site cannot weigh more than the best-provided one (or
      // the admin's cap), whatever it claims.
      double weight =
          double(std::min<std::uint64_t>(report_.samples, weight_cap_)) / double(weight_cap_);
      if (auto dp = apply_client_dp(); !dp) {
        return dp.error();
      } else if (*dp) {
        weight = 1.0;  // DP-FedAvg weighs clipped updates equally
      }
      // Stochastic rounding needs no secrecy (the result is masked), only independence
      // from the data: seeded from the round's nonce.
      Rng rounding(std::hash<std::string>{}(envelope_.nonce));
      // Federated evaluation, summed too: e = min(test samples, cap) / cap weighs this
      // site's loss and accuracy on the received model; a site without one sends zeros.
      // With adaptive clipping the last slot is the unclipped bit (clip_report).
      const std::uint32_t slots = client_.plan().metric_slots;
      const std::uint32_t evaluation_slots = slots - (clip_slot_ && slots > 0 ? 1 : 0);
      std::vector<double> metrics;
      if (evaluation_slots == 3) {
        metrics = {0.0, 0.0, 0.0};
        if (const auto& eval = report_.evaluation; eval && eval->samples > 0) {
          const double e =
              double(std::min<std::uint64_t>(eval->samples, weight_cap_)) / double(weight_cap_);
          metrics = {e * eval->loss, e * eval->accuracy, e};
        }
      } else {
        metrics.assign(evaluation_slots, 0.0);
      }
      if (clip_slot_) {
        if (slots == 0) {
          return fail(errc::invalid_argument,
                      "secure aggregation: the run asks for the unclipped bit of adaptive "
                      "clipping but the round's plan has no slot for it");
        }
        metrics.push_back(*clip_slot_);
      }
      // The frame payload type is a float vector; the words are written into it bit for bit.
      auto payload = std::make_shared<std::vector<float>>(client_.masked_words(delta_.size()));
      if (auto ok = client_.masked_input(m->body, delta_, std::max(weight, 1e-9), rounding, metrics,
                                         std::as_writable_bytes(std::span(*payload)));
          !ok) {
        return ok.error();
      }
      std::fill(delta_.begin(), delta_.end(), 0.0f);  // not needed past this point
      masked_sent_ = true;
      return OutgoingFrame{protocol::MessageType::secagg_masked, secagg::to_metadata(envelope_),
                           std::move(payload)};
    }
    case protocol::MessageType::secagg_survivors: {
      auto m = secagg::parse_survivor_list(frame.metadata);
      if (!m) {
        return m.error();
      }
      if (auto ok = same_round(m->envelope); !ok) {
        return ok.error();
      }
      auto signature = client_.sign_survivors(m->body);
      if (!signature) {
        return signature.error();
      }
      return OutgoingFrame{protocol::MessageType::secagg_signed,
                           secagg::to_metadata(envelope_, *signature), nullptr};
    }
    case protocol::MessageType::secagg_unmask: {
      auto m = secagg::parse_unmask_request(frame.metadata);
      if (!m) {
        return m.error();
      }
      if (auto ok = same_round(m->envelope); !ok) {
        return ok.error();
      }
      auto response = client_.unmask(m->body);
      if (!response) {
        return response.error();
      }
      finished_ = true;
      return OutgoingFrame{protocol::MessageType::secagg_revealed,
                           secagg::to_metadata(envelope_, *response), nullptr};
    }
    default:
      break;
  }
  return fail(errc::invalid_argument, "secure aggregation: a " +
                                          std::string(protocol::message_type_name(frame.type)) +
                                          " message is not for a client");
}

// Client-level DP under secure aggregation: the server cannot clip what it cannot see, so
// the site clips its update to the run's L2 norm here; with distributed DP it also adds
// its share of the noise, sized so that any t survivors together add N(0, (zC)^2) and no
// party ever sees an un-noised sum. The noise comes from OpenSSL's DRBG: a seed the
// server knew would let it subtract the noise.
result<bool> SecureParticipation::apply_client_dp() {
  const auto& terms = request_.privacy;
  if (terms.dp != protocol::DpMode::client_central &&
      terms.dp != protocol::DpMode::client_distributed) {
    return false;
  }
  auto clipped = privacy::clip_l2(delta_, terms.clip_norm);
  if (!clipped) {
    return clipped.error();
  }
  double update_z = terms.noise_multiplier;
  if (terms.count_stddev > 0) {
    // Adaptive clipping: the bit is released too, so the update's noise is the smaller z_Δ
    // that leaves room for it within the run's z (privacy/adaptive_clip.hpp).
    auto report = clip_report(clipped->norm);
    if (!report) {
      return report.error();
    }
    clip_slot_ = *report;
    if (terms.noise_multiplier > 0) {
      auto z = privacy::update_noise_multiplier(terms.noise_multiplier, terms.count_stddev);
      if (!z) {
        return z.error();
      }
      update_z = *z;
    }
  }
  if (terms.dp == protocol::DpMode::client_distributed) {
    auto stddev = privacy::per_client_noise_stddev(update_z, terms.clip_norm, threshold_);
    if (!stddev) {
      return stddev.error();
    }
    privacy::CryptoNormal noise;
    if (auto ok =
            privacy::add_gaussian_noise(delta_, *stddev / terms.clip_norm, terms.clip_norm, noise);
        !ok) {
      return ok.error();
    }
  }
  return true;
}

result<double> SecureParticipation::clip_report(double update_norm) {
  const auto& terms = request_.privacy;
  const bool distributed = terms.dp == protocol::DpMode::client_distributed;
  auto slot = privacy::clip_report_slot(terms.count_stddev, distributed, threshold_,
                                        client_.plan().clip_range);
  if (!slot) {
    return slot.error();
  }
  double report = privacy::unclipped_report(update_norm, terms.clip_norm);
  if (slot->share_stddev > 0) {
    // The count's noise, this site's share, from OpenSSL's DRBG like the update's.
    privacy::CryptoNormal noise;
    double draw = 0;
    if (auto ok = noise.fill_standard_normal(std::span(&draw, 1)); !ok) {
      return ok.error();
    }
    report += slot->share_stddev * draw;
  }
  return report / slot->scale;
}

}  // namespace fedcore::client
