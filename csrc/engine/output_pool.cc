#include "engine/output_pool.h"

#include <sys/mman.h>

#include <cstdint>
#include <mutex>

namespace phv {

namespace {

constexpr size_t kMaxBuffers = 4;
constexpr size_t kMaxBytes = size_t(1) << 30;
// Below this, malloc serves from its heap without mmap: nothing to save, so such buffers bypass the pool.
constexpr size_t kMinBytes = size_t(128) << 10;

class Pool {
 public:
  std::vector<uint8_t>* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    // Best fit among the waiting buffers that hold `bytes` without reallocating and are at most twice
    // as large (a small request must not take, and then shrink, a big buffer that the next big request
    // would have to zero-fill again).
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      size_t cap = free_[i]->capacity();
      if (cap >= bytes && cap / 2 <= bytes && (best == free_.size() || cap < free_[best]->capacity())) best = i;
    }
    if (best == free_.size()) return nullptr;
    std::vector<uint8_t>* v = free_[best];
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
    held_ -= v->capacity();
    return v;
  }

  void give_back(std::vector<uint8_t>* v) {
    if (v->capacity() < kMinBytes) {
      delete v;
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (free_.size() < kMaxBuffers && held_ + v->capacity() <= kMaxBytes) {
        held_ += v->capacity();
        free_.push_back(v);
        return;
      }
    }
    delete v;
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<uint8_t>*> free_;
  size_t held_ = 0;
};

// Transparent huge pages (2 MiB) for the whole 2 MiB-aligned part of a fresh buffer, asked before its
// first touch. Peers write these outputs with process_vm_writev (algorithms/direct_copy.h), and this rank
// with memcpy: the kernel pins the far side's pages one at a time, and with 4 KiB pages a cross-memory
// copy of 16 MiB ran at about a third of the speed it reaches on huge pages (benchmarks/cma_copy.py). numpy asks the same for its large
// arrays, so the raw core's numpy buffers already had them. Advice only: where the kernel refuses, the
// buffer simply keeps small pages.
void advise_huge_pages(void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const auto begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

std::vector<uint8_t>* fresh_buffer(size_t bytes) {
  auto* v = new std::vector<uint8_t>;
  v->reserve(bytes);  // allocated, not yet touched
  advise_huge_pages(v->data(), bytes);
  v->resize(bytes);
  return v;
}

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: see output_pool.h
  return *p;
}

}  // namespace

OutputBytes take_output_buffer(size_t bytes) {
  if (bytes < kMinBytes) return std::make_shared<std::vector<uint8_t>>(bytes);
  std::vector<uint8_t>* v = pool().take(bytes);
  if (v == nullptr) {
    v = fresh_buffer(bytes);
  } else {
    v->resize(bytes);  // never above capacity here: no reallocation; shrinking writes nothing
  }
  return OutputBytes(v, [](std::vector<uint8_t>* b) { pool().give_back(b); });
}

}  // namespace phv
