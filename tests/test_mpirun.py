"""Under `mpirun -np 3` with no rendezvous address: ranks come from Open MPI's variables and rank 0's
store address reaches the others through mpi4py (pyhorovod/_rendezvous.py). Skipped, with the reason,
where mpirun or mpi4py is missing; CI installs both."""
import numpy as np

from mpirun_util import needs_mpi, print_result, run_under_mpirun

pytestmark = needs_mpi


def mpi_body():
    import pyhorovod as hvd
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    assert hvd.rank_source() == "openmpi" and size == 3
    assert (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()) == (rank, 3, 0, 1)
    assert hvd.allreduce(np.arange(1000, dtype=np.float32) * rank, op=hvd.Sum).tolist() == \
        (np.arange(1000, dtype=np.float32) * 3).tolist()
    assert hvd.allgather(np.full((rank, 2), rank, np.int32)).tolist() == [[1, 1], [2, 2], [2, 2]]
    assert hvd.broadcast(np.array([rank, 7]), root_rank=1).tolist() == [1, 7]
    out, got = hvd.alltoall(np.arange(3) + 10 * rank, splits=[1, 1, 1])
    assert out.tolist() == [rank, 10 + rank, 20 + rank] and got.tolist() == [1, 1, 1]
    # shutdown + init reuses the store rank 0 hosts (no second broadcast)
    hvd.shutdown()
    hvd.init()
    assert hvd.allreduce(np.array([1]), op=hvd.Sum).tolist() == [3]
    hvd.shutdown()
    print_result({"rank": rank, "ok": True})


def test_collectives_under_mpirun_with_mpi4py_rendezvous():
    lines = run_under_mpirun("test_mpirun", "mpi_body", 3)
    assert sorted(d["rank"] for d in lines if d["ok"]) == [0, 1, 2], lines
