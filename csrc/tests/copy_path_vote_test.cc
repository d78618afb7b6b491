// CopyPathVote (engine/copy_path_vote.h) on made-up timings: when a rank explores the other copy path,
// when it asks for a switch and when it stays, how explorations back off, the percentile that a burst of
// slow calls cannot move, and the fixed policies.
#include <string>

#include "engine/copy_path_vote.h"
#include "tests/check.h"
#include "transport/cross_memory.h"

using namespace phv;
using namespace phv::testing;

namespace {

using Vote = CopyPathVote::Vote;
constexpr size_t kPiece = kWideDirectBytes * 2;  // 128 KiB pieces
constexpr int kRun = CopyPathVote::kMinRun + 1;  // a run's untimed first call, then enough to judge it

// n calls in mode `wide`, each taking ns_per_byte; the last vote polled after them that was not NONE.
Vote calls(CopyPathVote& v, bool wide, int n, double ns_per_byte) {
  Vote last = Vote::NONE;
  for (int i = 0; i < n; ++i) {
    v.record(wide, kPiece, ns_per_byte * 1e-9 * static_cast<double>(kPiece));
    Vote got = v.poll();
    if (got != Vote::NONE) last = got;
  }
  return last;
}

std::string name(Vote v) { return v == Vote::WIDE ? "wide" : v == Vote::NARROW ? "narrow" : "none"; }

void test_explores_then_keeps_the_faster_ring() {
  CopyPathVote v;
  expect(v.poll() == Vote::NONE, "no call yet: no vote");
  Vote got = calls(v, false, kRun - 1, 1.0);
  expect(got == Vote::NONE, "the first call is not timed, so kMinRun calls are not yet enough", name(got));
  got = calls(v, false, 1, 1.0);
  expect(got == Vote::WIDE, "single copies never timed: explore them", name(got));
  got = calls(v, true, kRun, 1.3);
  expect(got == Vote::NARROW, "single copies 30% slower: back to the ring", name(got));
  expect(v.explore_after() == 2 * CopyPathVote::kExploreFirst, "an exploration that changed nothing backs off");
  got = calls(v, false, kRun + 400, 1.0);
  expect(got == Vote::NONE, "the ring stays until the doubled interval has passed", name(got));
  got = calls(v, false, 200, 1.0);
  expect(got == Vote::WIDE, "then single copies are explored again", name(got));
  expect(v.calls(true) == static_cast<uint64_t>(kRun), "calls are counted per mode");
}

void test_switches_when_the_ring_slows() {
  CopyPathVote v;
  calls(v, false, kRun, 1.0);
  calls(v, true, kRun, 1.3);  // explored: the ring wins
  Vote got = calls(v, false, kRun, 4.0);
  expect(got == Vote::WIDE, "the ring 4x slower than single copies' recent figure: single copies", name(got));
  expect(v.explore_after() == CopyPathVote::kExploreFirst, "a switch starts the exploring anew");
  got = calls(v, true, kRun, 1.3);
  expect(got == Vote::NONE, "single copies stay while the ring's last figure is slower", name(got));
  got = calls(v, true, static_cast<int>(CopyPathVote::kExploreFirst), 1.3);
  expect(got == Vote::NARROW, "the ring not timed for a while: explore it", name(got));
  got = calls(v, false, kRun, 4.0);
  expect(got == Vote::WIDE, "still slow: back to single copies", name(got));
}

void test_close_figures_do_not_flap() {
  CopyPathVote v;
  calls(v, false, kRun, 1.0);
  Vote got = calls(v, true, kRun, 1.1);
  expect(got == Vote::NARROW, "explored: single copies 10% slower", name(got));
  // Other ranks keep the mode wide: this rank goes on timing single copies, slightly faster now.
  got = calls(v, true, 100, 0.9);
  expect(got == Vote::NONE, "10% faster is not a clear gain: the vote stays", name(got));
  got = calls(v, true, 100, 0.7);
  expect(got == Vote::WIDE, "30% faster is", name(got));
}

void test_a_burst_of_slow_calls_does_not_decide() {
  CopyPathVote v;
  calls(v, false, kRun, 1.0);
  calls(v, true, kRun, 1.3);
  Vote got = calls(v, false, kRun + 40, 1.0);
  expect(got == Vote::NONE, "the ring, as fast as before: no new vote", name(got));
  got = calls(v, false, CopyPathVote::kWindow / 4 - 1, 1000.0);  // a mean would now be hundreds of times higher
  expect(got == Vote::NONE, "fewer slow calls than a quarter of the window do not move the figure", name(got));
  got = calls(v, false, CopyPathVote::kWindow, 4.0);
  expect(got == Vote::WIDE, "a whole window of slow calls does", name(got));
}

void test_fixed_policies() {
  for (auto [text, want] : {std::pair<const char*, Vote>{"wide", Vote::WIDE}, {"narrow", Vote::NARROW}}) {
    CopyPathVote v(CopyPathVote::parse(text));
    expect(v.poll() == want, std::string(text) + ": votes so at the first round, before any call");
    v.record(want == Vote::NARROW, kPiece, 1.0);
    expect(v.poll() == Vote::NONE && v.votes() == 1, std::string(text) + ": and never again");
  }
  CopyPathVote off(CopyPathVote::parse("off"));
  expect(calls(off, false, 400, 1.0) == Vote::NONE && off.votes() == 0 && off.calls(false) == 400,
         "off: counts, never votes");
  bool threw = false;
  try {
    CopyPathVote::parse("sometimes");
  } catch (const HvdError& e) {
    threw = e.kind() == ErrorKind::INVALID_ARGUMENT && std::string(e.what()).find("sometimes") != std::string::npos;
  }
  expect(threw, "an unknown policy is an argument error that quotes it");
  // The allreduce's vote: its own words, and its knob in what it says.
  CopyPathVote single(CopyPathVote::parse("single", kAllreduceKnob), kAllreduceKnob);
  expect(single.poll() == Vote::WIDE && single.reason() == "single copies: PYHOROVOD_ALLREDUCE_SINGLE_COPY=single",
         "single: votes for single copies, and says why", single.reason());
  expect(CopyPathVote::parse("ring", kAllreduceKnob) == CopyPathVote::Policy::NARROW, "ring: the other mode");
  threw = false;
  try {
    CopyPathVote::parse("wide", kAllreduceKnob);
  } catch (const HvdError& e) {
    const std::string what = e.what();
    threw =
        what.find("PYHOROVOD_ALLREDUCE_SINGLE_COPY must be auto, off, single or ring, not 'wide'") != std::string::npos;
  }
  expect(threw, "the copy path's words are not the allreduce's");
}

}  // namespace

int main() {
  test_explores_then_keeps_the_faster_ring();
  test_switches_when_the_ring_slows();
  test_close_figures_do_not_flap();
  test_a_burst_of_slow_calls_does_not_decide();
  test_fixed_policies();
  return finish("copy_path_vote_test");
}
