// HeldAnnouncements: events kept back from subscribers while a round commits on another
// SQLite connection, then let out in id order.
//
// Why: a round handed off to the background writer commits there, with its
// "round_committed" event in the same transaction. Events the controller's thread records
// meanwhile are written on its own connection; whichever takes the write lock first gets
// the smaller id. Announced as written, a subscriber could see id 17 before 16, and one
// resuming after 17 (SSE's Last-Event-ID) would never see 16. The store's own order is
// right (ids follow commits), so only the announcements wait.
//
// Holds nest: events go out when the last hold is released. Thread safety: none; the
// controller's thread only.
#pragma once

#include <vector>

#include "server/store/records.hpp"

namespace fedcore::federation {

class HeldAnnouncements {
 public:
  void hold() noexcept { ++holds_; }
  bool held() const noexcept { return holds_ > 0; }
  // Keeps `event` while held; false when nothing is held (announce it now).
  bool keep(const store::EventRecord& event);
  // Ends one hold. When it was the last, returns every kept event in id order (an event
  // whose write failed has no id and goes first); otherwise nothing.
  std::vector<store::EventRecord> release();

 private:
  int holds_ = 0;
  std::vector<store::EventRecord> kept_;
};

}  // namespace fedcore::federation
