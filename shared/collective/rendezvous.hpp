// Rendezvous: how the ranks of a group learn each other's addresses before connecting.
//
// Each rank calls exchange() once with its own listening address; it returns every
// rank's address (index = rank) once all `size` ranks have called it, or fails at the
// deadline. Implementations: MemoryRendezvous (ranks as threads of one process) and the
// TCP rendezvous of fedcore-dist (distributed/rendezvous.hpp), hosted by the launcher.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "shared/collective/transport.hpp"

namespace fedcore::collective {

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  // Errors: deadline_exceeded when not all ranks arrived in time; invalid_argument when
  // rank/size disagree with the others'.
  virtual result<std::vector<std::string>> exchange(int rank, int size, const std::string& address,
                                                    Clock::time_point deadline) = 0;
};

// Thread-safe; for `size` ranks of one process. One exchange per rank.
class MemoryRendezvous final : public Rendezvous {
 public:
  explicit MemoryRendezvous(int size) : addresses_(size) {}
  result<std::vector<std::string>> exchange(int rank, int size, const std::string& address,
                                            Clock::time_point deadline) override;

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<std::string> addresses_;  // guarded by mutex_
  int count_ = 0;                       // guarded by mutex_
};

}  // namespace fedcore::collective
