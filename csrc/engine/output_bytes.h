// The type of the output memory the engine allocates for allgather and alltoall (Result.output).
//
// Peers copy into these outputs with process_vm_writev (algorithms/direct_copy.h), and the kernel pins the
// far side's pages one at a time: with 4 KiB pages a cross-memory copy runs at about a third of its speed
// on 2 MiB transparent huge pages (benchmarks/cma_copy.py). malloc's large blocks start anywhere, so up to
// 2 MiB at each end of a buffer stayed on small pages even when huge pages were asked for the rest. This
// allocator starts every block of 2 MiB or more on a 2 MiB boundary and asks for huge pages for all of
// it before the first touch (advice: where the kernel refuses, the block keeps small pages); smaller
// blocks start on a 64-byte line. It also leaves new elements uninitialized: the collective overwrites
// every byte, so a zero fill was a wasted pass over memory.
//
// The bytes of an output start `lead` bytes into that storage: at the same offset within a 64-byte line as
// the request's input, so that the peers' kernel copies into it run at full speed
// (transport/cross_memory.h, copy_phase).
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
  static constexpr size_t kLine = 64;

  static constexpr size_t round_up(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding, as allocators do

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) {  // on a 64-byte line, so that a lead places the bytes within it
      void* p = std::aligned_alloc(kLine, (bytes + kLine) / kLine * kLine);
      if (p == nullptr) throw std::bad_alloc();
      return static_cast<T*>(p);
    }
    // Straight from the kernel, not from malloc: freed blocks of this size go back at once instead of
    // raising malloc's threshold for mapping and then lying free in its heap (a 4-rank soak of mixed
    // sizes left up to 70 MiB free there), and the over-mapped slack that gives the alignment is unmapped.
    const size_t whole = round_up(bytes);
    void* mapped = mmap(nullptr, whole + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) throw std::bad_alloc();
    auto* start = static_cast<uint8_t*>(mapped);
    auto* p = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(start)));
    if (p > start) munmap(start, static_cast<size_t>(p - start));
    munmap(p + whole, static_cast<size_t>(start + kHugePage - p));
    // Huge pages for all but a last line that spills past a 2 MiB boundary: an OutputBuffer holds a line
    // more than its bytes (for a lead), and a 4 MiB output starting 16 bytes in would otherwise fault in a
    // whole third huge page, 2 MiB of resident memory, for its last 16 bytes.
    const size_t advised = round_up(bytes - kLine);
    madvise(p, advised, MADV_HUGEPAGE);
    if (advised < whole) madvise(p + advised, whole - advised, MADV_NOHUGEPAGE);
    return reinterpret_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) {
      std::free(p);
    } else {
      munmap(p, round_up(bytes));
    }
  }

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

// size() bytes at data(), which lies lead() bytes into the storage (lead < kMaxLead).
class OutputBuffer {
 public:
  static constexpr size_t kMaxLead = 64;
  OutputBuffer() = default;
  explicit OutputBuffer(OutputVector bytes) : storage_(std::move(bytes)), size_(storage_.size()) {}
  // `bytes` bytes starting `lead` bytes in. The storage holds kMaxLead more, so the buffer takes any lead
  // later (an input's offset moves with where the caller's allocator put it); no reallocation (and no byte
  // written) when the capacity holds them, so a reused buffer keeps its pages and its old contents.
  void reshape(size_t bytes, size_t lead) {
    storage_.reserve(kMaxLead + bytes);
    storage_.resize(lead + bytes);
    lead_ = lead;
    size_ = bytes;
  }
  uint8_t* data() { return storage_.data() + lead_; }
  const uint8_t* data() const { return storage_.data() + lead_; }
  size_t size() const { return size_; }
  size_t lead() const { return lead_; }
  size_t capacity() const { return storage_.capacity(); }
  uint8_t& operator[](size_t i) { return data()[i]; }
  const uint8_t& operator[](size_t i) const { return data()[i]; }

 private:
  OutputVector storage_;
  size_t lead_ = 0;
  size_t size_ = 0;
};

using OutputBytes = std::shared_ptr<OutputBuffer>;

}  // namespace phv
