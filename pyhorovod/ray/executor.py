"""RayExecutor: a pyhorovod job whose ranks are Ray actors (Horovod's ``horovod.ray.RayExecutor`` API).

Life of an executor:
  start()    reserves the placement group (placement.py), hosts the rendezvous store on this node's
             address as Ray reports it, starts one actor per rank (worker.py), orders them by node and
             gives each its rank variables; with executable_cls, each actor also builds one instance of it;
  run(fn)    calls fn(*args, **kwargs) on every rank and returns the results in rank order; the first
             rank to raise makes run() raise at once, naming the rank and its node;
  execute(fn) the same with fn(executable); execute_single(fn) on rank 0 only;
  shutdown() kills the actors, removes the placement group (when the executor made it), closes the store.
"""
from __future__ import annotations

import os
import secrets
from typing import Any, Callable, Dict, List, Optional, Sequence

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import get_current_placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from pyhorovod.runner.launch import rank_env

from . import placement, settings as settings_mod
from .progress import CallbackRelay
from .worker import RayWorker

_POLL_S = 0.1   # how often run() looks at the results and the progress queue

# How long run() waits, once only echoes have failed, for the error that caused them.
_ROOT_CAUSE_WAIT_S = 2.0


def _is_echo(e) -> bool:
    """A rank's failure that another rank caused: its collective failed (HorovodInternalError)."""
    from pyhorovod.errors import HorovodInternalError
    return isinstance(getattr(e, "cause", None), HorovodInternalError)


class RayExecutor:
    """See the module docstring. num_workers (spread over the nodes as Ray sees fit) or num_hosts x
    num_workers_per_host (that many workers on each of num_hosts different nodes), never both; or, for an
    elastic job, min_workers and max_workers, with autoscale="goodput" and the autoscale_* keywords for a
    job that picks its own size (ray/autoscale.py)."""

    create_settings = staticmethod(settings_mod.create_settings)

    def __init__(self, settings: Optional[settings_mod.RaySettings] = None, num_workers: Optional[int] = None,
                 num_hosts: Optional[int] = None, num_workers_per_host: int = 1, cpus_per_worker: float = 1,
                 use_gpu: bool = False, gpus_per_worker: Optional[float] = None,
                 use_current_placement_group: bool = True, min_workers: Optional[int] = None,
                 max_workers: Optional[int] = None, reset_limit: Optional[int] = None, cooldown_range=None,
                 elastic_timeout: float = 600, override_discovery: bool = True, autoscale: Optional[str] = None,
                 autoscale_every: int = 50, autoscale_margin: float = 0.10, autoscale_trace: Optional[str] = None,
                 autoscale_cores_per_host: Optional[int] = None):
        self._elastic = None
        if min_workers is not None or max_workers is not None:
            if num_workers is not None or num_hosts is not None:
                raise ValueError("RayExecutor: min_workers/max_workers (an elastic job) exclude num_workers "
                                 "and num_hosts")
            auto = {"autoscale": autoscale, "autoscale_every": autoscale_every, "autoscale_margin": autoscale_margin,
                    "autoscale_trace": autoscale_trace, "autoscale_cores_per_host": autoscale_cores_per_host}
            from .elastic import from_executor_arguments
            self.settings = settings or settings_mod.create_settings()
            self._elastic = from_executor_arguments(self.settings, min_workers or 1, max_workers, reset_limit,
                                                    cooldown_range, elastic_timeout, override_discovery,
                                                    cpus_per_worker, use_gpu, gpus_per_worker, auto)
            return
        if autoscale is not None:
            raise ValueError("RayExecutor: autoscale needs an elastic job (min_workers and max_workers, the "
                             "range the job may move in), not num_workers/num_hosts")
        if num_workers is not None and num_hosts is not None:
            raise ValueError("RayExecutor: give num_workers or num_hosts (with num_workers_per_host), not both")
        if num_workers is None and num_hosts is None:
            raise ValueError("RayExecutor: give num_workers, or num_hosts and num_workers_per_host")
        if num_workers is not None:
            settings_mod.positive_count("num_workers", num_workers)
        else:
            settings_mod.positive_count("num_hosts", num_hosts)
            settings_mod.positive_count("num_workers_per_host", num_workers_per_host)
        settings_mod.amount("cpus_per_worker", cpus_per_worker, allow_zero=True)
        if gpus_per_worker is not None:
            if not use_gpu:
                raise ValueError("RayExecutor: gpus_per_worker needs use_gpu=True")
            settings_mod.amount("gpus_per_worker", gpus_per_worker)
        self.settings = settings or settings_mod.create_settings()
        self.num_workers = num_workers if num_workers is not None else num_hosts * num_workers_per_host
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.use_current_placement_group = use_current_placement_group
        self._layout = placement.layout(num_workers, num_hosts, num_workers_per_host,
                                        placement.worker_resources(cpus_per_worker, self.gpus_per_worker))
        self.workers: List[Any] = []       # actor handles, in rank order
        self.slots: List[Any] = []         # runner.hosts.SlotInfo of each rank
        self._pg = None                    # the placement group this executor made (removed at shutdown)
        self._store = None
        self._relay = CallbackRelay()

    # ---- start ------------------------------------------------------------------------------------
    def start(self, executable_cls: Optional[type] = None, executable_args: Optional[Sequence] = None,
              executable_kwargs: Optional[Dict[str, Any]] = None,
              extra_env_vars: Optional[Dict[str, str]] = None) -> None:
        if self._elastic is not None:
            if executable_cls is not None:
                raise ValueError("RayExecutor.start: executable_cls is for a fixed-size job; an elastic one "
                                 "(min_workers) runs functions only")
            self._elastic._env.update(extra_env_vars or {})
            return self._elastic.start()
        if self.workers:
            raise RuntimeError("RayExecutor.start: already started; shutdown() first")
        if not ray.is_initialized():
            ray.init()   # RAY_ADDRESS when set, else a local cluster (what Ray does on its first call)
        try:
            self._start(executable_cls, executable_args, executable_kwargs, dict(extra_env_vars or {}))
        except BaseException:
            self.shutdown()
            raise

    def _start(self, executable_cls, executable_args, executable_kwargs, extra_env: Dict[str, str]) -> None:
        from pyhorovod._rendezvous import host_store
        secret = secrets.token_hex(32).encode()
        # Ray's address of this node, the one the other nodes reach it on (never 0.0.0.0).
        store_addr = ray.util.get_node_ip_address()
        self._store = host_store(store_addr, 0, secret, os.environ)
        pg, bundle_of = self._placement_group()
        actor_cls = ray.remote(RayWorker)
        actors = [actor_cls.options(num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
                                    scheduling_strategy=PlacementGroupSchedulingStrategy(pg, bundle_of(i)))
                  .remote(secret) for i in range(self.num_workers)]
        self.workers = actors   # so that shutdown() finds them should what follows fail
        locations = self._get([a.location.remote() for a in actors], "report where they run")
        order, self.slots = placement.assign_ranks([(node, ip) for node, ip, _, _ in locations])
        self.workers = [actors[i] for i in order]
        gpus = _node_gpus([locations[i] for i in order])
        envs = []
        for rank, slot in enumerate(self.slots):
            env = rank_env(slot, store_addr, self._store.port, 0, extra_env)
            env["PYHOROVOD_CONNECT_TIMEOUT_SECONDS"] = f"{self.settings.timeout_s:g}"
            if self.settings.nics:
                env["PYHOROVOD_IFACE"] = self.settings.nics
            if gpus[rank]:
                env["CUDA_VISIBLE_DEVICES"] = gpus[rank]
            envs.append(env)
        self._get([w.set_env.remote(env) for w, env in zip(self.workers, envs)], "take their rank variables")
        if executable_cls is not None:
            self._wait([w.start_executable.remote(executable_cls, executable_args, executable_kwargs)
                        for w in self.workers])

    def _placement_group(self):
        """(placement group, worker index -> bundle index)."""
        current = get_current_placement_group() if self.use_current_placement_group else None
        if current is not None:   # inside a Ray Tune trial, say: its group already holds our resources
            return current, lambda i: -1
        self._pg = placement.reserve(self._layout, self.settings.placement_timeout_s)
        per_bundle = self._layout.workers_per_bundle
        return self._pg, lambda i: i // per_bundle

    def _get(self, refs, what: str) -> list:
        try:
            return ray.get(refs, timeout=self.settings.timeout_s)
        except GetTimeoutError:
            raise TimeoutError(f"RayExecutor.start: the workers did not {what} within settings.timeout_s = "
                               f"{self.settings.timeout_s:g} s") from None

    # ---- running ----------------------------------------------------------------------------------
    def run(self, fn: Callable, args: Optional[Sequence] = None, kwargs: Optional[Dict[str, Any]] = None,
            callbacks: Optional[Sequence[Callable[[Any], None]]] = None) -> List[Any]:
        """fn(*args, **kwargs) on every rank; their results in rank order (elastic: of the workers that
        returned, in the order of their last ranks)."""
        if self._elastic is not None:
            return self._elastic.run(lambda: fn(*(args or ()), **(kwargs or {})), callbacks=callbacks)
        self._check_started("run", fn)
        queue = self._relay.open(callbacks)
        return self._wait([w.run.remote(fn, args, kwargs, queue) for w in self.workers])

    def run_remote(self, fn: Callable, args: Optional[Sequence] = None,
                   kwargs: Optional[Dict[str, Any]] = None) -> List[Any]:
        """As run(), without waiting: the object refs of the results, in rank order (ray.get them)."""
        self._check_started("run_remote", fn)
        return [w.run.remote(fn, args, kwargs) for w in self.workers]

    def execute(self, fn: Callable, callbacks: Optional[Sequence[Callable[[Any], None]]] = None) -> List[Any]:
        """fn(executable) on every rank (the instance of executable_cls start() made there)."""
        self._check_started("execute", fn)
        queue = self._relay.open(callbacks)
        return self._wait([w.execute.remote(fn, queue) for w in self.workers])

    def execute_single(self, fn: Callable) -> Any:
        """fn(executable) on rank 0 only."""
        self._check_started("execute_single", fn)
        return self._wait([self.workers[0].execute.remote(fn)])[0]

    def _check_started(self, method: str, fn) -> None:
        if self._elastic is not None:
            raise ValueError(f"RayExecutor.{method}: an elastic job (min_workers) has run() only")
        if not self.workers:
            raise RuntimeError(f"RayExecutor.{method}: the executor is not started; call start() first")
        if not callable(fn):
            raise ValueError(f"RayExecutor.{method}: fn must be callable, got {type(fn).__name__}")

    def _wait(self, refs: List[Any]) -> List[Any]:
        """Every result, in order, relaying progress meanwhile; the first failure raises at once."""
        index = {ref: i for i, ref in enumerate(refs)}
        results: List[Any] = [None] * len(refs)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=_POLL_S)
            failures = []
            for ref in ready:
                try:
                    results[index[ref]] = ray.get(ref)
                except (RayTaskError, RayActorError) as e:
                    failures.append((index[ref], e))
            self._relay.drain()
            if failures and pending and all(_is_echo(e) for _, e in failures):
                # Only echoes so far: the rank whose own error made them may report a moment later.
                late, pending = ray.wait(pending, num_returns=len(pending), timeout=_ROOT_CAUSE_WAIT_S)
                for ref in late:
                    try:
                        results[index[ref]] = ray.get(ref)
                    except (RayTaskError, RayActorError) as e:
                        failures.append((index[ref], e))
            if failures:
                raise self._failure(failures)
        self._relay.drain()
        return results

    def _failure(self, failures) -> RuntimeError:
        """The error of the rank that failed of a cause of its own, before those whose collectives failed
        because of it (HorovodInternalError), lowest rank among equals."""
        rank, e = min(failures, key=lambda f: (_is_echo(f[1]), f[0]))
        where = f"rank {rank} (node {self.slots[rank].hostname})"
        if isinstance(e, RayActorError):
            err = RuntimeError(f"RayExecutor: {where} died: {e}")
        else:
            cause = getattr(e, "cause", None)
            err = RuntimeError(f"RayExecutor: {where} raised {type(cause).__name__ if cause else 'an error'}: "
                               f"{cause}\n{e}")
        err.rank = rank
        return err

    # ---- shutdown ---------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Kills the actors, removes the placement group it made, closes the store. Harmless twice."""
        if self._elastic is not None:
            return self._elastic.shutdown()
        workers, self.workers = self.workers, []
        for w in workers:
            ray.kill(w, no_restart=True)
        if self._pg is not None:
            remove_placement_group(self._pg)
            self._pg = None
        self._relay.close()
        if self._store is not None:
            self._store.close()
            self._store = None


def _node_gpus(locations) -> List[str]:
    """Each rank's CUDA_VISIBLE_DEVICES: every GPU that Ray gave to a worker of its node, so that
    local_rank indexes the node's GPUs as under `pyhorovod run` ("" without GPUs)."""
    per_node: Dict[str, set] = {}
    for node, _, _, gpu_ids in locations:
        per_node.setdefault(node, set()).update(str(g) for g in gpu_ids)
    return [",".join(sorted(per_node[node], key=lambda g: (len(g), g))) for node, _, _, _ in locations]
