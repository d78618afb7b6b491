// The coordinator (global rank 0) of the negotiation rounds: from every rank's RankMessage it decides
// which requests are ready on every member of their process set, checks that the members agree, and
// writes the one ResponseList that every rank then executes in the same order.
//
// Readiness: a request is ready when every member of its set has submitted it, where a member that has
// joined counts as having submitted any allreduce (it contributes the identity). Cached requests are
// named by bits that each rank re-sends every round while pending (a stateless AND); uncached ones by
// descriptors that the coordinator keeps in its table until the key resolves. A key can be reported by
// bit on some ranks and by descriptor on others (for example when one rank's shape changed): the bits are
// then folded into the table entry and the descriptors compared as usual, so the change is a mismatch
// error rather than a silent cache hit.
//
// Verdicts per ready key: FULL (agreed descriptor; allgather also lists every member's dim 0), CACHED
// (bit position), or ERROR (mismatch -> INTERNAL; a member's deadline passed -> TIMEOUT naming the ranks
// that never submitted; a non-allreduce while a member has joined -> INTERNAL). Header flags: shutdown
// (any rank asked, or the stall inspector's limit), join done (all ranks joined; value = last to join),
// all waiting (nothing can progress until an enqueue: everyone sleeps a cycle instead of spinning), wide
// copies (more than half the ranks' last copy-path votes were for wide single copies: copy_path_vote.h),
// single-copy allreduce (the same for the allreduce votes).
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>
#include "engine/engine_options.h"
#include "engine/fusion.h"
#include "engine/messages.h"
#include "engine/process_set.h"
#include "engine/response_cache.h"
#include "engine/stall.h"
#include "engine/timeline.h"

namespace phv {

class Coordinator {
 public:
  Coordinator(int world, ProcessSetRegistry& sets, ResponseCache& cache, Timeline& timeline,
              const EngineOptions& options, bool gpu_built);

  // msgs[r] is rank r's message of this round. The result has `agreed` pointers resolved.
  void decide(const std::vector<RankMessage>& msgs, ResponseList& out);
  // Between rounds (autotune): the fusion threshold of the units planned from now on.
  void set_fusion_threshold(int64_t bytes) { fusion_threshold_ = bytes; }

 private:
  struct TableEntry {
    std::vector<Desc> descs;     // per global rank
    std::vector<uint8_t> have;   // per global rank
    Clock::time_point first_seen;
    uint64_t order = 0;
  };
  struct Partial {  // a cached request some members have reported this round and others not
    uint64_t generation = 0;
    Clock::time_point first_seen;
    std::vector<uint8_t> marked;  // timeline: rank already marked ready
  };

  void take_new(const std::vector<RankMessage>& msgs, Clock::time_point now);
  void take_bits(const std::vector<RankMessage>& msgs, Clock::time_point now, ResponseList& out);
  void take_expiries(const std::vector<RankMessage>& msgs, Clock::time_point now, ResponseList& out);
  void take_table(Clock::time_point now, ResponseList& out);
  void check_stalls(const std::vector<RankMessage>& msgs, Clock::time_point now, ResponseList& out);
  void verdict(const Key& key, TableEntry& e, const std::vector<int>& members, ResponseList& out);
  void add_error(ResponseList& out, const Key& key, DescKind kind, ErrorKind err, const std::string& msg);
  // negotiation_bits.cc: the requests named by cache bit.
  bool fold_into_table(int pos, const CacheEntry& ce, const std::vector<int>& members,
                       const std::vector<RankMessage>& msgs);
  bool bits_ready(int pos, const std::vector<int>& members, const std::vector<RankMessage>& msgs,
                  bool& joined_missing) const;
  void track_partial(int pos, const CacheEntry& ce, const std::vector<int>& members,
                     const std::vector<RankMessage>& msgs, Clock::time_point now);
  void close_partial(int pos, const CacheEntry& ce, const std::vector<int>& members,
                     const std::vector<RankMessage>& msgs, Clock::time_point now);
  void answer_cached(int pos, const Desc& d, const std::vector<int>& members, const std::vector<RankMessage>& msgs,
                     bool joined_missing, ResponseList& out);
  std::vector<int> joined_members(const std::vector<int>& members) const;
  bool expiring(const Key& key) const;
  // Why a ready request cannot run ("" when it can; kind: the error's kind): a non-allreduce while
  // members have joined, or a CUDA tensor without the GPU backend or with joined members.
  std::string refusal(const Desc& d, const Key& key, const std::vector<int>& joined, ErrorKind& kind) const;
  // negotiation_explain.cc: the names `rank` has pending, and the timeout text's explanation.
  std::vector<std::string> pending_names(int rank, const std::vector<RankMessage>& msgs) const;
  std::string explain_missing(const Key& key, const std::vector<int>& missing,
                              const std::vector<RankMessage>& msgs) const;

  int world_;
  ProcessSetRegistry& sets_;
  ResponseCache& cache_;
  Timeline& timeline_;
  int64_t fusion_threshold_;
  int64_t fusion_max_tensor_;
  bool gpu_built_;
  StallInspector stall_;
  FusionPlanner planner_;

  std::unordered_map<Key, TableEntry, KeyHash> table_;
  uint64_t next_order_ = 0;
  std::unordered_map<int, Partial> partial_;  // by bit position
  std::vector<uint8_t> joined_;               // this round, per rank
  std::vector<uint64_t> join_order_;          // 0: not joined; else order in which ranks joined
  uint64_t join_counter_ = 0;
  std::vector<uint8_t> votes_wide_;           // per rank: its last copy-path vote was for wide
  std::vector<uint8_t> votes_single_allreduce_;  // per rank: its last allreduce vote was for single copies
  std::vector<uint64_t> or_bits_;
  std::vector<std::pair<uint64_t, Key>> ready_;
  std::vector<const Expiry*> expiries_;
  std::vector<int> expiry_rank_;
};

}  // namespace phv
