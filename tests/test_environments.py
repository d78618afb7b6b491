"""End-to-end launches under each environment a cluster may provide: pyhorovod run, Open MPI (variables
set by the test, and a real mpirun), Slurm steps, torchrun over two simulated nodes. hvd.init() must find
rank, size, local and cross rank without extra flags, and a collective must give the exact answer.
(The variable parsers themselves are unit-tested in test_bootstrap.py.)"""
import json
import os
import secrets
import shutil
import subprocess
import sys

import pytest

from mp import free_port, run_ranks
from runner_util import ROOT, clean_env, run_launcher, write_script

# Prints one JSON line: [source, rank, size, local_rank, local_size, cross_rank, cross_size, allreduce],
# in one write: a bare mpirun passes on each rank's writes as they come, so a line written in two pieces
# (print() does that on an unbuffered stdout) may have another rank's line in between. Then one line
# written on purpose in pieces, for launchers that promise whole lines per rank.
BODY = """
import json, sys, time
import numpy as np
import pyhorovod as hvd
hvd.init()
total = hvd.allreduce(np.array([hvd.rank() + 1], np.int64), op=hvd.Sum)
sys.stdout.write("RESULT " + json.dumps([hvd.rank_source(), hvd.rank(), hvd.size(), hvd.local_rank(),
                                         hvd.local_size(), hvd.cross_rank(), hvd.cross_size(), int(total[0])]) + "\\n")
sys.stdout.flush()
for piece in ["PIECES", " of", " rank ", str(hvd.rank()), "\\n"]:
    sys.stdout.write(piece)
    sys.stdout.flush()
    time.sleep(0.02)
hvd.shutdown()
"""


def body():
    import numpy as np
    import pyhorovod as hvd
    hvd.init()
    total = hvd.allreduce(np.array([hvd.rank() + 1], np.int64), op=hvd.Sum)
    info = [hvd.rank_source(), hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
            hvd.cross_size(), int(total[0])]
    hvd.shutdown()
    return info


def results_from(text, prefix=""):
    """RESULT lines (optionally behind a launcher's rank prefix), sorted by rank."""
    rows = [json.loads(line.split("RESULT ", 1)[1]) for line in text.splitlines() if "RESULT " in line]
    return sorted(rows, key=lambda row: row[1])


@pytest.fixture
def store():
    """A rendezvous store hosted by the test, as a cluster's own launcher would not: (env, server)."""
    from pyhorovod import _core
    secret = secrets.token_hex(16)
    server = _core.TcpStoreServer("127.0.0.1", 0, secret.encode())
    yield {"PYHOROVOD_STORE_ADDR": "127.0.0.1", "PYHOROVOD_STORE_PORT": str(server.port),
           "PYHOROVOD_SECRET": secret}
    server.close()


def test_pyhorovod_run_single_host(tmp_path):
    script = write_script(tmp_path, "body.py", BODY)
    r = run_launcher(["-np", "3", "python", script], timeout=90)
    assert r.returncode == 0, r
    assert results_from(r.stdout) == [["pyhorovod", k, 3, k, 3, 0, 1, 6] for k in range(3)], r
    for k in range(3):
        assert f"[{k}]<stdout>:PIECES of rank {k}" in r.lines(), r


def test_pyhorovod_run_two_host_names_gives_cross_ranks(tmp_path):
    # localhost and 127.0.0.1 are both this machine but count as two hosts of two slots each.
    script = write_script(tmp_path, "body.py", BODY)
    r = run_launcher(["-np", "4", "-H", "localhost:2,127.0.0.1:2", "python", script], timeout=90)
    assert r.returncode == 0, r
    assert results_from(r.stdout) == [["pyhorovod", 0, 4, 0, 2, 0, 2, 10], ["pyhorovod", 1, 4, 1, 2, 0, 2, 10],
                                      ["pyhorovod", 2, 4, 0, 2, 1, 2, 10], ["pyhorovod", 3, 4, 1, 2, 1, 2, 10]], r


def test_pyhorovod_run_hostfile(tmp_path):
    script = write_script(tmp_path, "body.py", BODY)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two 'hosts' that are both this machine\nlocalhost slots=2\n127.0.0.1 slots=1\n")
    r = run_launcher(["--hostfile", str(hostfile), "python", script], timeout=90)   # -np: all 3 slots
    assert r.returncode == 0, r
    assert results_from(r.stdout) == [["pyhorovod", 0, 3, 0, 2, 0, 2, 6], ["pyhorovod", 1, 3, 1, 2, 0, 1, 6],
                                      ["pyhorovod", 2, 3, 0, 1, 1, 2, 6]], r


def test_open_mpi_variables(store):
    # As under mpirun on 2 nodes of 2 slots, but without MPI: the variables are all the ranks get.
    def env(r):
        return dict(store, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE="4",
                    OMPI_COMM_WORLD_LOCAL_RANK=str(r % 2), OMPI_COMM_WORLD_LOCAL_SIZE="2",
                    PYHOROVOD_HOSTNAME=f"node{r // 2}")
    results = run_ranks(body, 4, env=env, launcher=None, timeout=90)
    assert [r.value for r in results] == [["openmpi", 0, 4, 0, 2, 0, 2, 10], ["openmpi", 1, 4, 1, 2, 0, 2, 10],
                                          ["openmpi", 2, 4, 0, 2, 1, 2, 10], ["openmpi", 3, 4, 1, 2, 1, 2, 10]]


def test_mpich_pmi_variables(store):
    # mpiexec (MPICH / Intel MPI hydra) on one node: PMI_* plus MPI_LOCALRANKID / MPI_LOCALNRANKS.
    def env(r):
        return dict(store, PMI_RANK=str(r), PMI_SIZE="3", MPI_LOCALRANKID=str(r), MPI_LOCALNRANKS="3")
    results = run_ranks(body, 3, env=env, launcher=None, timeout=90)
    assert [r.value for r in results] == [["pmi", k, 3, k, 3, 0, 1, 6] for k in range(3)]


def test_slurm_step_variables(store):
    # srun -N 2 -n 3 with the block distribution: node0 runs tasks 0,1 and node1 runs task 2.
    def env(r):
        node = 0 if r < 2 else 1
        return dict(store, SLURM_JOB_ID="77", SLURM_STEP_ID="0", SLURM_PROCID=str(r), SLURM_NTASKS="3",
                    SLURM_LOCALID=str(r if node == 0 else 0), SLURM_NODEID=str(node),
                    SLURM_STEP_TASKS_PER_NODE="2,1", PYHOROVOD_HOSTNAME=f"node{node}")
    results = run_ranks(body, 3, env=env, launcher=None, timeout=90)
    assert [r.value for r in results] == [["slurm", 0, 3, 0, 2, 0, 2, 6], ["slurm", 1, 3, 1, 2, 0, 1, 6],
                                          ["slurm", 2, 3, 0, 1, 1, 2, 6]]


def test_torchrun_variables_two_nodes():
    # torchrun --nnodes 2 --nproc-per-node 2 (what Kubeflow's PyTorchJob sets): rank 0 hosts the store.
    port, store_port = free_port(), free_port()

    def env(r):
        return {"RANK": str(r), "WORLD_SIZE": "4", "LOCAL_RANK": str(r % 2), "LOCAL_WORLD_SIZE": "2",
                "GROUP_RANK": str(r // 2), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "PYHOROVOD_STORE_PORT": str(store_port), "PYHOROVOD_HOSTNAME": f"node{r // 2}"}
    results = run_ranks(body, 4, env=env, launcher=None, timeout=90)
    assert [r.value for r in results] == [["torchrun", 0, 4, 0, 2, 0, 2, 10], ["torchrun", 1, 4, 1, 2, 0, 2, 10],
                                          ["torchrun", 2, 4, 0, 2, 1, 2, 10], ["torchrun", 3, 4, 1, 2, 1, 2, 10]]


needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI (mpirun) is not installed")


def mpirun_base():
    argv = ["mpirun", "--oversubscribe", "-np", "3"]
    return argv[:1] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + argv[1:]


@needs_mpirun
def test_real_mpirun_shares_the_store_through_mpi4py(tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed")
    script = write_script(tmp_path, "body.py", BODY)
    try:
        out = subprocess.run(mpirun_base() + [sys.executable, script], capture_output=True, text=True,
                             timeout=120, env=clean_env(), cwd=ROOT, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"mpirun did not finish in 120 s:\n{e.stdout}\n{e.stderr}") from None
    assert out.returncode == 0, out
    assert results_from(out.stdout) == [["openmpi", k, 3, k, 3, 0, 1, 6] for k in range(3)], out


@needs_mpirun
def test_pyhorovod_run_mpi_delegates_to_mpirun(tmp_path):
    script = write_script(tmp_path, "body.py", BODY)
    r = run_launcher(["--mpi", "-np", "3", "--verbose", "python", script], timeout=120)
    assert r.returncode == 0, r
    assert results_from(r.stdout) == [["openmpi", k, 3, k, 3, 0, 1, 6] for k in range(3)], r
    # mpirun --tag-output tags each write; the launcher gives back whole lines, in its own format.
    for k in range(3):
        assert f"[{k}]<stdout>:PIECES of rank {k}" in r.lines(), r
    # The secret went to mpirun by name only (-x PYHOROVOD_SECRET), never by value.
    cmd = [l for l in r.stdout.splitlines() if l.startswith("[pyhorovod] ") and "mpirun" in l]
    assert len(cmd) == 1 and "-x PYHOROVOD_SECRET " in cmd[0] + " " and "PYHOROVOD_SECRET=" not in cmd[0], r
