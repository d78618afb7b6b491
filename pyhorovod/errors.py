"""Python exceptions of pyhorovod, and the one place where core (C++) exceptions become them.

The C++ core raises `_core.CoreError` subclasses whose text already carries the context (our rank, the
peer rank and address, the op, the tensor name, the sequence number). They map one-to-one:

    _core.InvalidArgumentError  -> ValueError              (bad arguments; nothing was communicated)
    _core.TimeoutError_         -> HorovodTimeoutError     (a deadline passed)
    _core.PeerLostError,
    _core.ShutdownError,
    _core.InterruptedError_,
    _core.InternalError, other  -> HorovodInternalError    (the collective failed; as in horovod.torch)

A transfer that breaks or stops moving stops the engine; its requests fail as PeerLostError on every rank,
so HorovodTimeoutError always means "this request timed out and the engine still works". A signal
handler that raises during a blocking call is not mapped: its own exception reaches the caller.

The message is kept verbatim so that logs and tests see exactly what the core said.
"""


class HorovodInternalError(RuntimeError):
    """A collective failed (a peer died, a connection broke, ranks disagreed). Same name and base class
    as horovod.common.exceptions.HorovodInternalError, so `except HorovodInternalError` code carries over."""


class HorovodTimeoutError(HorovodInternalError):
    """A collective or the bootstrap ran past its deadline (PYHOROVOD_TIMEOUT_SECONDS)."""


class HostsUpdatedInterrupt(RuntimeError):
    """The job's hosts changed (elastic training): training should stop at the next commit point and
    resume with the new set of ranks. skip_sync: the state need not be synchronised again afterwards.
    Same name, base class and argument as horovod.common.exceptions.HostsUpdatedInterrupt."""

    def __init__(self, skip_sync=False):
        super().__init__(f"the job's hosts changed (skip_sync={bool(skip_sync)})")
        self.skip_sync = bool(skip_sync)


def _core_classes():
    # Imported lazily: the pure-Python layers (config, bootstrap) stay importable without the extension.
    from pyhorovod import _core
    return _core


# The one mapping from the core's classes (one per C++ ErrorKind, declared in csrc/bindings/bind_runtime.cc)
# to ours, most specific first; any other CoreError is a HorovodInternalError.
_BY_CORE_CLASS = (("InvalidArgumentError", ValueError), ("TimeoutError_", HorovodTimeoutError))


def translate(exc):
    """Returns the pyhorovod exception for `exc` (a _core.CoreError), or `exc` itself if it is not one."""
    try:
        core = _core_classes()
    except ImportError:
        return exc
    if not isinstance(exc, core.CoreError):
        return exc
    for core_name, ours in _BY_CORE_CLASS:
        if isinstance(exc, getattr(core, core_name)):
            return ours(str(exc))
    return HorovodInternalError(str(exc))


def raise_translated(exc):
    """Raises the pyhorovod exception for `exc` (with `exc` as its __cause__), or `exc` itself if it has
    none: for except blocks that do their own bookkeeping before the error leaves."""
    mapped = translate(exc)
    if mapped is exc:
        raise exc
    raise mapped from exc


class translated:
    """Context manager: re-raises core exceptions as their pyhorovod classes (keeping the original as
    __cause__, so the C++ class is still visible in a traceback)."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None:
            return False
        mapped = translate(exc)
        if mapped is exc:
            return False
        raise mapped from exc
