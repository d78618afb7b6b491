"""Integer reductions never round silently: a fractional prescale/postscale factor on an integer tensor
is a ValueError (numpy and torch API, every integer dtype, every reducing op), and Average over integers
is the sum divided by the number of ranks, truncated toward zero (C division: -7 / 2 = -3, where numpy's
// gives -4), for negative sums too."""
import numpy as np
import pytest

from mp import run_ranks

INT_DTYPES = ["uint8", "int8", "int16", "int32", "int64"]


def expected_message(name, factor, dtype):
    return (f"{name}={factor!r} is not a whole number, so it cannot scale an integer ({dtype}) tensor "
            f"exactly; use a floating-point tensor or a whole factor")


def body_fractional_scales(use_torch):
    import pyhorovod as hvd
    hvd.init()
    if use_torch:
        import torch
        import pyhorovod.torch as api
        make = lambda dtype: torch.ones(4, dtype=getattr(torch, dtype))   # noqa: E731
    else:
        api = hvd
        make = lambda dtype: np.ones(4, dtype)                            # noqa: E731
    calls = {
        "allreduce": lambda x, **kw: api.allreduce(x, op=hvd.Sum, **kw),
        "allreduce_": lambda x, **kw: api.allreduce_(x, op=hvd.Average, **kw),
        "allreduce_async": lambda x, **kw: api.synchronize(api.allreduce_async(x, op=hvd.Sum, **kw)),
        "grouped_allreduce": lambda x, **kw: api.grouped_allreduce([x, x], op=hvd.Sum, **kw),
        "reducescatter": lambda x, **kw: api.reducescatter(x, op=hvd.Sum, **kw),
    }
    errors = []
    for dtype in INT_DTYPES:
        for call_name, call in calls.items():
            for arg, factor in (("prescale_factor", 0.5), ("postscale_factor", 1.5), ("prescale_factor", 1e-3)):
                try:
                    call(make(dtype), **{arg: factor})
                    errors.append(f"{call_name} {dtype} {arg}={factor}: no error")
                except ValueError as e:
                    if str(e) != expected_message(arg, factor, dtype):
                        errors.append(f"{call_name} {dtype} {arg}={factor}: {e}")
        # Whole factors stay allowed, and are exact: (1 * 2 summed over ranks) * 3.
        got = api.allreduce(make(dtype), op=hvd.Sum, prescale_factor=2.0, postscale_factor=3.0)
        if [int(v) for v in got.tolist()] != [6 * hvd.size()] * 4:
            errors.append(f"{dtype} whole factors: {got.tolist()}")
    # Floating-point tensors take any factor.
    got = api.allreduce(make("float32"), op=hvd.Sum, prescale_factor=0.5)
    if got.tolist() != [0.5 * hvd.size()] * 4:
        errors.append(f"float32 prescale 0.5: {got.tolist()}")
    hvd.shutdown()
    return errors


@pytest.mark.parametrize("use_torch", [False, True], ids=["numpy", "torch"])
def test_a_fractional_scale_on_an_integer_tensor_is_a_value_error(use_torch):
    if use_torch:
        pytest.importorskip("torch")
    for r in run_ranks(body_fractional_scales, 2, timeout=180, args=(use_torch,)):
        assert r.value == [], r.value
    print(f"MEASURED fractional scale on integer tensors ({'torch' if use_torch else 'numpy'}): "
          f"ValueError for {len(INT_DTYPES) * 5 * 3} calls on each of 2 ranks, before anything is sent")


# Each rank's integers: negative and positive, sums that are and are not multiples of the size.
def rank_values(rank, dtype):
    base = np.array([-7, -6, -5, -1, 0, 1, 5, 6, 7, -3, 3, -2], np.int64)
    values = base + (rank % 2) * np.array([0, 1, -1, 0, 0, 0, 1, 0, -1, 1, 0, -1])
    return values if dtype != "uint8" else np.abs(values)


def truncated_average(size, dtype):
    total = sum(rank_values(r, dtype) for r in range(size))
    return [-(-s // size) if s < 0 else s // size for s in total.tolist()]   # toward zero


def body_integer_average(use_torch):
    import pyhorovod as hvd
    hvd.init()
    n, r = hvd.size(), hvd.rank()
    got = {}
    for dtype in INT_DTYPES:
        x = rank_values(r, dtype).astype(dtype)
        if use_torch:
            import torch
            import pyhorovod.torch as api
            t = torch.from_numpy(x)
            got[dtype] = {"allreduce": api.allreduce(t, op=hvd.Average).tolist(),
                          "async_": api.synchronize(api.allreduce_async_(t.clone(), op=hvd.Average)).tolist(),
                          "reducescatter": api.reducescatter(torch.from_numpy(np.tile(x, n)), op=hvd.Average).tolist()}
        else:
            got[dtype] = {"allreduce": hvd.allreduce(x, op=hvd.Average).tolist(),
                          "async_": hvd.synchronize(hvd.allreduce_async_(x.copy(), op=hvd.Average)).tolist(),
                          "reducescatter": hvd.reducescatter(np.tile(x, n), op=hvd.Average).tolist()}
    hvd.shutdown()
    return got


@pytest.mark.parametrize("size", [2, 3, 4])
@pytest.mark.parametrize("use_torch", [False, True], ids=["numpy", "torch"])
def test_integer_average_truncates_toward_zero(size, use_torch):
    if use_torch:
        pytest.importorskip("torch")
    for r in run_ranks(body_integer_average, size, timeout=180, args=(use_torch,)):
        for dtype in INT_DTYPES:
            want = truncated_average(size, dtype)
            assert r.value[dtype] == {"allreduce": want, "async_": want, "reducescatter": want}, (r.rank, dtype)


def test_the_expected_values_round_toward_zero_not_down():
    # The expectation itself: element 2 sums to -11 over two ranks, -5.5 rounds to -5 (floor: -6).
    total = rank_values(0, "int32") + rank_values(1, "int32")
    assert total[2] == -11 and truncated_average(2, "int32")[2] == -5 and -11 // 2 == -6
