// The two messages of a negotiation round.
//
// Round: every rank sends a RankMessage to the coordinator (global rank 0); the coordinator answers every
// rank with the same ResponseList. A round is one gather plus one broadcast of small messages. Each
// message travels as a fixed-size slot of kSlotBytes (so the receiver can post its receive before it
// knows the length) followed, only when it is longer, by the rest in a second message whose length the
// slot's header gives.
//
// RankMessage: flags; the response-cache bits of every pending request this rank can name by bit (sent
// again every round while pending, so the coordinator keeps no state about them); descriptors of
// requests that are not in the cache (sent once, kept by the coordinator); and expiries (a request whose
// deadline passed: the coordinator turns it into a TIMEOUT error on every rank).
//
// ResponseList: what to run, in order, on every rank: CACHED (a bit position), FULL (the agreed
// descriptor, inserted into the cache after it runs), INLINE (a cached small allreduce already reduced
// by the coordinator: its result bytes) or ERROR (fail this key everywhere). `fused` marks an item that
// runs in one fusion buffer with the item before it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "common/error.h"
#include "engine/descriptor.h"

namespace phv {

constexpr size_t kSlotBytes = 512;

// RankMessage flags.
constexpr uint32_t kRankShutdown = 1;  // this rank's user asked to shut down
constexpr uint32_t kRankJoined = 2;    // this rank has a join() pending
constexpr uint32_t kRankWaiting = 4;   // this rank has reported requests that have not run yet
constexpr uint32_t kRankVoteWide = 8;     // this rank now prefers wide single copies (copy_path_vote.h)
constexpr uint32_t kRankVoteNarrow = 16;  // ... now prefers the fixed threshold again
constexpr uint32_t kRankVoteSingleAllreduce = 32;  // this rank now prefers the single-copy allreduce
constexpr uint32_t kRankVoteRingAllreduce = 64;    // ... now prefers the ring allreduce again

// ResponseList flags.
constexpr uint32_t kRespShutdown = 1;     // every rank stops after this round
constexpr uint32_t kRespJoinDone = 2;     // every rank has joined; join_value is the last one
constexpr uint32_t kRespAllWaiting = 4;   // nothing can progress until someone enqueues: sleep a cycle
constexpr uint32_t kRespExpress = 8;      // the following rounds begin with the express round (express_round.h)
constexpr uint32_t kRespWideCopies = 16;  // the copy-path mode is wide from this round on (copy_path_vote.h)
constexpr uint32_t kRespSingleCopyAllreduce = 32;  // large allreduces take single copies from this round on
// The flags that only carry the negotiation's modes: a round with nothing else is still a steady one.
constexpr uint32_t kRespModeFlags = kRespWideCopies | kRespSingleCopyAllreduce;

struct Expiry {
  Key key;
  DescKind kind = kDescAllreduce;
  double waited_s = 0;
  int64_t request_seq = 0;
};

struct InlineData {  // a small allreduce's bytes riding with its cache bit (engine/inline_reduce.h)
  int pos = -1;
  std::vector<uint8_t> data;
};

struct RankMessage {
  uint32_t flags = 0;
  std::vector<uint64_t> bits;
  std::vector<Desc> news;  // first n_news are valid (objects reused across rounds)
  size_t n_news = 0;
  std::vector<Expiry> expiries;
  size_t n_expiries = 0;
  std::vector<InlineData> inlines;
  size_t n_inlines = 0;

  void clear() {
    flags = 0;
    bits.clear();
    n_news = 0;
    n_expiries = 0;
    n_inlines = 0;
  }
  Desc& add_new();
  Expiry& add_expiry();
  InlineData& add_inline();
  void set_bit(int pos);
  bool bit(int pos) const {
    size_t w = static_cast<size_t>(pos) / 64;
    return w < bits.size() && ((bits[w] >> (pos % 64)) & 1u);
  }
};

// INLINE: a CACHED allreduce whose result the coordinator computed and sends in `data`.
enum class ItemType : uint8_t { CACHED = 1, FULL = 2, ERROR = 3, INLINE = 4 };

struct ResponseItem {
  ItemType type = ItemType::FULL;
  bool fused = false;
  int pos = -1;                   // CACHED/INLINE: bit position
  std::vector<uint8_t> data;      // INLINE: the reduced bytes
  Desc desc;                      // FULL: agreed descriptor; ERROR: kind, set and name
  std::vector<int64_t> dim0s;     // FULL allgather, alltoall: dim 0 of every member
  ErrorKind error_kind = ErrorKind::INTERNAL;
  std::string message;            // ERROR
  const Desc* agreed = nullptr;   // resolved locally: &desc, or the cache entry's descriptor
  const std::vector<int64_t>* agreed_dim0s = nullptr;
};

struct ResponseList {
  uint32_t flags = 0;
  int join_value = -1;
  int shutdown_rank = -1;
  std::string shutdown_reason;
  std::vector<ResponseItem> items;  // first n valid
  size_t n = 0;

  void clear() {
    flags = 0;
    join_value = -1;
    shutdown_rank = -1;
    shutdown_reason.clear();
    n = 0;
  }
  ResponseItem& add();
};

void encode_rank_message(const RankMessage& m, std::vector<uint8_t>& out);
void decode_rank_message(const uint8_t* data, size_t len, RankMessage& m);
void encode_response_list(const ResponseList& r, std::vector<uint8_t>& out);
void decode_response_list(const uint8_t* data, size_t len, ResponseList& r);

// Total length a message announces in its slot header (checked against a cap before any allocation).
size_t announced_length(const uint8_t* slot);

}  // namespace phv
