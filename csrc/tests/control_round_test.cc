// The control round and the coordinator's decisions without threads: every rank of an in-memory world
// (transport/memory_transport.h) has its own ControlRound, and one thread steps them all until each has
// its ResponseList. Every case runs the same body at world sizes 1 to 5 and checks that every rank got
// the same list, and that it is the expected one.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/control_round.h"
#include "engine/inline_reduce.h"
#include "tests/check.h"
#include "transport/memory_transport.h"

using namespace phv;
using namespace phv::testing;

namespace {

// One rank's agreed state and its round, as the engine core holds them.
struct RankSide {
  RankSide(Transport& transport, const EngineOptions& options, bool gpu_built = true)
      : sets(&transport, transport.size(), transport.rank()),
        cache(options.cache_capacity),
        round(transport, sets, cache, timeline, options, gpu_built) {}
  ProcessSetRegistry sets;
  ResponseCache cache;
  Timeline timeline;
  ControlRound round;
};

class World {
 public:
  explicit World(int p, bool gpu_built = true) : p_(p), transports_(make_memory_transports(p)) {
    for (int r = 0; r < p; ++r) {
      ranks_.push_back(std::make_unique<RankSide>(*transports_[r], EngineOptions(), gpu_built));
    }
    msgs_.resize(static_cast<size_t>(p));
  }
  int size() const { return p_; }
  int last() const { return p_ - 1; }
  RankMessage& msg(int r) { return msgs_[static_cast<size_t>(r)]; }
  ResponseCache& cache(int r) { return ranks_[static_cast<size_t>(r)]->cache; }

  // Every rank reports a new descriptor.
  void report_everywhere(const Desc& d) {
    for (int r = 0; r < p_; ++r) msg(r).add_new() = d;
  }
  // Rank r names the cached descriptor of this key by its bit.
  void report_bit(int r, const Key& key) { msg(r).set_bit(cache(r).lookup(key)); }

  // Runs one round from the messages set up so far, checks that every rank got rank 0's list, and
  // returns rank 0's list as text; then clears the messages and updates every cache as the runner does.
  std::string round(const std::string& what) {
    for (int r = 0; r < p_; ++r) ranks_[static_cast<size_t>(r)]->round.begin(msg(r));
    std::vector<bool> done(static_cast<size_t>(p_), false);
    Deadline deadline = deadline_after(10);
    bool all = false;
    for (int sweep = 0; sweep < 16 && !all; ++sweep) {
      all = true;
      for (int r = 0; r < p_; ++r) {
        if (!done[static_cast<size_t>(r)])
          done[static_cast<size_t>(r)] = side(r).round.step(ControlRound::Step::POLL, deadline);
        all = all && done[static_cast<size_t>(r)];
      }
    }
    expect(all, "[p=" + std::to_string(p_) + "] " + what + ": every rank's round completes");
    if (!all) return "(incomplete)";
    std::string first = describe(0);
    for (int r = 1; r < p_; ++r) {
      std::string mine = describe(r);
      if (mine != first)
        expect(
            false,
            "[p=" + std::to_string(p_) + "] " + what + ": rank " + std::to_string(r) + " got the same list as rank 0",
            mine + " vs " + first);
    }
    last_ = &side(0).round.response();
    settle();
    return first;
  }
  const ResponseList& last_list() const { return *last_; }
  bool wide(int r) const { return transports_[static_cast<size_t>(r)]->wide_direct(); }
  bool single_allreduce(int r) const { return transports_[static_cast<size_t>(r)]->single_copy_allreduce(); }

  void expect_round(const std::string& what, const std::string& want) {
    std::string got = round(what);
    expect(got == want, "[p=" + std::to_string(p_) + "] " + what + ": " + (want.empty() ? "(nothing)" : want), got);
  }

 private:
  RankSide& side(int r) { return *ranks_[static_cast<size_t>(r)]; }

  std::string describe(int r) {
    const ResponseList& list = side(r).round.response();
    std::string out;
    for (size_t i = 0; i < list.n; ++i) {
      const ResponseItem& it = list.items[i];
      out += i ? " " : "";
      out += it.fused ? "+" : "";
      switch (it.type) {
        case ItemType::FULL: out += "FULL"; break;
        case ItemType::CACHED: out += "CACHED@" + std::to_string(it.pos); break;
        case ItemType::INLINE: out += "INLINE@" + std::to_string(it.pos); break;
        case ItemType::ERROR: out += "ERROR(" + std::to_string(static_cast<int>(it.error_kind)) + ")"; break;
      }
      out += " " + (it.type == ItemType::ERROR ? it.desc.name : it.agreed->name);
    }
    if (list.flags & kRespAllWaiting) out += " [all waiting]";
    if (list.flags & kRespJoinDone) out += " [join done: " + std::to_string(list.join_value) + "]";
    if (list.flags & kRespShutdown) out += " [shutdown by " + std::to_string(list.shutdown_rank) + "]";
    if (list.flags & kRespWideCopies) out += " [wide]";
    if (list.flags & kRespSingleCopyAllreduce) out += " [single]";
    return out;
  }

  void settle() {
    for (int r = 0; r < p_; ++r) {
      const ResponseList& list = side(r).round.response();
      for (size_t i = 0; i < list.n; ++i) {
        const ResponseItem& it = list.items[i];
        if (it.type == ItemType::CACHED || it.type == ItemType::INLINE) {
          side(r).cache.touch(it.pos);
        } else if (it.type == ItemType::FULL && ResponseCache::cacheable(it.desc)) {
          side(r).cache.put(it.desc, it.dim0s);
        }
      }
      msg(r).clear();
    }
  }

  int p_;
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<std::unique_ptr<RankSide>> ranks_;
  std::vector<RankMessage> msgs_;
  const ResponseList* last_ = nullptr;
};

Desc make_desc(const std::string& name, OpType kind, int64_t count) {
  Desc d;
  d.kind = desc_kind(kind);
  d.dtype = DataType::FLOAT32;
  d.shape = {count};
  d.name = name;
  return d;
}

std::string error_of(const ResponseList& list, size_t i) { return i < list.n ? list.items[i].message : ""; }

void test_idle(int p) {
  World w(p);
  w.expect_round("nothing to do", "");
  for (int r = 0; r < p; ++r) w.msg(r).flags |= kRankWaiting;
  w.expect_round("everybody waits", " [all waiting]");
  w.msg(w.last()).flags |= kRankShutdown;
  w.expect_round("the last rank shuts down", " [shutdown by " + std::to_string(w.last()) + "]");
}

void test_readiness_and_cache(int p) {
  World w(p);
  Desc x = make_desc("x", OpType::ALLREDUCE, 1024);
  for (int r = 0; r < p - 1; ++r) w.msg(r).add_new() = x;
  w.expect_round("all but the last report x", p == 1 ? "" : "");
  w.msg(w.last()).add_new() = x;
  w.expect_round("the last reports x too", "FULL x");
  for (int r = 0; r < p - 1; ++r) w.report_bit(r, x.key());
  w.expect_round("all but the last name x by its bit", p == 1 ? "" : "");
  for (int r = 0; r < p; ++r) w.report_bit(r, x.key());
  w.expect_round("every rank names x by its bit", "CACHED@0 x");
  Desc changed = make_desc("x", OpType::ALLREDUCE, 1025);
  for (int r = 0; r < p - 1; ++r) w.report_bit(r, x.key());
  w.msg(w.last()).add_new() = changed;
  std::string want = p == 1 ? "FULL x" : "ERROR(" + std::to_string(static_cast<int>(ErrorKind::INTERNAL)) + ") x";
  w.expect_round("a changed shape on one rank", want);
  if (p > 1) {
    std::string msg = error_of(w.last_list(), 0);
    expect(msg.find("Mismatched") != std::string::npos, "[p=" + std::to_string(p) + "] the error says why", msg);
  }
}

void test_inline(int p) {
  World w(p);
  Desc s = make_desc("loss", OpType::ALLREDUCE, 2);
  w.report_everywhere(s);
  w.expect_round("a small allreduce, first time", "FULL loss");
  std::vector<float> inputs(static_cast<size_t>(2 * p));
  for (int r = 0; r < p; ++r) {
    Op op;
    op.desc = s;
    inputs[static_cast<size_t>(2 * r)] = static_cast<float>(r + 1);
    inputs[static_cast<size_t>(2 * r + 1)] = 0.5f;
    op.req.input = &inputs[static_cast<size_t>(2 * r)];
    w.report_bit(r, s.key());
    append_inline(w.msg(r), w.cache(r).lookup(s.key()), op);
  }
  w.expect_round("cached, every rank's bytes ride along", "INLINE@0 loss");
  float sum[2] = {0, 0};
  if (w.last_list().n == 1) std::memcpy(sum, w.last_list().items[0].data.data(), sizeof(sum));
  expect(sum[0] == static_cast<float>(p * (p + 1) / 2) && sum[1] == 0.5f * static_cast<float>(p),
         "[p=" + std::to_string(p) + "] the coordinator reduced the bytes in the round",
         std::to_string(sum[0]) + ", " + std::to_string(sum[1]));
}

// One of the negotiation's two modes, as its votes, its response flag, its mark in a described list and its
// setting in a transport.
struct ModeVote {
  const char* name;
  uint32_t vote_on, vote_off, resp;
  const char* mark;
  bool (World::*in_transport)(int) const;
};

void test_mode_votes(int p, const ModeVote& m) {
  // The mode is on while more than half the ranks' last votes were for it; a vote counts until the rank
  // votes again, every rank's transport takes the mode, and it leaves express mode alone.
  World w(p);
  const std::string tag = "[p=" + std::to_string(p) + ", " + m.name + "] ";
  Desc x = make_desc("x", OpType::ALLREDUCE, 1 << 20);
  w.report_everywhere(x);
  w.expect_round("x, no votes", "FULL x");
  int on_votes = 0;
  for (int r = 0; r < p; ++r) {
    w.msg(r).flags |= m.vote_on;
    ++on_votes;
    for (int q = 0; q < p; ++q) w.report_bit(q, x.key());
    const bool on = 2 * on_votes > p;
    w.expect_round(tag + "ranks 0.." + std::to_string(r) + " voted for it",
                   std::string("CACHED@0 x") + (on ? m.mark : ""));
    for (int q = 0; q < p; ++q) expect((w.*m.in_transport)(q) == on, tag + "every transport took the mode");
  }
  for (int round = 0; round < ControlRound::kExpressAfter; ++round) {
    for (int q = 0; q < p; ++q) w.report_bit(q, x.key());
    w.round("steady, no new votes");
  }
  expect((w.last_list().flags & (m.resp | kRespExpress)) == (m.resp | kRespExpress),
         tag + "votes are remembered, and the mode does not keep express mode off");
  for (int q = 0; q < p; ++q) w.report_bit(q, x.key());
  w.msg(0).flags |= m.vote_off;
  const bool still = 2 * (p - 1) > p;
  w.expect_round(tag + "rank 0 votes against it", std::string("CACHED@0 x") + (still ? m.mark : ""));
  for (int q = 0; q < p; ++q) expect((w.*m.in_transport)(q) == still, tag + "every transport took the mode again");
}

void test_copy_path_votes(int p) {
  test_mode_votes(p, {"copy path", kRankVoteWide, kRankVoteNarrow, kRespWideCopies, " [wide]", &World::wide});
  test_mode_votes(p, {"allreduce", kRankVoteSingleAllreduce, kRankVoteRingAllreduce, kRespSingleCopyAllreduce,
                      " [single]", &World::single_allreduce});
}

void test_join(int p) {
  World w(p);
  std::string internal = std::to_string(static_cast<int>(ErrorKind::INTERNAL));
  Desc a = make_desc("a", OpType::ALLREDUCE, 1024);
  Desc b = make_desc("b", OpType::BROADCAST, 1024);
  w.report_everywhere(a);
  w.report_everywhere(b);
  w.expect_round("a and b, nobody joined", "FULL a FULL b");
  // The last rank joins; at p=1 that is everybody.
  w.msg(w.last()).flags |= kRankJoined;
  for (int r = 0; r < p - 1; ++r) {
    w.report_bit(r, a.key());
    w.report_bit(r, b.key());
  }
  std::string join_done = " [join done: " + std::to_string(w.last()) + "]";
  std::string want = p == 1 ? join_done : "CACHED@0 a ERROR(" + internal + ") b";
  w.expect_round("cached, with the last rank joined", want);
  if (p > 1) {
    std::string msg = error_of(w.last_list(), 1);
    expect(msg.find("only allreduce supports join") != std::string::npos,
           "[p=" + std::to_string(p) + "] the join error says why", msg);
  }
  Desc c = make_desc("c", OpType::ALLREDUCE, 1024);
  Desc d = make_desc("d", OpType::BROADCAST, 1024);
  w.msg(w.last()).flags |= kRankJoined;
  for (int r = 0; r < p - 1; ++r) {
    w.msg(r).add_new() = c;
    w.msg(r).add_new() = d;
  }
  want = p == 1 ? join_done : "FULL c ERROR(" + internal + ") d";
  w.expect_round("new, with the last rank joined", want);
  // The last to join is the highest rank of those that joined in the latest round.
  for (int r = 0; r < p; ++r) w.msg(r).flags |= kRankJoined;
  w.expect_round("everybody joined", " [join done: " + std::to_string(p == 1 ? 0 : p - 2) + "]");
}

void test_gpu_refusals(int p) {
  std::string invalid = "ERROR(" + std::to_string(static_cast<int>(ErrorKind::INVALID_ARGUMENT)) + ") g";
  Desc g = make_desc("g", OpType::ALLREDUCE, 1024);
  g.device = 0;
  {
    World w(p, false);
    w.report_everywhere(g);
    w.expect_round("a CUDA allreduce without the GPU backend", invalid);
    std::string msg = error_of(w.last_list(), 0);
    expect(msg.find("built without the GPU backend") != std::string::npos,
           "[p=" + std::to_string(p) + "] the refusal says why", msg);
  }
  if (p == 1) return;  // a joined rank needs another one that has not joined
  World w(p);
  w.report_everywhere(g);
  w.expect_round("a CUDA allreduce", "FULL g");
  w.msg(w.last()).flags |= kRankJoined;
  for (int r = 0; r < p - 1; ++r) w.report_bit(r, g.key());
  w.expect_round("cached CUDA allreduce, the last rank joined", invalid);
  std::string msg = error_of(w.last_list(), 0);
  expect(msg.find("CUDA tensors cannot be reduced while ranks have joined") != std::string::npos,
         "[p=" + std::to_string(p) + "] the cached refusal says why", msg);
  w.msg(w.last()).flags |= kRankJoined;
  Desc h = g;
  h.name = "h";
  for (int r = 0; r < p - 1; ++r) w.msg(r).add_new() = h;
  w.expect_round("new CUDA allreduce, the last rank joined",
                 "ERROR(" + std::to_string(static_cast<int>(ErrorKind::INVALID_ARGUMENT)) + ") h");
}

void test_expiry(int p) {
  World w(p);
  Desc t = make_desc("t", OpType::ALLREDUCE, 1024);
  w.msg(0).add_new() = t;
  w.expect_round("rank 0 reports t", p == 1 ? "FULL t" : "");
  if (p == 1) return;  // alone, t ran at once: nothing can expire
  Expiry& x = w.msg(0).add_expiry();
  x.key = t.key();
  x.kind = t.kind;
  x.waited_s = 5;
  x.request_seq = 7;
  w.expect_round("t expires on rank 0", "ERROR(" + std::to_string(static_cast<int>(ErrorKind::TIMEOUT)) + ") t");
  std::string msg = error_of(w.last_list(), 0);
  std::string missing = "ranks [1";
  for (int r = 2; r < p; ++r) missing += ", " + std::to_string(r);
  missing += "] never submitted it";
  expect(msg.find(missing) != std::string::npos && msg.find("request #7 on rank 0") != std::string::npos,
         "[p=" + std::to_string(p) + "] the timeout names the missing ranks", msg);
}

void test_long_messages(int p) {
  // Forty descriptors with long names: every message and the list outgrow their first slot.
  World w(p);
  std::string want;
  for (int k = 0; k < 40; ++k) {
    std::string name = "a.rather.long.gradient.name.for.the.second.slot." + std::to_string(k);
    w.report_everywhere(make_desc(name, OpType::ALLREDUCE, 16));
    want += (k ? " +FULL " : "FULL ") + name;
  }
  w.expect_round("forty small allreduces, one fused unit", want);
}

void test_coordinator_waits(int p) {
  // The coordinator's round cannot complete before every worker has sent its message.
  if (p == 1) return;
  auto transports = make_memory_transports(p);
  EngineOptions options;
  std::vector<std::unique_ptr<RankSide>> ranks;
  for (int r = 0; r < p; ++r) ranks.push_back(std::make_unique<RankSide>(*transports[r], options));
  RankMessage empty;
  ranks[0]->round.begin(empty);
  Deadline deadline = deadline_after(10);
  bool early = ranks[0]->round.step(ControlRound::Step::POLL, deadline) ||
               ranks[0]->round.step(ControlRound::Step::POLL, deadline);
  expect(!early, "[p=" + std::to_string(p) + "] the coordinator waits for the workers");
  for (int r = 1; r < p; ++r) ranks[static_cast<size_t>(r)]->round.begin(empty);
  bool done = false;
  for (int sweep = 0; sweep < 8 && !done; ++sweep) done = ranks[0]->round.step(ControlRound::Step::POLL, deadline);
  for (int r = 1; r < p; ++r) {
    ControlRound& round = ranks[static_cast<size_t>(r)]->round;
    bool worker = false;
    for (int sweep = 0; sweep < 8 && !worker; ++sweep) worker = round.step(ControlRound::Step::POLL, deadline);
    done = done && worker;
  }
  expect(done, "[p=" + std::to_string(p) + "] once they have, every round completes");
}

}  // namespace

int main() {
  for (int p = 1; p <= 5; ++p) {
    test_idle(p);
    test_readiness_and_cache(p);
    test_inline(p);
    test_copy_path_votes(p);
    test_join(p);
    test_gpu_refusals(p);
    test_expiry(p);
    test_long_messages(p);
    test_coordinator_waits(p);
  }
  return finish("control_round_test");
}
