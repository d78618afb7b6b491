"""Backward passes of pyhorovod.torch's allgather and reducescatter with Horovod's conventions.

Rank k's loss is w_k * sum(output * coefficients), w_k = k + 1, so the output gradient of set rank j is
g_j = w_j (times the coefficients). Horovod's backward of reducescatter is allgather(g) * n for Sum and
allgather(g) for Average (times prescale * postscale), n the set size; its backward of allgather is this
rank's rows of the averaged output gradient. With w_k = 1 at 2 ranks that is 2.0 (Sum) and 1.0 (Average)."""
import pytest

from mp import run_ranks


def body():
    import torch
    import pyhorovod.torch as hvd
    import os
    n_world = int(os.environ["PYHOROVOD_SIZE"])
    pair = hvd.ProcessSet([0, 2]) if n_world == 3 else None
    hvd.init(process_sets=[pair] if pair else None)
    r, n = hvd.rank(), hvd.size()
    w = float(r + 1)
    out = {}
    rows = 2 * n + 1  # uneven: set rank 0 keeps one row more
    s = torch.ones((rows, 2), dtype=torch.float64, requires_grad=True)
    (hvd.reducescatter(s, op=hvd.Sum) * w).sum().backward()
    out["rs Sum"] = s.grad.tolist()
    s.grad = None
    (hvd.reducescatter(s, op=hvd.Average) * w).sum().backward()
    out["rs Average"] = s.grad.tolist()
    s.grad = None
    (hvd.reducescatter(s) * w).sum().backward()  # default op: Average
    out["rs default"] = s.grad.tolist()
    s.grad = None
    (hvd.reducescatter(s, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25) * w).sum().backward()
    out["rs Sum scaled"] = s.grad.tolist()
    s.grad = None
    (hvd.reducescatter(s, op=hvd.Average, prescale_factor=3.0) * w).sum().backward()
    out["rs Average scaled"] = s.grad.tolist()
    s.grad = None
    outs = hvd.grouped_reducescatter([s, s * 2], op=hvd.Sum)
    ((outs[0] + outs[1]) * w).sum().backward()
    out["grouped rs Sum"] = s.grad.tolist()
    s.grad = None
    outs = hvd.grouped_reducescatter([s, s * 2], op=hvd.Average)
    ((outs[0] + outs[1]) * w).sum().backward()
    out["grouped rs Average"] = s.grad.tolist()
    s.grad = None
    plain = torch.ones((2 * n, 1), requires_grad=True)  # the plain case: every rank's loss = sum(output)
    hvd.reducescatter(plain, op=hvd.Sum).sum().backward()
    out["rs Sum unweighted"] = plain.grad.tolist()
    plain.grad = None
    hvd.reducescatter(plain, op=hvd.Average).sum().backward()
    out["rs Average unweighted"] = plain.grad.tolist()
    if pair is not None and r in pair.ranks:
        p = torch.ones((3, 2), dtype=torch.float64, requires_grad=True)
        (hvd.reducescatter(p, op=hvd.Sum, process_set=pair) * w).sum().backward()
        out["rs Sum on [0, 2]"] = p.grad.tolist()
    # allgather: rank k sends k + 1 rows; rank k's loss weights gathered row i by w_k * i.
    g = torch.ones((r + 1, 2), requires_grad=True)
    gathered = hvd.allgather(g)
    coef = torch.arange(gathered.shape[0], dtype=torch.float32)[:, None] * w
    (gathered * coef).sum().backward()
    out["allgather"] = g.grad.tolist()
    g.grad = None
    outs = hvd.grouped_allgather([g, g])
    ((outs[0] + outs[1]) * coef).sum().backward()
    out["grouped allgather"] = g.grad.tolist()
    hvd.shutdown()
    return out


def _blocks(rows, n, value_of):
    """Per-row lists: set rank j's block of `rows` rows (dim0 // n, one more for the first dim0 % n)
    filled with value_of(j), 2 columns."""
    grad = []
    for j in range(n):
        grad += [[value_of(j)] * 2] * (rows // n + (1 if j < rows % n else 0))
    return grad


@pytest.mark.parametrize("size", [1, 2, 3])
def test_reducescatter_and_allgather_backward_as_horovod(size):
    results = run_ranks(body, size, timeout=240)
    n = size
    rows = 2 * n + 1
    w = lambda j: float(j + 1)  # noqa: E731
    mean_w = (n + 1) / 2
    for res in results:
        r, got = res.rank, res.value
        assert got["rs Sum"] == _blocks(rows, n, lambda j: n * w(j)), r
        assert got["rs Average"] == _blocks(rows, n, w), r
        assert got["rs default"] == _blocks(rows, n, w), r
        assert got["rs Sum scaled"] == _blocks(rows, n, lambda j: n * w(j) * 0.5), r
        assert got["rs Average scaled"] == _blocks(rows, n, lambda j: w(j) * 3.0), r
        assert got["grouped rs Sum"] == _blocks(rows, n, lambda j: 3 * n * w(j)), r
        assert got["grouped rs Average"] == _blocks(rows, n, lambda j: 3 * w(j)), r
        # e.g. at 2 ranks: 2.0 for Sum, 1.0 for Average (the exact gradients would be 1.0 and 0.5)
        assert got["rs Sum unweighted"] == [[float(n)]] * (2 * n), r
        assert got["rs Average unweighted"] == [[1.0]] * (2 * n), r
        if n == 3 and r in (0, 2):
            # set [0, 2]: 3 rows, set rank 0 (global 0, w 1) keeps 2, set rank 1 (global 2, w 3) keeps 1.
            assert got["rs Sum on [0, 2]"] == [[2.0, 2.0]] * 2 + [[6.0, 6.0]], r
        offset = r * (r + 1) // 2
        assert got["allgather"] == [[(offset + i) * mean_w] * 2 for i in range(r + 1)], r
        assert got["grouped allgather"] == [[2 * (offset + i) * mean_w] * 2 for i in range(r + 1)], r
