// Live events for GET /api/v1/events (docs/api.md, "Live events").
//
// EventHub fans the federation's events out to any number of subscribers, each with a
// bounded queue of formatted server-sent-event frames. A subscriber that falls more than
// `max_queue` events behind is marked overflowed and gets nothing more; its session then
// closes the stream (the client reconnects and reloads).
//
// Thread safety: none; everything runs on the io_context thread that FederationServer
// delivers events on.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "server/store/records.hpp"

namespace fedcore::api {

// The wire form of one event:
//   id: 42\nevent: round_committed\ndata: {"id":42,...}\n\n
std::string format_sse(const store::EventRecord& event);
// The JSON object of an event (the `data:` line). A run_ended event's detail.state is
// given as the state's name ("finished").
std::string event_json(const store::EventRecord& event);

struct Subscription {
  std::deque<std::string> frames;  // formatted, oldest first
  bool overflowed = false;
  // Called after a frame is queued (or on overflow), to wake the session that drains it.
  std::function<void()> wake;
};

class EventHub {
 public:
  explicit EventHub(std::size_t max_queue = 1000) : max_queue_(max_queue) {}

  std::shared_ptr<Subscription> subscribe();
  void unsubscribe(const std::shared_ptr<Subscription>& s);
  // Queues the event for every subscriber.
  void publish(const store::EventRecord& event);

  std::size_t subscribers() const noexcept { return subs_.size(); }

 private:
  std::size_t max_queue_;
  std::map<Subscription*, std::shared_ptr<Subscription>> subs_;
};

}  // namespace fedcore::api
