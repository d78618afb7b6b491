"""Several hosts, simulated by network namespaces (tests/netns.py): each "host" has a management interface
hv0 (the "ssh" address the launcher is given) and a data interface hv1. The launcher runs on host 0 and
starts the other ranks through the rsh agent; with --network-interfaces hv1 (or HOROVOD_GLOO_IFACE=hv1)
collectives must be exact, every byte of them must cross hv1, and nothing may listen anywhere but on hv1.
Skipped, with the reason, where namespaces cannot be made (not root, no `ip`)."""
import json
import re
import subprocess
import threading
import time

import pytest

from netns import Network, NetemUnavailable, cleanup_stale, netem_available, require_netns
from runner_util import clean_env, kill_leftovers, launcher_argv, wait_gone, write_script

COUNT = 262144  # float32 elements: 1 MiB per rank

RANK = f"""
import json, os, subprocess, time
import numpy as np
import pyhorovod as hvd
SECRET = os.environ["PYHOROVOD_SECRET"].encode()  # init() takes it out of the environment
hvd.init()
print(f"pid {{os.getpid()}}", flush=True)
if os.environ.get("FAIL_RANK") == str(hvd.rank()):
    raise RuntimeError(f"rank {{hvd.rank()}} fails on purpose")
if os.environ.get("FAIL_RANK"):
    time.sleep(40)
x = np.arange({COUNT}, dtype=np.float32) * (hvd.rank() + 1)
y = hvd.allreduce(x, op=hvd.Sum)
ok = bool(np.array_equal(y, np.arange({COUNT}, dtype=np.float32) * (hvd.size() * (hvd.size() + 1) // 2)))
listening = subprocess.run(["ss", "-H", "-ltn"], capture_output=True, text=True).stdout.split("\\n")
dev = {{}}
for line in open("/proc/net/dev").read().splitlines()[2:]:
    name, fields = line.split(":", 1)
    f = fields.split()
    dev[name.strip()] = int(f[0]) + int(f[8])   # received + sent bytes
# Where each rank listened for the mesh (set-up only, so too brief to sample): "host:port" in the store.
from pyhorovod import _core
store = _core.TcpStore(os.environ["PYHOROVOD_STORE_ADDR"], int(os.environ["PYHOROVOD_STORE_PORT"]),
                           SECRET, 10.0)
mesh = [bytes(store.get(f"phv/g0/tcp/addr/{{r}}", 10.0)).decode() for r in range(hvd.size())]
hvd.barrier()
print("RESULT " + json.dumps({{"rank": hvd.rank(), "size": hvd.size(), "local": [hvd.local_rank(), hvd.local_size()],
      "cross": [hvd.cross_rank(), hvd.cross_size()], "ok": ok, "listening": [l for l in listening if l.strip()],
      "bytes": dev, "mesh": mesh}}), flush=True)
hvd.shutdown()
"""


@pytest.fixture(scope="module")
def net():
    require_netns()
    cleanup_stale()  # namespaces of earlier test runs that were killed before their cleanup
    with Network(hosts=3, subnets=2) as network:
        yield network


class ListenWatcher:
    """Samples the listening TCP sockets of every namespace while a job runs (ranks listen only during
    set-up, so a final look would miss them)."""

    def __init__(self, net):
        self.net, self.seen, self._stop = net, set(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            for h in self.net.hosts:
                try:
                    for addr, port, _ in h.listening():
                        self.seen.add((h.name, addr, port))
                except Exception:  # noqa: BLE001 -- a failed sample only weakens the check
                    pass
            self._stop.wait(0.02)

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        return self.seen


def launch(net, tmp_path, extra_args, env=None, timeout=90):
    script = write_script(tmp_path, "rank.py", RANK)
    hosts = ",".join(f"{h.addr('hv0')}:1" for h in net.hosts)
    argv = net.hosts[0].argv(launcher_argv(["-np", "3", "-H", hosts, "--rsh-agent", net.rsh_agent(),
                                            "--start-timeout", "60", *extra_args, "python", script]))
    watcher = ListenWatcher(net)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(dict(env or {}, PYHOROVOD_CONNECT_TIMEOUT_SECONDS="30",
                                               PYHOROVOD_TIMEOUT_SECONDS="30")),
                            cwd=str(tmp_path), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=15)
        raise AssertionError(f"launcher timed out\n{out}\n{err}")
    finally:
        seen = watcher.stop()
    return proc.returncode, out, err, seen


def check_job(net, code, out, err, seen):
    report = f"exit {code}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert code == 0, report
    rows = sorted((json.loads(l.split("RESULT ", 1)[1]) for l in out.splitlines() if "RESULT " in l),
                  key=lambda row: row["rank"])
    assert [(r["rank"], r["size"], r["local"], r["cross"], r["ok"]) for r in rows] == \
        [(k, 3, [0, 1], [k, 3], True) for k in range(3)], report
    for k, row in enumerate(rows):
        # The ring moved at least 2(p-1)/p of 1 MiB through hv1; hv0 carried no job traffic (only a few
        # bytes of IPv6 neighbour discovery the kernel may send on its own).
        assert row["bytes"]["hv1"] >= 2 * 2 / 3 * COUNT * 4, report
        assert row["bytes"]["hv0"] < 20000, report
    # Rank 0 (host 0) sees the launcher's store: it listens on host 0's hv1 address only.
    store = [l.split()[3] for l in rows[0]["listening"]]
    assert store and all(a.startswith(net.hosts[0].addr("hv1") + ":") for a in store), report
    for ns, addr, port in seen:
        host = next(h for h in net.hosts if h.name == ns)
        assert addr == host.addr("hv1"), f"{ns} listened on {addr}:{port}\n{report}"
    assert (net.hosts[0].name, net.hosts[0].addr("hv1"), int(store[0].rsplit(":", 1)[1])) in seen, report
    # Ranks 1 and 2 listened for the mesh on their hv1 address (rank 0 only connects: it publishes "").
    assert rows[0]["mesh"][0] == "", report
    for k in (1, 2):
        assert rows[0]["mesh"][k].rsplit(":", 1)[0] == net.hosts[k].addr("hv1"), report


def test_collectives_across_namespaces_on_the_chosen_interface(net, tmp_path):
    code, out, err, seen = launch(net, tmp_path, ["--network-interfaces", "hv1"])
    check_job(net, code, out, err, seen)


def test_interface_from_horovod_gloo_iface(net, tmp_path):
    code, out, err, seen = launch(net, tmp_path, [], env={"HOROVOD_GLOO_IFACE": "hv1"})
    check_job(net, code, out, err, seen)


def test_remote_failure_stops_every_host(net, tmp_path):
    code, out, err, _ = launch(net, tmp_path, ["--network-interfaces", "hv1"], env={"FAIL_RANK": "2"})
    pids = [int(p) for p in re.findall(r"<stdout>:pid (\d+)", out)]
    try:
        assert code == 1, err
        assert len(pids) == 3, out + err
        assert wait_gone(pids, 5) == [], out + err
        assert f"job failed: rank 2 (host {net.hosts[2].addr('hv0')}" in err, err
        assert err.rstrip().splitlines()[-2] == "    RuntimeError: rank 2 fails on purpose", err
    finally:
        kill_leftovers(pids)


def _transfer_seconds(net, nbytes):
    """Seconds to send nbytes from host 0 to host 1 over hv1 with plain sockets."""
    dst = net.hosts[1].addr("hv1")
    server = net.hosts[1].popen(["python3", "-c", f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("{dst}", 5999)); s.listen(1)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 16)
    if not b: break
    n += len(b)
print(n)
"""], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        client = net.hosts[0].run(["python3", "-c", f"""
import socket, time
c = socket.create_connection(("{dst}", 5999), timeout=10); t = time.perf_counter()
c.sendall(b"x" * {nbytes}); c.shutdown(socket.SHUT_WR); c.recv(1); print(time.perf_counter() - t)
"""], timeout=60, check=True)
        assert int(server.communicate(timeout=30)[0]) == nbytes
        return float(client.stdout)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_netns_helper_rate_limit(net):
    # 40 Mbit/s = 5 MB/s: 4 MB take >= ~0.7 s (minus one burst); unshaped it is a few ms.
    net.hosts[0].shape("hv1", rate_mbit=40)
    try:
        shaped = _transfer_seconds(net, 4_000_000)
    finally:
        net.hosts[0].unshape("hv1")
    assert shaped > 0.6, shaped
    assert _transfer_seconds(net, 4_000_000) < shaped / 3


def test_netns_helper_delay_and_loss(net):
    if not netem_available():
        with pytest.raises(NetemUnavailable):
            net.hosts[0].shape("hv1", delay_ms=5)
        pytest.skip("this kernel has no sch_netem: delay and loss cannot be emulated here")
    net.hosts[0].shape("hv1", delay_ms=50)
    try:
        t = time.perf_counter()
        r = net.hosts[0].run(["python3", "-c", "import socket; "
                              f"socket.create_connection(('{net.hosts[1].addr('hv1')}', "
                              "9), timeout=5)"], timeout=30)
        assert time.perf_counter() - t >= 0.05 and "refused" in r.stderr, r
    finally:
        net.hosts[0].unshape("hv1")
