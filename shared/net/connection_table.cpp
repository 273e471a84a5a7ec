#include "shared/net/connection_table.hpp"

#include <utility>

namespace fedcore::net {

result<ConnectionTable::Ticket> ConnectionTable::admit(const std::string& address) {
  if (open_ >= limits_.max_open) {
    return fail(errc::resource_exhausted, std::to_string(open_) + " connections open (limit " +
                                              std::to_string(limits_.max_open) + ")");
  }
  if (anonymous_ >= limits_.max_unauthenticated) {
    return fail(errc::resource_exhausted, std::to_string(anonymous_) +
                                              " connections not yet authenticated (limit " +
                                              std::to_string(limits_.max_unauthenticated) + ")");
  }
  if (open_from(address) >= limits_.max_open_per_address) {
    return fail(errc::resource_exhausted,
                std::to_string(open_from(address)) + " connections open from " + address +
                    " (limit " + std::to_string(limits_.max_open_per_address) + " per address)");
  }
  auto& from_address = anonymous_by_address_[address];
  if (from_address >= limits_.max_unauthenticated_per_address) {
    return fail(errc::resource_exhausted,
                std::to_string(from_address) + " connections from " + address +
                    " not yet authenticated (limit " +
                    std::to_string(limits_.max_unauthenticated_per_address) + " per address)");
  }
  ++from_address;
  ++anonymous_;
  ++open_;
  ++open_by_address_[address];
  return Ticket(this, address);
}

std::size_t ConnectionTable::open_from(const std::string& address) const {
  const auto it = open_by_address_.find(address);
  return it == open_by_address_.end() ? 0 : it->second;
}

std::size_t ConnectionTable::unauthenticated_from(const std::string& address) const {
  const auto it = anonymous_by_address_.find(address);
  return it == anonymous_by_address_.end() ? 0 : it->second;
}

ConnectionTable::Ticket::Ticket(Ticket&& other) noexcept
    : table_(std::exchange(other.table_, nullptr)),
      address_(std::move(other.address_)),
      anonymous_(other.anonymous_) {}

ConnectionTable::Ticket& ConnectionTable::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    release();
    table_ = std::exchange(other.table_, nullptr);
    address_ = std::move(other.address_);
    anonymous_ = other.anonymous_;
  }
  return *this;
}

ConnectionTable::Ticket::~Ticket() {
  release();
}

void ConnectionTable::Ticket::authenticated() noexcept {
  if (table_ == nullptr || !anonymous_) {
    return;
  }
  anonymous_ = false;
  --table_->anonymous_;
  // Addresses without anonymous connections are forgotten: the map stays as small as
  // the set of hosts currently handshaking.
  if (auto it = table_->anonymous_by_address_.find(address_);
      it != table_->anonymous_by_address_.end() && --it->second == 0) {
    table_->anonymous_by_address_.erase(it);
  }
  table_->room_given_back();
}

void ConnectionTable::Ticket::release() noexcept {
  if (table_ == nullptr) {
    return;
  }
  authenticated();
  --table_->open_;
  if (auto it = table_->open_by_address_.find(address_);
      it != table_->open_by_address_.end() && --it->second == 0) {
    table_->open_by_address_.erase(it);
  }
  table_->room_given_back();
  table_ = nullptr;
}

void ConnectionTable::room_given_back() noexcept {
  if (room_callback_ && has_room()) {
    room_callback_();
  }
}

}  // namespace fedcore::net
