#include "shared/util/checksum.hpp"

#include <algorithm>
#include <limits>

#include <zlib.h>

namespace fedcore {

std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t previous) noexcept {
  // zlib takes a uInt length; feed large spans in pieces it can take.
  uLong value = previous;
  const auto* data = reinterpret_cast<const Bytef*>(bytes.data());
  std::size_t left = bytes.size();
  while (left > 0) {
    const auto piece =
        static_cast<uInt>(std::min<std::size_t>(left, std::numeric_limits<uInt>::max()));
    value = ::crc32(value, data, piece);
    data += piece;
    left -= piece;
  }
  return static_cast<std::uint32_t>(value);
}

}  // namespace fedcore
