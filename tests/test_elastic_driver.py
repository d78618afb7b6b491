"""The elastic driver's parts, alone (generation order, blacklist, discovery, bad input at start), and
its store hygiene over 50 consecutive resets of a real job."""
import random

import pytest

from pyhorovod.runner import generation
from pyhorovod.runner.blacklist import Blacklist
from pyhorovod.runner.discovery import HostDiscovery, parse_discovery_output
from tests.runner_util import run_launcher, write_script


def _order(members):
    ordered = generation.order([generation.Member(str(i), h, prev, i) for i, (h, prev) in enumerate(members)])
    return [(m.hostname, m.prev_rank) for m in ordered]


def test_survivors_keep_order_and_rank0_is_a_survivor():
    # Rank 0 (host a) died; the survivors (b: old ranks 1, 2; c: 3) keep their order; a new worker on a
    # and one on a new host d come after the survivors' hosts.
    got = _order([("c", 3), ("a", None), ("b", 2), ("d", None), ("b", 1)])
    assert got == [("b", 1), ("b", 2), ("c", 3), ("a", None), ("d", None)]
    # A new worker on a survivor's host joins that host's block, after its survivors.
    assert _order([("b", 0), ("c", 1), ("b", None)]) == [("b", 0), ("b", None), ("c", 1)]


def test_records_give_local_and_cross_ranks_by_host():
    members = [generation.Member(str(i), h, i, i) for i, h in enumerate(["a", "a", "b", "b", "c"])]
    recs = generation.records(7, generation.order(members), hosts_version=3)
    got = [(recs[str(i)]["rank"], recs[str(i)]["local_rank"], recs[str(i)]["local_size"],
            recs[str(i)]["cross_rank"], recs[str(i)]["cross_size"]) for i in range(5)]
    assert got == [(0, 0, 2, 0, 3), (1, 1, 2, 0, 2), (2, 0, 2, 1, 3), (3, 1, 2, 1, 2), (4, 0, 1, 2, 3)]
    assert all(r["gen"] == 7 and r["size"] == 5 and r["hosts_version"] == 3 and r["homogeneous"] is False
               for r in recs.values())


def test_blacklist_is_permanent_without_a_cooldown_range():
    now = [0.0]
    b = Blacklist(clock=lambda: now[0])
    assert b.add("h") == float("inf") and b.blocked("h") and not b.blocked("other")
    now[0] = 1e9
    assert b.blocked("h") and b.permanent()


def test_blacklist_cooldown_doubles_with_jitter_and_caps():
    now = [0.0]
    b = Blacklist((10, 50), clock=lambda: now[0], rng=random.Random(1))
    cooldowns = [b.add("h") for _ in range(5)]
    for n, c in enumerate(cooldowns):
        base = min(50, 10 * 2 ** n)
        assert 0.8 * base <= c <= 1.2 * base, (n, c)
    now[0] = cooldowns[-1] + 0.01
    assert not b.blocked("h") and b.failures("h") == 5
    with pytest.raises(ValueError, match="MIN MAX"):
        Blacklist((5, 1))


def test_discovery_output_parsing():
    assert parse_discovery_output("a\nb:3\n# note\n\nc:2  # two\n", 2) == {"a": 2, "b": 3, "c": 2}
    for bad in ("a b\n", "a:x\n", "a:0\n", ":3\n", "a,b\n"):
        with pytest.raises(ValueError, match="line 1"):
            parse_discovery_output(bad, 1)


def _script(tmp_path, name, body, mode=0o755):
    path = tmp_path / name
    path.write_text(body)
    path.chmod(mode)
    return str(path)


def test_discovery_keeps_the_last_good_answer(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("a:2\n")
    script = _script(tmp_path, "d.sh", f"#!/bin/sh\ncat {hosts} || exit 3\n")
    d = HostDiscovery(script=script, interval_s=0.05)
    try:
        assert d.current() == {"a": 2}
        hosts.write_text("a:2\nb\n")
        assert d.changed.wait(10) and d.current() == {"a": 2, "b": 1}
        runs = d.runs
        hosts.unlink()   # the script now fails: the answer stays
        import time
        deadline = time.monotonic() + 10
        while d._last_error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert d._last_error is not None and "status 3" in d._last_error
        assert d.current() == {"a": 2, "b": 1} and d.runs == runs
    finally:
        d.close()


def test_bad_elastic_input_fails_before_any_worker(tmp_path):
    marker = tmp_path / "ran"
    cmd = ["python", "-c", f"open({str(marker)!r}, 'w').write('x')"]
    garbage = _script(tmp_path, "garbage.sh", "#!/bin/sh\necho 'host one two'\n")
    failing = _script(tmp_path, "fail.sh", "#!/bin/sh\necho nope >&2\nexit 4\n")
    plain = _script(tmp_path, "plain.sh", "#!/bin/sh\necho a\n", mode=0o644)
    cases = [
        (["-np", "2", "--host-discovery-script", str(tmp_path / "missing.sh")], "no such file"),
        (["-np", "2", "--host-discovery-script", plain], "not an executable"),
        (["-np", "2", "--host-discovery-script", garbage], "line 1: expected `host` or `host:slots`"),
        (["-np", "2", "--host-discovery-script", failing], "exited with status 4: nope"),
        (["-np", "2", "--min-np", "3", "--max-np", "2"], "--min-np 3 is above --max-np 2"),
        (["-np", "5", "--min-np", "1", "--max-np", "4"], "-np 5 lies outside --min-np 1 .. --max-np 4"),
        (["-np", "1", "--min-np", "0"], "--min-np must be >= 1"),
        (["-np", "2", "--max-np", "2", "--elastic-timeout", "0"], "--elastic-timeout must be > 0"),
        (["-np", "2", "--max-np", "2", "--reset-limit", "-1"], "--reset-limit must be >= 0"),
        (["-np", "2", "--max-np", "2", "--blacklist-cooldown-range", "5", "1"], "0 <= MIN <= MAX"),
        (["-np", "2", "--max-np", "2", "--max-restarts", "1"], "exclude each other"),
        (["-np", "2", "--max-np", "2", "-H", "a:2", "--host-discovery-script", garbage], "exclude each other"),
    ]
    for flags, message in cases:
        r = run_launcher([*flags, *cmd], timeout=30)
        assert r.returncode == 2 and message in r.stderr, (flags, r)
        assert not marker.exists(), (flags, r)


LEAK_WORKER = """
import json, os, threading
import numpy as np
import pyhorovod as hvd
from pyhorovod.elastic import _membership

def snapshot():
    fds = len(os.listdir("/proc/self/fd"))
    with open("/proc/self/maps") as f:   # shared-memory segments mapped (they are unlinked once opened)
        shm = len({line.split()[-1] for line in f if "/dev/shm/phv-" in line})
    return {"threads": threading.active_count(), "tasks": len(os.listdir("/proc/self/task")), "fds": fds,
            "shm": shm}

stats, stale = [], []
for i in range(50):
    hvd.init()
    a = _membership.current()
    x = hvd.allreduce(np.full(1 << 20, hvd.rank() + 1.0), name="x", op=hvd.Sum)
    assert x[0] == hvd.size() * (hvd.size() + 1) / 2, x[:3]
    snapshot_in_use = snapshot()["shm"] > 0
    if a.gen > 0:
        store = _membership._session.store
        stale += [k for k in (f"phv/e{a.gen - 1}/tcp/addr/0", f"pyhvd/elastic/worker/{a.rank}/assign/{i - 1}")
                  if store.check(k)]
    hvd.shutdown()
    stats.append(snapshot())
    if i == 0:
        assert a.local_size == 1 or snapshot_in_use, "shared memory was not used"
print("RESULT", json.dumps({"gen": a.gen, "stats": [stats[4], stats[-1]], "stale": stale}), flush=True)
"""


def test_fifty_resets_leave_nothing_behind(tmp_path):
    script = write_script(tmp_path, "leak.py", LEAK_WORKER)
    # Two workers share host 127.0.0.1 (shared memory between them), the third is on "host" 127.0.0.2.
    r = run_launcher(["-np", "3", "--min-np", "3", "-H", "127.0.0.1:2,127.0.0.2:1",
                      "--elastic-timeout", "20", "python", script], timeout=280)
    assert r.returncode == 0, r
    import json
    results = [json.loads(l.split("RESULT ", 1)[1]) for l in r.lines() if "RESULT " in l]
    assert len(results) == 3, r
    for res in results:
        assert res["gen"] == 49, r
        assert res["stale"] == [], r
        early, late = res["stats"]
        assert late == early, (early, late)
