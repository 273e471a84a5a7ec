#include "server/federation/round_stage.hpp"

#include <array>

namespace fedcore::federation {
namespace {

struct Transition {
  RoundStage from;
  RoundEvent event;
  RoundStage to;
};

// The whole round protocol in one table (the picture is in round_stage.hpp). `abandoned`
// is allowed from every stage that is not final and is handled before the table.
constexpr std::array kTransitions{
    Transition{RoundStage::selecting, RoundEvent::clients_selected, RoundStage::training},
    Transition{RoundStage::selecting, RoundEvent::not_enough_clients, RoundStage::failed},
    Transition{RoundStage::training, RoundEvent::requests_sent, RoundStage::collecting},
    Transition{RoundStage::collecting, RoundEvent::all_answered, RoundStage::aggregating},
    Transition{RoundStage::collecting, RoundEvent::deadline_passed, RoundStage::aggregating},
    Transition{RoundStage::collecting, RoundEvent::target_reached, RoundStage::aggregating},
    Transition{RoundStage::aggregating, RoundEvent::aggregated, RoundStage::committing},
    Transition{RoundStage::aggregating, RoundEvent::quorum_missed, RoundStage::failed},
    Transition{RoundStage::collecting, RoundEvent::keys_collected, RoundStage::sharing_keys},
    Transition{RoundStage::collecting, RoundEvent::below_threshold, RoundStage::failed},
    Transition{RoundStage::sharing_keys, RoundEvent::shares_collected, RoundStage::masking},
    Transition{RoundStage::sharing_keys, RoundEvent::below_threshold, RoundStage::failed},
    Transition{RoundStage::masking, RoundEvent::inputs_collected, RoundStage::consistency},
    Transition{RoundStage::consistency, RoundEvent::survivors_signed, RoundStage::unmasking},
    Transition{RoundStage::consistency, RoundEvent::below_threshold, RoundStage::failed},
    Transition{RoundStage::masking, RoundEvent::below_threshold, RoundStage::failed},
    Transition{RoundStage::unmasking, RoundEvent::unmasked, RoundStage::aggregating},
    Transition{RoundStage::unmasking, RoundEvent::below_threshold, RoundStage::failed},
    Transition{RoundStage::aggregating, RoundEvent::evaluation_requested, RoundStage::evaluating},
    Transition{RoundStage::evaluating, RoundEvent::evaluated, RoundStage::committing},
    Transition{RoundStage::evaluating, RoundEvent::deadline_passed, RoundStage::committing},
    Transition{RoundStage::committing, RoundEvent::committed, RoundStage::done},
    Transition{RoundStage::committing, RoundEvent::commit_failed, RoundStage::failed},
    Transition{RoundStage::committing, RoundEvent::handed_off, RoundStage::persisting},
    Transition{RoundStage::persisting, RoundEvent::committed, RoundStage::done},
    Transition{RoundStage::persisting, RoundEvent::commit_failed, RoundStage::failed},
};

}  // namespace

bool is_final(RoundStage stage) noexcept {
  return stage == RoundStage::done || stage == RoundStage::failed;
}

std::optional<RoundStage> next_stage(RoundStage stage, RoundEvent event) noexcept {
  if (event == RoundEvent::abandoned) {
    // A persisting round's model went out to the next round: it commits or fails, never
    // quietly disappears.
    return is_final(stage) || stage == RoundStage::persisting ? std::nullopt
                                                              : std::optional(RoundStage::failed);
  }
  for (const auto& t : kTransitions) {
    if (t.from == stage && t.event == event) {
      return t.to;
    }
  }
  return std::nullopt;
}

std::string_view round_stage_name(RoundStage stage) noexcept {
  switch (stage) {
    case RoundStage::selecting:
      return "selecting";
    case RoundStage::training:
      return "training";
    case RoundStage::collecting:
      return "collecting";
    case RoundStage::sharing_keys:
      return "sharing_keys";
    case RoundStage::masking:
      return "masking";
    case RoundStage::consistency:
      return "consistency";
    case RoundStage::unmasking:
      return "unmasking";
    case RoundStage::aggregating:
      return "aggregating";
    case RoundStage::evaluating:
      return "evaluating";
    case RoundStage::committing:
      return "committing";
    case RoundStage::persisting:
      return "persisting";
    case RoundStage::done:
      return "done";
    case RoundStage::failed:
      return "failed";
  }
  return "unknown";
}

std::string_view round_event_name(RoundEvent event) noexcept {
  switch (event) {
    case RoundEvent::clients_selected:
      return "clients_selected";
    case RoundEvent::not_enough_clients:
      return "not_enough_clients";
    case RoundEvent::requests_sent:
      return "requests_sent";
    case RoundEvent::all_answered:
      return "all_answered";
    case RoundEvent::deadline_passed:
      return "deadline_passed";
    case RoundEvent::target_reached:
      return "target_reached";
    case RoundEvent::aggregated:
      return "aggregated";
    case RoundEvent::quorum_missed:
      return "quorum_missed";
    case RoundEvent::keys_collected:
      return "keys_collected";
    case RoundEvent::shares_collected:
      return "shares_collected";
    case RoundEvent::inputs_collected:
      return "inputs_collected";
    case RoundEvent::survivors_signed:
      return "survivors_signed";
    case RoundEvent::unmasked:
      return "unmasked";
    case RoundEvent::below_threshold:
      return "below_threshold";
    case RoundEvent::committed:
      return "committed";
    case RoundEvent::commit_failed:
      return "commit_failed";
    case RoundEvent::handed_off:
      return "handed_off";
    case RoundEvent::evaluation_requested:
      return "evaluation_requested";
    case RoundEvent::evaluated:
      return "evaluated";
    case RoundEvent::abandoned:
      return "abandoned";
  }
  return "unknown";
}

}  // namespace fedcore::federation
