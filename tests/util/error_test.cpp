#include "shared/util/error.hpp"

#include <gtest/gtest.h>

namespace fedcore {
namespace {

result<int> parse_positive(int x) {
  if (x <= 0) {
    return fail(errc::invalid_argument, "x must be positive, got " + std::to_string(x));
  }
  return x;
}

TEST(Error, ResultCarriesValueOrCodeAndMessage) {
  auto ok = parse_positive(3);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 3);
  auto bad = parse_positive(-1);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  EXPECT_EQ(bad.error().to_string(), "invalid_argument: x must be positive, got -1");
}

TEST(Error, ValueOnErrorThrowsTheErrorOnce) {
  auto bad = parse_positive(0);
  try {
    (void)bad.value();
    FAIL() << "value() on an error must throw";
  } catch (const error_exception& e) {
    EXPECT_EQ(e.get().code, errc::invalid_argument);
  }
}

TEST(Error, RegisteredAsABoostErrorCategory) {
  boost::system::error_code ec = errc::deadline_exceeded;
  EXPECT_EQ(ec.category().name(), std::string("fedcore"));
  EXPECT_EQ(ec.message(), "deadline_exceeded");
  EXPECT_EQ(errc_name(errc::io_error), "io_error");
}

}  // namespace
}  // namespace fedcore
