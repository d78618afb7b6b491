"""One rank of a RayExecutor job: a Ray actor that runs the driver's functions after pyhorovod's rank
variables are in its environment.

The job secret arrives as an argument of the actor's constructor and is handed to the rendezvous code
directly (_rendezvous.use_secret): it never enters os.environ, so the training function's subprocesses,
environment dumps and Ray's task names never show it. Everything else a rank needs (rank variables, store
address) goes into os.environ, as under `pyhorovod run`, so that an unchanged ``hvd.init()`` joins the job.
"""
from __future__ import annotations

import os
import socket
from typing import Any, Callable, Dict, Optional, Tuple


class Stopped:
    """What an elastic worker's call returns when the driver let the worker go (init() raised WorkerStopped)."""

    def __init__(self, reason: str):
        self.reason = reason


class RayWorker:
    def __init__(self, secret: bytes):
        from pyhorovod import _rendezvous
        _rendezvous.use_secret(secret)
        self.rank: Optional[int] = None
        self.executable = None

    def location(self) -> Tuple[str, str, str, list]:
        """(Ray node id, node IP, hostname, the GPU ids Ray gave it) of this worker."""
        import ray
        return (ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), socket.gethostname(),
                list(ray.get_gpu_ids()))

    def set_env(self, env: Dict[str, str]) -> None:
        os.environ.update(env)
        self.rank = int(env["PYHOROVOD_RANK"]) if "PYHOROVOD_RANK" in env else None   # None: elastic

    def start_executable(self, cls, args, kwargs) -> None:
        self.executable = cls(*(args or ()), **(kwargs or {}))

    def run(self, fn: Callable, args, kwargs, queue=None) -> Any:
        return self._call(queue, fn, *(args or ()), **(kwargs or {}))

    def run_elastic(self, fn: Callable, queue=None) -> Any:
        """fn() in a worker of an elastic driver: Stopped when the driver lets it go."""
        from pyhorovod.elastic._membership import WorkerStopped
        try:
            return self._call(queue, fn)
        except WorkerStopped as e:
            return Stopped(e.reason)

    def execute(self, fn: Callable, queue=None) -> Any:
        """fn(executable): the executable start() made (None without one)."""
        return self._call(queue, fn, self.executable)

    def _call(self, queue, fn, *args, **kwargs):
        from . import progress
        # A fixed job knows rank 0 now; in an elastic one ranks change, and report() checks at each call.
        progress.set_worker_queue(queue if self.rank in (0, None) else None)
        try:
            return fn(*args, **kwargs)
        except BaseException:
            # Leave the job at once: peers blocked in a collective with this rank then fail within
            # moments (the rank has shut down) instead of at their collective deadline.
            _leave_job()
            raise
        finally:
            progress.set_worker_queue(None)

    def stop(self) -> None:
        _leave_job()


def _leave_job() -> None:
    import pyhorovod
    try:
        pyhorovod.shutdown()
    except Exception:  # noqa: BLE001 -- the engine may already have failed; the caller reports the cause
        pass
