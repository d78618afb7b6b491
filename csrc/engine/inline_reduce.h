// Small allreduces, broadcasts, reducescatters and allgathers carried by the negotiation round itself.
//
// A cached allreduce of at most kInlineBytes (a loss, a metric, a counter) would otherwise cost a round
// (gather + broadcast) and then a collective of its own. Instead each rank puts its (prescaled) bytes
// next to the request's cache bit; when the coordinator sees the bit set on every member, it reduces the
// members' bytes in set order and broadcasts the result inside the response (item type INLINE), so the
// whole operation is one gather + broadcast. When some member is not ready yet the bytes are simply
// dropped and sent again next round, like the bit. A member that has joined contributes nothing (the
// identity). Every rank receives the coordinator's bytes, so all ranks hold bit-identical results.
//
// A small broadcast of the global set rides the same way: every rank sends its bytes (so that the packet
// has one shape whoever the root is), and the "reduction" keeps the root's. It needs every member ready:
// a joined member sends the request down the ordinary path, which knows what a join means for it. So does
// a small reducescatter of the global set: its whole input (at most kInlineBytes) is reduced as an
// allreduce's would be, and each rank keeps its own block of rows. And a small allgather of the global
// set: the "reduction" concatenates the members' bytes in set order, into an output the engine owns. A
// small alltoall of the global set with even splits concatenates the members' whole inputs the same way,
// and each rank then copies out the blocks addressed to it.
#pragma once
#include <cstdint>
#include <vector>
#include "engine/messages.h"
#include "engine/op.h"
#include "engine/response_cache.h"

namespace phv {

// At most this many bytes per request (members' inputs together, for a concatenation): up to here one
// express round (recursive doubling over the ring buffers) beat a round plus a collective of its own
// (RESULTS.md, "Express rounds up to 4 KiB" and "Inline requests up to 8 KiB": 8 KiB allgather,
// allreduce, broadcast and reducescatter 1.1-2x faster at 4 ranks on 2 cores). At 16 KiB it no longer
// did at 2 ranks: the 16 KiB allgather and reducescatter lost 10-20% there.
constexpr size_t kInlineBytes = 8192;
// A rank's message carries at most this many inline bytes; the requests past it send their bit alone, so
// the coordinator, which reduces every inline request itself, keeps them on the ordinary (fused, ring) path
// and a round with many small tensors does not funnel them all through rank 0.
constexpr size_t kInlineMessageBytes = 16384;

bool inline_eligible(const Desc& d);
// The same for a cached request, which also decides an allgather or alltoall: in the global set of at
// most 32 ranks (the express round's block mask), when the members' inputs together are at most
// kInlineBytes, and for an alltoall when every member's dim 0 splits evenly.
bool inline_eligible(const CacheEntry& e);
constexpr size_t kInlineMaxGatherRanks = 32;

// Kinds whose inline "reduction" concatenates the members' inputs in set order.
inline bool concatenates_inputs(DescKind kind) { return kind == kDescAllgather || kind == kDescAlltoall; }

// Whether this rank's request may send its bytes inline at an eligible position. The cache entry cannot
// tell an alltoall's splits: one with uneven explicit splits keeps the ordinary path (a member sending no
// bytes makes the position a miss for everyone).
bool sends_inline(const Request& req);

// Worker: appends this request's input (times its prescale) for bit position `pos`.
void append_inline(RankMessage& m, int pos, const Op& op);

// Coordinator: if every non-joined member sent bytes for pos, writes their reduction (a broadcast: the
// root's bytes) into `out` and returns true; false (out untouched) otherwise.
bool reduce_inline(const std::vector<RankMessage>& msgs, int pos, const Desc& d, const std::vector<int>& members,
                   const std::vector<uint8_t>& joined, std::vector<uint8_t>& out);

// Every rank: copies an INLINE item's result into the request's output and applies the postscale.
void finish_inline(const ResponseItem& item, Op& op, int set_size);

// The timeline's name for the execution of an inline request ("ALLREDUCE", "BROADCAST", ...).
const char* inline_span(const Desc& d);

}  // namespace phv
