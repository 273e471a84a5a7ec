// Little helpers for the project's binary file formats (model/param_io, distributed/checkpoint):
// append a trivially copyable value's bytes to a buffer, and read one back from unaligned
// memory. Both formats are little-endian and written with memcpy, so they assert that
// the host is little-endian where they are defined.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

namespace fedcore {

template <class T>
requires std::is_trivially_copyable_v<T>
void put(std::vector<std::byte>& out, const T& value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

// REQUIRES: sizeof(T) readable bytes at p.
template <class T>
requires std::is_trivially_copyable_v<T> T get(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

}  // namespace fedcore
