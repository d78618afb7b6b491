// Recursive doubling's schedule: which peer a rank talks to at each step and what it does there.
//
// One schedule, two drivers: small_allreduce (blocking, over a Comm) and the engine's express round
// (engine/express_round.h, stepped so that a test can drive every rank from one thread). Both combine
// what arrives with what they hold; only the payload differs (a tensor, or a tensor plus a readiness word).
//
// p' = largest power of two <= p, rem = p - p'. Fix-up for p not a power of two: the first 2*rem ranks
// pair up (2i, 2i+1); the even one SENDs its data to the odd one (RECV_COMBINE) and sits out. The other
// p' ranks ("new ranks" 0..p'-1) run log2(p') EXCHANGE steps: at step k new rank n swaps its whole buffer
// with new rank n ^ 2^k and both combine. Finally each odd rank of the fix-up SENDs the result to its even
// partner (RECV_RESULT: it replaces the buffer). Steps: log2(p'), plus 2 when p is not a power of two.
//
// Identical results on every rank: both partners of an EXCHANGE hold the same two operands and combine
// them in the same order (peer_first: the partner has the lower new rank, so its value is the first
// operand), so even non-associative float sums agree bit for bit.
#pragma once
#include <cstdint>

namespace phv {

struct RdStep {
  enum Kind : uint8_t {
    SEND,          // send my buffer, keep it
    RECV_COMBINE,  // receive the peer's buffer and combine it into mine
    EXCHANGE,      // both at once: send mine, receive theirs, combine
    RECV_RESULT,   // receive the final result into my buffer
  };
  Kind kind = SEND;
  int peer = 0;             // set rank
  bool peer_first = false;  // RECV_COMBINE/EXCHANGE: the peer's value is the first operand
};

struct RdSchedule {
  static constexpr int kMaxSteps = 34;  // log2 of a 32-bit world plus the two fix-up steps
  RdStep steps[kMaxSteps];
  int n = 0;

  RdSchedule(int rank, int size) {
    if (size <= 1) return;
    int p2 = 1;
    while (p2 * 2 <= size) p2 *= 2;
    const int rem = size - p2;
    const bool folded = rank < 2 * rem;  // in a fix-up pair
    const bool sits_out = folded && rank % 2 == 0;
    if (folded) add(sits_out ? RdStep::SEND : RdStep::RECV_COMBINE, sits_out ? rank + 1 : rank - 1, !sits_out);
    if (!sits_out) {
      const int newrank = folded ? rank / 2 : rank - rem;
      for (int mask = 1; mask < p2; mask <<= 1) {
        const int partner_new = newrank ^ mask;
        const int partner = partner_new < rem ? partner_new * 2 + 1 : partner_new + rem;
        add(RdStep::EXCHANGE, partner, partner_new < newrank);
      }
    }
    if (folded) add(sits_out ? RdStep::RECV_RESULT : RdStep::SEND, sits_out ? rank + 1 : rank - 1, false);
  }

 private:
  void add(RdStep::Kind kind, int peer, bool peer_first) {
    steps[n].kind = kind;
    steps[n].peer = peer;
    steps[n].peer_first = peer_first;
    ++n;
  }
};

}  // namespace phv
