// The express round without threads: every rank of an in-memory world has its own ExpressRound over an
// agreed cache, and one thread steps them all until each is done. World sizes 1 to 5 (3 and 5 exercise
// the fix-up pairs of a non-power of two). Checks that every rank takes the same branch, that a hit
// holds the exact reduction (a broadcast: the root's bytes, from every root; an allgather: every rank's
// rows, of different counts; an alltoall: each rank's blocks, finished as the engine does), and that any
// rank not ready
// for the same request makes everyone miss.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_options.h"
#include "engine/express_round.h"
#include "engine/inline_reduce.h"
#include "tests/check.h"
#include "transport/memory_transport.h"

using namespace phv;
using namespace phv::testing;

namespace {

Desc make_desc(const std::string& name, DataType dt, ReduceOp op, int64_t count) {
  Desc d;
  d.kind = desc_kind(OpType::ALLREDUCE);
  d.dtype = dt;
  d.op = op;
  d.shape = {count};
  d.name = name;
  return d;
}

class World {
 public:
  explicit World(int p) : p_(p), transports_(make_memory_transports(p)), msgs_(static_cast<size_t>(p)) {
    for (int r = 0; r < p; ++r) {
      caches_.push_back(std::make_unique<ResponseCache>(EngineOptions().cache_capacity));
      rounds_.push_back(std::make_unique<ExpressRound>(*transports_[static_cast<size_t>(r)], *caches_.back()));
    }
  }
  int size() const { return p_; }
  // Every rank's heads hold `bytes` of payload from now on (ExpressRound::set_head_payload).
  void set_head_payload(size_t bytes) {
    for (auto& r : rounds_) r->set_head_payload(bytes);
  }
  // Every rank caches d (same position everywhere, as after an agreed FULL response).
  int cache_everywhere(const Desc& d, const std::vector<int64_t>& dim0s = {}) {
    int pos = -1;
    for (auto& c : caches_) pos = c->put(d, dim0s);
    return pos;
  }
  // Rank r reports the cached d (its own shape: `mine`, when given) by its bit with `values` as its input.
  void report(int r, const Desc& d, const void* values, const Desc* mine = nullptr) {
    RankMessage& m = msgs_[static_cast<size_t>(r)];
    Op op;
    op.desc = mine ? *mine : d;
    op.req.input = values;
    int pos = caches_[static_cast<size_t>(r)]->lookup(d.key());
    m.set_bit(pos);
    append_inline(m, pos, op);
  }
  RankMessage& msg(int r) { return msgs_[static_cast<size_t>(r)]; }

  // Steps every rank to the end; returns "hit" / "miss" when all agree, "split" otherwise.
  std::string run(const std::string& what) {
    for (int r = 0; r < p_; ++r) rounds_[static_cast<size_t>(r)]->begin(msg(r));
    std::vector<bool> done(static_cast<size_t>(p_), false);
    Deadline deadline = deadline_after(10);
    bool all = false;
    for (int sweep = 0; sweep < 32 && !all; ++sweep) {
      all = true;
      for (int r = 0; r < p_; ++r) {
        if (!done[static_cast<size_t>(r)])
          done[static_cast<size_t>(r)] = rounds_[static_cast<size_t>(r)]->step(ExpressRound::Step::POLL, deadline);
        all = all && done[static_cast<size_t>(r)];
      }
    }
    for (auto& m : msgs_) m.clear();
    expect(all, tag() + what + ": every rank completes");
    if (!all) return "incomplete";
    bool hit = rounds_[0]->hit();
    for (int r = 1; r < p_; ++r) {
      if (rounds_[static_cast<size_t>(r)]->hit() != hit) return "split";
    }
    return hit ? "hit" : "miss";
  }
  // Rank r's result bytes after a hit.
  const std::vector<uint8_t>& result(int r) const { return item(r).data; }
  const ResponseItem& item(int r) const { return rounds_[static_cast<size_t>(r)]->response().items[0]; }
  std::string tag() const { return "[p=" + std::to_string(p_) + "] "; }

 private:
  int p_;
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<std::unique_ptr<ResponseCache>> caches_;
  std::vector<std::unique_ptr<ExpressRound>> rounds_;
  std::vector<RankMessage> msgs_;
};

// Every rank ready for the same request: a hit with the exact reduction on every rank.
// n elements: a few (the head alone), or more than the head holds (a tail follows), up to kInlineBytes.
// head: the heads' payload (0: the shortest, 256 bytes).
template <typename T>
void test_hit(int p, DataType dt, ReduceOp op, const std::string& what_op, size_t n, size_t head = 0) {
  World w(p);
  w.set_head_payload(head);
  const std::string what = what_op + " x" + std::to_string(n) + " head " + std::to_string(head);
  Desc d = make_desc("loss", dt, op, static_cast<int64_t>(n));
  w.cache_everywhere(d);
  std::vector<std::vector<T>> in(static_cast<size_t>(p));
  std::vector<T> want(n);
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const int v = i % 3 == 0 ? r + 1 : i % 3 == 1 ? 2 : p - r + static_cast<int>(i % 5);
      in[static_cast<size_t>(r)].push_back(static_cast<T>(v));
    }
    for (size_t i = 0; i < n; ++i) {
      T v = in[static_cast<size_t>(r)][i];
      if (r == 0) want[i] = v;
      else if (op == ReduceOp::SUM || op == ReduceOp::AVERAGE) want[i] = static_cast<T>(want[i] + v);
      else if (op == ReduceOp::MIN) want[i] = v < want[i] ? v : want[i];
      else if (op == ReduceOp::MAX) want[i] = v > want[i] ? v : want[i];
      else want[i] = static_cast<T>(want[i] * v);
    }
    w.report(r, d, in[static_cast<size_t>(r)].data());
  }
  std::string got = w.run(what);
  expect(got == "hit", w.tag() + what + ": every rank ready for the same request hits", got);
  if (got != "hit") return;
  for (int r = 0; r < p; ++r) {
    const std::vector<uint8_t>& res = w.result(r);
    expect(res.size() == sizeof(T) * n && std::memcmp(res.data(), want.data(), res.size()) == 0,
           w.tag() + what + ": rank " + std::to_string(r) + " holds the exact reduction (sum before the postscale)");
  }
}

// A small broadcast of n int32 from each root in turn: a hit, and every rank holds exactly the root's bytes.
void test_broadcast(int p, int n) {
  for (int root = 0; root < p; ++root) {
    World w(p);
    Desc d = make_desc("b", DataType::INT32, ReduceOp::SUM, n);
    d.kind = desc_kind(OpType::BROADCAST);
    d.root = root;
    w.cache_everywhere(d);
    std::vector<std::vector<int32_t>> in(static_cast<size_t>(p));
    for (int r = 0; r < p; ++r) {
      for (int i = 0; i < n; ++i) in[static_cast<size_t>(r)].push_back(i % 2 ? 10 * r + i : -r - i);
      w.report(r, d, in[static_cast<size_t>(r)].data());
    }
    std::string what = "broadcast of " + std::to_string(n) + " from root " + std::to_string(root);
    std::string got = w.run(what);
    expect(got == "hit", w.tag() + what + ": a hit", got);
    if (got != "hit") continue;
    const std::vector<int32_t>& want = in[static_cast<size_t>(root)];
    for (int r = 0; r < p; ++r) {
      const std::vector<uint8_t>& res = w.result(r);
      expect(res.size() == sizeof(int32_t) * static_cast<size_t>(n) &&
                 std::memcmp(res.data(), want.data(), res.size()) == 0,
             w.tag() + what + ": rank " + std::to_string(r) + " holds the root's bytes");
    }
  }
}

// A small allgather: rank r has r + 1 rows of `width` int32; a hit, and every rank holds the concatenation.
void test_allgather(int p, int width) {
  World w(p);
  const std::string what = "allgather of width " + std::to_string(width);
  Desc d = make_desc("g", DataType::INT32, ReduceOp::SUM, 1);
  d.kind = desc_kind(OpType::ALLGATHER);
  d.shape = {1, width};  // as agreed: dim 0 of the lowest member
  std::vector<int64_t> dim0s;
  for (int r = 0; r < p; ++r) dim0s.push_back(r + 1);
  w.cache_everywhere(d, dim0s);
  std::vector<std::vector<int32_t>> in(static_cast<size_t>(p));
  std::vector<int32_t> want;
  std::vector<Desc> mine(static_cast<size_t>(p), d);
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < width * (r + 1); ++k) in[static_cast<size_t>(r)].push_back(10000 * r + k);
    want.insert(want.end(), in[static_cast<size_t>(r)].begin(), in[static_cast<size_t>(r)].end());
    mine[static_cast<size_t>(r)].shape = {r + 1, width};
  }
  expect(inline_eligible(CacheEntry{d, dim0s}), w.tag() + what + ": eligible (at most kInlineBytes in all)");
  for (int r = 0; r < p; ++r) w.report(r, d, in[static_cast<size_t>(r)].data(), &mine[static_cast<size_t>(r)]);
  std::string got = w.run(what);
  expect(got == "hit", w.tag() + what + ": a hit", got);
  if (got != "hit") return;
  for (int r = 0; r < p; ++r) {
    const std::vector<uint8_t>& res = w.result(r);
    expect(res.size() == want.size() * sizeof(int32_t) && std::memcmp(res.data(), want.data(), res.size()) == 0,
           w.tag() + what + ": rank " + std::to_string(r) + " holds every rank's rows in rank order");
  }
}

// A small alltoall with even splits: rank r has p * c(r) rows of one int32, c(r) = 1 + r % 2, and sends
// each rank c(r) of them. A hit; each rank's finished output is its block of every rank's input, in rank
// order, and its received splits are c(r) per rank r. Then a rank whose explicit splits are uneven sends no bytes,
// and everyone misses.
void test_alltoall(int p) {
  World w(p);
  Desc d = make_desc("a2a", DataType::INT32, ReduceOp::SUM, p);
  d.kind = desc_kind(OpType::ALLTOALL);
  std::vector<int64_t> dim0s;
  auto c = [](int r) { return 1 + r % 2; };
  for (int r = 0; r < p; ++r) dim0s.push_back(static_cast<int64_t>(p) * c(r));
  w.cache_everywhere(d, dim0s);
  const CacheEntry entry{d, dim0s};
  expect(inline_eligible(entry), w.tag() + "alltoall: even splits of a small input are eligible");
  std::vector<std::vector<int32_t>> in(static_cast<size_t>(p));
  std::vector<Desc> mine(static_cast<size_t>(p), d);
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < p * c(r); ++k) in[static_cast<size_t>(r)].push_back(1000 * r + k);
    mine[static_cast<size_t>(r)].shape = {p * c(r)};
    w.report(r, d, in[static_cast<size_t>(r)].data(), &mine[static_cast<size_t>(r)]);
  }
  std::string got = w.run("alltoall");
  expect(got == "hit", w.tag() + "alltoall: a hit", got);
  if (got != "hit") return;
  for (int me = 0; me < p; ++me) {
    Op op;
    op.set_index = me;
    finish_inline(w.item(me), op, p);
    std::vector<int32_t> want;
    std::vector<int64_t> want_splits;
    for (int r = 0; r < p; ++r) {
      for (int k = 0; k < c(r); ++k) want.push_back(1000 * r + me * c(r) + k);
      want_splits.push_back(c(r));
    }
    const OutputBuffer& res = *op.result.output;
    expect(res.size() == want.size() * sizeof(int32_t) && std::memcmp(res.data(), want.data(), res.size()) == 0 &&
               op.result.output_shape == std::vector<int64_t>{static_cast<int64_t>(want.size())} &&
               op.result.received_splits == want_splits,
           w.tag() + "alltoall: rank " + std::to_string(me) + " holds its block of every rank's input");
  }
  Request even;
  even.type = OpType::ALLTOALL;
  even.shape = {2 * p};
  even.splits.assign(static_cast<size_t>(p), 2);
  expect(sends_inline(even), w.tag() + "alltoall: explicit even splits send inline");
  if (p > 1) {
    Request uneven = even;
    uneven.splits[0] = 3;
    uneven.splits[1] = 1;
    expect(!sends_inline(uneven), w.tag() + "alltoall: uneven splits keep the ordinary path");
    for (int r = 1; r < p; ++r) w.report(r, d, in[static_cast<size_t>(r)].data(), &mine[static_cast<size_t>(r)]);
    w.msg(0).set_bit(w.item(0).pos);  // rank 0's bit without bytes, as the runner sends it then
    expect(w.run("alltoall, rank 0 with uneven splits") == "miss", w.tag() + "alltoall: a rank without bytes: a miss");
    Desc odd = d;
    odd.shape = {p + 1};
    expect(!inline_eligible(CacheEntry{odd, std::vector<int64_t>(static_cast<size_t>(p), p + 1)}),
           w.tag() + "alltoall: a dim 0 that does not split evenly is not eligible");
  }
}

// One rank differs in turn (not ready, another request, a join, a new descriptor): everyone misses. The
// other request is larger than the shortest head, so that rank alone sends a tail: the streams must stay
// in step, which the hits at the end show. With heads that hold the larger request (head = its bytes) no
// rank sends a tail, and a request larger still sends one.
void test_misses(int p, size_t head = 0) {
  World w(p);
  w.set_head_payload(head);
  Desc a = make_desc("a", DataType::FLOAT32, ReduceOp::SUM, 1);
  Desc b = make_desc("b", DataType::FLOAT32, ReduceOp::SUM, 600);
  w.cache_everywhere(a);
  w.cache_everywhere(b);
  float one = 1.0f;
  std::vector<float> ones(600, 1.0f);
  for (int odd = 0; odd < p; ++odd) {
    for (int how = 0; how < 4; ++how) {
      if (p == 1 && how == 1) continue;  // alone, another request is simply the request
      for (int r = 0; r < p; ++r) {
        if (r != odd) {
          w.report(r, a, &one);
        } else if (how == 1) {
          w.report(r, b, ones.data());
        } else if (how == 2) {
          w.report(r, a, &one);
          w.msg(r).flags |= kRankJoined;
        } else if (how == 3) {
          w.report(r, a, &one);
          w.msg(r).add_new() = make_desc("c", DataType::FLOAT32, ReduceOp::SUM, 1);
        }  // how == 0: nothing to report
      }
      std::string what = "rank " + std::to_string(odd) +
                         (how == 0   ? " not ready"
                          : how == 1 ? " on another request"
                          : how == 2 ? " joining"
                                     : " with a new descriptor");
      std::string got = w.run(what);
      expect(got == "miss", w.tag() + what + ": every rank misses", got);
    }
  }
  for (int r = 0; r < p; ++r) w.report(r, a, &one);
  expect(w.run("after the misses") == "hit", w.tag() + "every rank ready again: a hit");
  for (int r = 0; r < p; ++r) w.report(r, b, ones.data());
  expect(w.run("a request with a tail, after the misses") == "hit", w.tag() + "the larger request: a hit");
  std::vector<float> sum(600, static_cast<float>(p));
  expect(w.result(p - 1).size() == sizeof(float) * 600 && std::memcmp(w.result(p - 1).data(), sum.data(), 2400) == 0,
         w.tag() + "the larger request: the exact sum");
  Desc c = make_desc("c", DataType::FLOAT32, ReduceOp::SUM, kInlineBytes / 4);
  w.cache_everywhere(c);
  std::vector<float> more(kInlineBytes / 4, 2.0f);
  for (int r = 0; r < p; ++r) w.report(r, c, more.data());
  expect(w.run("the largest request") == "hit", w.tag() + "the largest request: a hit");
  expect(w.result(0).size() == kInlineBytes &&
             reinterpret_cast<const float*>(w.result(0).data())[kInlineBytes / 4 - 1] == 2.0f * static_cast<float>(p),
         w.tag() + "the largest request: the exact sum");
}

// A cached request too large to ride inline: every rank sends its bit alone. A hit is one CACHED item (the
// negotiation alone; the collective runs after); a rank not ready makes everyone miss, and requests the
// round does not decide (a process set's, a device's, a group's) miss even with every rank ready.
void test_negotiation_alone(int p) {
  World w(p);
  Desc big = make_desc("grad", DataType::FLOAT32, ReduceOp::SUM, 1 << 20);
  const int pos = w.cache_everywhere(big);
  for (int r = 0; r < p; ++r) w.msg(r).set_bit(pos);
  std::string got = w.run("a large cached allreduce");
  expect(got == "hit", w.tag() + "a large cached allreduce, every rank ready: a hit", got);
  if (got == "hit") {
    for (int r = 0; r < p; ++r) {
      const ResponseItem& it = w.item(r);
      expect(it.type == ItemType::CACHED && it.pos == pos && it.data.empty() && it.agreed && it.agreed->name == "grad",
             w.tag() + "rank " + std::to_string(r) + ": one CACHED item for the request, no bytes");
    }
  }
  if (p > 1) {
    for (int r = 1; r < p; ++r) w.msg(r).set_bit(pos);  // rank 0 has nothing to report
    expect(w.run("rank 0 not ready") == "miss", w.tag() + "a large cached allreduce, rank 0 not ready: a miss");
  }
  for (int r = 0; r < p; ++r) w.msg(r).set_bit(pos);
  expect(w.run("again") == "hit", w.tag() + "every rank ready again: a hit");
  Desc in_set = big, on_device = big, grouped = big;
  in_set.name = "in_set";
  in_set.set = 1;
  on_device.name = "on_device";
  on_device.device = 0;
  grouped.name = "grouped";
  grouped.group_size = 2;
  for (const Desc* d : {&in_set, &on_device, &grouped}) {
    const int at = w.cache_everywhere(*d);
    expect(!ExpressRound::decides(CacheEntry{*d, {}, 0, 0, true}), w.tag() + d->name + ": not decided by the round");
    for (int r = 0; r < p; ++r) w.msg(r).set_bit(at);
    expect(w.run(d->name) == "miss", w.tag() + d->name + ": every rank ready, still a miss");
  }
}

void test_readiness() {
  expect(inline_eligible(make_desc("x", DataType::FLOAT32, ReduceOp::SUM, kInlineBytes / 4)),
         "an allreduce of kInlineBytes is eligible");
  expect(!inline_eligible(make_desc("x", DataType::FLOAT32, ReduceOp::SUM, kInlineBytes / 4 + 1)),
         "one element more is not");
  Desc a = make_desc("a", DataType::FLOAT32, ReduceOp::SUM, 1);
  RankMessage m;
  expect(!ExpressRound::ready(m), "an empty message is not ready");
  m.set_bit(0);
  expect(ExpressRound::ready(m), "a bit alone is ready (the negotiation alone)");
  float v = 1;
  Op op;
  op.desc = a;
  op.req.input = &v;
  append_inline(m, 0, op);
  expect(ExpressRound::ready(m), "one bit with its bytes is ready");
  m.flags |= kRankWaiting;
  expect(ExpressRound::ready(m), "still ready when the request was reported before");
  m.set_bit(5);
  expect(!ExpressRound::ready(m), "two bits are not ready");
  m.clear();
  m.set_bit(0);
  append_inline(m, 0, op);
  m.flags |= kRankShutdown;
  expect(!ExpressRound::ready(m), "a shutdown is not ready");
}

}  // namespace

int main() {
  test_readiness();
  for (int p = 1; p <= 5; ++p) {
    for (size_t bytes : {size_t(24), size_t(800), kInlineBytes}) {  // the head alone; a tail; the largest
      test_hit<float>(p, DataType::FLOAT32, ReduceOp::SUM, "float32 sum", bytes / 4);
      test_hit<float>(p, DataType::FLOAT32, ReduceOp::AVERAGE, "float32 average", bytes / 4);
      test_hit<double>(p, DataType::FLOAT64, ReduceOp::MAX, "float64 max", bytes / 8);
      test_hit<int32_t>(p, DataType::INT32, ReduceOp::MIN, "int32 min", bytes / 4);
      test_hit<int64_t>(p, DataType::INT64, ReduceOp::PRODUCT, "int64 product", bytes / 8);
      test_hit<float>(p, DataType::FLOAT32, ReduceOp::SUM, "float32 sum", bytes / 4, bytes);  // no tail
      test_hit<int32_t>(p, DataType::INT32, ReduceOp::MAX, "int32 max", bytes / 4, 800);  // a head longer than needed
    }
    test_misses(p);
    test_misses(p, 2400);
    test_broadcast(p, 5);
    test_broadcast(p, static_cast<int>(kInlineBytes / 4));
    test_allgather(p, 2);
    test_allgather(p, static_cast<int>(kInlineBytes / 4) / (p * (p + 1) / 2));  // a tail, up to kInlineBytes
    test_alltoall(p);
    test_negotiation_alone(p);
  }
  return finish("express_round_test");
}
