// HeldAnnouncements: events kept back while a round commits on another SQLite connection,
// then written (those not written yet) and let out in id order.
//
// Why hold: a round handed off to the background writer commits there, with its
// "round_committed" event in the same transaction. An event the controller's thread wrote
// meanwhile on its own connection could get either id, whichever connection took the write
// lock first. Announced as written, a subscriber could see id 17 before 16, and one
// resuming after 17 (SSE's Last-Event-ID) would never see 16.
//
// Why defer the writes too: an event written on the controller's thread while the writer
// commits waits for the writer's lock (its fsync), and that thread is the one sending the
// next round's models and receiving its updates; and every write on one connection throws
// away the other connection's page cache. So an event recorded while held is only kept,
// and the last release writes all of them in one transaction, after the round's own
// commit: their ids then follow the round's "round_committed". They are still durable
// before their own round is reported committed (that round's commit fsyncs the log), and
// the history's readers see them a round's write later.
//
// Holds nest: events go out when the last hold is released. Thread safety: none; the
// controller's thread only.
#pragma once

#include <vector>

#include "server/store/history_store.hpp"
#include "server/store/records.hpp"

namespace fedcore::federation {

class HeldAnnouncements {
 public:
  void hold() noexcept { ++holds_; }
  bool held() const noexcept { return holds_ > 0; }
  // Keeps `event`, which the store already wrote (it has its id), while held; false when
  // nothing is held (announce it now).
  bool keep(const store::EventRecord& event);
  // Keeps `event`, not written yet, until the last hold is released.
  // REQUIRES: held().
  void defer(store::EventRecord event);
  // Ends one hold. When it was the last, writes the deferred events to `store` in one
  // transaction (one by one if that fails, so that one bad event loses no other; a failed
  // write is logged and the event keeps id 0) and returns everything to announce: the kept
  // events in id order (an id-less one first), then the deferred ones in the order they
  // came, whose ids are larger. Otherwise returns nothing.
  std::vector<store::EventRecord> release(store::HistoryStore& store);

 private:
  int holds_ = 0;
  std::vector<store::EventRecord> kept_;
  std::vector<store::EventRecord> deferred_;
};

}  // namespace fedcore::federation
