"""run(): calls the training function again after every reset, until it returns.

A *reset* is `shutdown(); init()`: in a worker of the elastic driver, init() waits for this worker's
place in the next generation (possibly another rank and size; pyhorovod/elastic/_membership.py), or
raises WorkerStopped (a SystemExit(0)) when the driver lets the worker go.

    sync -> train -> returns                      : done
                  -> HorovodInternalError         : restore, reset, on_reset, sync, train again
                  -> HostsUpdatedInterrupt        : reset, on_reset, sync unless skip_sync, train again

Whether to sync after a reset is voted (one small allreduce): skip_sync only holds when every rank of
the new generation has it, so a rank that joined or whose commit failed is never left alone in a sync.

An init that fails (the store or a peer went away while the generation formed) asks for the next
generation, for at most the elastic timeout (HOROVOD_ELASTIC_TIMEOUT) from the first failure
(basics.init); the driver, which decides who belongs to a generation, sends the worker away long
before that if it should go. Outside an elastic driver nobody re-forms the job, so both exceptions propagate and
run() amounts to sync() and one call.
"""
import functools
import logging
from typing import Callable

from pyhorovod import basics
from pyhorovod.elastic import _membership
from pyhorovod.errors import HorovodInternalError, HostsUpdatedInterrupt

log = logging.getLogger("pyhorovod.elastic")


def run(func: Callable) -> Callable:
    """Decorator: ``func(state, *args, **kwargs)`` runs until it returns, through resets.

    Before the first call and after every reset ``state.sync()`` gives every rank rank 0's state. On
    ``HorovodInternalError`` (a peer died, a collective failed) the state goes back to its last commit
    (``state.restore()``); on ``HostsUpdatedInterrupt`` (raised at a commit) it is kept. Then the job
    re-forms at its new size, ``state.on_reset()`` runs the reset callbacks and ``func`` is called
    again. Outside an elastic driver the exceptions propagate.

    Returns:
        The wrapped function; its return value is ``func``'s.
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        elastic = _membership.is_elastic()
        skip_sync = False
        while True:
            try:
                if not elastic or _anyone_needs_sync(not skip_sync):
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                if not elastic:
                    raise
                log.warning("pyhorovod elastic: %s; going back to the last commit and re-forming the job",
                            _first_line(e))
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                if not elastic:
                    raise
                log.info("pyhorovod elastic: the hosts changed; re-forming the job")
                skip_sync = e.skip_sync
            reset()
            state.on_reset()

    return wrapper


def _anyone_needs_sync(mine: bool) -> bool:
    """True when any rank of the new generation needs sync(): every rank then takes part in it. A rank
    that joined always does; so does one whose commit failed while the others saw skip_sync."""
    import numpy as np
    from pyhorovod import _api, _numpy_ops
    votes = _numpy_ops.allreduce(np.array([int(mine)], dtype=np.int32), op=_api.Max, name="elastic.sync_needed")
    return bool(votes[0])


def reset() -> None:
    """shutdown(); init(): this worker's place in the next generation (init() retries a generation that
    fails to form, basics.init)."""
    import pyhorovod
    try:
        basics.shutdown()
    except HorovodInternalError as e:   # the engine was already broken: it is gone all the same
        log.debug("pyhorovod elastic: shutdown before the reset reported: %s", _first_line(e))
    pyhorovod.init()
    log.info("pyhorovod elastic: re-formed as rank %d of %d", basics.rank(), basics.size())


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
