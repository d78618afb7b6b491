"""The `pyhorovod run` launcher: cli.py (flags), launch.py (ranks, store, fail-fast, restarts),
hosts.py (host lists, slots, interfaces), remote.py (ssh), output.py (rank-prefixed output), mpi.py (--mpi)."""
from .cli import main, run_command  # noqa: F401
