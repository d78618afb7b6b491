"""The pace of the engine's negotiation rounds, over real processes: a loop of synchronous calls that
each run longer than the cycle (HOROVOD_CYCLE_TIME) costs one round per call, not two. The background
thread's idle round is due a cycle after the last round's work ended (csrc/engine/engine_loop.cc);
counted from when that round began, it fell due during every such call and ran the moment the caller
returned, so each call's request waited for a second round. Rounds are counted by the engine's
statistics line, logged at INFO level when it stops."""
import re

import numpy as np

from mp import run_ranks

ROUNDS = re.compile(r"engine stats: (\d+) rounds")
CALLS = 60


def body_long_calls(calls):
    import pyhorovod as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    x = np.full(1 << 20, r + 1, np.float32)  # 4 MiB: about 0.5 ms at 2 ranks, above the 0.2 ms cycle
    for _ in range(calls):  # in place and nothing between the calls: a pause longer than the cycle
        hvd.allreduce_(x, op=hvd.Sum, name="long")  # (a fresh output's page faults, say) earns an idle round
    # The first call sums n(n+1)/2; every later one multiplies by n: exact in float32.
    assert np.array_equal(x, np.full(1 << 20, n * (n + 1) // 2 * float(n) ** (calls - 1), np.float32))
    hvd.shutdown()


def test_a_call_longer_than_the_cycle_costs_one_round():
    results = run_ranks(body_long_calls, 2, timeout=120, args=(CALLS,),
                        env={"HOROVOD_LOG_LEVEL": "info", "HOROVOD_CYCLE_TIME": "0.2"})
    for r in results:
        m = ROUNDS.search(r.stderr)
        assert m, f"no engine stats line in:\n{r.stderr}"
        # One round per call, plus a few idle ones where a rank was descheduled between calls for longer
        # than the cycle; two rounds per call before the cycle counted from the end of the work.
        assert int(m.group(1)) <= CALLS * 5 // 4 + 10, (int(m.group(1)), CALLS)
