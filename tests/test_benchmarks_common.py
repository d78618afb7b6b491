"""Exact checks of the benchmark helpers: sizes, bus factors, statistics, records, aggregation and ratios."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import collectives  # noqa: E402
import common as C  # noqa: E402


def test_parse_and_format_sizes():
    assert C.parse_size("4") == 4
    assert C.parse_size("64K") == 65536
    assert C.parse_size("1M") == C.parse_size("1MiB") == 1 << 20
    assert C.parse_size("256MiB") == 256 << 20
    with pytest.raises(ValueError):
        C.parse_size("12X")
    assert C.size_range(4, 64) == [4, 8, 16, 32, 64]
    assert C.size_range(4, 256 << 20)[-1] == 256 << 20 and len(C.size_range(4, 256 << 20)) == 27
    assert C.fmt_size(1 << 20) == "1MiB" and C.fmt_size(12) == "12B"


def test_bus_factors():
    assert C.bus_factor("allreduce", 2) == 1.0
    assert C.bus_factor("allreduce", 4) == 1.5
    assert C.bus_factor("allgather", 4) == 0.75
    assert C.bus_factor("broadcast", 4) == 1.0
    with pytest.raises(ValueError):
        C.bus_factor("scatter", 2)


def test_statistics():
    m, half = C.mean_ci95([1.0, 2.0, 3.0])
    assert m == 2.0 and half == pytest.approx(4.303 * 1.0 / 3 ** 0.5)
    med, (lo, hi), exact = C.median_ci95([5, 1, 4, 2, 3])
    assert (med, lo, hi, exact) == (3, 1, 5, False)
    # n = 10: P(Binom(10,1/2) <= 1) = 11/1024 <= 0.025 < P(<= 2): interval [x_(2), x_(9)]
    med, (lo, hi), exact = C.median_ci95(list(range(1, 11)))
    assert (med, lo, hi, exact) == (5.5, 2, 9, True)


def test_records_roundtrip(capsys):
    C.emit({"a": 1})
    out = capsys.readouterr().out
    assert C.parse_records("[1]<stdout>:" + out + "noise\n") == [{"a": 1}]


def test_run_records_collects_long_records_from_every_process():
    # Records far longer than a pipe write (what mpirun's merged output had split and interleaved) come
    # back whole, one per emit(), from processes started with their own environments.
    code = ("import sys; sys.path.insert(0, %r); import common as C; r = int(sys.argv[1]); "
            "[C.emit({'rank': r, 'k': k, 'times': [0.001 * i + r for i in range(3000)]}) for k in range(2)]"
            % os.path.dirname(C.__file__))
    group = [([sys.executable, "-c", code, str(r)], dict(os.environ)) for r in range(3)]
    recs = C.run_records(group, 60, "records")
    assert sorted((r["rank"], r["k"]) for r in recs) == [(r, k) for r in range(3) for k in range(2)]
    assert all(rec["times"] == [0.001 * i + rec["rank"] for i in range(3000)] for rec in recs)
    assert len(json.dumps(recs[0])) > 4096


def test_size_blocks():
    sizes = [4, 1 << 19, 1 << 20, 1 << 24, 1 << 25, 1 << 26]
    assert collectives.size_blocks(sizes, [1 << 20, 1 << 25]) == [[4, 1 << 19], [1 << 20, 1 << 24], [1 << 25, 1 << 26]]


def test_aggregate_takes_slowest_rank_then_median_and_pairs_rounds():
    recs = []
    for tag, (core_t, mpi_t) in {"r0": ((1.0, 3.0), (2.0, 2.0)), "r1": ((2.0, 2.0), (8.0, 4.0))}.items():
        for rank in range(2):
            recs.append({"n": 2, "cand": "core", "op": "allreduce", "bytes": 1000, "iters": 3, "wrong": 0,
                         "tag": tag, "times": [core_t[rank]]})
            recs.append({"n": 2, "cand": "mpi", "op": "allreduce", "bytes": 1000, "iters": 3, "wrong": rank,
                         "tag": tag, "times": [mpi_t[rank]]})
    agg = collectives.aggregate(recs)
    core, mpi = agg[(2, "core", "allreduce", 1000)], agg[(2, "mpi", "allreduce", 1000)]
    assert sorted(core["samples_s"]) == [2.0, 3.0] and core["time_s"] == 2.5    # slowest ranks: 3, 2
    assert sorted(mpi["samples_s"]) == [2.0, 8.0] and mpi["time_s"] == 5.0
    assert mpi["wrong"] == 2
    assert core["busbw"] == pytest.approx(1000 / 2.5 / 1e9)                    # factor 1 at n = 2
    (r,) = collectives.ratios(agg)
    assert (r["ours"], r["peer"]) == ("core", "mpi")
    assert r["ratio_of_medians"] == 2.0
    assert r["median_paired_ratio"] == pytest.approx((2.0 / 3.0 + 8.0 / 2.0) / 2)
