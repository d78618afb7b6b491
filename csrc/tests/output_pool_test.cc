// The engine's output memory (engine/output_bytes.h, engine/output_pool.h): blocks of 2 MiB and more start
// on a 2 MiB boundary, growing a vector leaves the new bytes as they were (no zero fill), smaller blocks
// still work, and the pool hands a released buffer to the next request of a size it holds, even when it
// was full of other sizes; and an output starts at the offset within a 64-byte line that it was asked for,
// whether fresh or reused.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <vector>

#include "engine/output_pool.h"
#include "transport/cross_memory.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  constexpr size_t kHuge = size_t(2) << 20;
  for (size_t bytes : {kHuge, kHuge + 1, 3 * kHuge + 4096, size_t(64) << 20}) {
    OutputVector v(bytes);
    CHECK(reinterpret_cast<uintptr_t>(v.data()) % kHuge == 0, "%zu bytes start at %p", bytes,
          static_cast<void*>(v.data()));
    std::memset(v.data(), 0xab, v.size());  // every byte writable
    CHECK(v[bytes - 1] == 0xab);
  }
  {
    // An output of whole huge pages starting a line in (its lead) spills a few bytes past the last 2 MiB
    // boundary: those fault in a small page, not a third huge page.
    OutputBytes b = take_output_buffer(kHuge * 2, 16);
    std::memset(b->data(), 1, b->size());
    uint8_t* past = b->data() - 16 + kHuge * 2;
    std::vector<unsigned char> resident(kHuge / 4096);
    CHECK(mincore(past, kHuge, resident.data()) == 0);
    size_t pages = 0;
    for (unsigned char r : resident) pages += r & 1;
    CHECK(pages == 1, "%zu small pages resident past the last huge page", pages);
  }
  {
    OutputVector small(100);  // below 2 MiB: on a 64-byte line
    std::memset(small.data(), 7, small.size());
    CHECK(small.size() == 100 && small[99] == 7);
  }
  {
    // Growing within the capacity default-initializes: the bytes stay as they were. std::allocator
    // would zero them (a wasted pass over an output the collective overwrites anyway).
    OutputVector v(kHuge);
    std::memset(v.data(), 0x5c, v.size());
    v.resize(16);
    v.resize(kHuge);
    CHECK(v[kHuge - 1] == 0x5c && v[kHuge / 2] == 0x5c);
  }
  {
    // A released buffer comes back for the next request that it holds.
    const void* first = nullptr;
    {
      OutputBytes a = take_output_buffer(size_t(8) << 20);
      first = a->data();
      CHECK(a->size() == size_t(8) << 20 && reinterpret_cast<uintptr_t>(first) % kHuge == 0);
      std::memset(a->data(), 0x11, a->size());
    }
    OutputBytes b = take_output_buffer(size_t(6) << 20);  // the same buffer, its bytes kept
    CHECK(b->data() == first && b->size() == size_t(6) << 20 && (*b)[0] == 0x11);
    OutputBytes c = take_output_buffer(size_t(1) << 20);  // far smaller: a fresh buffer, not the pooled one
    CHECK(c->data() != first && c->size() == size_t(1) << 20);
  }
  {
    // A full pool of other sizes still keeps the newest buffer: a loop of 16 MiB outputs after runs of
    // smaller ones reuses its own buffer instead of allocating each one afresh.
    std::vector<OutputBytes> others;
    for (size_t mib : {1, 2, 3, 5}) others.push_back(take_output_buffer(mib << 20));
    others.clear();  // four waiting buffers: the pool is full
    {
      OutputBytes b = take_output_buffer(size_t(16) << 20);
      std::memset(b->data(), 0x3c, b->size());
    }
    // The same buffer comes back with its bytes; a fresh one (even at the same address, as mmap may give)
    // would come from the kernel zeroed.
    OutputBytes again = take_output_buffer(size_t(16) << 20);
    CHECK((*again)[0] == 0x3c && (*again)[(size_t(16) << 20) - 1] == 0x3c,
          "the newest released buffer was dropped from a full pool");
  }
  {
    // The offset within a 64-byte line follows the request's input (copy_phase), for small outputs,
    // fresh ones and reused ones alike; a reused buffer still holds lead + bytes without reallocating.
    for (size_t lead : {size_t(16), size_t(0), size_t(48), size_t(8)}) {
      for (size_t bytes : {size_t(1000), size_t(32) << 20}) {
        OutputBytes b = take_output_buffer(bytes, lead);
        const auto at = reinterpret_cast<uintptr_t>(b->data());
        CHECK(at % kCopyLineBytes == lead && b->size() == bytes && b->lead() == lead, "%zu bytes at lead %zu: %p",
              bytes, lead, static_cast<void*>(b->data()));
        std::memset(b->data(), 0x42, b->size());
      }
    }
    // A released buffer serves the next request whatever the offsets of the two: the same storage.
    const uint8_t* start = nullptr;
    {
      OutputBytes a = take_output_buffer(size_t(24) << 20, 16);
      start = a->data() - 16;
    }
    OutputBytes b = take_output_buffer(size_t(24) << 20, 48);
    CHECK(b->data() - 48 == start && b->size() == size_t(24) << 20, "a new lead took a fresh buffer");
    CHECK(copy_phase(0x1010, 4) == 16 && copy_phase(0x103c, 4) == 60 && copy_phase(0x1004, 8) == 0 &&
          copy_phase(0x1003, 1) == 3);
    char line[3 * kCopyLineBytes];
    for (size_t phase : {size_t(0), size_t(16), size_t(40)}) {
      char* at = at_copy_phase(line, phase);
      CHECK(reinterpret_cast<uintptr_t>(at) % kCopyLineBytes == phase && at >= line && at < line + kCopyLineBytes);
    }
  }
  return finish("output_pool_test");
}
