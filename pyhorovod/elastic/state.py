"""The state an elastic job keeps across resets: State (the protocol) and ObjectState (plain attributes).

Terms. A *commit* is a point where every rank has the same consistent state: commit() = save() (an
in-memory copy, no disk) + check_host_updates(). restore() goes back to the last save; sync() makes every
rank's state rank 0's (rank 0 is always a survivor of the previous generation, so it holds trained
state) and saves it. commit(), sync() and check_host_updates() are collective: every rank calls them at
the same point of the same step.

Host changes. The driver publishes a version number of its host set (pyhorovod/elastic/_membership.py).
At check_host_updates() rank 0 reads it and decides for everybody -- only rank 0's view counts, so that a
worker that joined late cannot disagree -- then broadcasts (version, changed, removed_only); every rank
takes the version as the last one seen and, when it changed, raises HostsUpdatedInterrupt(skip_sync=
removed_only) at the same commit. sync() hands rank 0's last seen version to the ranks that joined.
Outside an elastic driver check_host_updates() returns at once and communicates nothing.

ElasticSampler attributes of an ObjectState are saved as their committed progress: save() gathers every
rank's pending indices first (one allgather per sampler, in attribute-name order), then copies, so a
failure during a commit leaves the previous save intact on this rank.
"""
import copy
from typing import Any, Callable, Dict, Iterable, List, Optional

from pyhorovod import basics
from pyhorovod.elastic import _membership
from pyhorovod.elastic.sampler import ElasticSampler
from pyhorovod.errors import HostsUpdatedInterrupt


class State:
    """The base of elastic states; subclasses define save(), restore() and sync().

    Args:
        bcast_object: ``f(obj)`` returning rank 0's object on every rank (default: pyhorovod's).
        get_rank: ``f()`` returning this process's rank (default: :func:`pyhorovod.rank`).
    """

    def __init__(self, bcast_object: Optional[Callable[[Any], Any]] = None,
                 get_rank: Optional[Callable[[], int]] = None):
        if bcast_object is None:
            from pyhorovod.elastic._objects import broadcast_object as bcast_object
        self._bcast_object = bcast_object
        self._get_rank = get_rank or basics.rank
        self._reset_callbacks: List[Callable[[], None]] = []
        self._hosts_version = 0   # the driver's host-set version this state last saw (rank 0's view)

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], None]]) -> None:
        """Functions called, in order, after every reset (new rank and size), before the next sync."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Called by :func:`pyhorovod.elastic.run` after each reset: :meth:`reset`, then the callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def reset(self) -> None:
        """Subclasses adapt what depends on rank and size here (samplers re-partition)."""

    def commit(self) -> None:
        """Saves the state and raises HostsUpdatedInterrupt (on every rank) when hosts changed."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises HostsUpdatedInterrupt on every rank when the driver's hosts changed since the last
        check; collective in an elastic worker, nothing at all elsewhere."""
        if not _membership.is_elastic():
            return
        if self._get_rank() == 0:
            version, removed_only = _membership.host_update()
            # A change made before this generation formed is part of it already (a failure and a host
            # change can come together): only later ones count.
            formed = _membership.current()
            seen = max(self._hosts_version, formed.hosts_version if formed is not None else 0)
            news = (version, version > seen, removed_only)
        else:
            news = None
        version, changed, removed_only = self._bcast_object(news)
        self._hosts_version = version
        if changed:
            raise HostsUpdatedInterrupt(skip_sync=removed_only)

    def _sync_hosts_version(self) -> None:
        if _membership.is_elastic():
            self._hosts_version = self._bcast_object(self._hosts_version)

    def save(self) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError


class ObjectState(State):
    """Plain attributes (epoch, batch, counters, ...) saved, restored and synchronized as a whole.

    ``ObjectState(epoch=0, batch=0)`` makes ``state.epoch`` and ``state.batch``; the constructor's
    values are the first save. Values are deep-copied at each save and must be picklable (sync sends
    rank 0's). Attributes holding an :class:`ElasticSampler` keep its committed progress.
    """

    def __init__(self, bcast_object: Optional[Callable[[Any], Any]] = None,
                 get_rank: Optional[Callable[[], int]] = None, **kwargs):
        super().__init__(bcast_object, get_rank)
        self._names = sorted(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._saved = self._snapshot()

    def _samplers(self) -> Dict[str, ElasticSampler]:
        return {n: getattr(self, n) for n in self._names if isinstance(getattr(self, n), ElasticSampler)}

    def _snapshot(self) -> Dict[str, Any]:
        return {n: (v.state_dict() if isinstance(v, ElasticSampler) else copy.deepcopy(v))
                for n, v in ((n, getattr(self, n)) for n in self._names)}

    def _apply(self, values: Dict[str, Any]) -> None:
        for name, value in values.items():
            current = getattr(self, name, None)
            if isinstance(current, ElasticSampler):
                current.load_state_dict(value)
            else:
                setattr(self, name, copy.deepcopy(value))

    def _gather_samplers(self) -> None:
        from pyhorovod.elastic._objects import gather_indices
        samplers = self._samplers()
        if not samplers or not basics.is_initialized():
            for s in samplers.values():
                s._commit(sorted(s.pending))
            return
        gathered = {n: gather_indices(sorted(s.pending)) for n, s in sorted(samplers.items())}
        for name, indices in gathered.items():
            samplers[name]._commit(indices)

    def save(self) -> None:
        """Copies the attributes (collective when samplers are among them: their progress is gathered)."""
        self._gather_samplers()
        self._saved = self._snapshot()

    def restore(self) -> None:
        """Puts the attributes back to the last save (samplers: their committed progress)."""
        self._apply(self._saved)

    def sync(self) -> None:
        """Every rank takes rank 0's attributes, which become the saved state."""
        self._sync_hosts_version()
        self._apply(self._bcast_object(self._snapshot()))
        self._saved = self._snapshot()

    def reset(self) -> None:
        for sampler in self._samplers().values():
            sampler.reset()
