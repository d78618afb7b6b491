"""The rendezvous store under pressure: more connections than the process has descriptors, accept()
failing with EMFILE, silent connections, thousands of refused strangers, and authenticated clients that
store too much. The store runs in its own process (often rank 0's training process in a real job), with
its own RLIMIT_NOFILE, so that what the flood costs that process -- descriptors, CPU, memory, log lines --
can be measured. Limits come from the PYHOROVOD_STORE_* variables (pyhorovod/_config.py store_limits).
"""
import os
import re
import resource
import socket
import subprocess
import sys
import time

import pytest

import stranger
from fault_util import fd_count, rss_kb
from mp import ROOT, clean_env

# The store's process: hosts the store with the limits of its environment, then answers commands on
# stdin: "open N" (how many of N open() calls fail), "hog N" (open files until N descriptors are in use).
STORE = r"""
import os, sys
from pyhorovod import _rendezvous
server = _rendezvous.host_store("127.0.0.1", 0, sys.argv[1].encode(), os.environ)
print(server.port, flush=True)
held = []
for line in sys.stdin:
    cmd, n = line.split()
    n = int(n)
    if cmd == "open":
        failed = 0
        for _ in range(n):
            try:
                os.close(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                failed += 1
        print(failed, flush=True)
    elif cmd == "hog":
        while len(os.listdir("/proc/self/fd")) < n:
            held.append(os.open(os.devnull, os.O_RDONLY))
        print(len(held), flush=True)
"""


class Store:
    def __init__(self, tmp, nofile=None, env=None):
        self.secret = os.urandom(16).hex()
        self.log = os.path.join(str(tmp), "store.stderr")

        def limit():
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", STORE, self.secret], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT,
                                         env=clean_env(env), preexec_fn=limit)
        self.port = int(self.proc.stdout.readline())

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cpu_share(self, seconds):
        """Fraction of one core the store process used over the next `seconds`."""
        c0, t0 = self.cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        return (self.cpu_seconds() - c0) / (time.monotonic() - t0)

    def stderr(self):
        with open(self.log) as f:
            return f.read()

    def close(self):
        self.proc.kill()
        self.proc.wait()


def idle_connections(port, count):
    """`count` TCP connections that say nothing (non-blocking connects: the ones the store does not
    accept wait in its backlog)."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    return socks


@pytest.fixture
def many_descriptors():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the test process needs 4,096 descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_connection_flood_leaves_the_store_process_its_descriptors(tmp_path, many_descriptors):
    """ulimit -n 1024 and 1,100 idle connections: the store holds at most a quarter of the limit, every
    open() of the process still works, and the store thread does not spin."""
    store = Store(tmp_path, nofile=1024)
    socks = []
    try:
        socks = idle_connections(store.port, 1100)
        time.sleep(3.5)   # connections beyond the backlog retry their SYN after 1 and 3 s
        failed = store.ask("open 200")
        held = fd_count(store.proc.pid)
        share = store.cpu_share(1.0)
        print(f"MEASURED 1,100 idle connections, ulimit -n 1024: {failed}/200 open() failed, store process "
              f"holds {held} descriptors, store process CPU {share:.0%} of a core")
        assert failed == 0, f"{failed} of 200 open() calls failed in the store's process"
        assert held <= 256 + 32, f"the store's process holds {held} descriptors (cap: 1024 / 4)"
        assert share < 0.1, f"the store process used {share:.0%} of a core while at its connection cap"
        assert "the cap" in store.stderr(), store.stderr()
    finally:
        for s in socks:
            s.close()
        store.close()


def test_accept_running_out_of_descriptors_backs_off_instead_of_spinning(tmp_path):
    """The process itself uses nearly all its descriptors (below the store's cap): accept() fails with
    EMFILE; the store pauses instead of polling the listening socket in a busy loop."""
    store = Store(tmp_path, nofile=512)
    socks = []
    try:
        store.ask("hog 508")
        socks = idle_connections(store.port, 40)
        time.sleep(0.3)
        share = store.cpu_share(1.5)
        print(f"MEASURED accept() at EMFILE: store process CPU {share:.0%} of a core")
        assert share < 0.1, f"the store process used {share:.0%} of a core while accept() fails"
        warnings = [l for l in store.stderr().splitlines() if "cannot accept connections" in l]
        assert warnings and "Too many open files" in warnings[0], store.stderr()
        assert len(warnings) <= 5, f"{len(warnings)} EMFILE warnings: not throttled"
    finally:
        for s in socks:
            s.close()
        store.close()


@pytest.mark.parametrize("setting, lower, upper", [(None, 1.5, 4.0), ("0.5", 0.3, 1.8)])
def test_silent_connections_are_closed_after_the_handshake_deadline(tmp_path, setting, lower, upper):
    env = {"PYHOROVOD_STORE_HANDSHAKE_SECONDS": setting} if setting else None
    store = Store(tmp_path, env=env)
    loris = None
    try:
        start = time.monotonic()
        loris = stranger.SlowLoris("127.0.0.1", store.port, 20)
        assert len(loris.socks) == 20
        assert loris.closed_by_peer(lower - 0.2) == 0, "closed before the handshake deadline"
        closed = loris.closed_by_peer(upper - (time.monotonic() - start))
        elapsed = time.monotonic() - start
        print(f"MEASURED handshake deadline {setting or 'default'}: {closed}/20 silent connections closed "
              f"after {elapsed:.2f} s")
        assert closed == 20, f"{closed}/20 silent connections closed within {upper} s"
    finally:
        if loris:
            loris.close()
        store.close()


SUMMARY = re.compile(r"(\d+) more like this in the last \d+ s")


def test_refused_connection_warnings_are_throttled_with_counted_summaries(tmp_path):
    store = Store(tmp_path)
    try:
        n = 300
        refused = sum(stranger.wrong_secret("127.0.0.1", store.port, stranger.STORE_CONTEXT,
                                            stranger.ROLE_STORE_CLIENT) for _ in range(n))
        assert refused == n
        time.sleep(11.5)   # the summary comes at the end of the 10 s window
        lines = store.stderr().splitlines()
        full = [l for l in lines if "closing connection from" in l and "more like this" not in l]
        counted = sum(int(m.group(1)) for m in map(SUMMARY.search, lines) if m)
        print(f"MEASURED {n} wrong-secret strangers: {len(lines)} log lines ({len(full)} in full, summaries "
              f"counting {counted})")
        assert len(full) + counted == n, lines
        assert len(lines) <= 12, f"{len(lines)} log lines for {n} strangers"
    finally:
        store.close()


def test_store_memory_is_bounded_and_the_writer_is_told_which_limit(tmp_path):
    from pyhorovod import _core
    store = Store(tmp_path, env={"PYHOROVOD_STORE_MAX_BYTES": str(8 << 20)})
    try:
        client = _core.TcpStore("127.0.0.1", store.port, store.secret.encode(), 10.0)
        before = rss_kb(store.proc.pid)
        big = (64 << 20) - 1024   # just under the wire format's cap; the default value limit is 1 MiB
        start = time.monotonic()
        for i in range(8):
            with pytest.raises(_core.InvalidArgumentError, match=r"set\('big%d'\) refused: a value of %d bytes exceeds "
                               r"the store's limit of 1048576 bytes per value \(PYHOROVOD_STORE_MAX_VALUE_BYTES\)"
                               % (i, big)):
                client.set(f"big{i}", bytes(big))
        per_set = (time.monotonic() - start) / 8
        grown = rss_kb(store.proc.pid) - before
        stored = 0
        with pytest.raises(_core.InvalidArgumentError, match=r"exceed its limit of 8388608 bytes in total "
                                             r"\(PYHOROVOD_STORE_MAX_BYTES\)"):
            while True:
                value = bytes([stored % 251]) * (1 << 20)
                client.set(f"k{stored}", value)
                stored += 1
        assert stored == 7, stored   # 7 x (1 MiB + key + 64): the 8th would pass 8 MiB
        # The connection still works, the full store still answers reads, the stored values are intact, and
        # overwriting within the limit works.
        for i in range(stored):
            assert client.get(f"k{i}", 5) == bytes([i % 251]) * (1 << 20)
        small = 0
        with pytest.raises(_core.InvalidArgumentError, match="PYHOROVOD_STORE_MAX_BYTES"):
            while small < 2000:   # fill the last MiB
                client.set(f"s{small}", bytes(1000))
                small += 1
        assert client.check("k1") and not client.check("k9") and client.get("s0", 5) == bytes(1000)
        for i in range(small):
            client.set(f"s{i}", b"")   # making room
        client.set("k0", b"small")
        client.set("k7", bytes(512 << 10))
        assert client.get("k0", 5) == b"small" and client.add("n", 3) == 3
        print(f"MEASURED 8 x 64 MiB values refused ({per_set:.2f} s per set() to its error): store RSS "
              f"+{grown} KiB; total limit 8 MiB reached after {stored} x 1 MiB")
        assert grown < 8 * 1024, f"store RSS grew {grown} KiB while refusing 512 MiB of values"
    finally:
        store.close()


def test_store_limits_are_parsed_and_checked():
    from pyhorovod._config import store_limits
    assert store_limits({}) == {}
    assert store_limits({"PYHOROVOD_STORE_MAX_BYTES": "100", "PYHOROVOD_STORE_MAX_VALUE_BYTES": "10",
                         "PYHOROVOD_STORE_HANDSHAKE_SECONDS": "0.5"}) == \
        {"max_total_bytes": 100, "max_value_bytes": 10, "handshake_s": 0.5}
    for name, value in [("PYHOROVOD_STORE_MAX_BYTES", "0"), ("PYHOROVOD_STORE_MAX_VALUE_BYTES", "lots"),
                        ("PYHOROVOD_STORE_MAX_VALUE_BYTES", str((64 << 20) + 1)),
                        ("PYHOROVOD_STORE_HANDSHAKE_SECONDS", "0")]:
        with pytest.raises(ValueError, match=name):
            store_limits({name: value})
