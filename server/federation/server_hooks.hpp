// Notifications for tests, fedcore-sim and the admin plane, called on the server's
// io_context thread. A hook must not block; it may call the server's public methods.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "server/store/records.hpp"

namespace fedcore::federation {

struct ServerHooks {
  std::function<void(std::int64_t run_id, const store::RoundRecord&)> round_committed;
  std::function<void(std::int64_t run_id, const store::RoundRecord&)> round_failed;
  std::function<void(std::int64_t run_id, store::RunState)> run_ended;
  std::function<void(const std::string& client_id, bool online)> client_changed;
};

}  // namespace fedcore::federation
