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
from pyhorovod.errors import HorovodInternalError, translate

# Reduction ops, as in horovod (module constants pyhorovod.Sum, ...). Adasum is recognised and rejected.
Sum, Average, Min, Max, Product = _core.SUM, _core.AVERAGE, _core.MIN, _core.MAX, _core.PRODUCT
Adasum = -1
REDUCE_OPS = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product"}

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
# fallback naming would be, diverges as soon as a set excludes somebody.)
_auto_names: Dict[Tuple[int, int], int] = {}
# A synchronous unnamed request is over before its caller can make the next one, so it can reuse one
# name, "<op>.noname.sync": the response cache then knows it from the second call on (a fresh counter
# name is a cache miss every time: 61-93 us instead of 27-48 us for one float at 4 ranks). While one
# thread has that name in flight, another thread's synchronous call falls back to a counter name.
_sync_names_busy: set = set()
OP_TYPE_NAMES = {_core.ALLREDUCE: "allreduce", _core.ALLGATHER: "allgather", _core.BROADCAST: "broadcast",
                 _core.ALLTOALL: "alltoall", _core.REDUCESCATTER: "reducescatter", _core.BARRIER: "barrier",
                 _core.JOIN: "join"}


def new_group_id() -> int:
    """A group id for grouped allreduce: the same sequence on every rank, as ranks group in the same order."""
    return next(_next_group)


def check_reduce(op: int, dtype: int, prescale: float, postscale: float) -> None:
    """ValueError for reductions the core cannot do (raised before anything is enqueued)."""
    if op == Adasum:
        raise ValueError("op=Adasum is not supported by pyhorovod (Sum, Average, Min, Max, Product are)")
    if op not in REDUCE_OPS:
        raise ValueError(f"op={op!r} is not a reduction op (use pyhorovod.Sum/Average/Min/Max/Product)")
    if dtype == _core.BOOL:
        if op == Average:
            raise ValueError("op=Average is not defined for bool tensors (use Sum/Max for or, Min/Product "
                             "for and)")
        if prescale != 1.0 or postscale != 1.0:
            raise ValueError("prescale_factor/postscale_factor must be 1 for bool tensors")


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


def check_root(root_rank, set_size: int) -> int:
    if isinstance(root_rank, bool):
        raise ValueError(f"root_rank must be an integer, got {root_rank!r}")
    try:
        root = operator.index(root_rank)
    except TypeError:
        raise ValueError(f"root_rank must be an integer, got {root_rank!r}") from None
    if not 0 <= root < set_size:
        raise ValueError(f"root_rank={root} is out of range for a process set of size {set_size}")
    return root


def submit(ops: Sequence[Op], keepalive: Any, finalize: Callable[[List[Any]], Any]) -> int:
    """Enqueues `ops` and returns one handle. Arguments must have been checked already: if the engine
    rejects the k-th op, ops before it are already in flight; they are kept alive and left to complete
    (the error, raised here, is the same on every rank in the usual case of a deterministic program)."""
    engine = basics.engine()
    handles = []
    try:
        for op in ops:
            if not op.name:
                op = dataclasses.replace(op, name=_auto_name(op.op_type, op.process_set))
            handles.append(engine.enqueue(
                op.op_type, op.name, op.dtype, list(op.shape), op.input_ptr, op.output_ptr,
                reduce_op=op.reduce_op, prescale=float(op.prescale), postscale=float(op.postscale),
                root=op.root, splits=list(op.splits), process_set=op.process_set, device=op.device,
                group=op.group, group_size=op.group_size, timeout_s=float(op.timeout), stream=op.stream,
                sumsq_in=op.sumsq_in, sumsq_out=op.sumsq_out, fill_from=op.fill_from))
    except Exception as e:
        if handles:
            with _lock:
                _orphans.append(_Entry(handles, keepalive, finalize))
        mapped = translate(e)
        if mapped is e:
            raise
        raise mapped from e
    handle = next(_next_handle)
    with _lock:
        _handles[handle] = _Entry(handles, keepalive, finalize)
    return handle


def run_sync(op_type: int, name: Optional[str], dtype: int, shape, input, output, reduce_op: int,
             prescale: float, postscale: float, root: int, process_set: int, timeout: float):
    """The synchronous fast path for one host request (arguments checked already; name None: the
    reusable synchronous name): enqueue and wait in one engine call, so no handle, no Op record and no
    wake-up of the engine thread. input / output are the buffer objects themselves (kept alive by the
    caller for the call). Errors are mapped as submit() + synchronize() map them."""
    claimed = None
    if not name:
        name, claimed = _claim_sync_name(op_type, process_set)
    engine = basics.engine()
    try:
        return engine.run_sync(op_type, name, dtype, shape, input, output, reduce_op, prescale,
                               postscale, root, process_set, timeout)
    except _core.CoreError as e:
        raise translate(e) from e
    except BaseException:
        _after_interrupt(engine)
        raise
    finally:
        if claimed is not None:
            with _lock:
                _sync_names_busy.discard(claimed)


def _claim_sync_name(op_type: int, process_set: int):
    """(name, key to release or None): the reusable synchronous name if no other thread holds it."""
    key = (op_type, process_set)
    with _lock:
        if key not in _sync_names_busy:
            _sync_names_busy.add(key)
            where = f".ps{process_set}" if process_set else ""
            return f"{OP_TYPE_NAMES.get(op_type, 'op')}{where}.noname.sync", key
    return _auto_name(op_type, process_set), None


def _auto_name(op_type: int, process_set: int) -> str:
    with _lock:
        n = _auto_names.get((op_type, process_set), 0) + 1
        _auto_names[(op_type, process_set)] = n
    where = f".ps{process_set}" if process_set else ""
    return f"{OP_TYPE_NAMES.get(op_type, 'op')}{where}.noname.{n}"


def _entry(handle: int) -> _Entry:
    entry = _handles.get(handle)
    if entry is None:
        if handle in _cancelled:
            raise HorovodInternalError(f"handle {handle} was cancelled by pyhorovod.shutdown()")
        raise ValueError(f"unknown or already synchronized handle {handle!r}")
    return entry


def poll(handle: int) -> bool:
    """True when synchronize(handle) would return without waiting."""
    entry = _entry(handle)
    engine = basics.engine()
    try:
        return all(engine.poll(h) for h in entry.engine_handles)
    except Exception as e:
        mapped = translate(e)
        if mapped is e:
            raise
        raise mapped from e


def synchronize(handle: int):
    """Waits for the handle's requests and returns the op's result (the output array, a list for grouped
    ops, a tuple (output, received_splits) for alltoall with splits). Raises the request's error."""
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


basics.on_shutdown(_drop_all)


def barrier(process_set_id: int = 0, timeout=None) -> None:
    synchronize(submit([Op(_core.BARRIER, _core.UINT8, (0,), process_set=process_set_id,
                           timeout=check_timeout(timeout))], None, lambda rs: None))


def join(device: int = -1, process_set_id: int = 0, timeout=None) -> int:
    """Blocks until every rank has joined; returns the rank that joined last (horovod.torch.join)."""
    return synchronize(submit([Op(_core.JOIN, _core.UINT8, (0,), device=device, process_set=process_set_id,
                                  timeout=check_timeout(timeout))], None, lambda rs: int(rs[0].value)))
