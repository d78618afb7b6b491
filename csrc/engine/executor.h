// Runs one agreed unit (a single request, or several fused allreduces) on this rank's Comm of the set:
// copies into and out of the fusion buffer, applies prescale/postscale (AVERAGE = SUM then 1/size),
// calls the algorithm, and fills each request's Result. Never writes to an out-of-place request's input.
//
// A rank that has joined and lacks some of the unit's requests (entry.op == nullptr) contributes the
// reduction's identity for them and discards the result.
//
// Copies: a lone allreduce copies input -> output once when out of place, then reduces in place; a
// fused unit copies every input in and every result out (2 copies of each tensor).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>
#include "algorithms/tuning.h"
#include "engine/op.h"
#include "engine/process_set.h"
#include "engine/timeline.h"

namespace phv {

struct UnitEntry {
  const Desc* agreed = nullptr;
  const std::vector<int64_t>* dim0s = nullptr;
  Op* op = nullptr;  // nullptr: this rank joined and contributes the identity
};

class Executor {
 public:
  Executor(const Tuning& tuning, Timeline& timeline) : tuning_(tuning), timeline_(timeline) {}

  // Throws HvdError from the algorithms (the caller adds the request context).
  void run(const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline);

 private:
  void allreduce(const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline);
  void allgather(const Comm& comm, const UnitEntry& e, Deadline deadline);
  void broadcast(const Comm& comm, const UnitEntry& e, Deadline deadline);
  void alltoall(const Comm& comm, const UnitEntry& e, Deadline deadline);
  void reducescatter(const Comm& comm, const UnitEntry& e, Deadline deadline);
  uint8_t* scratch(size_t bytes);
  void spans(const std::vector<UnitEntry>& unit, const std::string& name, bool begin);

  Tuning tuning_;
  Timeline& timeline_;
  std::vector<uint8_t> fusion_;  // grows to the largest unit, never shrinks: no allocation per cycle
  std::vector<size_t> sizes_;
};

}  // namespace phv
