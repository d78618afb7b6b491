"""The rank body of the hierarchical collective tests (tests/test_hierarchical.py): every dtype and op of
the flat allreduce over counts that do not divide evenly by the host size, fused and alone, plus
allgathers of uneven blocks; each rank checks its result exactly (tests/coll_data.py)."""
import json
import sys

import numpy as np

from coll_data import AVERAGE, DTYPES, check, expected, ops_for, rank_values

COUNTS = [0, 1, 2, 3, 7, 13, 65, 1021, 4097]
BIG = 3 * 2 ** 18 + 7  # 3 MiB of float32, more than one segment per shard, and odd


def _op(hvd, op):
    return {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}[op]


def body(big=True):
    import pyhorovod as hvd
    from pyhorovod import basics
    hvd.init()
    size, rank, checks = hvd.size(), hvd.rank(), 0
    for dt in DTYPES:
        pending = []
        for op in ops_for(dt):
            for count in COUNTS:
                x = dt.make(rank_values(rank, count, dt, op))
                pending.append((hvd.allreduce_async(x, op=_op(hvd, op), **dt.kwargs()), op, count))
        for h, op, count in pending:  # submitted together: fused units
            check(hvd.synchronize(h), expected(size, count, dt, op), dt, f"fused {dt} {op} {count}",
                  exact=op != AVERAGE)
            checks += 1
        for op in ops_for(dt):  # one at a time: each its own unit
            count = BIG if big and dt.name in ("float32", "int32") else 1025
            x = dt.make(rank_values(rank, count, dt, op, seed=3))
            out = hvd.allreduce(x, op=_op(hvd, op), name=f"alone.{dt.name}.{dt.explicit}.{op}", **dt.kwargs())
            check(out, expected(size, count, dt, op, seed=3), dt, f"alone {dt} {op} {count}", exact=op != AVERAGE)
            checks += 1
    for rows_of in (lambda r: r + 1, lambda r: 0 if r % 2 else 3, lambda r: 5000 + 7 * r):
        x = np.full((rows_of(rank), 3), rank, dtype=np.int32)
        got = hvd.allgather(x)
        want = np.concatenate([np.full((rows_of(r), 3), r, dtype=np.int32) for r in range(size)])
        assert np.array_equal(got, want), f"allgather: got {got[:, 0].tolist()[:20]}"
        checks += 1
    info = basics._state.engine.hierarchy()
    local = [hvd.local_rank(), hvd.local_size()]
    hvd.shutdown()
    return {"checks": checks, "host_of": list(info["host_of"]), "allreduce_mode": info["allreduce_mode"],
            "allgather_mode": info["allgather_mode"], "local": local}


if __name__ == "__main__" and len(sys.argv) == 1:
    print("RESULT " + json.dumps(body()), flush=True)


# Ethernet (14) + IPv4 (20) + TCP with timestamps (32) bytes in front of every packet. The veth counts a
# GSO packet once, with one set of headers, so subtracting them per packet leaves the TCP payload whatever
# the segmentation (which varies with load) and drops the ACKs, which carry none.
_HEADER_BYTES = 14 + 20 + 32


def _sent_bytes(iface="hv0"):
    """TCP payload bytes this host has sent on `iface`."""
    for line in open("/proc/net/dev").read().splitlines()[2:]:
        name, fields = line.split(":", 1)
        if name.strip() == iface:
            tx_bytes, tx_packets = (int(v) for v in fields.split()[8:10])
            return tx_bytes - _HEADER_BYTES * tx_packets
    raise AssertionError(f"no interface {iface}")


def traffic_body(count=1 << 20):
    """Bytes this host sends on its link during one allreduce of `count` float32, flat then hierarchical
    (the mode switched on every rank between barriers)."""
    import pyhorovod as hvd
    from pyhorovod import basics
    hvd.init()
    x = np.ones(count, dtype=np.float32)
    sent = {}
    for name, mode in (("flat", 0), ("hierarchical", 1)):
        basics._state.engine.set_knobs(hierarchical_allreduce=mode)
        hvd.barrier()
        before = _sent_bytes()
        y = hvd.allreduce(x, op=hvd.Sum, name=f"traffic.{name}")
        hvd.barrier()
        sent[name] = _sent_bytes() - before
        assert np.array_equal(y, np.full(count, hvd.size(), np.float32))
    hvd.shutdown()
    return sent


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "traffic":
    print("RESULT " + json.dumps(traffic_body()), flush=True)
