// The stages of one federated round and the one function that moves between them.
//
//   selecting ──clients_selected──▶ training ──requests_sent──▶ collecting
//       │                                                          │  all_answered
//       └─not_enough_clients──▶ failed                             │  deadline_passed
//                                                                  │  target_reached
//                                                                  ▼
//                       failed ◀──quorum_missed── aggregating ──aggregated──▶ committing
//                                                       │                    ▲  │
//                                  evaluation_requested │        evaluated   │  │
//                                                       ▼     deadline_passed│  │
//                                                   evaluating ──────────────┘  │
//                                 failed ◀──commit_failed───────────────────────┤
//                                                              done ◀─committed─┤
//                                                                    handed_off │
//                                 failed ◀──commit_failed── persisting ◀────────┘
//                                                              │ committed
//                                                              ▼
//                                                             done
//   any stage before done/failed but persisting ──abandoned──▶ failed (shutdown or stop:
//   nothing kept)
//
// A secure-aggregated round (SecAgg+, server/federation/secure_round.hpp) goes from
// collecting (keys, instead of updates) through four more stages:
//
//   collecting ─keys_collected─▶ sharing_keys ─shares_collected─▶ masking
//        │                            │                              │ inputs_collected
//        │                            │                              ▼
//        ├──────────below_threshold───┴─────────────────────── consistency
//        │                                                           │ survivors_signed
//        ▼                                                           ▼
//      failed ◀──────────────────below_threshold─────────────── unmasking ─unmasked─▶ aggregating
//                                  (from consistency too)
//
// selecting   the eligible clients are sampled and each gets a fresh nonce;
// training    every selected client is sent the global model (TRAIN);
// collecting  updates, errors and lost sessions arrive until everyone answered, the
//             deadline passed, or (over-selection) the round's target of accepted
//             updates is in (federation/round.hpp judges each update);
// aggregating quorum is decided and the strategy produces the next global model;
// evaluating  rounds due for federated evaluation: the participants evaluate the new
//             global model on their test splits until all answered or the deadline
//             (federation/evaluation_round.hpp);
// committing  the checkpoint is written and the round commits in one transaction, with
//             its evaluations;
// persisting  (a round that is not the run's last, with a background worker) the
//             checkpoint is being written on the worker while the next round runs; the
//             round commits once it is written, before anything of the next is recorded
//             (run_controller.hpp, "Overlap").
//
// sharing_keys   each client's sealed Shamir shares are relayed to its neighbours;
// masking        masked updates are summed as they arrive;
// consistency    survivors sign the survivor list (the consistency check);
// unmasking      survivors reveal the shares that remove the masks.
#pragma once

#include <optional>
#include <string_view>

namespace fedcore::federation {

enum class RoundStage {
  selecting,
  training,
  collecting,
  sharing_keys,
  masking,
  consistency,
  unmasking,
  aggregating,
  evaluating,
  committing,
  persisting,
  done,
  failed,
};

enum class RoundEvent {
  clients_selected,
  not_enough_clients,
  requests_sent,
  all_answered,
  deadline_passed,
  target_reached,  // over-selection: enough updates accepted; the rest are late
  aggregated,
  quorum_missed,
  keys_collected,
  shares_collected,
  inputs_collected,
  survivors_signed,
  unmasked,
  below_threshold,
  committed,
  commit_failed,
  handed_off,  // the checkpoint write went to the background worker
  evaluation_requested,
  evaluated,
  abandoned,
};

// The stage `event` leads to from `stage`, or nullopt when the event cannot happen there
// (a bug in the caller: the run controller asserts on it).
std::optional<RoundStage> next_stage(RoundStage stage, RoundEvent event) noexcept;

// done and failed.
bool is_final(RoundStage stage) noexcept;

std::string_view round_stage_name(RoundStage stage) noexcept;
std::string_view round_event_name(RoundEvent event) noexcept;

}  // namespace fedcore::federation
