// Keeping the memory of large, short-lived buffers in the process.
//
// A federation moves model-sized buffers all the time: every update a server receives and
// every model a client receives is a fresh payload buffer of hundreds of kilobytes to tens
// of megabytes, freed again a moment later. With glibc's defaults, a buffer that size is
// mapped from the kernel and unmapped when freed (or trimmed off the heap's top), so the
// next one is fresh memory again: a page fault and a zeroing per 4 KiB page. Measured in
// `federation_bench rounds`, that was about 40% of the server's CPU time per round
// (docs/results.md, "Where a round's time goes"). Called once at the start of main(), this
// raises glibc's mmap threshold to its maximum (32 MiB) and the trim threshold to 512 MiB,
// so freed buffers stay in the heap for the next one. The process's peak RSS is what it
// was (the buffers were live at the peak anyway); its RSS between rounds stays near the
// peak instead of shrinking. Buffers above 32 MiB are still mapped: the payload gate
// recycles those (shared/net/payload_gate.hpp).
//
// Thread safety: call before starting threads.
#pragma once

namespace fedcore {

// Returns false if the C library refused a setting (the process works either way).
bool keep_large_buffers_warm() noexcept;

}  // namespace fedcore
