// copy_streaming: exact bytes for sizes around its floor and every kind of line offset of source and
// destination (the head before the first whole line, the streamed lines, the tail), nothing written
// outside the destination, and memmove's result where the ranges overlap.
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "common/stream_copy.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

namespace {

constexpr size_t kGuard = 128;  // bytes checked untouched on each side of the destination

void fill(std::vector<unsigned char>& v, unsigned seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>((i * 131u + seed * 7u + (i >> 9)) & 0xff);
}

void check_copy(size_t bytes, size_t src_off, size_t dst_off) {
  std::vector<unsigned char> src(bytes + 64), dst(bytes + 64 + 2 * kGuard);
  fill(src, 1);
  fill(dst, 2);
  const std::vector<unsigned char> before = dst;
  unsigned char* d = dst.data() + kGuard + dst_off;
  copy_streaming(d, src.data() + src_off, bytes);
  CHECK(std::memcmp(d, src.data() + src_off, bytes) == 0, "bytes %zu src+%zu dst+%zu: wrong bytes", bytes, src_off,
        dst_off);
  const size_t end = kGuard + dst_off + bytes;
  CHECK(std::memcmp(dst.data(), before.data(), kGuard + dst_off) == 0 &&
            std::memcmp(dst.data() + end, before.data() + end, dst.size() - end) == 0,
        "bytes %zu src+%zu dst+%zu: wrote outside the destination", bytes, src_off, dst_off);
}

void check_overlap(size_t bytes, long shift) {
  std::vector<unsigned char> a(bytes + 4096), b;
  fill(a, 3);
  b = a;
  const size_t base = 2048;
  copy_streaming(a.data() + base + shift, a.data() + base, bytes);
  std::memmove(b.data() + base + shift, b.data() + base, bytes);
  CHECK(a == b, "overlap: bytes %zu shift %ld differs from memmove", bytes, shift);
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  const size_t floor = kStreamingCopyBytes;
  // Below the floor (memmove): every pairing of the offsets.
  for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(4096), size_t(100000)}) {
    for (size_t src_off : {0, 3, 17, 48})
      for (size_t dst_off : {0, 1, 8, 31, 63}) check_copy(bytes, src_off, dst_off);
  }
  // Streamed: sizes that leave no tail, a one-byte tail and a 63-byte one, each with a destination on a
  // line boundary and off it by 1, 8, 31 and 63 bytes (a head of 63, 56, 33 and 1 bytes).
  const std::pair<size_t, size_t> offsets[] = {{0, 0}, {3, 1}, {17, 63}, {48, 31}, {0, 8}};
  for (size_t bytes : {floor - 1, floor, floor + 1, floor + 63, floor + 64, 3 * floor + 5}) {
    for (const auto& o : offsets) check_copy(bytes, o.first, o.second);
  }
  for (long shift : {-1000L, -64L, -1L, 1L, 64L, 1000L}) check_overlap(floor + 100, shift);
  return finish("stream_copy_test");
}
