// CRC-32 (the zlib/PNG polynomial) over byte ranges; used by the parameter file format
// to detect corruption. Incremental: pass the previous value to continue a running sum.
#pragma once

#include <cstdint>
#include <span>

namespace fedcore {

std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t previous = 0) noexcept;

}  // namespace fedcore
