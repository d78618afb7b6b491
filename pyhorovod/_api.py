"""The lower level of the framework-free API: requests to the engine, and the handle table.

Frameworks (numpy in pyhorovod/_numpy_ops.py, torch in pyhorovod/torch) turn their tensors into `Op`s:
raw pointers, byte-exact shapes, a _core dtype code. `submit()` enqueues them and returns a handle; the
handle table keeps the `keepalive` objects (inputs, outputs) referenced until `synchronize()` returns,
because the engine thread reads and writes those buffers asynchronously. `finalize` turns the engine's
_core.Result list into what the framework returns (the output array, a reshaped allgather result, ...).

A handle covers one or more engine requests (a grouped allreduce is one handle). Handles are our own
integers, not the engine's.
"""
import dataclasses
import itertools
import operator
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from pyhorovod import _core, basics
from pyhorovod.errors import HorovodInternalError, raise_translated, translate

# Reduction ops, as in horovod (module constants pyhorovod.Sum, ...). Adasum (csrc/common/adasum.h) is
# for float tensors on the host, in allreduce and grouped allreduce only.
Sum, Average, Min, Max, Product, Adasum = (_core.SUM, _core.AVERAGE, _core.MIN, _core.MAX, _core.PRODUCT,
                                           _core.ADASUM)
REDUCE_OPS = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product", Adasum: "Adasum"}

DTYPE_NAMES = {
    "uint8": _core.UINT8, "int8": _core.INT8, "int16": _core.INT16, "int32": _core.INT32,
    "int64": _core.INT64, "float16": _core.FLOAT16, "bfloat16": _core.BFLOAT16,
    "float32": _core.FLOAT32, "float64": _core.FLOAT64, "bool": _core.BOOL,
}
CODE_NAMES = {v: k for k, v in DTYPE_NAMES.items()}
ITEMSIZE = {_core.UINT8: 1, _core.INT8: 1, _core.INT16: 2, _core.INT32: 4, _core.INT64: 8,
            _core.FLOAT16: 2, _core.BFLOAT16: 2, _core.FLOAT32: 4, _core.FLOAT64: 8, _core.BOOL: 1}
FLOAT_CODES = {_core.FLOAT16, _core.BFLOAT16, _core.FLOAT32, _core.FLOAT64}


@dataclasses.dataclass
class Op:
    """One engine request. shape is the element shape (count = product; () is a scalar)."""
    op_type: int
    dtype: int
    shape: Tuple[int, ...]
    input_ptr: int = 0
    output_ptr: int = 0
    name: str = ""
    reduce_op: int = _core.SUM
    prescale: float = 1.0
    postscale: float = 1.0
    root: int = 0
    splits: Tuple[int, ...] = ()
    process_set: int = 0
    device: int = -1
    group: int = 0
    group_size: int = 0
    timeout: float = 0.0   # seconds; 0: the engine's default (PYHOROVOD_TIMEOUT_SECONDS)
    stream: int = 0        # device >= 0: the producer's cudaStream_t (0 = legacy default stream)
    sumsq_in: int = 0      # float64 addresses for the noise-scale tap (Request::sumsq_in/out in request.h)
    sumsq_out: int = 0
    fill_from: int = 0     # float64 address: the engine fills the (in-place) buffer from it at enqueue


@dataclasses.dataclass
class _Entry:
    engine_handles: List[int]
    keepalive: Any
    finalize: Callable[[List[Any]], Any]


_handles: Dict[int, _Entry] = {}
_cancelled: set = set()
_orphans: List[_Entry] = []   # requests of a partly failed submit: kept alive until shutdown
_lock = threading.Lock()
_next_handle = itertools.count(1)
_next_group = itertools.count(1)
# Unnamed requests get "<op>.noname.<n>" (in a process set "<op>.ps<id>.noname.<n>"), n counting per
# (op type, process set): ranks outside a set do not count its ops, so names still agree across ranks
# when only some ranks run collectives on a set. (One counter for everything, as the engine's own
# fallback naming would be, diverges as soon as a set excludes somebody.) Names agree across ranks as
# long as the ranks' sequences of accepted unnamed calls agree, hence:
# - a call refused locally (a duplicate name, a bad argument caught by the engine) gives its number back;
# - a number some other rank used for a call this rank never made (it failed there, e.g. timed out) is
#   skipped here (the engine learns it from the failure: Engine.auto_name_floor), so the counters meet
#   again after one rank ran ahead;
# - the counters restart with every init() (every rank restarts them together);
# - unnamed calls from several threads cannot be ordered alike on every rank: one made while another
#   thread's unnamed request is still running is refused at once (_claim_unnamed).
_auto_names: Dict[Tuple[int, int], int] = {}
# A synchronous unnamed request is over before its caller can make the next one, so it can reuse one
# name, "<op>.noname.sync": the response cache then knows it from the second call on (a fresh counter
# name is a cache miss every time: 61-93 us instead of 27-48 us for one float at 4 ranks).
_sync_names_busy: Dict[Tuple[int, int], int] = {}   # key -> thread holding the synchronous name
_sync_names: Dict[Tuple[int, int], str] = {}        # key -> that name, formatted once
# Handles with unnamed requests, by the thread that submitted them (until synchronize): handle -> the
# (op type, process set) counters its names came from.
_unnamed_by_thread: Dict[int, Dict[int, frozenset]] = {}
OP_TYPE_NAMES = {_core.ALLREDUCE: "allreduce", _core.ALLGATHER: "allgather", _core.BROADCAST: "broadcast",
                 _core.ALLTOALL: "alltoall", _core.REDUCESCATTER: "reducescatter", _core.BARRIER: "barrier",
                 _core.JOIN: "join"}


def new_group_id() -> int:
    """A group id for grouped allreduce: the same sequence on every rank, as ranks group in the same order."""
    return next(_next_group)


def check_reduce(op: int, dtype: int, prescale: float, postscale: float) -> None:
    """ValueError for reductions the core cannot do, or would round silently: a fractional scale of an
    integer tensor (raised before anything is enqueued). Integer Average itself truncates toward zero."""
    if op not in REDUCE_OPS:
        raise ValueError(f"op={op!r} is not a reduction op (use pyhorovod.Sum/Average/Min/Max/Product/Adasum)")
    if op == Adasum and dtype not in FLOAT_CODES:
        raise ValueError(f"op=Adasum needs a float16, bfloat16, float32 or float64 tensor, not "
                         f"{CODE_NAMES.get(dtype, dtype)}")
    if dtype == _core.BOOL:
        if op == Average:
            raise ValueError("op=Average is not defined for bool tensors (use Sum/Max for or, Min/Product "
                             "for and)")
        if prescale != 1.0 or postscale != 1.0:
            raise ValueError("prescale_factor/postscale_factor must be 1 for bool tensors")
    elif dtype not in FLOAT_CODES:
        # An integer tensor is scaled in its own type, truncating toward zero: a fractional factor
        # would silently lose most of the value (1 * 0.5 gives 0).
        for name, factor in (("prescale_factor", prescale), ("postscale_factor", postscale)):
            if not float(factor).is_integer():
                raise ValueError(f"{name}={factor!r} is not a whole number, so it cannot scale an integer "
                                 f"({CODE_NAMES.get(dtype, dtype)}) tensor exactly; use a floating-point tensor "
                                 f"or a whole factor")


def resolve_op(op, average) -> int:
    """horovod.torch semantics: op=None and average=None mean Average; average=True/False is the old
    spelling of Average/Sum and may not be combined with op."""
    if average is not None:
        if op is not None:
            raise ValueError("pass either op= or the deprecated average=, not both")
        return Average if average else Sum
    return Average if op is None else op


def check_timeout(timeout) -> float:
    """The per-call `timeout=` keyword: None -> 0.0 (the job's PYHOROVOD_TIMEOUT_SECONDS), else a positive
    finite number of seconds after which every rank's request fails with HorovodTimeoutError."""
    if timeout is None:
        return 0.0
    if isinstance(timeout, bool):
        raise ValueError(f"timeout must be a number of seconds, got {timeout!r}")
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(f"timeout must be a number of seconds, got {timeout!r}") from None
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    return value


def check_root(root_rank, ranks: Sequence[int]) -> int:
    """root_rank is a global rank, also on a process set (as in Horovod); the engine wants its position
    among the set's sorted `ranks`. ValueError for a non-integer or a rank that is not in the set."""
    if isinstance(root_rank, bool):
        raise ValueError(f"root_rank must be an integer, got {root_rank!r}")
    try:
        root = operator.index(root_rank)
    except TypeError:
        raise ValueError(f"root_rank must be an integer, got {root_rank!r}") from None
    try:
        return ranks.index(root)
    except ValueError:
        raise ValueError(f"root_rank={root} is out of range: not a member of the process set (ranks "
                         f"{_ranks_text(ranks)}; root_rank is a global rank)") from None


def _ranks_text(ranks: Sequence[int]) -> str:
    if len(ranks) > 8 and list(ranks) == list(range(len(ranks))):
        return f"0..{len(ranks) - 1}"
    return str(list(ranks))


def submit(ops: Sequence[Op], keepalive: Any, finalize: Callable[[List[Any]], Any]) -> int:
    """Enqueues `ops` and returns one handle. Arguments must have been checked already: if the engine
    rejects the k-th op, ops before it are already in flight; they are kept alive and left to complete
    (the error, raised here, is the same on every rank in the usual case of a deterministic program)."""
    engine = basics.engine()
    unnamed = frozenset((op.op_type, op.process_set) for op in ops if not op.name)
    if unnamed:
        _claim_unnamed(engine, unnamed)
    handles = []
    try:
        for op in ops:
            numbered = None
            if not op.name:
                numbered = (op.op_type, op.process_set)
                op = dataclasses.replace(op, name=_auto_name(engine, *numbered))
            try:
                # Positional, in the binding's order (reduce_op, prescale, postscale, root, splits,
                # process_set, device, group, group_size, timeout_s, stream, sumsq_in, sumsq_out,
                # fill_from): pybind11 matches keywords by name, 2.4 us of a 4 B request's enqueue.
                handles.append(engine.enqueue(
                    op.op_type, op.name, op.dtype, list(op.shape), op.input_ptr, op.output_ptr,
                    op.reduce_op, float(op.prescale), float(op.postscale), op.root, list(op.splits),
                    op.process_set, op.device, op.group, op.group_size, float(op.timeout), op.stream,
                    op.sumsq_in, op.sumsq_out, op.fill_from))
            except Exception:
                if numbered is not None:
                    _return_number(numbered, op.name)
                raise
    except Exception as e:
        if handles:
            with _lock:
                _orphans.append(_Entry(handles, keepalive, finalize))
        raise_translated(e)
    handle = next(_next_handle)
    with _lock:
        _handles[handle] = _Entry(handles, keepalive, finalize)
        if unnamed:
            _unnamed_by_thread.setdefault(threading.get_ident(), {})[handle] = unnamed
    return handle


def run_sync(op_type: int, name: Optional[str], dtype: int, shape, input, output, reduce_op: int,
             prescale: float, postscale: float, root: int, process_set: int, timeout: float, splits=()):
    """The synchronous fast path for one host request (arguments checked already; name None: the
    reusable synchronous name): enqueue and wait in one engine call, so no handle, no Op record and no
    wake-up of the engine thread. input / output are the buffer objects themselves (kept alive by the
    caller for the call); splits: an alltoall's, () for an even split. Errors are mapped as submit() +
    synchronize() map them."""
    rest = (dtype, shape, input, output, reduce_op, prescale, postscale, root, process_set, timeout)
    if splits:
        rest += (splits,)
    return _engine_call(op_type, name, process_set, lambda engine, nm: engine.run_sync(op_type, nm, *rest))


def run_alltoall_sync(name: Optional[str], dtype: int, array, splits, process_set: int, timeout: float):
    """run_sync for a blocking alltoall with splits of a C-contiguous numpy array: (output, received
    splits as an int32 array), both made by the engine's binding (Engine.alltoall_sync)."""
    return _engine_call(_core.ALLTOALL, name, process_set,
                        lambda engine, nm: engine.alltoall_sync(nm, dtype, array, splits, process_set, timeout))


def _engine_call(op_type: int, name: Optional[str], process_set: int, call: Callable[[Any, str], Any]):
    """call(engine, name): one synchronous engine call, under the reusable synchronous name (claimed for
    the call) when name is empty; errors mapped as synchronize() maps them."""
    claimed = None
    if not name:
        name, claimed = _claim_sync_name(op_type, process_set)
    engine = basics.engine()
    try:
        return call(engine, name)
    except _core.CoreError as e:
        raise translate(e) from e
    except BaseException:
        _after_interrupt(engine)
        raise
    finally:
        if claimed is not None:
            with _lock:
                _sync_names_busy.pop(claimed, None)


def submit_sync(ops: Sequence[Op], keepalive: Any, finalize: Callable[[List[Any]], Any]) -> Any:
    """What synchronize(submit(ops, keepalive, finalize)) returns. A lone host request (the usual
    blocking call, an alltoall with splits too) takes run_sync: one engine call, no handle, and an
    unnamed one gets the reusable synchronous name, so that from its second call on it is a cached
    response (one negotiation exchange) instead of a fresh counter name (a full negotiation, and a
    wake-up of the engine thread)."""
    op = ops[0] if len(ops) == 1 else None
    if (op is None or op.device >= 0 or op.group or op.sumsq_in or op.fill_from
            or op.op_type not in _SYNC_TYPES):
        return synchronize(submit(ops, keepalive, finalize))
    result = run_sync(op.op_type, op.name, op.dtype, op.shape, op.input_ptr, op.output_ptr or None, op.reduce_op,
                      float(op.prescale), float(op.postscale), op.root, op.process_set, float(op.timeout),
                      op.splits)
    return finalize([result])


# The op types the synchronous fast path carries (the others need the engine's handle machinery: join).
_SYNC_TYPES = frozenset((_core.ALLREDUCE, _core.ALLGATHER, _core.BROADCAST, _core.ALLTOALL, _core.REDUCESCATTER))


def _claim_sync_name(op_type: int, process_set: int):
    """(name, key to release): the reusable synchronous name. The usual case (no other thread has an
    unnamed request running) costs one lock and two dict look-ups; otherwise _claim_unnamed decides."""
    key = (op_type, process_set)
    me = threading.get_ident()
    with _lock:
        if _sync_names_busy.get(key, me) == me and all(t == me for t in _unnamed_by_thread):
            _sync_names_busy[key] = me
            return _sync_name(key), key
    _claim_unnamed(basics.engine(), (key,))
    with _lock:
        _sync_names_busy[key] = me
    return _sync_name(key), key


def _sync_name(key: Tuple[int, int]) -> str:
    name = _sync_names.get(key)
    if name is None:
        op_type, process_set = key
        where = f".ps{process_set}" if process_set else ""
        name = _sync_names[key] = f"{OP_TYPE_NAMES.get(op_type, 'op')}{where}.noname.sync"
    return name


def _claim_unnamed(engine, keys) -> None:
    """ValueError when another thread has an unnamed request of the same op type and process set
    running: the ranks could not pair the threads' calls alike (each rank interleaves them in its own
    order). Different op types count separately, so threads that use different ones do not conflict."""
    me = threading.get_ident()
    with _lock:
        if not _sync_names_busy and all(t == me for t in _unnamed_by_thread):
            return
        clash = [k for k in keys if _sync_names_busy.get(k, me) != me]
        for thread, handles in list(_unnamed_by_thread.items()):
            if thread == me or clash:
                continue
            for h, their_keys in list(handles.items()):
                entry = _handles.get(h)
                if entry is None or _completed(engine, entry):
                    del handles[h]  # completed: no longer in the way
                elif their_keys & set(keys):
                    clash.extend(their_keys & set(keys))
                    break
            if not handles:
                del _unnamed_by_thread[thread]
    if clash:
        op_type = next(iter(clash))[0]
        raise ValueError(
            f"an unnamed {OP_TYPE_NAMES.get(op_type, 'collective')} was called while another thread's "
            f"unnamed {OP_TYPE_NAMES.get(op_type, 'collective')} is still running: ranks pair unnamed calls "
            f"by their order, which differs between ranks when several threads make them; give each "
            f"thread's collectives their own name= (the same on every rank)")


def _completed(engine, entry: _Entry) -> bool:
    """Has every request of the entry completed? (A request its thread is just synchronizing is gone from
    the engine already: that counts as completed.)"""
    try:
        return all(engine.poll(eh) for eh in entry.engine_handles)
    except Exception:  # noqa: BLE001 -- the engine no longer knows the handle: waited for, so done
        return True


def _auto_name(engine, op_type: int, process_set: int) -> str:
    where = f".ps{process_set}" if process_set else ""
    prefix = f"{OP_TYPE_NAMES.get(op_type, 'op')}{where}.noname."
    floor = engine.auto_name_floor(prefix)
    with _lock:
        n = max(_auto_names.get((op_type, process_set), 0), floor) + 1
        _auto_names[(op_type, process_set)] = n
    return f"{prefix}{n}"


def _return_number(key: Tuple[int, int], name: str) -> None:
    """A numbered call the engine refused gives its number back (the other ranks never saw it)."""
    n = int(name.rsplit(".", 1)[1])
    with _lock:
        if _auto_names.get(key) == n:
            _auto_names[key] = n - 1


def _entry(handle: int) -> _Entry:
    entry = _handles.get(handle)
    if entry is None:
        if handle in _cancelled:
            raise HorovodInternalError(f"handle {handle} was cancelled by pyhorovod.shutdown()")
        basics.engine()  # raises when not initialized (in a forked child too): that says more
        raise ValueError(f"unknown or already synchronized handle {handle!r}")
    return entry


def poll(handle: int) -> bool:
    """Whether the asynchronous operation behind ``handle`` has completed.

    Returns:
        True when :func:`synchronize` would return (or raise) without waiting. Never blocks.
    """
    entry = _entry(handle)
    engine = basics.engine()
    try:
        return all(engine.poll(h) for h in entry.engine_handles)
    except Exception as e:
        raise_translated(e)


def synchronize(handle: int) -> Any:
    """Waits until the asynchronous operation behind ``handle`` has completed, and returns its result.

    Returns:
        What the synchronous form returns: the output (the input itself for in-place forms), a list
        for grouped operations, ``(output, received_splits)`` for alltoall with splits.

    Raises:
        ValueError: an unknown handle, or one already synchronized.
        HorovodTimeoutError: the request's deadline passed.
        HorovodInternalError: the operation failed, or :func:`shutdown` cancelled it.
    """
    entry = _entry(handle)
    engine = basics.engine()
    results, error = [], None
    try:
        for h in entry.engine_handles:
            # Wait for every request even after a failure, so no buffer is released while in use.
            try:
                results.append(engine.wait(h))
            except _core.CoreError as e:
                error = error or e
    except BaseException:
        _after_interrupt(engine, entry)  # before the finally below releases the buffers
        raise
    finally:
        with _lock:
            _handles.pop(handle, None)
            for handles in _unnamed_by_thread.values():
                handles.pop(handle, None)
    if error is not None:
        raise translate(error) from error
    return entry.finalize(results)


def _after_interrupt(engine, entry: Optional[_Entry] = None) -> None:
    """A wait raised something other than a core error: mostly a signal handler's exception
    (KeyboardInterrupt, a test runner's timeout). If the engine was interrupted by it, it has stopped
    (its sockets close, so the peers fail at once naming this rank): shut pyhorovod down, so that
    shutdown(); init() starts afresh. Otherwise (the handler raised just as the wait completed) the
    engine works on, and requests of the handle not waited for yet may still run: their buffers stay
    referenced until shutdown."""
    if engine.interrupted:
        basics.shutdown()
    elif entry is not None:
        with _lock:
            _orphans.append(entry)


def _drop_all():
    with _lock:
        _cancelled.update(_handles)
        _handles.clear()
        _orphans.clear()
        _auto_names.clear()  # every rank restarts its counters with the next engine
        _sync_names_busy.clear()
        _unnamed_by_thread.clear()


def _forget_after_fork():
    """In a forked child: the parent's requests are not ours to wait for (their buffers are the child's
    copies, nobody writes them); the lock may have been held by a parent thread at the fork."""
    global _lock
    _lock = threading.Lock()
    _handles.clear()
    _orphans.clear()
    _auto_names.clear()
    _sync_names_busy.clear()


basics.on_shutdown(_drop_all)
basics.on_fork_child(_forget_after_fork)


def barrier(process_set_id: int = 0, timeout=None) -> None:
    synchronize(submit([Op(_core.BARRIER, _core.UINT8, (0,), process_set=process_set_id,
                           timeout=check_timeout(timeout))], None, lambda rs: None))


def join(device: int = -1, process_set_id: int = 0, timeout=None) -> int:
    """Blocks until every rank has joined; returns the rank that joined last (horovod.torch.join)."""
    return synchronize(submit([Op(_core.JOIN, _core.UINT8, (0,), device=device, process_set=process_set_id,
                                  timeout=check_timeout(timeout))], None, lambda rs: int(rs[0].value)))
