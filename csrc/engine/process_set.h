// Process sets: named groups of ranks that run collectives among themselves. Id 0 is the global set;
// static sets from the options get ids 1, 2, ... at construction; dynamic ones are added and removed at
// run time through negotiated requests, so every rank applies the change at the same point of the
// agreed order and ids stay identical on every rank. Each set has a Comm over the shared transport
// (no new connections) and its own operation counter, the sequence number quoted in error messages.
//
// Thread-safety: the engine thread changes the registry, callers read it (enqueue validation), so every
// method takes the registry's mutex; comm() returns a pointer that stays valid until the set is removed,
// and only the engine thread removes sets or runs collectives.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>
#include "transport/transport.h"

namespace phv {

struct ProcessSet {
  int id = 0;
  Comm comm;            // members ascending (global ranks); comm.my_index is -1 for non-members
  bool member = false;  // is this rank in the set?
  uint64_t ops_run = 0; // collectives run in this set (same count on every member)
};

class ProcessSetRegistry {
 public:
  ProcessSetRegistry(Transport* transport, int world_size, int my_rank);

  // Validates and normalises (sorts) ranks; throws HvdError(INVALID_ARGUMENT) with the reason.
  std::vector<int> normalise(const std::vector<int>& ranks) const;
  // Adds a set (ranks already normalised); returns its id. Throws INVALID_ARGUMENT if identical to an
  // existing set.
  int add(const std::vector<int>& ranks);
  void remove(int id);  // throws INVALID_ARGUMENT for id 0 or an unknown id

  bool exists(int id) const;
  bool is_member(int id) const;      // false for unknown ids
  std::vector<int> ranks(int id) const;  // throws INVALID_ARGUMENT for unknown ids
  std::vector<int> ids() const;
  int size_of(int id) const;         // 0 for unknown ids
  int my_index(int id) const;        // this rank's position in the set, -1 if not a member or unknown
  // Engine thread only: the set for running a collective (nullptr if unknown).
  ProcessSet* get(int id);
  // "rank 3 is not a member of process set 1 (ranks [0, 1])"-style check; throws INVALID_ARGUMENT.
  // Returns the set's size and this rank's index in it (one lock for enqueue's fast path).
  std::pair<int, int> check_member(int id, const char* op) const;

 private:
  mutable std::mutex mu_;
  Transport* transport_;
  int world_size_;
  int my_rank_;
  int next_id_ = 1;
  std::map<int, std::unique_ptr<ProcessSet>> sets_;
};

}  // namespace phv
