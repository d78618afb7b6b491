"""Compression.fp16 / .bf16: round-trip error bounds and range (one process), allreduce and grouped allreduce
with them at 2 and 3 ranks (values exact in the wire type come back exact, in the input's dtype), and the
ValueError on integer and boolean tensors."""
import pytest

from mp import run_ranks


def _normal_float32_values():
    """float32 values across the whole normal range, both signs, with random mantissas."""
    import torch
    g = torch.Generator().manual_seed(3)
    exponents = torch.randint(-126, 127, (20000,), generator=g).double()
    mantissas = 1 + torch.rand(20000, generator=g, dtype=torch.float64)
    signs = torch.where(torch.rand(20000, generator=g) < 0.5, -1.0, 1.0).double()
    return (signs * mantissas * torch.pow(2.0, exponents)).float()


def test_bf16_round_trip_error_and_range():
    import torch
    from pyhorovod.torch.compression import Compression
    x = _normal_float32_values()
    wire, ctx = Compression.bf16.compress(x)
    assert wire.dtype == torch.bfloat16
    back = Compression.bf16.decompress(wire, ctx)
    assert back.dtype == torch.float32
    rel = ((back.double() - x.double()).abs() / x.double().abs()).max().item()
    assert rel <= 2.0 ** -8, rel                       # round to nearest with 8 significant bits
    assert torch.isfinite(back).all()                  # float32's range is kept ...
    wire16, ctx16 = Compression.fp16.compress(x)
    assert not torch.isfinite(Compression.fp16.decompress(wire16, ctx16)).all()   # ... which fp16 loses
    extremes = torch.tensor([3.0e38, -3.0e38, 1.2e-38, 0.0, float("inf"), -float("inf")])
    out = Compression.bf16.decompress(*Compression.bf16.compress(extremes))
    assert torch.isfinite(out[:4]).all() and (out[:4] != 0).sum() == 3 and out[4] == float("inf")
    assert ((out[:3] - extremes[:3]).abs() <= extremes[:3].abs() * 2.0 ** -8).all()
    # float64 and float16 inputs come back in their own dtype
    for dt in (torch.float64, torch.float16):
        y = torch.linspace(-4, 4, 33, dtype=dt)
        assert Compression.bf16.decompress(*Compression.bf16.compress(y)).dtype == dt


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_integer_tensors_refused(name):
    import torch
    from pyhorovod.torch.compression import Compression
    for dt in (torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool):
        with pytest.raises(ValueError, match="compression=.*floating-point.*" + str(dt).replace(".", r"\.")):
            getattr(Compression, name).compress(torch.ones(3, dtype=dt))


def body_allreduce():
    import torch
    import pyhorovod.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    out = {}
    for name in ("fp16", "bf16"):
        comp = getattr(hvd.Compression, name)
        for dt in (torch.float32, torch.float64):
            # small integers times powers of two: exact in both wire types, and so are their sums
            x = (torch.arange(40, dtype=dt) % 7 - 3 + r) * 0.25
            expect = sum((torch.arange(40, dtype=dt) % 7 - 3 + k) * 0.25 for k in range(n))
            got = hvd.allreduce(x, op=hvd.Sum, compression=comp, name=f"c.{name}.{dt}")
            out[f"{name} {dt} sum"] = [got.dtype == dt, float((got - expect).abs().max())]
            got = hvd.grouped_allreduce([x, 2 * x], op=hvd.Average, compression=comp, name=f"g.{name}.{dt}")
            out[f"{name} {dt} grouped"] = [all(t.dtype == dt for t in got),
                                           float(max((got[0] - expect / n).abs().max(),
                                                     (got[1] - 2 * expect / n).abs().max()))]
        # relative error of a sum of general values: the inputs' rounding plus the sum's (wire type)
        y = torch.randn(1000, generator=torch.Generator().manual_seed(r), dtype=torch.float64).float()
        exact = sum(torch.randn(1000, generator=torch.Generator().manual_seed(k), dtype=torch.float64).float()
                    for k in range(n)).double()
        got = hvd.allreduce(y, op=hvd.Sum, compression=comp, name=f"r.{name}").double()
        out[f"{name} random"] = float(((got - exact).abs() / exact.abs().clamp(min=1)).max())
        try:
            hvd.allreduce(torch.ones(3, dtype=torch.int32), compression=comp, name=f"i.{name}")
            out[f"{name} int"] = "no error"
        except ValueError as e:
            out[f"{name} int"] = str(e)
    hvd.shutdown()
    return out


@pytest.mark.parametrize("size", [2, 3])
def test_allreduce_with_16_bit_compression(size):
    for res in run_ranks(body_allreduce, size, timeout=120):
        v = res.value
        for name in ("fp16", "bf16"):
            for key in (k for k in v if k.startswith(name) and ("sum" in k or "grouped" in k)):
                assert v[key] == [True, 0.0], (key, v[key])
            # n inputs each rounded (<= 2^-p relative) and the sum rounded: a few units of 2^-p
            bound = (size + 2) * (2.0 ** -8 if name == "bf16" else 2.0 ** -11)
            assert v[f"{name} random"] <= bound, (name, v[f"{name} random"])
            assert "compression=" in v[f"{name} int"] and "int32" in v[f"{name} int"], v[f"{name} int"]
