// Two-level allreduce and allgather (see hierarchy.h for the terms and the traffic they save).
#include <algorithm>
#include <cstring>
#include <map>

#include "algorithms/algorithms.h"
#include "algorithms/hierarchy.h"
#include "algorithms/ring_pipeline.h"
#include "common/error.h"

namespace phv {

namespace {

// Hosts of comm's members in order of their lowest rank; each host's members ascending.
std::vector<std::vector<int>> hosts_of(const Comm& comm, const std::vector<int>& host_of) {
  std::map<int, size_t> index;  // host id -> position in the result
  std::vector<std::vector<int>> hosts;
  for (int g : comm.members) {
    int h = host_of[static_cast<size_t>(g)];
    auto it = index.find(h);
    if (it == index.end()) {
      it = index.emplace(h, hosts.size()).first;
      hosts.emplace_back();
    }
    hosts[it->second].push_back(g);
  }
  return hosts;
}

Comm sub_comm(const Comm& comm, std::vector<int> members) {
  std::sort(members.begin(), members.end());
  Comm c;
  c.transport = comm.transport;
  c.my_index = static_cast<int>(std::find(members.begin(), members.end(), comm.global(comm.rank())) - members.begin());
  c.members = std::move(members);
  return c;
}

std::vector<Range> to_bytes(std::vector<Range> chunks, size_t esize) {
  for (Range& r : chunks) {
    r.offset *= esize;
    r.count *= esize;
  }
  return chunks;
}

}  // namespace

bool make_two_level(const Comm& comm, const std::vector<int>& host_of, TwoLevel* out) {
  if (comm.rank() < 0 || comm.size() < 2) return false;
  for (int g : comm.members)
    if (g < 0 || static_cast<size_t>(g) >= host_of.size()) return false;
  std::vector<std::vector<int>> hosts = hosts_of(comm, host_of);
  if (hosts.size() < 2) return false;
  const size_t per_host = hosts.front().size();
  for (const auto& h : hosts)
    if (h.size() != per_host) return false;
  const int me = comm.global(comm.rank());
  size_t j = 0;
  for (const auto& h : hosts) {
    auto it = std::find(h.begin(), h.end(), me);
    if (it != h.end()) {
      out->local = sub_comm(comm, h);
      j = static_cast<size_t>(it - h.begin());
    }
  }
  std::vector<int> cross;
  for (const auto& h : hosts) cross.push_back(h[j]);
  out->cross = sub_comm(comm, cross);
  out->hosts = static_cast<int>(hosts.size());
  out->per_host = static_cast<int>(per_host);
  return true;
}

void hierarchical_allreduce(const TwoLevel& tl, void* buf, size_t count, DataType dt, ReduceOp op, const Tuning& tuning,
                            Deadline deadline, double postscale) {
  const size_t esize = dtype_size(dt);
  PHV_CHECK_ARG(esize != 0, "allreduce: unknown dtype ", static_cast<int>(dt));
  if (count == 0) return;
  char* base = static_cast<char*>(buf);
  const int L = tl.local.size();
  // Chunk j of the buffer is local rank j's shard: reduced over the host, then over the hosts.
  std::vector<Range> chunks = even_chunks(count, L);
  if (L > 1) run_ring(tl.local, buf, chunks, dt, op, RingKind::REDUCE_SCATTER, tuning, deadline);
  const Range& mine = chunks[static_cast<size_t>(tl.local.rank())];
  if (mine.count > 0) {
    allreduce(tl.cross, base + mine.offset * esize, mine.count, dt, op, tuning, deadline, postscale);
  }
  if (L > 1)
    run_ring(tl.local, buf, to_bytes(chunks, esize), DataType::UINT8, ReduceOp::SUM, RingKind::ALLGATHER, tuning,
             deadline);
}

// Stage 1 gathers my host's blocks (host block: its members' blocks in rank order, S_h bytes). Stage 2:
// local rank j owns piece j of every host block (even byte split into L pieces) and swaps pieces with
// its cross comm, so it holds piece j of every host block. Stage 3 gathers the pieces inside the host;
// the host blocks are then reassembled from their pieces into the output, each rank's block at its offset.
void hierarchical_allgatherv(const Comm& comm, const TwoLevel& tl, const std::vector<int>& host_of, const void* send,
                             void* recv, const std::vector<size_t>& bytes_per_rank, const Tuning& tuning,
                             Deadline deadline) {
  const int p = comm.size();
  PHV_CHECK_ARG(bytes_per_rank.size() == static_cast<size_t>(p), "allgather: ", bytes_per_rank.size(),
                " block sizes for ", p, " ranks");
  std::vector<Range> out_blocks = chunks_from_counts(bytes_per_rank);  // by comm rank
  std::vector<size_t> comm_rank_of(host_of.size(), 0);
  for (int r = 0; r < p; ++r) comm_rank_of[static_cast<size_t>(comm.global(r))] = static_cast<size_t>(r);
  std::vector<std::vector<int>> hosts = hosts_of(comm, host_of);
  const int H = static_cast<int>(hosts.size());
  const int L = tl.local.size();
  const int j = tl.local.rank();

  // Host blocks: sizes, and where each member's block lies inside its host block.
  std::vector<size_t> host_bytes(static_cast<size_t>(H), 0);
  for (int h = 0; h < H; ++h)
    for (int g : hosts[static_cast<size_t>(h)])
      host_bytes[static_cast<size_t>(h)] += bytes_per_rank[comm_rank_of[static_cast<size_t>(g)]];
  // Cross comm k (the k-th member of every host), members ascending: its rank c belongs to host
  // order[k][c]. The order can differ between k when hosts' ranks interleave.
  std::vector<std::vector<int>> order(static_cast<size_t>(L));
  for (int k = 0; k < L; ++k) {
    std::vector<std::pair<int, int>> by_rank;  // (global rank, host)
    for (int h = 0; h < H; ++h) by_rank.emplace_back(hosts[static_cast<size_t>(h)][static_cast<size_t>(k)], h);
    std::sort(by_rank.begin(), by_rank.end());
    for (const auto& gh : by_rank) order[static_cast<size_t>(k)].push_back(gh.second);
  }
  const std::vector<int>& cross_host = order[static_cast<size_t>(j)];
  auto piece = [&](int h, int k) { return even_chunks(host_bytes[static_cast<size_t>(h)], L)[static_cast<size_t>(k)]; };
  const int my_host = cross_host[static_cast<size_t>(tl.cross.rank())];

  // Stage 1: my host block.
  std::vector<size_t> local_bytes;
  for (int g : tl.local.members) local_bytes.push_back(bytes_per_rank[comm_rank_of[static_cast<size_t>(g)]]);
  std::vector<char> host_block(host_bytes[static_cast<size_t>(my_host)]);
  allgatherv(tl.local, send, host_block.data(), local_bytes, tuning, deadline);

  // Stage 2: piece j of every host block, in cross rank order.
  std::vector<size_t> cross_bytes(static_cast<size_t>(H));
  for (int c = 0; c < H; ++c) cross_bytes[static_cast<size_t>(c)] = piece(cross_host[static_cast<size_t>(c)], j).count;
  size_t pieces_total = 0;
  for (size_t b : cross_bytes) pieces_total += b;
  std::vector<char> pieces(pieces_total);
  Range my_piece = piece(my_host, j);
  allgatherv(tl.cross, host_block.data() + my_piece.offset, pieces.data(), cross_bytes, tuning, deadline);

  // Stage 3: every local rank's pieces (local rank k holds piece k of each host block).
  std::vector<size_t> stage3_bytes(static_cast<size_t>(L), 0);
  for (int k = 0; k < L; ++k)
    for (int h = 0; h < H; ++h) stage3_bytes[static_cast<size_t>(k)] += piece(h, k).count;
  size_t all_total = 0;
  for (size_t b : stage3_bytes) all_total += b;
  std::vector<char> all(all_total);
  allgatherv(tl.local, pieces.data(), all.data(), stage3_bytes, tuning, deadline);

  // Reassemble: local rank k's part of `all` is piece k of each host block, hosts in cross rank order.
  std::vector<char> block;
  char* out = static_cast<char*>(recv);
  size_t part = 0;
  std::vector<size_t> part_start(static_cast<size_t>(L));
  for (int k = 0; k < L; ++k) {
    part_start[static_cast<size_t>(k)] = part;
    part += stage3_bytes[static_cast<size_t>(k)];
  }
  for (int h = 0; h < H; ++h) {
    block.assign(host_bytes[static_cast<size_t>(h)], 0);
    for (int k = 0; k < L; ++k) {
      size_t at = part_start[static_cast<size_t>(k)];
      const std::vector<int>& hosts_k = order[static_cast<size_t>(k)];
      for (int c = 0; c < H && hosts_k[static_cast<size_t>(c)] != h; ++c)
        at += piece(hosts_k[static_cast<size_t>(c)], k).count;
      Range pk = piece(h, k);
      if (pk.count > 0) std::memcpy(block.data() + pk.offset, all.data() + at, pk.count);
    }
    size_t off = 0;
    for (int g : hosts[static_cast<size_t>(h)]) {
      const Range& dst = out_blocks[comm_rank_of[static_cast<size_t>(g)]];
      if (dst.count > 0) std::memcpy(out + dst.offset, block.data() + off, dst.count);
      off += dst.count;
    }
  }
}

}  // namespace phv
