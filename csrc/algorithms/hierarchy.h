// Two-level (hierarchical) collectives: ranks grouped by host.
//
// Terms: H hosts with L ranks each (p = H*L). The local comm of a rank is the ranks of its host; its
// cross comm is the ranks of every host that hold the same position j in their host (the j-th lowest
// rank of each host), one per host.
//
// Hierarchical allreduce of M bytes: a reduce-scatter inside the host leaves local rank j with chunk j
// (M/L bytes) reduced over the host; one allreduce per local rank on its chunk over its cross comm (the
// L cross allreduces run at once, each over its own rank of every host); an allgather inside the host.
// A host's link then carries 2(H-1)/H * M in all (L streams of M/L) instead of the flat ring's
// 2(p-1)/p * M: at 2 hosts x 2 ranks, M instead of 1.5 M.
//
// The alpha-beta model that picks flat or hierarchical per size (HierarchyModel) is fitted at init
// from timed rings of the three kinds the choice involves, each on the links it really uses:
//   flat:  T = 2(p-1)*alpha_flat + 2(p-1)/p * M/beta_flat           (the ring over all ranks)
//   local: T = 2(L-1)*alpha_local + 2(L-1)/L * M/beta_local         (a ring inside each host, all at once)
//   cross: T = 2(H-1)*alpha_cross + 2(H-1)/H * s/beta_cross         (the L cross rings at once, shard s)
// hierarchical(M) = local(M) + cross(M/L): the local reduce-scatter plus allgather move exactly what a
// local ring allreduce of M moves.
// Below the small-message threshold the flat allreduce is recursive doubling: with ranks numbered host
// by host, ceil(log2 L) exchanges of the whole message inside the host, then ceil(log2 H) across it
// (the L ranks of a host exchanging at once, as the cross rings do):
//   flat_small: T = ceil(log2 L)*(alpha_local + M/beta_local) + ceil(log2 H)*(alpha_cross + M/beta_cross)
// The same holds for the hierarchical allreduce's cross phase, whose shard M/L is often small.
// Two timed sizes (256 KiB and 4 MiB) pin beta but hardly alpha (the fit often clamps it to 0), and at
// small sizes alpha decides; so the choice uses at least the Tuning's per-hop latencies (alpha_shm_s
// inside a host, alpha_s across). Small messages also pay what no alpha-beta fit holds (a wake-up per
// extra phase on busy cores, a traffic shaper's burst that lets a short message through at full speed),
// so init also times both algorithms at 4, 16 and 64 KiB: below the small-message threshold, two levels
// are used only from the smallest of those sizes at which they won by 10% (and kept winning at every larger
// one), and the model decides from there.
#pragma once
#include <cstddef>
#include <vector>
#include "algorithms/tuning.h"
#include "common/types.h"
#include "transport/transport.h"

namespace phv {

// Ring alpha (s per step) and beta (bytes/s) of one kind of ring; valid when beta > 0.
struct RingFit {
  double alpha_s = 0;
  double beta_bytes_per_s = 0;
  bool valid() const { return beta_bytes_per_s > 0; }
  // Predicted ring allreduce of `bytes` over n ranks: 2(n-1)*alpha + 2(n-1)/n * bytes/beta.
  double allreduce_s(int n, double bytes) const;
  // Predicted ring allgather collecting `bytes` in all over n ranks: (n-1)*alpha + (n-1)/n * bytes/beta.
  double allgather_s(int n, double bytes) const;
  // Predicted recursive doubling over n ranks: ceil(log2 n) exchanges of the whole `bytes`.
  double exchanges_s(int n, double bytes) const;
};

// Fit of T = 2(n-1)*alpha + 2(n-1)/n * bytes/beta through two timed ring allreduces (t1 at bytes1,
// t2 at bytes2 > bytes1). alpha is clamped at 0; beta invalid (0) when t2 <= t1.
RingFit fit_ring(int n, double bytes1, double t1, double bytes2, double t2);

struct HierarchyModel {
  RingFit flat, local, cross;
  // Below the flat small-message threshold, never two levels under this size (set at init from timed
  // runs; 0: no such limit).
  double two_level_from_bytes = 0;
  bool valid() const { return flat.valid() && local.valid() && cross.valid(); }
  double flat_allreduce_s(int hosts, int per_host, double bytes) const;
  double flat_small_allreduce_s(int hosts, int per_host, double bytes) const;  // recursive doubling
  // cross_small_bytes: the cross comm's small-message threshold (its allreduce is recursive doubling
  // below it); 0: always the ring.
  double hierarchical_allreduce_s(int hosts, int per_host, double bytes, double cross_small_bytes = 0) const;
  double flat_allgather_s(int hosts, int per_host, double bytes) const;
  double hierarchical_allgather_s(int hosts, int per_host, double bytes) const;
  // This model with every alpha raised to at least the tuning's (see above).
  HierarchyModel with_alpha_floor(const Tuning& tuning) const;
};

// Which ranks share a host, and whether to use the two-level algorithms.
// mode: 1 always (HOROVOD_HIERARCHICAL_*=1), 0 never, -1 automatic (the model, per size).
struct Hierarchy {
  std::vector<int> host_of;  // host index (0..H-1) of every global rank; empty: unknown (never two-level)
  int allreduce_mode = -1;
  int allgather_mode = -1;
  HierarchyModel model;      // fitted at init when a mode is automatic and the layout allows two levels
};

// The local and cross comms of this rank within `comm` (whose members are global ranks), or false
// when comm's members do not form >= 2 hosts of equal size >= 1 under host_of.
struct TwoLevel {
  Comm local, cross;
  int hosts = 0, per_host = 0;
};
bool make_two_level(const Comm& comm, const std::vector<int>& host_of, TwoLevel* out);

// Decides flat or two-level for a `collective` (ALLREDUCE or ALLGATHER) of `bytes` (mode as in Hierarchy).
// Automatic: two-level when the model (alphas floored) predicts it faster than the flat algorithm the
// size would run: the ring, or recursive doubling below the flat comm's small-message threshold.
bool prefer_two_level(int mode, const HierarchyModel& model, const TwoLevel& tl, size_t bytes, OpType collective,
                      const Tuning& tuning);

// Same contract as allreduce() (algorithms.h) over the union of tl's comms (comm.size() = H*L).
void hierarchical_allreduce(const TwoLevel& tl, void* buf, size_t count, DataType dt, ReduceOp op, const Tuning& tuning,
                            Deadline deadline, double postscale = 1.0);

// Same contract as allgatherv() over `comm` (bytes_per_rank indexed by comm rank), through tl: gather
// inside the host, each local rank exchanges 1/L of its host's bytes with its cross comm, gather
// inside the host again. Scratch: about twice the output.
void hierarchical_allgatherv(const Comm& comm, const TwoLevel& tl, const std::vector<int>& host_of, const void* send,
                             void* recv, const std::vector<size_t>& bytes_per_rank, const Tuning& tuning,
                             Deadline deadline);

}  // namespace phv
