#include "server/federation/held_announcements.hpp"

#include <algorithm>
#include <utility>

#include "shared/util/assert.hpp"

namespace fedcore::federation {

bool HeldAnnouncements::keep(const store::EventRecord& event) {
  if (holds_ == 0) {
    return false;
  }
  kept_.push_back(event);
  return true;
}

std::vector<store::EventRecord> HeldAnnouncements::release() {
  FEDCORE_ASSERT(holds_ > 0, "HeldAnnouncements::release without a hold");
  if (--holds_ > 0) {
    return {};
  }
  // Stable: events of equal id (none but the id-less ones) keep the order they came in.
  std::stable_sort(kept_.begin(), kept_.end(),
                   [](const auto& a, const auto& b) { return a.id < b.id; });
  return std::exchange(kept_, {});
}

}  // namespace fedcore::federation
