# Contract of the C++ extension pyhorovod._core (csrc/bindings). Python code relies on exactly this.
# Every blocking method releases the GIL. Engine.__init__/wait/run_sync/add/remove_process_set,
# TcpStore.__init__/get/wait and Communicator.__init__/collectives run signal handlers every 100 ms while
# they wait on the main thread, and raise the exception a handler raised (Engine.interrupted is then
# True). Errors: the core raises _core.CoreError subclasses mapped in pyhorovod/errors.py:
# InvalidArgument -> ValueError; Internal/Timeout/PeerLost/Shutdown/Interrupted -> HorovodInternalError.
from typing import Any, Callable, Dict, Optional, Sequence

# DataType codes (csrc/common/types.h)
UINT8: int; INT8: int; INT16: int; INT32: int; INT64: int
FLOAT16: int; BFLOAT16: int; FLOAT32: int; FLOAT64: int; BOOL: int
# ReduceOp codes
SUM: int; AVERAGE: int; MIN: int; MAX: int; PRODUCT: int; ADASUM: int
# OpType codes
ALLREDUCE: int; ALLGATHER: int; BROADCAST: int; ALLTOALL: int; REDUCESCATTER: int; BARRIER: int; JOIN: int

class CoreError(RuntimeError): ...          # base; .kind is one of the names below
class InvalidArgumentError(CoreError): ...  # -> ValueError in pyhorovod.errors
class InternalError(CoreError): ...
class TimeoutError_(InternalError): ...
class PeerLostError(InternalError): ...
class ShutdownError(InternalError): ...
class InterruptedError_(InternalError): ...  # the engine stopped: a waiting call of this rank was interrupted

# build_info: {"version", "compiler", "cxx_flags", "nccl": bool, "nccl_version": int, "cuda": bool, "shm": bool}
def build_info() -> dict: ...
def sum_of_squares(ptr: int, count: int, dtype: int) -> float: ...  # float32/float64 host buffer, in double
# A new C-contiguous numpy array for a collective's output, contents unspecified; from POOLED_OUTPUT_BYTES up
# on the engine's reused output memory, placed within its 64-byte line as the input at address `input` is.
POOLED_OUTPUT_BYTES: int
def empty_output(dtype: Any, shape: Sequence[int], input: int) -> Any: ...

class TcpStoreServer:
    """The rendezvous key/value store, hosted by the launcher or rank 0 (background thread)."""
    # port 0: any free port. Limits: see pyhorovod/_config.py store_limits (PYHOROVOD_STORE_*).
    def __init__(self, host: str, port: int, secret: bytes, max_value_bytes: int = ..., max_total_bytes: int = ...,
                 handshake_s: float = ..., max_connections: int = ...) -> None: ...
    @property
    def port(self) -> int: ...
    def close(self) -> None: ...

class TcpStore:
    """Client of TcpStoreServer. Every call proves the secret in the connection handshake."""
    def __init__(self, host: str, port: int, secret: bytes, timeout_s: float) -> None: ...
    def set(self, key: str, value: bytes) -> None: ...
    def get(self, key: str, timeout_s: float) -> bytes: ...
    def add(self, key: str, delta: int) -> int: ...
    def wait(self, keys: Sequence[str], timeout_s: float) -> None: ...
    def check(self, key: str) -> bool: ...
    def delete_prefix(self, prefix: str) -> int: ...   # removes the keys beginning with prefix; how many

class Tuning:
    alpha_s: float; beta_bytes_per_s: float; segment_bytes: int; small_threshold_bytes: int
    max_segments_in_flight: int
    alpha_shm_s: float; gamma_bytes_per_s: float   # shared-memory hop latency; reduction throughput

def small_message_threshold(tuning: Tuning, world: int, shared_memory: bool = False) -> int: ...

class ConnectOptions:
    rank: int; size: int; local_rank: int; local_size: int
    store_host: str; store_port: int; secret: bytes; bind_host: str; store_prefix: str
    connect_timeout_s: float; shm_enable: bool; tuning: Tuning
    shm_spin_us: int       # shared memory: poll the rings this long before sleeping (-1: automatic)
    shm_spin_yield: int    # shared memory: yield the CPU while polling: 1 always, 0 never, -1 after 2 us
    shm_ring_bytes: int    # shared memory: ring size per direction (0: 1 MiB)
    shm_zero_copy: bool    # shared memory: reduce straight from the ring (False: copy out first)
    shm_direct_bytes: int  # shared memory: single-copy reads (process_vm_readv) from this size up (0: off)
    shm_direct_refuse_probe: bool  # test hook: the single-copy probe reports refused (fallback)

class Communicator:
    """Collectives on the calling thread, no engine: the raw core (tests of algorithms, benchmarks).
    Buffers: C-contiguous writable buffer-protocol objects (numpy arrays). dtype: a DataType code."""
    def __init__(self, options: ConnectOptions) -> None: ...          # collective
    rank: int; size: int
    direct_bytes: int  # the agreed single-copy threshold (0: off, e.g. refused by the probe)
    def allreduce(self, buf: Any, dtype: int, op: int, timeout_s: float, algorithm: str = "auto") -> None: ...
    # algorithm: "auto" | "ring" | "small"; in place; op SUM/MIN/MAX/PRODUCT, ADASUM ("auto" only)
    def allgatherv(self, send: Any, recv: Any, bytes_per_rank: Sequence[int], timeout_s: float) -> None: ...
    def broadcast(self, buf: Any, root: int, timeout_s: float) -> None: ...
    def alltoallv(self, send: Any, send_bytes: Sequence[int], recv: Any, recv_bytes: Sequence[int],
                  timeout_s: float) -> None: ...
    def reducescatter(self, input: Any, output: Any, counts: Sequence[int], dtype: int, op: int,
                      timeout_s: float) -> None: ...
    def barrier(self, timeout_s: float) -> None: ...
    def close(self) -> None: ...

class EngineOptions:
    connect: ConnectOptions
    cross_rank: int; cross_size: int
    fusion_threshold_bytes: int; fusion_max_tensor_bytes: int; cycle_time_ms: float; cache_capacity: int
    stall_check_s: float; stall_shutdown_s: float; stall_check_disable: bool
    timeline_path: str; timeline_mark_cycles: bool; timeout_s: float
    dynamic_process_sets: bool; process_sets: list; log_level: int
    gpu_path: str  # "auto", "nccl" or "staged": how CUDA collectives travel (csrc/backends/gpu_path.h)
    copy_path_adapt: str  # "auto", "off", "wide" or "narrow" (csrc/engine/copy_path_vote.h)
    allreduce_path_adapt: str  # "auto", "off", "single" or "ring" (csrc/engine/copy_path_vote.h)
    hierarchical_allreduce: int  # 1 on, 0 off, -1 chosen per size (csrc/algorithms/hierarchy.h)
    hierarchical_allgather: int
    host_name: str               # ranks with equal names share a host ("": gethostname())

class DeviceBuffer:
    # allgather/alltoall output of CUDA tensors: engine-owned device memory, flat uint8, wrapped without a
    # copy by torch.as_tensor / cupy.asarray through __cuda_array_interface__ (which keeps it alive).
    nbytes: int; device: int; ptr: int
    __cuda_array_interface__: dict

class Result:
    # numpy uint8 array owning the engine's output bytes (allgather/alltoall); a DeviceBuffer for CUDA requests
    output: Optional[Any]
    output_shape: list
    received_splits: list
    value: int

class SyncCall:
    # A prepared synchronous allreduce, broadcast, reducescatter, allgather or alltoall (equal splits)
    # (pyhorovod/_sync_calls.py): the request of `example` (its dtype object and shape) with everything
    # but the buffers filled in, checked by the engine now; keeps `engine` alive. inplace: allreduce and
    # broadcast only; out_shape: a reducescatter's output shape (this rank's block).
    def __init__(self, engine: "Engine", op_type: int, name: str, dtype: int, example: Any, reduce_op: int,
                 prescale: float, postscale: float, root: int, process_set: int, timeout_s: float,
                 inplace: bool, out_shape: Sequence[int] = ()) -> None: ...
    # Runs it on `input` (enqueue + wait, as Engine.run_sync) and returns the output (a new array, or
    # input itself in place; allgather/alltoall: an array owning the engine's bytes); None, doing
    # nothing, when input is not a numpy array of the example's dtype object and shape, C-contiguous (and
    # writable in place).
    def __call__(self, input: Any) -> Optional[Any]: ...
    # __call__ as a builtin function of one argument that keeps this SyncCall alive: the interpreter
    # calls it directly, without pybind11's dispatch (pyhorovod/_sync_calls.py files these). With busy
    # (a dict), the function first claims the synchronous name: busy.setdefault(claim, this thread's
    # ident), returning None without running when another thread holds it or when by_thread (a dict by
    # thread ident) has an entry of another thread; the claim is popped afterwards.
    def entry(self, busy: Optional[Dict[Any, int]] = None, by_thread: Optional[Dict[int, Any]] = None,
              claim: Any = None) -> Callable[[Any], Optional[Any]]: ...

class Engine:
    def __init__(self, options: EngineOptions) -> None: ...  # collective
    def enqueue(self, op_type: int, name: str, dtype: int, shape: Sequence[int], input_ptr: int,
                output_ptr: int, reduce_op: int = 0, prescale: float = 1.0, postscale: float = 1.0,
                root: int = 0, splits: Sequence[int] = (), process_set: int = 0, device: int = -1,
                group: int = 0, group_size: int = 0, timeout_s: float = 0.0, stream: int = 0,
                sumsq_in: int = 0, sumsq_out: int = 0, fill_from: int = 0) -> int: ...
    # sumsq_in/sumsq_out: addresses of float64 values (host float32/float64 allreduce only) to which the
    # engine adds |input|^2 at enqueue and |output|^2 once reduced (the noise-scale tap); fill_from: the
    # address of `count` float64 values copied into an in-place allreduce's buffer at enqueue.
    # device >= 0: input/output are CUDA pointers and stream the cudaStream_t they were written on
    # (0 = legacy default stream); builds without the GPU backend refuse the request (ValueError).
    # Python keeps the input/output objects alive until wait() returns (pyhorovod/_api.py's handle table).
    def poll(self, handle: int) -> bool: ...
    def wait(self, handle: int) -> Result: ...
    def run_sync(self, op_type: int, name: str, dtype: int, shape: Sequence[int], input: Any, output: Any,
                 reduce_op: int, prescale: float, postscale: float, root: int, process_set: int,
                 timeout_s: float, splits: Sequence[int] = ()) -> Optional[Result]: ...
    # enqueue + wait in one call (host buffers only, device -1; positional arguments are fastest): the
    # calling thread runs the negotiation round without waking the engine thread. input/output: an int
    # pointer or a C-contiguous buffer-protocol object (output writable; None for allgather/alltoall).
    # Returns None for an allreduce or broadcast into a given output (nothing to say beyond the output).
    def alltoall_sync(self, name: str, dtype: int, input: Any, splits: Sequence[int], process_set: int,
                      timeout_s: float) -> Any: ...
    # run_sync for a blocking alltoall of a C-contiguous numpy array with splits: returns (output array
    # owning the engine's bytes, received splits as an int32 array).
    def add_process_set(self, ranks: Sequence[int]) -> int: ...
    def remove_process_set(self, id: int) -> None: ...
    def process_set_ranks(self, id: int) -> list: ...
    def process_set_ids(self) -> list: ...
    def start_timeline(self, path: str, mark_cycles: bool) -> None: ...
    def stop_timeline(self) -> None: ...
    # Knobs for the requests submitted after the call; negative: unchanged (every rank, same point).
    def set_knobs(self, fusion_threshold_bytes: int = -1, cycle_time_ms: float = -1.0,
                  hierarchical_allreduce: int = -2, segment_bytes: int = -1) -> None: ...
    # host_of (host index per rank), the modes, and the flat/local/cross (alpha_s, beta) fits from init.
    def hierarchy(self) -> Dict[str, Any]: ...
    def shutdown(self) -> None: ...
    rank: int; size: int
    interrupted: bool  # a wait was interrupted: the engine stops; only shutdown() is left to call
