#include "server/api/auth_limiter.hpp"

#include <algorithm>

namespace fedcore::api {

AuthLimiter::AuthLimiter(const Clock& clock, AuthLimits limits) : clock_(clock), limits_(limits) {
  limits_.max_failures = std::max<std::size_t>(limits_.max_failures, 1);
  limits_.max_addresses = std::max<std::size_t>(limits_.max_addresses, 1);
}

void AuthLimiter::age(std::deque<Time>& times, Time now) const {
  while (!times.empty() && now - times.front() >= limits_.window) {
    times.pop_front();
  }
}

std::optional<std::chrono::seconds> AuthLimiter::retry_after(std::string_view address) {
  const auto it = failures_.find(std::string(address));
  if (it == failures_.end()) {
    return std::nullopt;
  }
  const auto now = clock_.steady();
  age(it->second, now);
  if (it->second.empty()) {
    failures_.erase(it);
    return std::nullopt;
  }
  if (it->second.size() < limits_.max_failures) {
    return std::nullopt;
  }
  // Free again once enough failures have aged out to leave room for one more attempt:
  // the failure that must age is max_failures-th from the newest.
  const auto& times = it->second;
  const auto freeing = times[times.size() - limits_.max_failures];
  const auto wait = freeing + limits_.window - now;
  const auto seconds = std::chrono::ceil<std::chrono::seconds>(wait);
  return std::max(seconds, std::chrono::seconds(1));
}

void AuthLimiter::failed(std::string_view address) {
  const auto now = clock_.steady();
  auto it = failures_.find(std::string(address));
  if (it == failures_.end()) {
    make_room(now);
    it = failures_.emplace(std::string(address), std::deque<Time>{}).first;
  }
  age(it->second, now);
  it->second.push_back(now);
  // Only the newest max_failures matter for the decision; older ones need not be kept.
  while (it->second.size() > limits_.max_failures) {
    it->second.pop_front();
  }
}

void AuthLimiter::make_room(Time now) {
  if (failures_.size() < limits_.max_addresses) {
    return;
  }
  for (auto it = failures_.begin(); it != failures_.end();) {
    age(it->second, now);
    it = it->second.empty() ? failures_.erase(it) : std::next(it);
  }
  if (failures_.size() < limits_.max_addresses) {
    return;
  }
  // Still full of live entries (an attack from many addresses): forget the address whose
  // latest failure is oldest, the one closest to being free anyway.
  const auto oldest = std::min_element(
      failures_.begin(), failures_.end(),
      [](const auto& a, const auto& b) { return a.second.back() < b.second.back(); });
  failures_.erase(oldest);
}

}  // namespace fedcore::api
