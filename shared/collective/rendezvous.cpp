#include "shared/collective/rendezvous.hpp"

namespace fedcore::collective {

result<std::vector<std::string>> MemoryRendezvous::exchange(int rank, int size,
                                                            const std::string& address,
                                                            Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (size != static_cast<int>(addresses_.size()) || rank < 0 || rank >= size ||
      !addresses_[rank].empty()) {
    return fail(errc::invalid_argument, "rendezvous: bad or repeated rank " + std::to_string(rank));
  }
  addresses_[rank] = address;
  ++count_;
  arrived_.notify_all();
  if (!arrived_.wait_until(lock, deadline, [&] { return count_ == size; })) {
    return fail(errc::deadline_exceeded, "rendezvous: " + std::to_string(count_) + " of " +
                                             std::to_string(size) + " ranks arrived in time");
  }
  return addresses_;
}

}  // namespace fedcore::collective
