"""Prepared synchronous calls: the short way through a blocking collective that was made before.

A *prepared call* is a _core.SyncCall (csrc/bindings/bind_sync_call.cc): the engine request of one
blocking allreduce, broadcast, reducescatter, allgather or alltoall with everything but the arrays filled
in (op type, name, dtype code, shape, reduce op, scales, root), checked once by the engine. The numpy
API (`_numpy_allreduce`, `_numpy_exchange`) makes one after a call whose arguments passed every check,
and files it under the arguments that decided the request (the *key*: the op type, then the name and
that op's own arguments, e.g. op, prescale, postscale and in place or not for an allreduce). The next
call with the same key hands the prepared call its array and nothing else; the prepared call compares the
array with the one it was made for (dtype, shape, contiguity, writability) and returns None when they
differ, which sends the caller down its full path (every check again, then a new prepared call). So no
check a user relies on is skipped: arguments that are not in the key (dtype=, timeout=, average=,
alltoall's splits, a process set other than the global one, anything but a numpy array) never take this
way, and the engine negotiates every call as before.

The key holds the arguments as given, the scales only when they are floats and a root only when it is
an int. op None is not the same key as op=Average (both are correct: the first call of each just takes
the full path); keys that compare equal (op=1 and op=True) get the same treatment from the full path
too, and an unhashable name or op never makes a key. The op type comes first, so two op types never
share a key. Only a call whose full path succeeded files a prepared call. The cache belongs to one
engine: shutdown and fork clear it.

An unnamed call uses the reusable synchronous name of its op type, which one thread at a time may hold
(as _api.run_sync claims it): its prepared call claims the name itself, around the call, and returns None
without running when another thread holds it or has unnamed requests in flight (this thread's own entry
of _api._unnamed_by_thread stays behind, emptied, after its first asynchronous unnamed call, e.g. a
barrier); the full path then decides, and refuses when it must. A named call needs no claim.
"""
from pyhorovod import _api, _core, basics
from pyhorovod.errors import translate

# key -> a _core.SyncCall's entry() (the call as a builtin function: no pybind11 dispatch per call); at
# most _CAPACITY entries (a program that calls with ever new names, e.g. one per step, would otherwise
# grow it without bound: beyond the capacity a key is simply not prepared).
prepared = {}
_prepared_get = prepared.get
_CAPACITY = 1024


def prepare(key, op_type, code, arr, name, inplace=False, reduce_op=0, prescale=1.0, postscale=1.0, root=0,
            out_shape=()) -> None:
    """Files a prepared call of `op_type` (global set) for `key`, after a full-path call with these
    arguments succeeded. out_shape: a reducescatter's output shape."""
    if key is None or (len(prepared) >= _CAPACITY and key not in prepared):
        return
    sync_name = name or _api._sync_name((op_type, 0))
    call = _core.SyncCall(basics.engine(), op_type, sync_name, code, arr, reduce_op, prescale, postscale, root, 0,
                          0.0, inplace, list(out_shape))
    # An unnamed call claims the synchronous name (the module's docstring says why) in C++.
    prepared[key] = (call.entry() if name else
                     call.entry(_api._sync_names_busy, _api._unnamed_by_thread, (op_type, 0)))


def lookup(key, tensor):
    """(result, key): the output of the prepared call filed under `key` (key[0] is the op type), or None
    when there is none or it does not fit `tensor`; key is None when it cannot be one (unhashable). Errors
    as run() raises them, which this does inline: each Python frame is about 0.07 us of a 4 B call's
    1.6 us of local work."""
    try:
        call = _prepared_get(key)
    except TypeError:  # an unhashable name or op: the full path says what is wrong with it
        return None, None
    if call is None:
        return None, key
    try:
        return call(tensor), key
    except BaseException as e:
        reraise(e)


def run(call, tensor):
    """The output of a prepared call, or None when it does not fit `tensor` or, unnamed, cannot claim
    the synchronous name (see above); errors as reraise() says. (The blocking allreduce does this and
    lookup() inline: a frame is a tenth of its call.)"""
    try:
        return call(tensor)
    except BaseException as e:
        reraise(e)


def reraise(error: BaseException):
    """Raises what a prepared call's caller raises for `error`: a core error as its public class; after
    anything else (KeyboardInterrupt in the wait), the engine is checked as after any interrupted call."""
    if isinstance(error, _core.CoreError):
        raise translate(error) from error
    engine = basics._state.engine  # None if a signal handler shut pyhorovod down meanwhile
    if engine is not None:
        _api._after_interrupt(engine)
    raise error


def _forget():
    prepared.clear()


basics.on_shutdown(_forget)
basics.on_fork_child(_forget)
