#include "common/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace phv {

namespace {

#if defined(__SSE2__)
constexpr size_t kLine = 64;  // bytes per cache line: the unit a streaming store writes whole

// Up to the destination's first line boundary with memcpy, whole lines streamed (SSE2, so on any x86-64;
// the source may lie anywhere), the rest with memcpy.
void stream_lines(char* d, const char* s, size_t bytes) {
  const size_t head = (kLine - reinterpret_cast<uintptr_t>(d) % kLine) % kLine;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const size_t body = bytes / kLine * kLine;
  for (size_t i = 0; i < body; i += kLine) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  _mm_sfence();  // streamed stores are weakly ordered: visible before whatever this thread does next
  std::memcpy(d + body, s + body, bytes - body);
}
#endif

}  // namespace

void copy_streaming(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
#if defined(__SSE2__)
  const bool overlap = d < s + bytes && s < d + bytes;
  if (bytes >= kStreamingCopyBytes && !overlap) {
    stream_lines(d, s, bytes);
    return;
  }
#endif
  std::memmove(d, s, bytes);
}

}  // namespace phv
