// Fedcore's error vocabulary (docs/engineering.md, habits 3 and 4).
//
// Expected failures travel as values: `fedcore::result<T>` holds either a T or a
// `fedcore::error`, which pairs a canonical code (`fedcore::errc`, modelled on Abseil's
// status codes) with a human sentence that names the thing that was wrong ("file
// '/x/train-images-idx3-ubyte.gz': wrong magic number 0x00000802, expected 0x00000803").
// The code is for programs (mapped to HTTP status or exit codes at the edge), the
// message is for people. Every code is catalogued in docs/errors.md.
//
// `errc` is also registered as a boost::system error category, so it compares equal to
// and converts into a `boost::system::error_code` where Asio APIs want one.
#pragma once

#include <string>
#include <string_view>
#include <system_error>

#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>

namespace fedcore {

// Canonical error codes. Return the most specific one that applies.
enum class errc {
  ok = 0,
  invalid_argument = 1,     // the caller's input is malformed or out of range
  not_found = 2,            // a named file, client, run or round does not exist
  already_exists = 3,       // creating something that exists
  permission_denied = 4,    // authenticated, but not allowed
  unauthenticated = 5,      // no valid credentials
  failed_precondition = 6,  // the system is not in the state the operation needs
  out_of_range = 7,         // a value past the end of something valid (e.g. truncated file)
  data_loss = 8,            // stored data is corrupt (bad checksum, wrong magic)
  deadline_exceeded = 9,    // a wait ran out of time
  unavailable = 10,         // a peer or resource is temporarily unreachable
  resource_exhausted = 11,  // a size, count or rate limit was hit
  aborted = 12,             // the operation was cancelled or lost a race
  unimplemented = 13,       // a known but unsupported request
  internal = 14,            // an invariant broke; a bug
  io_error = 15,            // the operating system refused a read or write
};

// The boost::system category for `errc`.
const boost::system::error_category& fedcore_category() noexcept;

// Canonical lower_snake name of a code ("invalid_argument").
std::string_view errc_name(errc code) noexcept;

inline boost::system::error_code make_error_code(errc code) noexcept {
  return {static_cast<int>(code), fedcore_category()};
}

// An expected failure: a code and a sentence that says what was wrong.
struct error {
  errc code = errc::internal;
  std::string message;

  // "invalid_argument: <message>"
  std::string to_string() const;
};

// Result of an operation that can fail in an expected way. [[nodiscard]]: dropping one
// unread is a compile warning (an error in the dev and CI builds); a caller that really
// means to ignore a failure says so with `(void)` and a comment (Abseil TotW #76).
template <class T>
class [[nodiscard]] result : public boost::system::result<T, error> {
 public:
  using base = boost::system::result<T, error>;
  using base::base;
  result() = default;
  result(base other) : base(std::move(other)) {}  // NOLINT: implicit, like the base's
};

// Shorthand used in `return fail(errc::not_found, "...")`.
inline error fail(errc code, std::string message) {
  return error{code, std::move(message)};
}

// Thrown only by `result<T>::value()` on an error (i.e. by code that chose to treat a
// failure as fatal); sessions catch it once, at their top.
class error_exception : public std::runtime_error {
 public:
  explicit error_exception(error e);
  const error& get() const noexcept { return error_; }

 private:
  error error_;
};

// Found by boost::system::result through ADL when value() is called on an error.
[[noreturn]] void throw_exception_from_error(const error& e, const boost::source_location& loc);

}  // namespace fedcore

namespace boost::system {
template <>
struct is_error_code_enum<fedcore::errc> : std::true_type {};
}  // namespace boost::system
