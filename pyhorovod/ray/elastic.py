"""Elastic jobs on Ray: the elastic driver of `pyhorovod run --min-np ...` (runner/elastic_driver.py) with
Ray's nodes as host discovery (discovery.RayHostDiscovery) and Ray actors as its workers.

Horovod's two spellings:
    ElasticRayExecutor(ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=4), cpus_per_slot=1)
    RayExecutor(settings, min_workers=2, max_workers=4, cpus_per_worker=1)      # the executor's elastic mode
then start(); run(train_fn) (train_fn as under `pyhorovod run` elastic: it calls init() at each reset and
raises out of it when let go); shutdown(). With autoscale="goodput" (create_settings, or RayExecutor's
keyword) rank 0 picks the worker count in [min, max] (ray/autoscale.py; `pyhorovod run --autoscale`).

Each worker is one actor pinned to its node (NodeAffinitySchedulingStrategy, not soft): a node that leaves
the cluster takes its workers with it, which the driver sees as their failure (it blacklists the host,
the survivors reset); a node that joins shows up in the discovery, and the driver starts workers there up
to max_num_proc. The actor's call of train_fn stands for the worker's process: the call returning is the
worker exiting with 0, raising is exiting non-zero, the actor dying is the process killed.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from pyhorovod.elastic.autoscaler import NoNoiseScaleError
from pyhorovod.runner import elastic_driver
from pyhorovod.runner.autoscale_option import AutoscaleSpec
from pyhorovod.runner.hosts import SlotInfo
from pyhorovod.runner.launch import LaunchOptions
from pyhorovod.runner.ranks import RankProcess

from . import autoscale as autoscale_mod, settings as settings_mod
from .discovery import RayHostDiscovery
from .progress import CallbackRelay
from .worker import RayWorker, Stopped


@dataclasses.dataclass(frozen=True)
class ElasticSettings:
    min_num_proc: int = 1
    max_num_proc: Optional[int] = None
    reset_limit: Optional[int] = None
    cooldown_range: Optional[Tuple[float, float]] = None
    elastic_timeout: float = 600.0
    timeout_s: float = 30.0
    nics: Optional[str] = None
    verbose: int = 0
    autoscale: Optional[AutoscaleSpec] = None   # None: a plain elastic job (ray/autoscale.py)


def create_settings(min_num_proc: int = 1, max_num_proc: Optional[int] = None, reset_limit: Optional[int] = None,
                    cooldown_range=None, elastic_timeout: float = 600, timeout_s: float = 30,
                    ssh_identity_file=None, nics=None, verbose: int = 0, autoscale: Optional[str] = None,
                    autoscale_every: int = 50, autoscale_margin: float = 0.10, autoscale_trace: Optional[str] = None,
                    autoscale_cores_per_host: Optional[int] = None, _names=None, **_ignored) -> ElasticSettings:
    """Horovod's ElasticRayExecutor.create_settings; ssh_identity_file (and Horovod's other ssh and
    discovery keywords) are accepted and unused: Ray starts the workers and its nodes are the hosts.
    autoscale="goodput" and the autoscale_* keywords: `pyhorovod run --autoscale goodput`'s flags (ray/autoscale.py)."""
    settings_mod.positive_count("min_num_proc", min_num_proc)
    if max_num_proc is not None:
        settings_mod.positive_count("max_num_proc", max_num_proc)
        if max_num_proc < min_num_proc:
            raise ValueError(f"ElasticRayExecutor: max_num_proc {max_num_proc} < min_num_proc {min_num_proc}")
    if reset_limit is not None and (isinstance(reset_limit, bool) or not isinstance(reset_limit, int)
                                    or reset_limit < 0):
        raise ValueError(f"ElasticRayExecutor: reset_limit must be an int >= 0, got {reset_limit!r}")
    base = settings_mod.create_settings(timeout_s=timeout_s, nics=nics, verbose=verbose)
    settings_mod.amount("elastic_timeout", elastic_timeout)
    auto = autoscale_mod.spec(autoscale, min_num_proc, max_num_proc, autoscale_every, autoscale_margin,
                              autoscale_trace, autoscale_cores_per_host, _names)
    return ElasticSettings(min_num_proc, max_num_proc, reset_limit,
                           tuple(cooldown_range) if cooldown_range is not None else None, float(elastic_timeout),
                           base.timeout_s, base.nics, base.verbose, auto)


class _Output:
    """The driver reads a worker's last output lines when it fails: here, the error's text."""

    def __init__(self):
        self.text = ""
        self.first_traceback = None
        self.silent_rank = None

    def tail_text(self) -> str:
        return self.text

    def join(self, timeout=None) -> None:
        pass


class _ActorCall:
    """The actor's call of the worker function, with the part of subprocess.Popen's interface that a
    RankProcess uses: pid, stdin, wait() -> exit status (0: returned, 1: raised, -9: the actor died)."""

    def __init__(self, actor, ref, output: _Output):
        self.actor, self.ref, self.output = actor, ref, output
        self.pid = f"actor {actor._actor_id.hex()[:8]}"
        self.stdin = None
        self.result: Any = None
        self.error: Optional[BaseException] = None   # what the worker function raised
        self.returned = False   # the worker function returned (not let go, not failed)
        self.why = ""
        self.killed = threading.Event()

    def wait(self) -> int:
        while not ray.wait([self.ref], timeout=1.0)[0] and not self.killed.is_set():
            pass
        code = 0
        try:
            self.result = ray.get(self.ref, timeout=5.0)
            self.returned = not isinstance(self.result, Stopped)
        except RayActorError as e:   # before RayTaskError: Ray raises some actor deaths as both
            code, self.why = -9, "died (its node left the cluster, or it was killed)"
            self.output.text = str(e)
        except RayTaskError as e:
            self.error = getattr(e, "cause", None)
            code, self.why = 1, f"raised {type(self.error or e).__name__}"
            self.output.text = str(e)
        except Exception as e:  # noqa: BLE001 -- the call's result is lost (its node went): as a killed process
            code, self.why = -9, f"was lost ({type(e).__name__})"
            self.output.text = str(e)
        ray.kill(self.actor, no_restart=True)   # frees the worker's resources for the next one
        return code

    def kill(self) -> None:
        ray.kill(self.actor, no_restart=True)
        self.killed.set()


class ActorProcess(RankProcess):
    """One worker actor as the elastic driver sees a worker process."""

    def __init__(self, seq: int, host: str, actor, ref, wake: threading.Event):
        pumps = [_Output(), _Output()]
        self.call = _ActorCall(actor, ref, pumps[1])
        slot = SlotInfo(rank=seq, size=0, hostname=host, local_rank=0, local_size=0, cross_rank=0, cross_size=0)
        super().__init__(slot, self.call, False, pumps, wake)

    @property
    def result(self) -> Any:
        return self.call.result

    @property
    def returned(self) -> bool:
        return self.call.returned

    @property
    def error(self) -> Optional[BaseException]:
        return self.call.error

    def signal(self, sig: int) -> None:
        if self.running:
            self.stopped_by_launcher = True
            self.call.why = "was stopped by the driver"
        self.call.kill()

    def describe_exit(self) -> str:
        return f"rank {self.slot.rank} (host {self.slot.hostname}, {self.call.pid}) {self.call.why or 'exited'}"


class _RayDriver(elastic_driver.ElasticDriver):
    """The elastic driver with actors for processes."""

    def __init__(self, opts, discovery: RayHostDiscovery, fn: Callable, resources: Dict[str, float], queue):
        super().__init__(opts)
        self._discovery, self._fn, self._resources, self._queue = discovery, fn, resources, queue
        self.failure: Optional[str] = None
        self.user_error: Optional[NoNoiseScaleError] = None

    def _reap(self) -> None:
        super()._reap()
        # An autoscaled job whose optimizer does not measure the noise scale fails the same way on every
        # host: end the job now and raise the worker's error to the user (ElasticRayExecutor.run).
        for w in self.workers:
            if w.reaped and isinstance(w.proc.error, NoNoiseScaleError):
                self.user_error = w.proc.error
                raise elastic_driver._Fatal(f"{w.where()} raised {w.proc.error}")

    def _loop(self) -> int:
        try:
            return super()._loop()
        except elastic_driver._Fatal as e:
            self.failure = str(e)
            raise

    def _spawn(self, seq: int, host: str, env: Dict[str, str]) -> ActorProcess:
        node = self._discovery.node_id(host)
        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        actor = (ray.remote(RayWorker).options(num_cpus=self._resources.get("CPU", 0),
                                               num_gpus=self._resources.get("GPU", 0), scheduling_strategy=strategy)
                 .remote(self._secret_hex.encode()))
        actor.set_env.remote(env)
        ref = actor.run_elastic.remote(self._fn, self._queue)
        return ActorProcess(seq, host, actor, ref, self.wake)


class ElasticRayExecutor:
    """Horovod's ElasticRayExecutor: settings from create_settings, one worker per slot of Ray's nodes."""

    create_settings = staticmethod(create_settings)

    def __init__(self, settings: ElasticSettings, use_gpu: bool = False, cpus_per_slot: float = 1,
                 gpus_per_slot: Optional[float] = None, env_vars: Optional[Dict[str, str]] = None,
                 override_discovery: bool = True):
        if not isinstance(settings, ElasticSettings):
            raise ValueError("ElasticRayExecutor: settings must come from ElasticRayExecutor.create_settings")
        if not override_discovery:
            raise ValueError("ElasticRayExecutor: override_discovery=False (a discovery of your own) is not "
                             "supported; Ray's nodes are the hosts")
        settings_mod.amount("cpus_per_slot", cpus_per_slot, allow_zero=True)
        if gpus_per_slot is not None:
            if not use_gpu:
                raise ValueError("ElasticRayExecutor: gpus_per_slot needs use_gpu=True")
            settings_mod.amount("gpus_per_slot", gpus_per_slot)
        self.settings = settings
        self.discovery: Optional[RayHostDiscovery] = None
        self._resources = {"CPU": float(cpus_per_slot), "GPU": float((gpus_per_slot or 1) if use_gpu else 0)}
        self._use_gpu, self._gpus_per_slot, self._cpus_per_slot = use_gpu, gpus_per_slot, cpus_per_slot
        self._env = dict(env_vars or {})
        self._relay = CallbackRelay()
        self.driver: Optional[_RayDriver] = None

    def start(self) -> None:
        if not ray.is_initialized():
            ray.init()
        self.discovery = RayHostDiscovery(self._use_gpu, self._cpus_per_slot, self._gpus_per_slot)

    def run(self, worker_fn: Callable, callbacks: Optional[Sequence[Callable[[Any], None]]] = None) -> List[Any]:
        """worker_fn() on every worker until one returns; the results of the workers that returned, in
        their last ranks' order. RuntimeError naming the reason when the job fails (fewer than
        min_num_proc workers for longer than elastic_timeout, the reset limit, every host blacklisted)."""
        if self.discovery is None:
            raise RuntimeError("ElasticRayExecutor.run: the executor is not started; call start() first")
        if not callable(worker_fn):
            raise ValueError(f"ElasticRayExecutor.run: worker_fn must be callable, got {type(worker_fn).__name__}")
        s = self.settings
        slots = sum(self.discovery.current().values())
        max_np = s.max_num_proc or max(slots, s.min_num_proc)
        # an autoscaled job starts small: growing is its autoscaler's decision
        np = s.min_num_proc if s.autoscale else max(s.min_num_proc, min(max_np, slots))
        env = dict(autoscale_mod.worker_env(s.autoscale, self.discovery), **self._env)   # env_vars win
        env["PYHOROVOD_CONNECT_TIMEOUT_SECONDS"] = f"{s.timeout_s:g}"
        if s.nics:
            env["PYHOROVOD_IFACE"] = s.nics
        launch = LaunchOptions(command=["<Ray actor>"], slots=[], local_hosts=[],
                               bind_host=ray.util.get_node_ip_address(), env=env, verbose=bool(s.verbose))
        opts = elastic_driver.ElasticOptions(launch, self.discovery, np, s.min_num_proc, max_np,
                                             s.elastic_timeout, s.reset_limit, s.cooldown_range,
                                             autoscaled=s.autoscale is not None)
        queue = self._relay.open(callbacks)
        self.driver = _RayDriver(opts, self.discovery, worker_fn, self._resources, queue)
        done = threading.Event()
        relay = threading.Thread(target=self._relay_until, args=(done,), name="ray-callbacks", daemon=True)
        relay.start()
        try:
            code = self.driver.run()
        finally:
            done.set()
            relay.join(10.0)
        self._relay.drain()
        if self.driver.user_error is not None:
            raise NoNoiseScaleError(f"ElasticRayExecutor.run: {self.driver.user_error}")
        if code != 0:
            raise RuntimeError(f"ElasticRayExecutor.run: the job failed: {self.driver.failure or f'status {code}'}")
        finished = [w for w in self.driver.workers if w.proc.returned]
        return [w.proc.result for w in sorted(finished, key=lambda w: (w.rank is None, w.rank or 0, w.seq))]

    def _relay_until(self, done: threading.Event) -> None:
        while not done.wait(0.1):
            self._relay.drain()

    def shutdown(self) -> None:
        """Stops what still runs (harmless twice)."""
        if self.driver is not None:
            for w in self.driver.workers:
                w.proc.signal(15)
        self._relay.close()
        if self.discovery is not None:
            self.discovery.close()
            self.discovery = None


def from_executor_arguments(settings, min_workers, max_workers, reset_limit, cooldown_range, elastic_timeout,
                            override_discovery, cpus_per_worker, use_gpu, gpus_per_worker,
                            autoscale_kwargs=None) -> ElasticRayExecutor:
    """RayExecutor(settings, min_workers=..., ...)'s elastic executor (Horovod 0.28's spelling);
    autoscale_kwargs: its autoscale=... keywords (create_settings's names)."""
    timeout_s = getattr(settings, "timeout_s", 30.0)
    nics = getattr(settings, "nics", None)
    es = create_settings(min_num_proc=min_workers, max_num_proc=max_workers, reset_limit=reset_limit,
                         cooldown_range=cooldown_range, elastic_timeout=elastic_timeout, timeout_s=timeout_s,
                         nics=nics, _names=autoscale_mod.EXECUTOR_NAMES, **(autoscale_kwargs or {}))
    return ElasticRayExecutor(es, use_gpu=use_gpu, cpus_per_slot=cpus_per_worker, gpus_per_slot=gpus_per_worker,
                              override_discovery=override_discovery)
