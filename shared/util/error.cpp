#include "shared/util/error.hpp"

#include <array>

namespace fedcore {
namespace {

constexpr std::array<std::string_view, 16> kNames = {
    "ok",
    "invalid_argument",
    "not_found",
    "already_exists",
    "permission_denied",
    "unauthenticated",
    "failed_precondition",
    "out_of_range",
    "data_loss",
    "deadline_exceeded",
    "unavailable",
    "resource_exhausted",
    "aborted",
    "unimplemented",
    "internal",
    "io_error",
};

class category final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "fedcore"; }
  std::string message(int value) const override {
    return std::string(errc_name(static_cast<errc>(value)));
  }
};

}  // namespace

const boost::system::error_category& fedcore_category() noexcept {
  static const category instance;
  return instance;
}

std::string_view errc_name(errc code) noexcept {
  auto index = static_cast<std::size_t>(code);
  return index < kNames.size() ? kNames[index] : std::string_view("unknown");
}

std::string error::to_string() const {
  return std::string(errc_name(code)) + ": " + message;
}

error_exception::error_exception(error e)
    : std::runtime_error(e.to_string()), error_(std::move(e)) {}

void throw_exception_from_error(const error& e, const boost::source_location&) {
  throw error_exception(e);
}

}  // namespace fedcore
