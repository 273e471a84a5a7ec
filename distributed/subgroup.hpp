// Sub-groups: some ranks of a transport seen as a group of their own, for the hybrid
// D × S job (one pipeline group per replica, one data-parallel group per stage).
//
// The sub-group's ranks are the positions of `members` (global ranks); messages go over
// the parent transport. Give each sub-group's Communicator its own job string (e.g.
// "job/pipe1") so that a message sent in one group can never be taken for another's.
// Every pair of ranks must belong to at most one sub-group in use: messages between two
// ranks share one ordered stream. Aborting a sub-group aborts the parent (all groups).
//
// Thread safety: as the parent; the parent must outlive the sub-group.
#pragma once

#include <memory>
#include <vector>

#include "shared/collective/transport.hpp"

namespace fedcore::distributed {

// REQUIRES: members distinct, in range, and containing parent.rank().
std::unique_ptr<collective::Transport> make_subgroup(collective::Transport& parent,
                                                     std::vector<int> members);

}  // namespace fedcore::distributed
