"""The network between two "hosts" (network namespaces, tests/netns.py) fails.

- A link cut mid-job (`ip link set hv0 down` on host 1): both ranks raise within the collective deadline,
  naming the other rank (nothing closes: only the deadline can tell).
- A peer unreachable at init (the link is down before the job starts): init fails on both within the
  connect timeout.
- A lossy link: this kernel has no sch_netem and no tc actions (no random loss, no gact drop), so loss is
  made with what works: a tbf qdisc with a tiny queue (tail drop -- real dropped packets, counted by
  `tc -s`) and link flaps (the interface down for 0.4 s, several times). TCP retransmits; results must
  stay exact and no error may surface.
Each rank runs tests' RANK script in its namespace with its own environment; on failure every rank's
output is shown. The store runs in host 0's namespace. Skipped (with the reason) without root or `ip`.
"""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from mp import ROOT, clean_env
from netns import Network, cleanup_stale, netns_unavailable_reason

RANK = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import pyhorovod as hvd
    mode, count, limit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    t0 = time.monotonic()
    try:
        hvd.init()
    except hvd.HorovodInternalError as e:
        print("RESULT " + json.dumps({"phase": "init", "elapsed": time.monotonic() - t0, "message": str(e)}))
        sys.exit(0)
    r, n = hvd.rank(), hvd.size()
    x = np.arange(count, dtype=np.float32) % 127 * (r + 1)
    want = np.arange(count, dtype=np.float32) % 127 * (n * (n + 1) // 2)
    print("READY", flush=True)
    # Modes: "count" runs `limit` allreduces; "time" runs for `limit` seconds; "file" runs until the file
    # `limit` exists -- decided inside the allreduce (its last element is every rank's vote), so all
    # ranks stop after the same iteration.
    i, start = 0, time.monotonic()
    while (i < int(limit)) if mode == "count" else (mode == "file" or time.monotonic() - start < float(limit)):
        if mode == "file":
            x[-1] = want[-1] = float(os.path.exists(limit))
        try:
            y = hvd.allreduce(x, op=hvd.Sum, name="ring")
        except hvd.HorovodInternalError as e:
            print("RESULT " + json.dumps({"phase": "run", "t_err": time.time(), "iterations": i,
                                          "message": str(e)}), flush=True)
            sys.exit(0)
        i += 1
        stop = mode == "file" and y[-1] > 0
        if mode == "file":
            y[-1] = want[-1]   # the votes' sum decided `stop`; every other element is checked
        assert np.array_equal(y, want), f"rank {r}: wrong result in iteration {i - 1}"
        if stop:
            break
    print("RESULT " + json.dumps({"phase": "done", "iterations": i}), flush=True)
    hvd.shutdown()
""")

STORE = "from pyhorovod import _core; import sys, time; s = _core.TcpStoreServer(sys.argv[1], 0, " \
        "sys.argv[2].encode()); print(s.port, flush=True); time.sleep(float(sys.argv[3]))"


@pytest.fixture(scope="module")
def net():
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(reason)
    cleanup_stale()
    with Network(hosts=2, subnets=1) as network:
        yield network


class Job:
    """Two ranks, one per host, plus a store on host 0; outputs kept for the failure report."""

    def __init__(self, net, tmp_path, mode, count, limit, timeout_s, connect_s=10.0):
        self.net, self.procs, self.outs = net, [], []
        secret = os.urandom(16).hex()
        h0 = net.hosts[0]
        self.store = h0.popen([sys.executable, "-c", STORE, h0.addr(), secret, "120"], stdout=subprocess.PIPE,
                              text=True, env=clean_env(), cwd=ROOT)
        port = int(self.store.stdout.readline())
        script = os.path.join(str(tmp_path), "rank.py")
        with open(script, "w") as f:
            f.write(RANK)
        for r, host in enumerate(net.hosts):
            env = clean_env({
                "PYHOROVOD_RANK": str(r), "PYHOROVOD_SIZE": "2", "PYHOROVOD_LOCAL_RANK": "0",
                "PYHOROVOD_LOCAL_SIZE": "1", "PYHOROVOD_CROSS_RANK": str(r), "PYHOROVOD_CROSS_SIZE": "2",
                "PYHOROVOD_STORE_ADDR": h0.addr(), "PYHOROVOD_STORE_PORT": str(port), "PYHOROVOD_SECRET": secret,
                "PYHOROVOD_IFACE": "hv0", "PYHOROVOD_SHM": "0", "PYHOROVOD_TIMEOUT_SECONDS": str(timeout_s),
                "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": str(connect_s), "PYTHONUNBUFFERED": "1"})
            out = open(os.path.join(str(tmp_path), f"rank{r}.log"), "w+")
            self.outs.append(out)
            self.procs.append(host.popen([sys.executable, script, mode, str(count), str(limit)], stdout=out,
                                         stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True))

    def text(self, r):
        self.outs[r].flush()
        with open(self.outs[r].name) as f:
            return f.read()

    def report(self):
        return "\n".join(f"===== rank {r} (exit {p.poll()}):\n{self.text(r)}" for r, p in enumerate(self.procs))

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all("READY" in self.text(r) for r in range(2)):
                return
            time.sleep(0.05)
        raise AssertionError("ranks not ready\n" + self.report())

    def results(self, timeout):
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        hung = [r for r, p in enumerate(self.procs) if p.poll() is None]
        assert not hung, f"ranks {hung} still running after {timeout} s\n" + self.report()
        assert all(p.returncode == 0 for p in self.procs), self.report()
        rows = []
        for r in range(2):
            lines = [l for l in self.text(r).splitlines() if l.startswith("RESULT ")]
            assert lines, self.report()
            rows.append(json.loads(lines[-1][7:]))
        return rows

    def close(self):
        for p in self.procs + [self.store]:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 9) if p in self.procs else p.kill()
                except ProcessLookupError:
                    pass
                p.wait()
        for out in self.outs:
            out.close()


@pytest.fixture
def link_up(net):
    yield
    for h in net.hosts:   # whatever a test did to the links, the next one starts clean
        h.link("hv0", up=True)
        h.unshape("hv0")


def test_link_cut_mid_job_errors_within_the_deadline(net, tmp_path, link_up):
    job = Job(net, tmp_path, "time", 1 << 18, 60, timeout_s=4)
    try:
        job.wait_ready(40)
        time.sleep(1.0)
        t_cut = time.time()
        net.hosts[1].link("hv0", up=False)
        rows = job.results(30)
        for r, row in enumerate(rows):
            assert row["phase"] == "run" and row["iterations"] > 0, job.report()
            delay = row["t_err"] - t_cut
            print(f"MEASURED link cut (2 namespaces), rank {r}: error after {delay:.2f} s (deadline 4 s)")
            assert delay < 4 + 4, (r, delay, job.report())
            assert f"rank {1 - r}" in row["message"], job.report()
    finally:
        job.close()


def test_peer_unreachable_at_init_fails_within_the_connect_timeout(net, tmp_path, link_up):
    net.hosts[1].link("hv0", up=False)
    t0 = time.monotonic()
    job = Job(net, tmp_path, "time", 16, 5, timeout_s=4, connect_s=4)
    try:
        rows = job.results(40)
        total = time.monotonic() - t0
        for r, row in enumerate(rows):
            assert row["phase"] == "init", job.report()
            print(f"MEASURED peer unreachable at init, rank {r}: error after {row['elapsed']:.2f} s "
                  f"(connect timeout 4 s)")
            assert row["elapsed"] < 4 + 4, job.report()
        assert "ranks [1] never arrived" in rows[0]["message"], job.report()   # rank 0 waited for rank 1
        assert "rendezvous store" in rows[1]["message"], job.report()  # rank 1 cannot reach the store
        assert total < 30, total
    finally:
        job.close()


def dropped(host):
    out = host.run(["tc", "-s", "qdisc", "show", "dev", "hv0"], timeout=10).stdout
    return sum(int(w) for w in __import__("re").findall(r"dropped (\d+)", out))


def test_lossy_link_tail_drop_keeps_results_exact(net, tmp_path, link_up):
    for h in net.hosts:   # 20 Mbit/s with an 8 KiB queue: bursts of a 1 MiB ring segment overflow it
        h.run(["tc", "qdisc", "replace", "dev", "hv0", "root", "tbf", "rate", "20mbit", "burst", "4kb",
               "limit", "8kb"], timeout=10, check=True)
    job = Job(net, tmp_path, "count", 1 << 18, 12, timeout_s=60)
    try:
        rows = job.results(120)
        drops = dropped(net.hosts[0]) + dropped(net.hosts[1])
        print(f"MEASURED lossy link (tbf tail drop): 12 exact 1 MiB allreduces, {drops} packets dropped")
        assert all(row["phase"] == "done" and row["iterations"] == 12 for row in rows), job.report()
        assert drops > 0, "the qdisc dropped nothing: the test did not test loss"
    finally:
        job.close()


def test_flapping_link_keeps_results_exact(net, tmp_path, link_up):
    # The job runs until the stop file appears after the last flap (a fixed count of allreduces ended
    # before the flapping did on a fast, idle machine).
    stop = tmp_path / "stop"
    job = Job(net, tmp_path, "file", 1 << 18, str(stop), timeout_s=20)
    try:
        job.wait_ready(40)
        for _ in range(3):
            time.sleep(0.6)
            net.hosts[1].link("hv0", up=False)
            time.sleep(0.4)
            net.hosts[1].link("hv0", up=True)
        assert all(p.poll() is None for p in job.procs), "the job ended before the last flap\n" + job.report()
        stop.write_text("")
        rows = job.results(150)
        print(f"MEASURED flapping link (3 x 0.4 s down): {rows[0]['iterations']} exact allreduces, no error")
        assert all(row["phase"] == "done" for row in rows), job.report()
        assert rows[0]["iterations"] == rows[1]["iterations"] > 0, job.report()
    finally:
        job.close()
