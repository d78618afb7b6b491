"""Runs one job across the "hosts" of a tests/netns.py Network without the launcher: R ranks in each
namespace, started with torchrun's variables (rank 0 hosts the store at host 0's address), each printing
one line "RESULT <json>". Ranks of one namespace share its host name, so they pair up through shared
memory; ranks of different namespaces do not (different host names), so their bytes cross the veth links.

    rows = run_job(net, per_host=2, command=["python3", "-c", CODE], timeout=120)   # list by rank
"""
import json
import os
import secrets
import signal
import subprocess
import time
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_job(net, per_host: int, command: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None,
            hosts: Optional[int] = None, port: int = 29517) -> List[dict]:
    """Every rank's RESULT object, by rank. Raises AssertionError with every rank's output on failure."""
    hosts = len(net.hosts) if hosts is None else hosts
    size = hosts * per_host
    secret = secrets.token_hex(16)
    procs = []
    for h in range(hosts):
        for lr in range(per_host):
            rank = h * per_host + lr
            e = {k: v for k, v in os.environ.items() if not k.startswith(("PYHOROVOD_", "HOROVOD_", "OMPI_"))}
            e.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(lr), LOCAL_WORLD_SIZE=str(per_host),
                     MASTER_ADDR=net.hosts[0].addr("hv0"), MASTER_PORT=str(port), PYHOROVOD_SECRET=secret,
                     PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]), OMP_NUM_THREADS="1",
                     PYHOROVOD_CONNECT_TIMEOUT_SECONDS="60", PYHOROVOD_TIMEOUT_SECONDS=str(max(10, timeout - 10)))
            e.update(env or {})
            procs.append(net.hosts[h].popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                            env=e, cwd=ROOT, start_new_session=True))
    deadline = time.monotonic() + timeout
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    os.killpg(q.pid, signal.SIGKILL)
            outs.append(p.communicate())
    report = "\n".join(f"=== rank {r}: exit {p.returncode}\n{o}\n{e}" for r, (p, (o, e)) in enumerate(zip(procs, outs)))
    rows = []
    for p, (o, _) in zip(procs, outs):
        found = [json.loads(line.split("RESULT ", 1)[1]) for line in o.splitlines() if line.startswith("RESULT ")]
        assert p.returncode == 0 and found, report
        rows.append(found[-1])
    return rows
