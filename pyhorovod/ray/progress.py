"""Progress from the workers to the driver's callbacks: rank 0 calls ``pyhorovod.ray.report(value)`` (a
metrics dict, say) inside a function that RayExecutor.run/execute runs with callbacks; the driver calls
every callback on every value, in the order rank 0 reported them, while it waits for the results.

The values travel through a Ray queue (ray.util.queue.Queue: an actor of 0 CPUs, on the driver's node) that
the executor creates when it first gets callbacks. report() on another rank, or outside such a run, does nothing -- so a
training function may report unconditionally, as with Horovod's Ray logger.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

_queue = None   # in a worker: the executor's queue while a run with callbacks is under way on rank 0


def report(value: Any) -> None:
    """Sends value (picklable) to the driver's callbacks, from rank 0; elsewhere, a no-op."""
    if _queue is not None and _is_rank_zero():
        _queue.put(value, timeout=60)


def _is_rank_zero() -> bool:
    import pyhorovod
    try:
        return pyhorovod.rank() == 0
    except ValueError:   # not initialized (yet): the rank the executor gave this worker
        import os
        return os.environ.get("PYHOROVOD_RANK") == "0"


def set_worker_queue(queue) -> None:
    global _queue
    _queue = queue


class CallbackRelay:
    """Driver side: the queue and the callbacks of the current run."""

    def __init__(self):
        self.queue = None
        self.callbacks: List[Callable[[Any], None]] = []

    def open(self, callbacks: Optional[Sequence[Callable[[Any], None]]]):
        """The queue for this run's rank 0, or None without callbacks."""
        self.callbacks = list(callbacks or [])
        for cb in self.callbacks:
            if not callable(cb):
                raise ValueError(f"RayExecutor: a callback must be callable, got {type(cb).__name__}")
        if not self.callbacks:
            return None
        if self.queue is None:
            import ray
            from ray.util.queue import Queue
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            # On the driver's own node: a queue placed on a worker's node would die with it (an elastic
            # job that loses that node would lose its progress relay, and rank 0's report() with it).
            here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
            self.queue = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
        return self.queue

    def drain(self) -> None:
        if self.queue is None or not self.callbacks:
            return
        n = self.queue.qsize()
        if n:
            for value in self.queue.get_nowait_batch(n):
                for cb in self.callbacks:
                    cb(value)

    def close(self) -> None:
        if self.queue is not None:
            self.queue.shutdown(force=True)
            self.queue = None
