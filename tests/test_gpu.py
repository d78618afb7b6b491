"""CUDA tensors through the GPU backend.

The GPU tests skip, with the reason, where torch sees no CUDA device or pyhorovod was built without the
GPU backend; they run one rank on one GPU, and 2 ranks when there are 2 or more GPUs (several ranks on one
GPU: test_gpu_shared.py). benchmarks/device_check.sh builds and runs them on a machine with a GPU.
The CPU tests at the end run everywhere: a CUDA request that cannot run (no GPU backend in the build, no
CUDA device, an unsupported combination) fails alone, with a clear ValueError, and the engine keeps
working.
"""
import pytest

from mp import run_ranks

# NCCL has no int16 (refused, see test_unsupported_combinations_refused_alone).
DTYPES = ["uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]
FLOATS = {"float16", "bfloat16", "float32", "float64"}


def _gpu_count():
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def _skip_reason():
    import pyhorovod
    if not pyhorovod.build_info().get("nccl"):
        return "pyhorovod was built without the GPU backend (PYHOROVOD_WITH_NCCL; see benchmarks/device_check.sh)"
    if _gpu_count() == 0:
        return "no CUDA device visible to torch"
    return None


needs_gpu = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
RANKS = 2 if _gpu_count() >= 2 else 1


def _setup():
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    # Ranks beyond the device count share devices (test_gpu_shared.py: several ranks on one GPU).
    device = hvd.local_rank() % torch.cuda.device_count()
    torch.cuda.set_device(device)
    return torch, hvd, torch.device("cuda", device)


def _check(results):
    failures = [f for r in results for f in (r.value or {}).get("failures", [])]
    counts = [(r.value or {}).get("count", 0) for r in results]
    assert not failures, "\n".join(failures[:40])
    assert all(c > 0 for c in counts), counts
    return counts


class _Checker:
    def __init__(self):
        self.failures, self.count = [], 0

    def eq(self, label, got, expected):
        import torch
        self.count += 1
        got_cpu = got.cpu() if isinstance(got, torch.Tensor) else got
        ok = (isinstance(got, torch.Tensor) and got.is_cuda and got.dtype == expected.dtype
              and tuple(got.shape) == tuple(expected.shape) and torch.equal(got_cpu, expected))
        if not ok:
            self.failures.append(f"{label}: got {got!r}, expected {expected!r}")

    def done(self):
        return {"failures": self.failures, "count": self.count}


def body_ops():
    torch, hvd, dev = _setup()
    r, n = hvd.rank(), hvd.size()
    c = _Checker()
    for dt in DTYPES:
        tdt = getattr(torch, dt)
        base = (torch.arange(12) % 4).reshape(3, 4)
        x = (base + r).to(tdt)
        allx = torch.stack([(base + k).to(tdt) for k in range(n)])
        if dt == "bool":
            exp = {"Sum": allx.any(0), "Max": allx.any(0), "Min": allx.all(0), "Product": allx.all(0)}
        else:
            wide = torch.stack([(base + k) for k in range(n)])
            exp = {"Sum": wide.sum(0).to(tdt), "Min": wide.min(0).values.to(tdt), "Max": wide.max(0).values.to(tdt),
                   "Product": wide.prod(0).to(tdt)}
            if dt in FLOATS:
                exp["Average"] = (wide.sum(0).double() / n).to(tdt)
        for opname, expected in exp.items():
            op = getattr(hvd, opname)
            c.eq(f"allreduce {dt} {opname}", hvd.allreduce(x.to(dev), op=op), expected)
            y = x.to(dev)
            hvd.allreduce_(y, op=op)
            c.eq(f"allreduce_ {dt} {opname}", y, expected)
        if dt in FLOATS:
            c.eq(f"allreduce {dt} pre/postscale", hvd.allreduce(x.to(dev), op=hvd.Sum, prescale_factor=2.0,
                                                               postscale_factor=0.5), exp["Sum"])
        # allgather, uneven first dimension: rank k contributes k + 1 rows of value k
        mine = torch.full((r + 1, 2), r).to(tdt)
        expected = torch.cat([torch.full((k + 1, 2), k).to(tdt) for k in range(n)])
        c.eq(f"allgather {dt}", hvd.allgather(mine.to(dev)), expected)
        # broadcast from the last rank, out of place and in place
        root = n - 1
        c.eq(f"broadcast {dt}", hvd.broadcast(x.to(dev), root_rank=root), (base + root).to(tdt))
        y = x.to(dev)
        hvd.broadcast_(y, root_rank=root)
        c.eq(f"broadcast_ {dt}", y, (base + root).to(tdt))
        # alltoall: rank r sends (k + 1) rows of value 10 r + k to rank k (bool: r == k)
        val = (lambda src, dst: src == dst) if dt == "bool" else (lambda src, dst: 10 * src + dst)
        send = torch.cat([torch.full((k + 1, 3), val(r, k)) for k in range(n)]).to(tdt)
        out, splits = hvd.alltoall(send.to(dev), splits=[k + 1 for k in range(n)])
        c.eq(f"alltoall {dt}", out, torch.cat([torch.full((r + 1, 3), val(k, r)) for k in range(n)]).to(tdt))
        if dt not in ("bool",):
            # reducescatter (Sum) of 2n + 1 rows: rank k keeps its block
            rows = 2 * n + 1
            inp = (torch.arange(rows * 2).reshape(rows, 2) % 5 + r).to(tdt)
            total = sum((torch.arange(rows * 2).reshape(rows, 2) % 5 + k) for k in range(n)).to(tdt)
            start = sum(rows // n + (1 if k < rows % n else 0) for k in range(r))
            mine_rows = rows // n + (1 if r < rows % n else 0)
            c.eq(f"reducescatter {dt}", hvd.reducescatter(inp.to(dev), op=hvd.Sum), total[start:start + mine_rows])
    return c.done()


def body_fusion():
    torch, hvd, dev = _setup()
    r, n = hvd.rank(), hvd.size()
    c = _Checker()
    tensors = [torch.full((k % 7 + 1, 3), float(k + r), device=dev) for k in range(64)]
    handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=f"fuse.{k}") for k, t in enumerate(tensors)]
    for k, h in enumerate(handles):
        out = hvd.synchronize(h)
        c.eq(f"fused {k}", out, torch.full((k % 7 + 1, 3), float(n * k + n * (n - 1) // 2)))
    mixed = [torch.full((5,), float(r + k), device=dev, dtype=torch.float16) for k in range(16)]
    outs = hvd.grouped_allreduce(mixed, op=hvd.Average)
    for k, o in enumerate(outs):
        c.eq(f"grouped {k}", o, torch.full((5,), k + (n - 1) / 2, dtype=torch.float16))
    return c.done()


def body_stream_order():
    torch, hvd, dev = _setup()
    r, n = hvd.rank(), hvd.size()
    c = _Checker()
    big = 1 << 22
    for label, stream in [("current stream", None), ("side stream", torch.cuda.Stream(dev))]:
        ctx = torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(torch.cuda.current_stream())
        with ctx:
            x = torch.zeros(big, device=dev)
            # Long queue of kernels ahead of the value the collective must see: if the backend did not
            # wait for this stream it would read zeros or an intermediate value.
            for _ in range(200):
                x = x * 1.0001 + 1.0
            x.fill_(r + 1)
            x.mul_(2)
            out = hvd.allreduce(x, op=hvd.Sum)
            torch.cuda.current_stream().synchronize()
        c.eq(f"{label}: allreduce after a long kernel chain", out[:8], torch.full((8,), float(n * (n + 1))))
        c.eq(f"{label}: all elements", out.min().reshape(1), torch.tensor([float(n * (n + 1))]))
    return c.done()


def body_optimizer():
    torch, hvd, dev = _setup()
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    gpu_model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double().to(dev)
    gpu_model.load_state_dict(cpu_model.state_dict())
    ref_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(gpu_model.parameters(), lr=0.1),
                                   named_parameters=gpu_model.named_parameters())
    gen = torch.Generator().manual_seed(1)
    for step in range(5):
        data = [torch.randn(4, 6, generator=gen, dtype=torch.float64) for _ in range(n)]
        target = [torch.randn(4, 1, generator=gen, dtype=torch.float64) for _ in range(n)]
        # Reference: the average of every rank's gradient, on the CPU.
        ref_opt.zero_grad()
        sum(torch.nn.functional.mse_loss(cpu_model(d), t) for d, t in zip(data, target)).div(n).backward()
        ref_opt.step()
        opt.zero_grad()
        torch.nn.functional.mse_loss(gpu_model(data[r].to(dev)), target[r].to(dev)).backward()
        opt.step()
    worst = max(float((a.detach().cpu() - b.detach()).abs().max())
                for a, b in zip(gpu_model.parameters(), cpu_model.parameters()))
    return {"failures": [] if worst < 1e-9 else [f"rank {r}: parameters differ from the CPU reference by {worst}"],
            "count": 1}


def body_cupy():
    """Every collective, op and dtype CuPy has (no bfloat16 there) on CuPy arrays, checked against numpy."""
    import cupy
    import numpy as np
    import pyhorovod as hvd
    hvd.init()
    cupy.cuda.Device(hvd.local_rank() % cupy.cuda.runtime.getDeviceCount()).use()
    r, n = hvd.rank(), hvd.size()
    failures, count = [], 0

    def eq(label, got, expected):
        nonlocal count
        count += 1
        ok = (isinstance(got, cupy.ndarray) and got.dtype == expected.dtype and got.shape == expected.shape
              and np.array_equal(cupy.asnumpy(got), expected))
        if not ok:
            failures.append(f"cupy {label}: got {got!r}, expected {expected!r}")

    for dt in [d for d in DTYPES if d != "bfloat16"]:
        ndt = np.dtype(dt)
        base = (np.arange(12) % 4).reshape(3, 4)
        x = (base + r).astype(ndt)
        wide = np.stack([base + k for k in range(n)])
        if dt == "bool":
            allx = wide.astype(bool)
            exp = {"Sum": allx.any(0), "Max": allx.any(0), "Min": allx.all(0), "Product": allx.all(0)}
        else:
            exp = {"Sum": wide.sum(0).astype(ndt), "Min": wide.min(0).astype(ndt), "Max": wide.max(0).astype(ndt),
                   "Product": wide.prod(0).astype(ndt)}
            if dt in FLOATS:
                exp["Average"] = (wide.sum(0) / n).astype(ndt)
        for opname, expected in exp.items():
            eq(f"allreduce {dt} {opname}", hvd.allreduce(cupy.asarray(x), op=getattr(hvd, opname)), expected)
            y = cupy.asarray(x)
            hvd.allreduce_(y, op=getattr(hvd, opname))
            eq(f"allreduce_ {dt} {opname}", y, expected)
        mine = np.full((r + 1, 2), r).astype(ndt)
        eq(f"allgather {dt}", hvd.allgather(cupy.asarray(mine)),
           np.concatenate([np.full((k + 1, 2), k).astype(ndt) for k in range(n)]))
        y = cupy.asarray(x)
        hvd.broadcast_(y, root_rank=n - 1)
        eq(f"broadcast_ {dt}", y, (base + n - 1).astype(ndt))
        val = (lambda src, dst: src == dst) if dt == "bool" else (lambda src, dst: 10 * src + dst)
        send = np.concatenate([np.full((k + 1, 3), val(r, k)) for k in range(n)]).astype(ndt)
        out, _ = hvd.alltoall(cupy.asarray(send), splits=[k + 1 for k in range(n)])
        eq(f"alltoall {dt}", out, np.concatenate([np.full((r + 1, 3), val(k, r)) for k in range(n)]).astype(ndt))
        if dt != "bool":
            rows = 2 * n + 1
            grid = np.arange(rows * 2).reshape(rows, 2) % 5
            total = sum(grid + k for k in range(n)).astype(ndt)
            start = sum(rows // n + (1 if k < rows % n else 0) for k in range(r))
            size = rows // n + (1 if r < rows % n else 0)
            eq(f"reducescatter {dt}", hvd.reducescatter(cupy.asarray((grid + r).astype(ndt)), op=hvd.Sum),
               total[start:start + size])
    return {"failures": failures, "count": count}


def body_cuda_interrupt():
    """Every rank's producer stream is busy for ~5 s (torch.cuda._sleep), so the CUDA allreduce waits on
    the GPU; a SIGALRM handler raising KeyboardInterrupt 1 s in must get through within a second."""
    import signal
    import time
    torch, hvd, dev = _setup()
    x = torch.ones(1024, device=dev)
    hvd.allreduce(x, name="warm")  # the NCCL communicator exists from here on
    torch.cuda.synchronize()

    def handler(signum, frame):
        raise KeyboardInterrupt("alarm")
    signal.signal(signal.SIGALRM, handler)
    torch.cuda._sleep(int(1e10))  # ~5 s of GPU cycles on the current (producer) stream
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    t = time.monotonic()
    try:
        hvd.allreduce(x, name="x")
        got = "returned"
    except KeyboardInterrupt:
        got = "KeyboardInterrupt"
    return {"got": got, "late_s": time.monotonic() - t - 1.0, "initialized_after": hvd.is_initialized()}


@needs_gpu
def test_a_raising_signal_handler_interrupts_a_cuda_collective():
    results = run_ranks(body_cuda_interrupt, RANKS, timeout=120)
    for res in results:
        print(f"MEASURED CUDA allreduce, rank {res.rank}: {res.value}")
        assert res.value["got"] == "KeyboardInterrupt", res.value
        assert res.value["late_s"] < 1.0, res.value
        assert res.value["initialized_after"] is False, res.value


@needs_gpu
def test_each_op_and_dtype():
    _check(run_ranks(body_ops, RANKS, timeout=240))


@needs_gpu
def test_fusion_many_tensors():
    _check(run_ranks(body_fusion, RANKS, timeout=120))


@needs_gpu
def test_stream_ordering():
    _check(run_ranks(body_stream_order, RANKS, timeout=120))


@needs_gpu
def test_distributed_optimizer_matches_cpu_reference():
    _check(run_ranks(body_optimizer, RANKS, timeout=120))


@needs_gpu
def test_cupy_arrays():
    pytest.importorskip("cupy", reason="CuPy is not installed")
    _check(run_ranks(body_cupy, RANKS, timeout=120))


# ---------------------------------------------------------------- CPU: refused CUDA requests

class _FakeCudaArray:
    """Looks like a CuPy array on cuda:0 but points at host memory: it must be refused before any access."""

    def __init__(self, arr):
        self.arr = arr
        self.device = type("Dev", (), {"id": 0})()
        self.__cuda_array_interface__ = {"shape": arr.shape, "typestr": arr.dtype.str,
                                         "data": (arr.__array_interface__["data"][0], False), "strides": None,
                                         "version": 3}


def body_refused():
    import numpy as np
    import pyhorovod as hvd
    from pyhorovod import _api, _core
    hvd.init()
    failures, count = [], 0

    def expect(label, fn, *needles):
        nonlocal count
        count += 1
        try:
            fn()
        except ValueError as e:
            if not any(s in str(e) for s in needles):
                failures.append(f"{label}: unclear message {e}")
        except Exception as e:  # noqa: BLE001 - reported as a failure
            failures.append(f"{label}: {type(e).__name__} instead of ValueError: {e}")
        else:
            failures.append(f"{label}: no error")
        # The engine keeps working after each refusal.
        count += 1
        got = hvd.allreduce(np.arange(4, dtype=np.float32) + hvd.rank(), op=hvd.Sum)
        n = hvd.size()
        if not np.array_equal(got, np.arange(4, dtype=np.float32) * n + n * (n - 1) / 2):
            failures.append(f"after {label}: CPU allreduce gave {got}")

    no_gpu = ("built without the GPU backend", "no CUDA device is visible")
    host = np.ones(8, dtype=np.float32)
    expect("CuPy-like allreduce_", lambda: hvd.allreduce_(_FakeCudaArray(host), op=hvd.Sum), *no_gpu)
    expect("CuPy-like allgather", lambda: hvd.allgather(_FakeCudaArray(host)), *no_gpu, "need CuPy")
    ptr = host.__array_interface__["data"][0]
    for kind in (_core.ALLREDUCE, _core.ALLGATHER, _core.ALLTOALL, _core.REDUCESCATTER):
        op = _api.Op(kind, _core.FLOAT32, (8,), ptr, ptr if kind != _core.ALLGATHER else 0, device=0, stream=0)
        expect(f"device request {kind}", lambda op=op: _api.synchronize(_api.submit([op], host, lambda rs: rs)),
               *no_gpu)
    i16 = np.ones(4, dtype=np.int16)
    p16 = i16.__array_interface__["data"][0]
    expect("int16 on cuda", lambda: _api.submit([_api.Op(_core.ALLREDUCE, _core.INT16, (4,), p16, p16, device=0)],
                                                i16, lambda rs: rs), "int16 CUDA tensors are not supported")
    other = np.ones(8, dtype=np.float32)
    expect("out-of-place broadcast on cuda",
           lambda: _api.submit([_api.Op(_core.BROADCAST, _core.FLOAT32, (8,), ptr,
                                        other.__array_interface__["data"][0], device=0)], (host, other),
                               lambda rs: rs), "broadcast in place")
    return {"failures": failures, "count": count}


@pytest.mark.skipif(_gpu_count() > 0, reason="a CUDA device is present: fake device pointers would be used")
@pytest.mark.parametrize("size", [1, 2])
def test_unsupported_cuda_requests_refused_alone(size):
    _check(run_ranks(body_refused, size, timeout=60))


def test_build_info_reports_what_is_linked():
    import subprocess
    import sys
    import pyhorovod
    info = pyhorovod.build_info()
    assert isinstance(info["nccl"], bool) and info["cuda"] == info["nccl"]
    assert pyhorovod.nccl_built() == info["nccl_version"] and (pyhorovod.nccl_built() > 0) == info["nccl"]
    out = subprocess.run([sys.executable, "-m", "pyhorovod.runner.cli", "run", "--check-build"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ("[X] NCCL" if info["nccl"] else "[ ] NCCL") in out.stdout, out.stdout
