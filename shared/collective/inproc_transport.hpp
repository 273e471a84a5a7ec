// In-process transport: the ranks of a group are threads of one process (tests, and
// single-process experiments). A send copies the payload into the receiver's mailbox, so
// sends never block; a receive waits on the mailbox with the operation's deadline.
//
// A rank whose transport is destroyed or aborted is dead: its peers' receives from it
// fail with errc::unavailable once its mailbox is drained, and their sends to it fail.
//
// Thread safety: InProcessGroup is thread-safe; each transport it makes belongs to one
// thread (abort may be called from any thread).
#pragma once

#include <memory>

#include "shared/collective/transport.hpp"

namespace fedcore::collective {

class InProcessGroup {
 public:
  // REQUIRES: size > 0.
  explicit InProcessGroup(int size);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const noexcept;
  // The transport of `rank`; call once per rank. The group must outlive it.
  // REQUIRES: 0 <= rank < size, not made before.
  std::unique_ptr<Transport> transport(int rank);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace fedcore::collective
