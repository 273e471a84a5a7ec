// AlignedVector<T>: a std::vector whose storage starts on a 64-byte boundary.
//
// Why: Eigen and GCC's vectorised loops split a loop over an unaligned buffer into a
// scalar head (up to the first aligned address), a SIMD body and a scalar tail. The head
// and body may round differently (fused vs separate multiply-add), so with plain
// std::vector storage — 16-byte aligned by malloc, 0 or 16 modulo 32 depending on the
// heap's history — the same training run gave different numbers in different processes.
// Fixing the base alignment fixes which elements take which path, so results depend only
// on the data and the seed. 64 bytes also keeps buffers off shared cache lines.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace fedcore {

inline constexpr std::size_t kBufferAlignment = 64;

template <class T>
struct AlignedAllocator {
  using value_type = T;

  AlignedAllocator() noexcept = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kBufferAlignment}));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ::operator delete (p, n * sizeof(T), std::align_val_t{kBufferAlignment});
  }

  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace fedcore
