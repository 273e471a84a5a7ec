#include "shared/net/connection_table.hpp"

#include <vector>

#include <gtest/gtest.h>

namespace fedcore::net {
namespace {

TEST(ConnectionTable, AnonymousSlotsAreBoundedPerAddressAndInAll) {
  ConnectionTable table(
      {.max_open = 100, .max_unauthenticated = 5, .max_unauthenticated_per_address = 3});
  std::vector<ConnectionTable::Ticket> held;
  for (int i = 0; i < 3; ++i) {
    auto t = table.admit("127.0.0.2");
    ASSERT_TRUE(t) << t.error().to_string();
    held.push_back(std::move(*t));
  }
  auto fourth = table.admit("127.0.0.2");
  ASSERT_FALSE(fourth);
  EXPECT_EQ(fourth.error().code, errc::resource_exhausted);
  EXPECT_NE(fourth.error().message.find("per address"), std::string::npos);
  // Another host still gets in, up to the total.
  for (int i = 0; i < 2; ++i) {
    auto t = table.admit("127.0.0.1");
    ASSERT_TRUE(t);
    held.push_back(std::move(*t));
  }
  auto sixth = table.admit("127.0.0.3");
  ASSERT_FALSE(sixth);
  EXPECT_NE(sixth.error().message.find("not yet authenticated (limit 5)"), std::string::npos)
      << sixth.error().message;
  EXPECT_EQ(table.unauthenticated(), 5u);
  EXPECT_EQ(table.open(), 5u);
}

TEST(ConnectionTable, AnAuthenticatedConnectionFreesItsAnonymousSlotAndClosingFreesTheRest) {
  ConnectionTable table(
      {.max_open = 3, .max_unauthenticated = 1, .max_unauthenticated_per_address = 1});
  auto first = table.admit("127.0.0.1");
  ASSERT_TRUE(first);
  EXPECT_FALSE(table.admit("127.0.0.1"));
  first->authenticated();
  first->authenticated();  // idempotent
  EXPECT_EQ(table.unauthenticated(), 0u);
  EXPECT_EQ(table.unauthenticated_from("127.0.0.1"), 0u);
  auto second = table.admit("127.0.0.1");
  ASSERT_TRUE(second);
  second->authenticated();
  auto third = table.admit("127.0.0.1");
  ASSERT_TRUE(third);
  third->authenticated();
  // Every slot is taken by authenticated peers: the total still holds.
  auto fourth = table.admit("127.0.0.9");
  ASSERT_FALSE(fourth);
  EXPECT_NE(fourth.error().message.find("connections open"), std::string::npos);
  {
    ConnectionTable::Ticket moved = std::move(*first);
    EXPECT_FALSE(first->valid());
    EXPECT_EQ(table.open(), 3u);
  }  // closing releases exactly once
  EXPECT_EQ(table.open(), 2u);
  EXPECT_TRUE(table.admit("127.0.0.9"));
}

// A listener stops accepting while the totals are reached and wakes when a slot comes back
// (storm_test.cpp: refusing at the total made every peer reconnect at once).
TEST(ConnectionTable, SaysWhenItIsFullAndCallsBackWhenASlotIsGivenBack) {
  ConnectionTable table(
      {.max_open = 3, .max_unauthenticated = 2, .max_unauthenticated_per_address = 2});
  int calls = 0;
  table.set_room_callback([&] { ++calls; });
  auto a = table.admit("127.0.0.2");
  auto b = table.admit("127.0.0.3");
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(table.has_room());  // two anonymous of two
  a->authenticated();              // an anonymous slot back: room, and a call
  EXPECT_TRUE(table.has_room());
  EXPECT_EQ(calls, 1);
  auto c = table.admit("127.0.0.4");
  ASSERT_TRUE(c);
  b->authenticated();
  c->authenticated();
  EXPECT_FALSE(table.has_room());  // three open of three
  EXPECT_EQ(calls, 1);             // slots went from anonymous to open: no room yet
  { auto gone = std::move(*a); }   // a closed connection gives its slot back
  EXPECT_TRUE(table.has_room());
  EXPECT_EQ(calls, 2);
}

TEST(ConnectionTable, OpenConnectionsPerAddressCanBeCapped) {
  ConnectionTable table({.max_open = 100,
                         .max_unauthenticated = 100,
                         .max_unauthenticated_per_address = 100,
                         .max_open_per_address = 2});
  auto a = table.admit("192.0.2.1");
  auto b = table.admit("192.0.2.1");
  ASSERT_TRUE(a && b);
  a->authenticated();
  b->authenticated();
  auto c = table.admit("192.0.2.1");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("open from 192.0.2.1"), std::string::npos);
  EXPECT_TRUE(table.admit("192.0.2.2"));
}

}  // namespace
}  // namespace fedcore::net
