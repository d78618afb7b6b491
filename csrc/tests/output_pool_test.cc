// The engine's output memory (engine/output_bytes.h, engine/output_pool.h): blocks of 2 MiB and more start
// on a 2 MiB boundary, growing a vector leaves the new bytes as they were (no zero fill), smaller blocks
// still work, and the pool hands a released buffer to the next request of a size it holds.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "engine/output_pool.h"
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
    OutputVector small(100);  // malloc's heap, any alignment
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
    }
    OutputBytes b = take_output_buffer(size_t(6) << 20);
    CHECK(b->data() == first && b->size() == size_t(6) << 20);
    OutputBytes c = take_output_buffer(size_t(1) << 20);  // far smaller: a fresh buffer, not the pooled one
    CHECK(c->data() != first && c->size() == size_t(1) << 20);
  }
  return finish("output_pool_test");
}
