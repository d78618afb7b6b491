"""Running pyhorovod jobs on a Ray cluster, with the API of Horovod's Ray integration.

Ray places the workers (one actor per rank, in a placement group) and keeps them alive; pyhorovod keeps
its own rendezvous store (hosted by the driver, the process that creates the executor), transport and
engine. A worker function calls ``pyhorovod.init()`` (or ``pyhorovod.torch.init()``) as under any launcher.

    from pyhorovod.ray import RayExecutor
    settings = RayExecutor.create_settings(timeout_s=30)
    executor = RayExecutor(settings, num_workers=4)
    executor.start()
    results = executor.run(train, kwargs={"epochs": 2})   # [rank 0's result, rank 1's, ...]
    executor.shutdown()

Ray is an optional dependency: ``pip install pyhorovod[ray]``.
"""
try:
    import ray  # noqa: F401 -- only to say early, and clearly, that it is missing
except ImportError as e:
    raise ImportError(f"pyhorovod.ray needs Ray, which is not installed ({e}): pip install pyhorovod[ray] "
                      f"(or pip install 'ray[default]')") from None

from .elastic import ElasticRayExecutor
from .executor import RayExecutor
from .progress import report
from .settings import RaySettings

__all__ = ["ElasticRayExecutor", "RayExecutor", "RaySettings", "report"]
