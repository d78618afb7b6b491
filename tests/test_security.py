"""Strangers and garbage at every port pyhorovod opens, while a job runs.

Ports: the rendezvous store (open for the whole job) and each rank's mesh listener (open only during
init: the mesh is complete when init returns, and the listener is closed -- checked with ss). Strangers
(tests/stranger.py): a handshake with the wrong secret, a bad magic, a wrong version, a slow loris that
connects and says nothing, and a bounded fuzz loop of random bytes. After the handshake (with the secret:
only the test knows it) a store frame with a bad magic or an oversized length must be refused before
anything is allocated: the store's RSS must not jump. The job must be unaffected: exact results, a second
init through the same store, no rank crashed. And: no network path unpickles (grep), broadcast_object and
allgather_object unpickle only bytes their peers pickled (a pickle "bomb" sent to every port never runs),
and nothing listens beyond loopback in a local job.
"""
import hashlib
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import stranger
from fault_util import listening, rss_kb, wait_for_files, write_pid_file
from mp import ROOT, clean_env, run_ranks

STORE = "from pyhorovod import _core; import sys, time; s = _core.TcpStoreServer('127.0.0.1', 0, " \
        "sys.argv[1].encode()); print(s.port, flush=True); time.sleep(float(sys.argv[2]))"


class StoreProcess:
    """The rendezvous store in its own process, so that its memory can be watched."""

    def __init__(self, secret: str, lifetime_s: float = 300):
        # stderr (warnings about refused strangers, throttled) is dropped: all expected.
        self.proc = subprocess.Popen([sys.executable, "-c", STORE, secret, str(lifetime_s)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=clean_env(), cwd=ROOT)
        self.port = int(self.proc.stdout.readline())

    def rss_kb(self):
        return rss_kb(self.proc.pid)

    def close(self):
        self.proc.kill()
        self.proc.wait()


def rank_env(size, port, secret, extra=None):
    def env(r):
        e = {"PYHOROVOD_RANK": str(r), "PYHOROVOD_SIZE": str(size), "PYHOROVOD_LOCAL_RANK": str(r),
             "PYHOROVOD_LOCAL_SIZE": str(size), "PYHOROVOD_STORE_ADDR": "127.0.0.1",
             "PYHOROVOD_STORE_PORT": str(port), "PYHOROVOD_SECRET": secret}
        e.update(extra(r) if callable(extra) else (extra or {}))
        return e
    return env


# ------------------------------------------------------------------ the job under attack

def body_job(tmp, seconds, delay_rank0):
    import pyhorovod as hvd
    r = int(os.environ["PYHOROVOD_RANK"])
    write_pid_file(tmp, r)
    if r == 0:
        time.sleep(delay_rank0)   # the others listen for the mesh meanwhile: the strangers' window
    counts = []
    for generation in range(2):   # the second init meets at the same store, after it was attacked
        hvd.init()
        n = hvd.size()
        if generation == 0:
            open(os.path.join(tmp, f"joined.{r}"), "w").close()
        i, start, go = 0, time.monotonic(), True
        while go:
            x = np.arange(1000 + i, dtype=np.int64) * (r + 1)
            y = hvd.allreduce(x, op=hvd.Sum, name=f"g{i % 7}")
            assert np.array_equal(y, np.arange(1000 + i, dtype=np.int64) * (n * (n + 1) // 2)), i
            i += 1
            # Rank 0's clock decides for everybody, so that every rank stops after the same iteration.
            go = bool(hvd.broadcast(np.array([time.monotonic() - start < seconds or i < 20]), root_rank=0,
                                    name="go")[0])
        counts.append(i)
        hvd.shutdown()
    return counts


def attack_rank_listeners(tmp, size, stats):
    """While rank 0 sleeps, ranks 1.. listen for the mesh: strangers at each of their ports."""
    assert wait_for_files([os.path.join(tmp, f"pid.{r}") for r in range(size)], 30)
    pids = {int(open(os.path.join(tmp, f"pid.{r}")).read()): r for r in range(1, size)}
    ports, deadline = {}, time.monotonic() + 20
    while len(ports) < size - 1 and time.monotonic() < deadline:
        for addr, port, pid in listening(pids):
            ports[pids[pid]] = (addr, port)
        time.sleep(0.05)
    stats["rank_listeners"] = dict(ports)
    for r, (addr, port) in ports.items():
        ctx = b"phv/g0"
        stats.setdefault("refused", []).append(stranger.wrong_secret(addr, port, ctx, stranger.ROLE_TRANSPORT))
        stats["refused"].append(stranger.bad_hello(addr, port, stranger.ROLE_TRANSPORT, magic=0xDEADBEEF))
        stats["refused"].append(stranger.bad_hello(addr, port, stranger.ROLE_TRANSPORT, version=65535))
        stats["fuzz"] = stats.get("fuzz", 0) + stranger.fuzz(addr, port, 0.5, seed=r)
        stats.setdefault("loris", []).append(stranger.SlowLoris(addr, port, 3))   # open until the test ends


def attack_store(port, secret, store, stop, stats):
    host = "127.0.0.1"
    stats["store_refused"] = [
        stranger.wrong_secret(host, port, stranger.STORE_CONTEXT, stranger.ROLE_STORE_CLIENT),
        stranger.bad_hello(host, port, stranger.ROLE_STORE_CLIENT, magic=0x12345678),
        stranger.bad_hello(host, port, stranger.ROLE_STORE_CLIENT, version=2)]
    loris = stranger.SlowLoris(host, port, 20)
    stats["store_loris_closed"] = loris  # checked by the test (closed by the store after its 2 s handshake deadline)
    # With the secret: frames that claim absurd lengths, or carry a bad magic, are refused at once.
    before = store.rss_kb()
    refused = []
    for frame in (stranger.store_frame(1, [b"k"], b"v", magic=0x0BADF00D),
                  stranger.store_frame(1, [b"k"], body_len=0xFFFFFFF0),
                  stranger.store_frame(1, [b"k"], body_len=(64 << 20) + 1),
                  stranger.store_frame(5, [b"k"] * 5000)):
        s = stranger.authenticated_store(host, port, secret.encode())
        s.sendall(frame)
        refused.append(stranger.closed_by_peer(s, 5))
        s.close()
    stats["store_frames_refused"] = refused
    stats["store_rss_kb"] = (before, store.rss_kb())
    i = 0
    stats["store_fuzz"] = 0
    while not stop.is_set() and stats["store_fuzz"] < 3000:   # a bounded fuzz loop, while the job runs
        stats["store_fuzz"] += stranger.fuzz(host, port, 0.1, seed=100 + i)
        i += 1
        stop.wait(0.1)   # about half the time: the machine is shared with the job


@pytest.mark.parametrize("size", [3])
def test_strangers_at_every_port_do_not_affect_the_job(tmp_path, size):
    secret = os.urandom(16).hex()
    store = StoreProcess(secret)
    stats, stop = {}, threading.Event()
    tmp = str(tmp_path)
    attackers = [threading.Thread(target=attack_rank_listeners, args=(tmp, size, stats), daemon=True),
                 threading.Thread(target=attack_store, args=(store.port, secret, store, stop, stats), daemon=True)]
    try:
        for t in attackers:
            t.start()
        results = run_ranks(body_job, size, timeout=150, args=(tmp, 3.0, 6.0), launcher=None,
                            env=rank_env(size, store.port, secret, {"PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "60"}))
        stop.set()
        for t in attackers:
            t.join(30)
        assert store.proc.poll() is None, "the store process died"
        counts = results[0].value
        assert all(res.value == counts for res in results) and min(counts) >= 20, [r.value for r in results]
        # Every stranger was refused: closed by the rank or store it tried.
        assert len(stats["rank_listeners"]) == size - 1, stats
        assert stats["refused"] and all(stats["refused"]), stats
        assert all(stats["store_refused"]), stats
        assert all(stats["store_frames_refused"]), stats
        before, after = stats["store_rss_kb"]
        assert after - before < 16 * 1024, f"store RSS grew {before} -> {after} KiB after oversized claims"
        assert stats["store_loris_closed"].closed_by_peer(15) == 20, "the store kept silent connections open"
        # Refusal warnings are throttled (5 per 10 s window, then a counted summary), not one per stranger.
        for res in results:
            full = [l for l in res.stderr.splitlines() if "refusing connection from" in l and "more like this" not in l]
            assert len(full) <= 10, f"rank {res.rank}: {len(full)} refusal warnings"
        print(f"MEASURED strangers: {len(stats['refused'])} refused at rank listeners, "
              f"{stats['fuzz']} fuzz connections to them, {stats['store_fuzz']} to the store; store RSS "
              f"{before} -> {after} KiB after claims of 4 GiB; job exact ({counts} iterations)")
    finally:
        stop.set()
        for loris in stats.get("loris", []):
            loris.close()
        if "store_loris_closed" in stats:
            stats["store_loris_closed"].close()
        store.close()


# ------------------------------------------------------------------ listening sockets

def body_listen(tmp):
    import pyhorovod as hvd
    write_pid_file(tmp, os.environ["PYHOROVOD_RANK"])
    if os.environ["PYHOROVOD_RANK"] == "0":
        time.sleep(1.5)
    hvd.init()
    hvd.barrier()
    open(os.path.join(tmp, f"up.{hvd.rank()}"), "w").close()
    assert wait_for_files([os.path.join(tmp, "looked")], 30)
    hvd.barrier()
    hvd.shutdown()


def rank_pids(tmp, size):
    pids = []
    for r in range(size):
        try:
            with open(os.path.join(tmp, f"pid.{r}")) as f:
                pids.append(int(f.read()))
        except (FileNotFoundError, ValueError):
            pass
    return pids


def test_a_local_job_listens_on_loopback_only_and_not_after_init(tmp_path):
    """Samples the ranks' listening sockets during init (the mesh listeners) and after it. (Several hosts
    with PYHOROVOD_IFACE: tests/test_multihost.py checks that nothing listens beyond the chosen interface.)"""
    tmp, size = str(tmp_path), 3
    seen, after = set(), {}

    def watch():
        while not os.path.exists(os.path.join(tmp, "looked")):
            pids = rank_pids(tmp, size)
            if pids:
                seen.update((a, p) for a, p, _ in listening(pids))
            if all(os.path.exists(os.path.join(tmp, f"up.{r}")) for r in range(size)):
                after["rows"] = listening(pids)
                open(os.path.join(tmp, "looked"), "w").close()
            time.sleep(0.005)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    # Rank 0 arrives late, so the others' mesh listeners stay open long enough to be sampled.
    run_ranks(body_listen, size, timeout=60, args=(tmp,))
    t.join(10)
    assert after.get("rows") == [], f"ranks still listen after init: {after}"
    assert seen, "no listener was seen at all (the watcher missed the set-up)"
    assert all(a == "127.0.0.1" for a, _ in seen), f"listeners beyond loopback: {sorted(seen)}"


# ------------------------------------------------------------------ nothing from the network is unpickled

UNPICKLERS = re.compile(r"\b(pickle|cPickle|_pickle|dill|cloudpickle|marshal|shelve|jsonpickle)\.(loads?|Unpickler)\b"
                        r"|\byaml\.(unsafe_)?load\(|\btorch\.load\(")


def test_no_network_path_unpickles():
    """Only broadcast_object/allgather_object (pyhorovod/torch/functions.py) and the elastic states' numpy
    broadcast_object (pyhorovod/elastic/_objects.py) unpickle, and they take their bytes from a collective
    (authenticated peers); the bootstrap, store, launcher and C++ core never do."""
    hits = []
    for base, _, files in os.walk(os.path.join(ROOT, "pyhorovod")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(base, name)
                for no, line in enumerate(open(path), 1):
                    if UNPICKLERS.search(line):
                        hits.append((os.path.relpath(path, ROOT), no, line.strip()))
    assert {(h[0], h[2]) for h in hits} == {
        ("pyhorovod/torch/functions.py", "return cloudpickle.loads(data)"),
        ("pyhorovod/elastic/_objects.py", "return obj if is_root else cloudpickle.loads(payload.tobytes())")}, hits
    for base, _, files in os.walk(os.path.join(ROOT, "csrc")):
        for name in files:
            text = open(os.path.join(base, name), errors="replace").read()
            assert "pickle" not in text.lower(), name


class Bomb:
    """Unpickling this runs code (writes a marker file): what a stranger would send."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def body_objects(tmp):
    import pickle
    import pyhorovod.torch as hvd
    from pyhorovod.torch import functions
    write_pid_file(tmp, os.environ["PYHOROVOD_RANK"])
    if os.environ["PYHOROVOD_RANK"] == "0":
        time.sleep(2.0)   # rank 1 listens for the mesh meanwhile: a target for the bombs
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    loaded, dumped = [], []
    import cloudpickle
    real_loads, real_dumps = cloudpickle.loads, cloudpickle.dumps

    class Spy:   # functions.py's `cloudpickle`, recording what it unpickles and what it pickled
        @staticmethod
        def loads(data):
            loaded.append(hashlib.sha256(data).hexdigest())
            return real_loads(data)

        @staticmethod
        def dumps(obj, protocol=None):
            data = real_dumps(obj, protocol=protocol)
            dumped.append(hashlib.sha256(data).hexdigest())
            return data
        HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL

    functions.cloudpickle = Spy
    open(os.path.join(tmp, f"ready.{r}"), "w").close()
    for i in range(30):
        obj = {"rank": r, "i": i, "blob": list(range(i))}
        assert hvd.broadcast_object(obj if r == i % n else None, root_rank=i % n, name=f"b{i}") == \
            {"rank": i % n, "i": i, "blob": list(range(i))}
        assert hvd.allgather_object(obj, name=f"a{i}") == [{"rank": q, "i": i, "blob": list(range(i))}
                                                           for q in range(n)]
    hvd.shutdown()
    return {"loaded": loaded, "dumped": dumped}


def test_objects_are_unpickled_only_from_peers_while_strangers_send_pickles(tmp_path):
    import pickle
    tmp = str(tmp_path)
    marker = os.path.join(tmp, "BOOM")
    bomb = pickle.dumps(Bomb(marker))
    secret = os.urandom(16).hex()
    store = StoreProcess(secret)
    stop = threading.Event()

    def throw_bombs():   # at the store and at the ranks' mesh listeners (only ours: other jobs share the box)
        while not stop.is_set():
            for _, port, _ in listening([store.proc.pid] + rank_pids(tmp, 2)):
                try:
                    s = stranger.connect("127.0.0.1", port, timeout=1)
                    s.sendall(bomb * 4)
                    s.close()
                except OSError:
                    pass
            time.sleep(0.05)
    t = threading.Thread(target=throw_bombs, daemon=True)
    t.start()
    try:
        results = run_ranks(body_objects, 2, timeout=120, args=(tmp,), launcher=None,
                            env=rank_env(2, store.port, secret))
    finally:
        stop.set()
        t.join(10)
        store.close()
    assert not os.path.exists(marker), "a stranger's pickle was unpickled"
    produced = {h for res in results for h in res.value["dumped"]}
    for res in results:
        assert res.value["loaded"], "nothing was unpickled: the spy did not work"
        assert set(res.value["loaded"]) <= produced, "a rank unpickled bytes that no peer pickled"
