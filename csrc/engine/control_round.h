// One negotiation round on this rank: this rank's RankMessage goes to the coordinator (global rank 0),
// which gathers every rank's message, decides, and broadcasts the one ResponseList every rank executes.
//
// The round owns what only the exchange needs: the coordinator (rank 0 only), the receive slots and the
// encode/decode buffers. It keeps nothing about requests between rounds (the coordinator does, rank 0).
//
// Express mode (express_round.h): while the last star response carried kRespExpress, run() first tries
// the express round and runs the star round only when that misses. Rank 0 turns the mode on after
// kExpressAfter consecutive star rounds that were one cached item the express round decides (an INLINE
// one, or a CACHED one of the global set) and nothing else; a miss turns it off.
//
// run() is the engine's entry: it blocks in the transport until the round is complete. The same round
// is also a small state machine (begin, then step until it says done) so that a test can drive every
// rank of an in-memory world from one thread, each step posting only what the previous one allows.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>
#include "engine/express_round.h"
#include "engine/messages.h"
#include "engine/negotiation.h"
#include "transport/transport.h"

namespace phv {

class ControlRound {
 public:
  // sets, cache and timeline are the engine's agreed state: the coordinator reads them, and a worker
  // resolves the list's cached items against its cache. All must outlive the round.
  ControlRound(Transport& transport, ProcessSetRegistry& sets, ResponseCache& cache, Timeline& timeline,
               const EngineOptions& options, bool gpu_built);

  // Exchanges `msg` and returns the agreed list (valid until the next round). Throws the transport's
  // HvdError when a peer fails or the deadline passes; the byte streams are then unusable.
  const ResponseList& run(const RankMessage& msg, Deadline deadline);

  // The same round in steps: begin() posts the first transfers; step() returns false while transfers
  // are in flight (Step::BLOCK: wait for them until the deadline instead) and true once response() is final.
  enum class Step { POLL, BLOCK };
  void begin(const RankMessage& msg);
  bool step(Step how, Deadline deadline);
  const ResponseList& response() const { return resp_; }

  // What run() did with the express round last time (stats, and the engine's stall text).
  enum class Express : uint8_t { OFF, HIT, MISS };
  Express last_express() const { return last_express_; }
  bool express_on() const { return express_on_; }
  static constexpr int kExpressAfter = 2;

  // Autotune, between rounds: the fusion threshold the coordinator plans with from now on.
  void set_fusion_threshold(int64_t bytes);

 private:
  // Where the round stands: what its posted transfers are, so what follows once they complete.
  enum class Stage : uint8_t {
    IDLE,
    GATHER_HEADS,  // coordinator: receiving every worker's first slot
    GATHER_TAILS,  // coordinator: receiving the rest of the longer messages
    BROADCAST,     // coordinator: sending the list to every worker
    REPLY_HEAD,    // worker: message sent, receiving the list's first slot
    REPLY_TAIL,    // worker: receiving the rest of a longer list
    DONE,
  };

  void drive(Deadline deadline);
  void note_agreed_flags();  // every rank, once resp_ is final: the copy path, and the mode of the next rounds
  void gather_tails();
  void decide_and_broadcast();
  bool receive_reply_tail();

  Transport& transport_;
  ResponseCache& cache_;
  int rank_;
  int size_;
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only
  Stage stage_ = Stage::IDLE;
  std::vector<RankMessage> msgs_;            // coordinator: every rank's message
  std::vector<std::vector<uint8_t>> slots_;  // coordinator: receive buffers per rank
  std::vector<uint8_t> send_buf_;
  std::vector<uint8_t> resp_buf_;
  ResponseList resp_;
  std::vector<RequestId> completed_;
  ExpressRound express_;
  bool express_on_ = false;  // agreed: the last star response's kRespExpress
  Express last_express_ = Express::OFF;
  int steady_ = 0;  // coordinator: consecutive star rounds that were one INLINE item
};

}  // namespace phv
