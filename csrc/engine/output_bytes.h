// The type of the output memory the engine allocates for allgather and alltoall (Result.output).
//
// Peers copy into these outputs with process_vm_writev (algorithms/direct_copy.h), and the kernel pins the
// far side's pages one at a time: with 4 KiB pages a cross-memory copy runs at about a third of its speed
// on 2 MiB transparent huge pages (benchmarks/cma_copy.py). malloc's large blocks start anywhere, so up to
// 2 MiB at each end of a buffer stayed on small pages even when huge pages were asked for the rest. This
// allocator starts every block of 2 MiB or more on a 2 MiB boundary and asks for huge pages for all of
// it before the first touch (advice: where the kernel refuses, the block keeps small pages). It also
// leaves new elements uninitialized: the collective overwrites every byte, so a zero fill was a wasted
// pass over memory.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace phv {

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t(2) << 20;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding, as allocators do

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) {
      void* p = std::malloc(bytes == 0 ? 1 : bytes);
      if (p == nullptr) throw std::bad_alloc();
      return static_cast<T*>(p);
    }
    const size_t whole = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, whole);
    if (p == nullptr) throw std::bad_alloc();
    madvise(p, whole, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }

  // Default-initialize (for bytes: leave as they are) where std::allocator would zero.
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const {
    return false;
  }
};

using OutputVector = std::vector<uint8_t, HugePageAllocator<uint8_t>>;
using OutputBytes = std::shared_ptr<OutputVector>;

}  // namespace phv
