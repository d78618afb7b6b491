// Copies of large blocks with non-temporal ("streaming") stores, for the copy an allgather or alltoall
// makes of a rank's own block into an output that is too large to stay in cache anyway.
//
// A plain store first reads the destination's cache line from memory (a "read for ownership"), then
// writes it back: three memory transfers per line copied. A streaming store writes whole lines straight
// to memory: two. glibc's memcpy streams only above its non-temporal threshold, three quarters of the
// shared cache it is told of: 240 MiB on this project's test host, so never for a collective's block.
// Two processes copying 8-128 MiB each at once, as the two ranks of an alltoall do, ran 1.25-1.5x faster
// with streaming stores; 1-4 MiB ran 5-12% slower, their destinations being still in cache
// (benchmarks/RESULTS.md, "Streaming stores for a rank's own block").
#pragma once
#include <cstddef>

namespace phv {

// From this many bytes copy_streaming() streams. Below it the destination often fits in cache, where a
// consumer reading the output right after the collective finds it: streamed, an 8 MiB block made such a
// reader's loop 19% slower, while the collective itself gained 0-16%.
constexpr size_t kStreamingCopyBytes = size_t(16) << 20;

// memmove(dst, src, bytes), with streaming stores for the bulk when bytes >= kStreamingCopyBytes, the
// ranges do not overlap and the CPU has SSE2 (every x86-64).
void copy_streaming(void* dst, const void* src, size_t bytes);

}  // namespace phv
