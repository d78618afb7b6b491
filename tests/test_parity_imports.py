"""Horovod's module paths under pyhorovod's name (pyhorovod.torch.mpi_ops, pyhorovod.common.exceptions,
...), and the opt-in `horovod` alias: an unchanged Horovod script runs through
`python -m pyhorovod.run --horovod-compat` (or PYHOROVOD_HOROVOD_COMPAT=1); without it `import horovod`
fails, Horovod not being installed."""
import subprocess
import sys

import pytest

from runner_util import clean_env, run_launcher, write_script

torch = pytest.importorskip("torch")

HOROVOD_SCRIPT = """
import torch
import horovod
import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovod.torch.compression import Compression
from horovod.torch.functions import broadcast_object
from horovod.torch.mpi_ops import Sum, allreduce_async_, synchronize
from horovod.torch.sync_batch_norm import SyncBatchNorm

hvd.init()
torch.manual_seed(1234 + hvd.rank())  # different initial weights on each rank until the broadcast
model = torch.nn.Linear(4, 1, bias=False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=Compression.none)
start = model.weight.detach().clone()
# d(sum(w . x))/dw = x = rank + 1 everywhere; DistributedOptimizer averages: (size + 1) / 2
optimizer.zero_grad()
model(torch.full((1, 4), float(hvd.rank() + 1))).sum().backward()
optimizer.step()
moved = ",".join(repr(v) for v in (start - model.weight.detach()).tolist()[0])
total = torch.tensor([float(hvd.rank() + 1)])
synchronize(allreduce_async_(total, op=Sum))
assert issubclass(HorovodInternalError, RuntimeError) and HostsUpdatedInterrupt(True).skip_sync
root_name = broadcast_object(__name__ if hvd.rank() == 0 else None, root_rank=0)
print(f"RESULT rank={hvd.rank()} size={hvd.size()} module={hvd.__name__} top={horovod.__name__} "
      f"start={','.join(repr(v) for v in start.tolist()[0])} moved={moved} total={total.item()} "
      f"sbn={SyncBatchNorm.__module__} "
      f"root_name={root_name}", flush=True)
"""


def _results(res, n):
    assert res.returncode == 0, res
    lines = sorted(line.split("RESULT ", 1)[1] for line in res.lines() if "RESULT " in line)
    assert len(lines) == n, res
    fields = [dict(kv.split("=", 1) for kv in line.split(" ")) for line in lines]
    assert [f["rank"] for f in fields] == [str(k) for k in range(n)], res
    return fields


def _check(fields, n):
    for f in fields:
        assert f["size"] == str(n) and f["module"] == "pyhorovod.torch" and f["top"] == "pyhorovod", f
        assert f["sbn"] == "pyhorovod.torch.sync_batch_norm" and f["root_name"] == "__main__", f
        assert float(f["total"]) == n * (n + 1) / 2, f
        # SGD step of lr * mean gradient = 0.5 * (n + 1) / 2 on every weight, from rank 0's weights
        assert [round(float(v), 6) for v in f["moved"].split(",")] == [0.5 * (n + 1) / 2] * 4, f
    assert len({f["start"] for f in fields}) == 1, fields


def test_horovod_script_runs_with_the_flag(tmp_path):
    script = write_script(tmp_path, "train_hvd.py", HOROVOD_SCRIPT)
    res = run_launcher(["--horovod-compat", "-np", "2", sys.executable, script], timeout=180)
    _check(_results(res, 2), 2)


def test_horovod_script_runs_with_the_variable(tmp_path):
    script = write_script(tmp_path, "train_hvd.py", HOROVOD_SCRIPT)
    res = run_launcher(["-np", "2", sys.executable, script], timeout=180, env={"PYHOROVOD_HOROVOD_COMPAT": "1"})
    _check(_results(res, 2), 2)


def test_without_the_alias_import_horovod_fails(tmp_path):
    out = subprocess.run([sys.executable, "-c", "import horovod"], capture_output=True, text=True,
                         env=clean_env(), cwd=str(tmp_path), timeout=60)
    assert out.returncode != 0 and "No module named 'horovod'" in out.stderr, out.stderr
    res = run_launcher(["-np", "1", sys.executable, "-c", "print('ran')"], timeout=60,
                       env={"PYHOROVOD_HOROVOD_COMPAT": "yes"})
    assert res.returncode == 2 and "PYHOROVOD_HOROVOD_COMPAT='yes'" in res.stdout + res.stderr, res


def test_deep_module_paths():
    import pyhorovod
    import pyhorovod.torch as hvd
    from pyhorovod.common import exceptions, process_sets
    from pyhorovod.torch import compression, functions, mpi_ops, sync_batch_norm
    assert exceptions.HorovodInternalError is pyhorovod.HorovodInternalError
    assert issubclass(exceptions.HostsUpdatedInterrupt, RuntimeError)
    assert exceptions.HostsUpdatedInterrupt(skip_sync=True).skip_sync is True
    assert process_sets.ProcessSet is hvd.ProcessSet and process_sets.global_process_set is hvd.global_process_set
    assert compression.Compression is hvd.Compression and sync_batch_norm.SyncBatchNorm is hvd.SyncBatchNorm
    assert functions.broadcast_optimizer_state is hvd.broadcast_optimizer_state
    for name in ("allreduce", "allreduce_async_", "grouped_allreduce", "allgather", "broadcast_", "alltoall",
                 "reducescatter", "grouped_reducescatter_async", "synchronize", "poll", "join", "barrier",
                 "init", "rank", "size", "Sum", "Average", "Adasum", "ProcessSet", "nccl_built"):
        assert getattr(mpi_ops, name) is getattr(hvd, name), name
    assert issubclass(mpi_ops.HorovodAllreduce, torch.autograd.Function)
    assert hvd.mpi_ops is mpi_ops and hvd.functions is functions and hvd.compression is compression
