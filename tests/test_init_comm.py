"""init(comm=...) and ProcessSet(comm), as Horovod has them: a job made of some of the launched
processes (a list of launched ranks, or an mpi4py communicator), independent jobs side by side, and
process sets given as MPI communicators. Under our launcher's store and under a bare mpirun (mpi4py)."""
import os

import numpy as np

from mp import run_ranks
from mpirun_util import needs_mpi, print_result, run_under_mpirun


def two_jobs():
    """Launched ranks 2 and 0 form one job (in that order), 1 and 3 another; then all four one job."""
    import pyhorovod as hvd
    me = int(os.environ["PYHOROVOD_RANK"])
    members = [2, 0] if me in (0, 2) else [1, 3]
    hvd.init(comm=members)
    seen = {"rank": hvd.rank(), "size": hvd.size(), "local": [hvd.local_rank(), hvd.local_size()],
            "sum": hvd.allreduce(np.array([me], np.int64), op=hvd.Sum).tolist(),
            "root0": hvd.broadcast(np.array([me], np.int64), root_rank=0).tolist(),
            "gather": hvd.allgather(np.array([me], np.int64)).tolist()}
    hvd.shutdown()
    hvd.init(comm=members)  # a second generation of the same job
    seen["again"] = hvd.allreduce(np.array([1], np.int64), op=hvd.Sum).tolist()
    hvd.shutdown()
    hvd.init()  # the whole launched job
    seen["world"] = [hvd.rank(), hvd.size(), hvd.allreduce(np.array([me], np.int64), op=hvd.Sum).tolist()]
    return seen


def test_disjoint_rank_lists_make_independent_jobs():
    results = run_ranks(two_jobs, 4, timeout=120, collective_timeout=40)
    expect = {0: (1, [2, 0]), 2: (0, [2, 0]), 1: (0, [1, 3]), 3: (1, [1, 3])}
    for me, (rank, members) in expect.items():
        v = results[me].value
        assert (v["rank"], v["size"], v["local"]) == (rank, 2, [rank, 2]), v
        assert v["sum"] == [sum(members)] and v["root0"] == [members[0]] and v["gather"] == members, v
        assert v["again"] == [2] and v["world"] == [me, 4, [6]], v


def bad_comms():
    import pyhorovod as hvd
    errors = []
    for comm in ([], [0, 0], [0, 5], ["0"], "01", 3, [1]):  # [1]: rank 0 is not in it
        try:
            hvd.init(comm=comm)
            errors.append("accepted")
            hvd.shutdown()
        except ValueError as e:
            errors.append(str(e))
    return errors


def test_bad_comm_arguments_are_value_errors():
    errors = run_ranks(bad_comms, 2, timeout=60)[0].value
    assert "accepted" not in errors, errors
    assert "empty" in errors[0] and "twice" in errors[1] and "outside" in errors[2], errors
    assert "integers" in errors[3] and "list of ranks" in errors[4] and "list of ranks" in errors[5], errors
    assert "not one of the ranks" in errors[6], errors


def mpi_body():
    """4 ranks under mpirun: a Split communicator in reverse rank order makes two jobs; ProcessSet(comm)
    maps communicators through the job's ranks, and each rank passing only its own split set (Horovod's
    pattern) registers both sets everywhere."""
    from mpi4py import MPI

    import pyhorovod as hvd
    world = MPI.COMM_WORLD
    me = world.Get_rank()
    sub = world.Split(color=me % 2, key=-me)      # odd: [3, 1], even: [2, 0]
    hvd.init(comm=sub)
    out = {"me": me, "rank": [hvd.rank(), sub.Get_rank()], "size": hvd.size(),
           "sum": hvd.allreduce(np.array([me]), op=hvd.Sum).tolist(),
           "root0": hvd.broadcast(np.array([me]), root_rank=0).tolist(),
           "ps_sub": hvd.ProcessSet(sub).ranks}
    hvd.shutdown()
    halves = world.Split(color=me // 2, key=me)  # [0, 1] and [2, 3]
    mine = hvd.ProcessSet(halves)
    hvd.init(process_sets=[mine])
    out["ps_ranks"] = mine.ranks
    out["ps_sum"] = hvd.allreduce(np.array([me]), op=hvd.Sum, process_set=mine).tolist()
    out["ids"] = sorted(hvd.basics.engine().process_set_ids())
    out["world"] = hvd.allreduce(np.array([me]), op=hvd.Sum).tolist()
    hvd.shutdown()
    print_result(out)


@needs_mpi
def test_mpi_communicators_under_mpirun():
    lines = run_under_mpirun("test_init_comm", "mpi_body", 4, timeout=150)
    rows = {r["me"]: r for r in lines}
    assert sorted(rows) == [0, 1, 2, 3], lines
    for me, r in rows.items():
        members = [3, 1] if me % 2 else [2, 0]
        assert r["rank"] == [members.index(me)] * 2 and r["size"] == 2, r
        assert r["sum"] == [sum(members)] and r["root0"] == [members[0]] and r["ps_sub"] == [0, 1], r
        half = [0, 1] if me < 2 else [2, 3]
        assert r["ps_ranks"] == half and r["ps_sum"] == [sum(half)], r
        assert r["ids"] == [0, 1, 2] and r["world"] == [6], r
