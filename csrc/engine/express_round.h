// The express round: a cached small allreduce's (or broadcast's, reducescatter's, allgather's, alltoall's)
// negotiation and data in one recursive-doubling exchange; for any other cached request of the global set
// on the host, its negotiation alone (the collective then runs as after a star round).
//
// Terms. A rank is *ready* for the express round when its RankMessage says nothing but "my one request is
// the cached request at bit `pos`" and, for a small one, "here are its (prescaled) bytes"
// (engine/inline_reduce.h): no flags other than kRankWaiting (no shutdown, no join), no new descriptors,
// no expiries, exactly one bit, and a request the round decides() (below).
// Its *packet* is a header (ready, pos, length) followed by those bytes (none for a request without). Each step moves the packet's
// *head*, of a length every rank agrees on so that it can post its receives before knowing what its peer
// has; then, when a header says ready with more bytes than the head holds, a *tail* with the rest: its
// sender knows to send it from its own header, its receiver to receive it from the head it got. The head
// holds the bytes of the request that turned express mode on (at least 256, at most kInlineBytes;
// set_head_payload), which every rank reads from the same star response: a loop of that request moves one
// message per step, where a tail cost a second one (a 4 KiB broadcast at 4 ranks on 2 cores: 6 us more a
// call), and a 4-byte loss still moves a 272-byte head. Up to kInlineBytes take one round either way.
//
// Why. The star round (control_round.h) costs a message to rank 0 and one back, then the data; even with
// the inline path (the bytes ride in the star round) it is two serial hops through rank 0, which does
// 2(p-1) transfers. Here every rank exchanges its packet with a partner each step of recursive doubling
// (algorithms/recursive_doubling.h): log2(p) hops, no rank busier than another.
//
// Combining. Each step the two packets become one: ready only if both are ready for the same pos and
// length (the cache is agreed, so the same pos is the same name, dtype, shape and op on every rank), and
// only then are the bytes reduced (a broadcast: the packet that holds the root's bytes, as its header
// says, is kept; the root is every rank's partner sooner or later, so every rank ends with its bytes; an
// allgather or alltoall: each packet holds the members' inputs its header's mask names, at their offsets
// in the concatenation, and the union is kept). Once ready is false the bytes are never combined again, so mismatched ranks never mix different tensors.
// At the end every rank holds the same packet (the schedule makes results identical everywhere), so every
// rank takes the same branch:
//   hit:  response() is one INLINE item (one CACHED item for a request without bytes), executed like the
//         star round's; no star round is run.
//   miss: nothing was decided; the caller runs the normal star round with the same message, so a rank
//         that is not ready, a mismatch, a shutdown or a join are handled exactly as without express.
//
// When it runs. Only while express mode is on, which every rank learns from the star round's response
// (kRespExpress): rank 0 turns it on after two consecutive star rounds that were one INLINE or CACHED item
// the round decides() and nothing else, and off after a miss. Every rank therefore starts every round
// with the same exchange. Why the negotiation alone too: a synchronous loop of one cached 16 KiB allreduce
// otherwise pays two serial hops through rank 0 before its collective, every call.
//
// Like ControlRound, run() blocks; begin()/step() let a test drive every rank of an in-memory world.
#pragma once
#include <cstdint>
#include <vector>
#include "algorithms/recursive_doubling.h"
#include "engine/inline_reduce.h"
#include "engine/messages.h"
#include "engine/response_cache.h"
#include "transport/transport.h"

namespace phv {

class ExpressRound {
 public:
  static constexpr size_t kHeaderBytes = 16;
  static constexpr size_t kHeadBytes = kHeaderBytes + 256;  // the shortest head: header and 256 payload bytes
  static constexpr size_t kPacketBytes = kHeaderBytes + kInlineBytes;

  // cache: the engine's agreed response cache (outlives the round).
  ExpressRound(Transport& transport, const ResponseCache& cache);

  // Whether `msg` makes this rank ready (see above; decides() is checked against the cache in begin()).
  static bool ready(const RankMessage& msg);
  // Whether the round may decide this cached request: one of the global set (every rank is a member, which
  // a hit needs), on the host, not part of a group (a group runs only whole). Rank 0 turns express mode on
  // only for these (control_round.cc).
  static bool decides(const CacheEntry& e);

  // The head's payload from now on: `bytes`, within [kHeadBytes - kHeaderBytes, kInlineBytes]. Every rank
  // must set the same value between rounds (ControlRound: from the star response that turns express on).
  void set_head_payload(size_t bytes);

  // Runs the exchange; returns hit(). Throws the transport's HvdError (with the step and peer added).
  bool run(const RankMessage& msg, Deadline deadline);

  enum class Step { POLL, BLOCK };  // as ControlRound's: POLL returns false while transfers are in flight
  void begin(const RankMessage& msg);
  bool step(Step how, Deadline deadline);  // true once the exchange is complete
  bool hit() const { return hit_; }
  const ResponseList& response() const { return resp_; }  // valid after a hit, until the next begin()

 private:
  struct Header {
    uint32_t ready;
    int32_t pos;
    uint32_t len;
    uint32_t holds;  // broadcast: 1 when the bytes are the root's; allgather, alltoall: a bit per member block held
  };
  Header& header(std::vector<uint8_t>& packet) { return *reinterpret_cast<Header*>(packet.data()); }
  void post_step();
  bool post_tails();  // once a step's heads are through: the tails they announce; true if any was posted
  void combine_step();
  void finish();

  Transport& transport_;
  const ResponseCache& cache_;
  RdSchedule schedule_;
  int at_ = 0;  // the schedule step in flight
  bool tails_posted_ = false;  // the step in flight is past its heads
  size_t head_bytes_ = kHeadBytes;
  bool done_ = true;
  bool hit_ = false;
  std::vector<uint8_t> mine_;  // my packet, combined in place
  std::vector<uint8_t> theirs_;  // the peer's packet
  std::vector<RequestId> completed_;
  ResponseList resp_;
};

}  // namespace phv
