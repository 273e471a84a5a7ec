// Asking for transparent huge pages on large buffers before their pages are touched.
//
// Why: a model-sized buffer the process has not used before (an update being received, the
// new global model, the aggregate's sum) becomes resident one 4 KiB page fault at a time:
// 10,000 faults, each with its memory-cgroup charge, for 40 MB. Measured in
// `federation_bench rounds 10000000`, fresh pages were a large share of the server's CPU
// per round (docs/results.md, "Huge pages for model-sized buffers"). With MADV_HUGEPAGE the
// kernel backs the range with 2 MiB pages where it can: 20 faults for the same buffer.
// Where transparent huge pages are off ("never") the advice does nothing; where they are
// "always" it is what the kernel does anyway.
#pragma once

#include <cstddef>

namespace fedcore {

// Buffers smaller than this are left alone: a huge page half used would cost resident memory.
inline constexpr std::size_t kHugePageAdviceMinBytes = std::size_t{8} << 20;

// Advises the kernel to back the whole 2 MiB pages inside [data, data + bytes) with huge
// pages when first touched. Call on memory that is allocated but not yet touched (a
// vector's reserve()). Does nothing for smaller buffers; a refusal changes nothing but
// speed, so it is not reported.
void advise_huge_pages(void* data, std::size_t bytes) noexcept;

}  // namespace fedcore
