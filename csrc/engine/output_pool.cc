#include "engine/output_pool.h"

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
  OutputBuffer* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    // Best fit among the waiting buffers that hold `bytes` without reallocating and are at most twice
    // as large (a small request must not take, and then shrink, a big buffer that the next big request
    // would have to allocate and fault in again); among equals the one released last, whose lines are
    // likeliest still in cache.
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      size_t cap = free_[i]->capacity();
      if (cap >= bytes && cap / 2 <= bytes && (best == free_.size() || cap <= free_[best]->capacity())) best = i;
    }
    if (best == free_.size()) return nullptr;
    OutputBuffer* v = free_[best];
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
    held_ -= v->capacity();
    return v;
  }

  // The newest buffer stays; the oldest waiting ones make room for it. Refusing the newcomer instead left
  // the pool full of an earlier size's buffers, and a loop of larger outputs then allocated (and page
  // faulted) every one of them afresh: 256 MiB allgathers took 1.45x as long after a run of 16 and 64 MiB.
  void give_back(OutputBuffer* v) {
    if (v->capacity() < kMinBytes || v->capacity() > kMaxBytes) {
      delete v;
      return;
    }
    std::vector<OutputBuffer*> evicted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(v);
      held_ += v->capacity();
      while (free_.size() > kMaxBuffers || held_ > kMaxBytes) {
        evicted.push_back(free_.front());
        held_ -= free_.front()->capacity();
        free_.erase(free_.begin());
      }
    }
    for (OutputBuffer* old : evicted) delete old;  // unmapping outside the lock
  }

 private:
  std::mutex mu_;
  std::vector<OutputBuffer*> free_;
  size_t held_ = 0;
};

OutputBuffer* fresh_buffer(size_t bytes, size_t lead) {
  auto* v = new OutputBuffer;
  v->reshape(bytes, lead);  // on whole huge pages from its first touch, and not zero-filled (output_bytes.h)
  return v;
}

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: see output_pool.h
  return *p;
}

}  // namespace

OutputBytes take_output_buffer(size_t bytes, size_t lead) {
  if (bytes < kMinBytes) {
    auto small = std::make_shared<OutputBuffer>();
    small->reshape(bytes, lead);
    return small;
  }
  OutputBuffer* v = pool().take(OutputBuffer::kMaxLead + bytes);  // whatever lead it had
  if (v == nullptr) {
    v = fresh_buffer(bytes, lead);
  } else {
    v->reshape(bytes, lead);  // never above capacity here: no reallocation; shrinking writes nothing
  }
  return OutputBytes(v, [](OutputBuffer* b) { pool().give_back(b); });
}

}  // namespace phv
