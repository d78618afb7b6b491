"""The `pyhorovod run` launcher: cli.py (flags), horovod_flags.py (horovodrun's tuning flags -> variables),
config_file.py (--config-file), launch.py (ranks, store, fail-fast, restarts), hosts.py (host lists, slots,
interfaces), remote.py (ssh), output.py (rank-prefixed output), mpi.py (--mpi); function.py and task.py
are `pyhorovod.run(func, ...)`."""
from .cli import main, run_command  # noqa: F401
