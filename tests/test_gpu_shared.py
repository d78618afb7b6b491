"""Several ranks on one GPU, the host-staged path, and join() with CUDA tensors.

NCCL refuses two ranks of one communicator on the same device. pyhorovod's ranks compare their devices
(host and PCI bus id) on a process set's first CUDA collective and, when two share one, all take the
host-staged path (device -> pinned host -> CPU ring -> device; csrc/backends/gpu_path.h), and rank 0 logs
the choice. Here every rank sees only the first GPU (CUDA_VISIBLE_DEVICES), so 2 and 4 ranks share it; the
bodies of test_gpu.py then check every op, dtype, fusion, stream ordering and the optimizer, exactly.
PYHOROVOD_GPU_PATH=staged forces the same path at one rank. The decision itself, with fake device ids,
is csrc/tests/gpu_path_test.cc; the staged backend and the routing on host memory, against a fake CUDA
runtime, csrc/tests/staged_backend_test.cc and gpu_router_test.cc. These tests skip where there is no GPU
(benchmarks/device_check.sh runs them on a machine with one).
"""
import os

import pytest

from mp import run_ranks
from test_gpu import (_check, _Checker, _gpu_count, _setup, body_fusion, body_ops, body_optimizer, body_stream_order,
                      needs_gpu)

STAGED_LOG = "use the host-staged path"


def _one_gpu_env(extra=None):
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    env = {"CUDA_VISIBLE_DEVICES": first}
    env.update(extra or {})
    return env


def _staged_logged(results, expected):
    logged = [STAGED_LOG in r.stderr for r in results]
    assert logged[0] == expected, results[0].stderr[-2000:]
    assert not any(logged[1:]), "only rank 0 of the process set logs the choice"


BODIES = {"ops": (body_ops, 180), "fusion": (body_fusion, 90), "stream": (body_stream_order, 90),
          "optimizer": (body_optimizer, 90)}


@needs_gpu
@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("body", sorted(BODIES))
def test_ranks_sharing_one_gpu(body, size):
    fn, timeout = BODIES[body]
    results = run_ranks(fn, size, timeout=timeout, env=_one_gpu_env())
    _check(results)
    _staged_logged(results, True)


@needs_gpu
@pytest.mark.parametrize("body", ["ops", "fusion"])
def test_staged_path_forced_at_one_rank(body):
    fn, timeout = BODIES[body]
    results = run_ranks(fn, 1, timeout=timeout, env=_one_gpu_env({"PYHOROVOD_GPU_PATH": "staged"}))
    _check(results)
    _staged_logged(results, True)


@needs_gpu
def test_one_rank_per_gpu_keeps_nccl():
    results = run_ranks(body_fusion, 1, timeout=120, env=_one_gpu_env())
    _check(results)
    _staged_logged(results, False)


def body_join():
    torch, hvd, dev = _setup()
    r, n = hvd.rank(), hvd.size()
    c = _Checker()
    x = torch.full((4,), float(r + 1), device=dev)
    c.eq("allreduce before join", hvd.allreduce(x, op=hvd.Sum), torch.full((4,), float(n * (n + 1) // 2)))
    if r == n - 1:
        last = hvd.join()
    else:
        # The last rank has joined (or will, without ever submitting this): CUDA tensors get no identity
        # fill from joined ranks, so the request is refused on every rank that made it.
        c.count += 1
        try:
            hvd.allreduce(x, op=hvd.Sum, name="cuda.after.join")
            c.failures.append(f"rank {r}: a CUDA allreduce while rank {n - 1} had joined did not fail")
        except ValueError as e:
            if "CUDA tensors cannot be reduced while ranks have joined" not in str(e):
                c.failures.append(f"rank {r}: unclear error {e}")
        last = hvd.join()
    c.count += 1
    if not (isinstance(last, int) and 0 <= last < n and (n > 1 or last == 0)):
        c.failures.append(f"rank {r}: join() returned {last!r}")
    # Everyone is back: CUDA collectives work again.
    c.eq("allreduce after join", hvd.allreduce(x * 2, op=hvd.Sum), torch.full((4,), float(n * (n + 1))))
    return c.done()


@needs_gpu
@pytest.mark.parametrize("size", [1, 2])
def test_join_with_cuda_tensors(size):
    _check(run_ranks(body_join, size, timeout=120, env=_one_gpu_env()))


def body_join_refuses_device_request():
    """CPU stand-in for body_join: a request that claims cuda:0 (host memory behind it, never touched)
    while the last rank has joined is refused by the coordinator, on every rank that made it."""
    import numpy as np
    import pyhorovod as hvd
    from pyhorovod import _api, _core
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    failures = []
    if r != n - 1:
        host = np.ones(8, dtype=np.float32)
        ptr = host.__array_interface__["data"][0]
        op = _api.Op(_core.ALLREDUCE, _core.FLOAT32, (8,), ptr, ptr, device=0, stream=0)
        try:
            _api.synchronize(_api.submit([op], host, lambda rs: rs))
            failures.append(f"rank {r}: no error")
        except ValueError as e:
            if "CUDA tensors cannot be reduced while ranks have joined" not in str(e):
                failures.append(f"rank {r}: unclear error {e}")
    last = hvd.join()
    got = hvd.allreduce(np.arange(3, dtype=np.float32), op=hvd.Sum)
    if not np.array_equal(got, np.arange(3, dtype=np.float32) * n):
        failures.append(f"rank {r}: allreduce after join gave {got}")
    if not 0 <= last < n:
        failures.append(f"rank {r}: join() returned {last!r}")
    return {"failures": failures, "count": 3}


@pytest.mark.skipif(_gpu_count() > 0, reason="a CUDA device is present: fake device pointers would be used")
@pytest.mark.parametrize("size", [2, 3])
def test_device_request_refused_while_ranks_joined(size):
    _check(run_ranks(body_join_refuses_device_request, size, timeout=90))
