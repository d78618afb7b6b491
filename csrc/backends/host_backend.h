// CollectiveBackend on host memory: the algorithms (algorithms/algorithms.h) over the Comm's transport.
//
// It makes the choices among algorithms: allreduce and allgather go two-level (algorithms/hierarchy.h)
// when the comm is the whole job spread over several hosts and the hierarchy's mode or model says so,
// else flat (where allreduce() picks the small-message algorithm or the ring by size); a fused Adasum
// unit passes the entries' element counts so that its dot products are per tensor.
//
// Copies: a lone allreduce copies input -> output once when out of place, then reduces in place; a
// fused unit copies every input into the fusion buffer and every result out (2 copies of each tensor).
// Never writes to an out-of-place input.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>
#include "algorithms/hierarchy.h"
#include "algorithms/tuning.h"
#include "backends/collective_backend.h"

namespace phv {

class HostBackend : public CollectiveBackend {
 public:
  explicit HostBackend(const Tuning& tuning) : tuning_(tuning) {}

  void allreduce(const Comm& comm, const std::vector<BufferEntry>& entries, DataType dt, ReduceOp op, double prescale,
                 double postscale, const CallContext& ctx) override;
  void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                  const CallContext& ctx) override;
  void broadcast(const Comm& comm, const void* input, void* buf, size_t bytes, int root,
                 const CallContext& ctx) override;
  void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes, const CallContext& ctx) override;
  void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts, DataType dt,
                     ReduceOp op, double prescale, double postscale, const CallContext& ctx) override;
  void barrier(const Comm& comm, const CallContext& ctx) override;

  // Before the first call: the host layout and the flat/two-level model.
  void set_hierarchy(const Hierarchy& hierarchy) { hierarchy_ = hierarchy; }
  // From any thread: knobs that the next call starting after it uses (autotune). mode < -1 /
  // segment_bytes < 0: unchanged. Every rank must set the same values before the calls they apply to.
  void set_knobs(int allreduce_mode, int64_t segment_bytes);

 private:
  void apply_knobs();
  uint8_t* scratch(size_t bytes);
  const TwoLevel* two_level(const Comm& comm);  // nullptr: comm is not the whole job, or one host
  // allreduce() or hierarchical_allreduce(), by the hierarchy's mode and the model.
  void reduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, Deadline deadline, double post,
              const void* input = nullptr);
  void fused_allreduce(const Comm& comm, const std::vector<BufferEntry>& entries, DataType dt, ReduceOp op,
                       double prescale, double postscale, const CallContext& ctx);

  Tuning tuning_;
  std::vector<uint8_t> fusion_;  // grows to the largest unit, never shrinks: no allocation per cycle
  std::vector<size_t> counts_;   // elements per entry of a fused Adasum unit
  Hierarchy hierarchy_;
  TwoLevel two_level_;
  enum class TwoLevelState { UNKNOWN, BUILT, IMPOSSIBLE };
  TwoLevelState two_level_state_ = TwoLevelState::UNKNOWN;
  std::mutex knobs_mu_;
  std::atomic<bool> knobs_pending_{false};
  int pending_mode_ = -2;
  int64_t pending_segment_ = -1;
};

}  // namespace phv
