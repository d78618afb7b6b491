// Exhaustive check of the ring schedules (algorithms/ring_schedule.h) without sockets: p ranks are
// simulated in memory, messages travel through per-link FIFO queues, each rank posts sends and receives in
// plan order under the same dependency rule the real driver uses (send j >= lead waits for receive
// j - lead). Each rank contributes 1 << r to every element, so a correct reduction is (1 << p) - 1, and
// per-element counters prove that every element is sent / reduced / received exactly once per phase.
#include <cstdint>
#include <cstdio>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "algorithms/ring_schedule.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

namespace {
enum class Kind { ALLREDUCE, REDUCE_SCATTER, ALLGATHER };
const char* kind_name(Kind k) {
  return k == Kind::ALLREDUCE ? "allreduce" : k == Kind::REDUCE_SCATTER ? "reducescatter" : "allgather";
}

int mod(int a, int p) { return ((a % p) + p) % p; }

bool in_chunk(const std::vector<Range>& chunks, int c, size_t i) {
  const Range& r = chunks[static_cast<size_t>(c)];
  return i >= r.offset && i < r.offset + r.count;
}

struct Msg {
  Range range;
  std::vector<uint64_t> payload;
};

void simulate(int p, const std::vector<Range>& chunks, size_t seg, Kind kind) {
  size_t total = chunks.back().offset + chunks.back().count;
  int shift = kind == Kind::ALLGATHER ? 0 : 1;
  int steps = kind == Kind::ALLREDUCE ? 2 * (p - 1) : p - 1;
  int reduce_steps = kind == Kind::ALLGATHER ? 0 : p - 1;
  const uint64_t full = (uint64_t(1) << p) - 1;
  const uint64_t garbage = uint64_t(1) << 40;

  std::vector<RingPlan> plans;
  std::vector<std::vector<uint64_t>> data(static_cast<size_t>(p));
  // Counters per rank per element: sent in reduce phase, sent in copy phase, reduced, received (copied).
  std::vector<std::vector<int>> sent_r(p), sent_c(p), reduced(p), copied(p);
  for (int r = 0; r < p; ++r) {
    plans.push_back(make_ring_plan(r, p, chunks, seg, shift, steps));
    auto& d = data[static_cast<size_t>(r)];
    d.assign(total, uint64_t(1) << r);
    if (kind == Kind::ALLGATHER)
      for (size_t i = 0; i < total; ++i)
        if (!in_chunk(chunks, r, i)) d[i] = garbage;  // only my own block is valid before an allgather
    sent_r[r].assign(total, 0);
    sent_c[r].assign(total, 0);
    reduced[r].assign(total, 0);
    copied[r].assign(total, 0);
  }
  std::string ctx = std::string(kind_name(kind)) + " p=" + std::to_string(p) + " total=" + std::to_string(total) +
                    " seg=" + std::to_string(seg);

  std::vector<std::deque<Msg>> link(static_cast<size_t>(p));  // link[r]: r -> r+1
  std::vector<size_t> ns(p, 0), nr(p, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const RingPlan& pl = plans[static_cast<size_t>(r)];
      // Receive everything that has arrived.
      auto& q = link[static_cast<size_t>(mod(r - 1, p))];
      while (!q.empty() && nr[r] < pl.recvs.size()) {
        const RingMessage& m = pl.recvs[nr[r]];
        // The left neighbour's writes land only after my reads of the same region (allreduce guard).
        long g = pl.overwrite_after[nr[r]];
        if (g >= 0) {
          CHECK(static_cast<size_t>(g) < ns[r], "%s rank %d recv %zu guard %ld not yet sent", ctx.c_str(), r, nr[r], g);
          CHECK(pl.sends[static_cast<size_t>(g)].range.offset == m.range.offset &&
                    pl.sends[static_cast<size_t>(g)].range.count == m.range.count,
                "%s guard range", ctx.c_str());
        }
        Msg msg = std::move(q.front());
        q.pop_front();
        CHECK(msg.range.offset == m.range.offset && msg.range.count == m.range.count,
              "%s rank %d recv %zu: got [%zu,+%zu) expected [%zu,+%zu)", ctx.c_str(), r, nr[r], msg.range.offset,
              msg.range.count, m.range.offset, m.range.count);
        CHECK(m.chunk == ring_recv_chunk(r, p, m.step, shift), "%s chunk formula", ctx.c_str());
        for (size_t i = 0; i < m.range.count && i < msg.payload.size(); ++i) {
          size_t e = m.range.offset + i;
          if (m.step < reduce_steps) {
            data[r][e] += msg.payload[i];
            ++reduced[r][e];
          } else {
            data[r][e] = msg.payload[i];
            ++copied[r][e];
          }
        }
        ++nr[r];
        progress = true;
      }
      // Send what the dependency rule allows.
      while (ns[r] < pl.sends.size() && (ns[r] < pl.lead || nr[r] > ns[r] - pl.lead)) {
        const RingMessage& m = pl.sends[ns[r]];
        CHECK(m.chunk == ring_send_chunk(r, p, m.step, shift), "%s chunk formula", ctx.c_str());
        if (ns[r] >= pl.lead) {
          const RingMessage& src = pl.recvs[ns[r] - pl.lead];
          CHECK(src.range.offset == m.range.offset && src.range.count == m.range.count && src.step + 1 == m.step,
                "%s forward mismatch", ctx.c_str());
        }
        Msg msg{m.range, std::vector<uint64_t>(data[r].begin() + static_cast<long>(m.range.offset),
                                               data[r].begin() + static_cast<long>(m.range.offset + m.range.count))};
        for (size_t i = 0; i < m.range.count; ++i) {
          if (m.step < reduce_steps) ++sent_r[r][m.range.offset + i];
          else ++sent_c[r][m.range.offset + i];
        }
        link[static_cast<size_t>(r)].push_back(std::move(msg));
        ++ns[r];
        progress = true;
      }
    }
  }

  for (int r = 0; r < p; ++r) {
    const RingPlan& pl = plans[static_cast<size_t>(r)];
    CHECK(ns[r] == pl.sends.size() && nr[r] == pl.recvs.size(), "%s rank %d stalled: sent %zu/%zu recv %zu/%zu",
          ctx.c_str(), r, ns[r], pl.sends.size(), nr[r], pl.recvs.size());
    CHECK(link[static_cast<size_t>(r)].empty(), "%s link %d not drained", ctx.c_str(), r);
    for (size_t i = 0; i < total; ++i) {
      bool own = in_chunk(chunks, r, i);
      if (kind == Kind::REDUCE_SCATTER) {
        CHECK(sent_r[r][i] == (own ? 0 : 1), "%s rank %d elem %zu sent %d", ctx.c_str(), r, i, sent_r[r][i]);
        CHECK(reduced[r][i] == (in_chunk(chunks, mod(r - 1, p), i) ? 0 : 1), "%s rank %d elem %zu reduced %d",
              ctx.c_str(), r, i, reduced[r][i]);
        if (own)
          CHECK(data[r][i] == full, "%s rank %d elem %zu = %llx", ctx.c_str(), r, i, (unsigned long long)data[r][i]);
      } else if (kind == Kind::ALLGATHER) {
        CHECK(copied[r][i] == (own ? 0 : 1), "%s rank %d elem %zu copied %d", ctx.c_str(), r, i, copied[r][i]);
        CHECK(sent_c[r][i] == (in_chunk(chunks, mod(r + 1, p), i) ? 0 : 1), "%s rank %d elem %zu sent %d", ctx.c_str(),
              r, i, sent_c[r][i]);
        int owner = 0;
        while (!in_chunk(chunks, owner, i)) ++owner;
        CHECK(data[r][i] == (uint64_t(1) << owner), "%s rank %d elem %zu", ctx.c_str(), r, i);
      } else {
        CHECK(sent_r[r][i] == (own ? 0 : 1), "%s rank %d elem %zu sent_r %d", ctx.c_str(), r, i, sent_r[r][i]);
        CHECK(reduced[r][i] == (in_chunk(chunks, mod(r - 1, p), i) ? 0 : 1), "%s rank %d elem %zu reduced %d",
              ctx.c_str(), r, i, reduced[r][i]);
        CHECK(sent_c[r][i] == (in_chunk(chunks, mod(r + 1, p), i) ? 0 : 1), "%s rank %d elem %zu sent_c %d",
              ctx.c_str(), r, i, sent_c[r][i]);
        CHECK(copied[r][i] == (own ? 0 : 1), "%s rank %d elem %zu copied %d", ctx.c_str(), r, i, copied[r][i]);
        CHECK(data[r][i] == full, "%s rank %d elem %zu = %llx", ctx.c_str(), r, i, (unsigned long long)data[r][i]);
      }
    }
  }
}

void check_even_chunks(size_t count, int p) {
  std::vector<Range> cs = even_chunks(count, p);
  size_t off = 0;
  for (int c = 0; c < p; ++c) {
    const Range& r = cs[static_cast<size_t>(c)];
    size_t expect = count / p + (static_cast<size_t>(c) < count % p ? 1 : 0);
    CHECK(r.offset == off && r.count == expect, "even_chunk(%zu, %d, %d) = [%zu,+%zu)", count, p, c, r.offset, r.count);
    off += r.count;
  }
  CHECK(off == count, "even_chunks(%zu, %d) cover %zu", count, p, off);
}

}  // namespace

int main() {
  // counts: 0, 1, small primes, 2^k +- 1, and sizes spanning many segments.
  std::vector<size_t> counts = {0, 1, 2, 3, 5, 7, 13, 17, 31, 33, 63, 65, 97, 127, 129, 255, 257, 1021, 1025, 4099};
  std::vector<size_t> segs = {1, 3, 8, 1000000};
  long configs = 0;
  for (int p = 1; p <= 16; ++p) {
    for (size_t count : counts) {
      check_even_chunks(count, p);
      if (p == 1) continue;  // no messages: nothing to simulate (checked in algorithms_test)
      for (size_t seg : segs) {
        if (seg == 1 && count > 257) continue;  // one element per message: keep the run short
        std::vector<Range> chunks = even_chunks(count, p);
        simulate(p, chunks, seg, Kind::ALLREDUCE);
        simulate(p, chunks, seg, Kind::REDUCE_SCATTER);
        simulate(p, chunks, seg, Kind::ALLGATHER);
        configs += 3;
      }
    }
  }
  // Uneven blocks (reducescatter / allgatherv), including empty ones.
  std::mt19937 rng(12345);
  for (int p = 2; p <= 16; ++p) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<size_t> sizes(static_cast<size_t>(p));
      for (auto& s : sizes) s = (rng() % 3 == 0) ? 0 : rng() % 40;
      if (trial == 0) sizes.assign(static_cast<size_t>(p), 0);
      if (trial == 0) sizes[0] = 1;
      std::vector<Range> chunks = chunks_from_counts(sizes);
      for (size_t seg : {size_t(1), size_t(4), size_t(1000)}) {
        simulate(p, chunks, seg, Kind::REDUCE_SCATTER);
        simulate(p, chunks, seg, Kind::ALLGATHER);
        simulate(p, chunks, seg, Kind::ALLREDUCE);
        configs += 3;
      }
    }
  }
  // Segments really pipeline: forwarding starts after one chunk's worth of sends, not after a whole step
  // of the whole buffer... and the lead is exactly the number of segments of the first chunk sent.
  RingPlan pl = make_ring_plan(0, 4, even_chunks(100, 4), 5, 1, 6);
  CHECK(pl.lead == 5, "lead %zu", pl.lead);
  CHECK(pl.sends.size() == 30 && pl.recvs.size() == 30, "sizes %zu %zu", pl.sends.size(), pl.recvs.size());
  std::printf("%ld configurations simulated\n", configs);
  return finish("ring_schedule_test");
}
