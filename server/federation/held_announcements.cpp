#include "server/federation/held_announcements.hpp"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "server/store/history_store.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::federation {

bool HeldAnnouncements::keep(const store::EventRecord& event) {
  if (holds_ == 0) {
    return false;
  }
  kept_.push_back(event);
  return true;
}

void HeldAnnouncements::defer(store::EventRecord event) {
  FEDCORE_ASSERT(holds_ > 0, "HeldAnnouncements::defer without a hold");
  deferred_.push_back(std::move(event));
}

std::vector<store::EventRecord> HeldAnnouncements::release(store::HistoryStore& store) {
  FEDCORE_ASSERT(holds_ > 0, "HeldAnnouncements::release without a hold");
  if (--holds_ > 0) {
    return {};
  }
  // Stable: events of equal id (none but the id-less ones) keep the order they came in.
  std::stable_sort(kept_.begin(), kept_.end(),
                   [](const auto& a, const auto& b) { return a.id < b.id; });
  auto out = std::exchange(kept_, {});
  auto deferred = std::exchange(deferred_, {});
  if (!deferred.empty()) {
    if (auto written = store.append_events(deferred); !written) {
      // Whatever made the batch fail (a full disk, one event the store refuses), each
      // event gets its own chance.
      for (auto& event : deferred) {
        if (auto id = store.append_event(event); id) {
          event.id = *id;
        } else {
          spdlog::warn("could not record event {}: {}", event.kind, id.error().message);
        }
      }
    }
  }
  out.insert(out.end(), std::make_move_iterator(deferred.begin()),
             std::make_move_iterator(deferred.end()));
  return out;
}

}  // namespace fedcore::federation
