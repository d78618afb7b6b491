"""Where the rendezvous store is, who hosts it, the per-job secret, and which address we bind to.

The store (csrc/rendezvous/tcp_store.h) is where ranks publish their listening addresses at init. Cases,
in order:

1. PYHOROVOD_STORE_ADDR + PYHOROVOD_STORE_PORT (else HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT) are set: a store
   already runs there (hosted by `pyhorovod run` or tests/mp.py). The secret must be given too:
   PYHOROVOD_SECRET (the text, used as UTF-8 bytes) or PYHOROVOD_SECRET_FILE (its bytes, trailing
   newlines stripped). Horovod's own rendezvous server speaks a different protocol: the HOROVOD_GLOO_*
   names are accepted only for a pyhorovod store.
2. One process: it hosts a private store on 127.0.0.1 with a random secret.
3. torchrun variables: rank 0 hosts the store at MASTER_ADDR, port PYHOROVOD_STORE_PORT if set, else
   MASTER_PORT + 1 (MASTER_PORT itself belongs to torchrun's own store). The secret is PYHOROVOD_SECRET
   if set, else derived from MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID: that identifies the job
   but is not secret, exactly as torch.distributed's store is unauthenticated; set PYHOROVOD_SECRET on
   shared networks (rank 0 says so once, at init, when the ranks span hosts).
4. Open MPI or PMI variables (mpirun, mpiexec): rank 0 hosts the store on a free port and broadcasts
   host, port and a random secret through mpi4py (MPI_Bcast of a fixed-size JSON buffer, never pickle).
5. Otherwise: ValueError naming the variables to set.

Once the store is located, the secret leaves os.environ (PYHOROVOD_SECRET, PYHOROVOD_SECRET_FILE), so
that the training script's subprocesses do not inherit it; the Rendezvous keeps it for a re-init. A
file that the launcher marked as one-time (PYHOROVOD_SECRET_FILE_ONCE=1) is deleted once read.

Binding: loopback when every rank is on this host (local_size == size); otherwise the IPv4 address of
PYHOROVOD_IFACE / HOROVOD_GLOO_IFACE, else the address of the route towards the store. Never 0.0.0.0.
"""
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import socket
from typing import Mapping, Optional

from pyhorovod._config import first, get_int, get_str, store_limits

log = logging.getLogger("pyhorovod")
LOOPBACK = "127.0.0.1"
_MPI_BUF = 1024  # bytes of the broadcast record: JSON {"host", "port", "secret"} or {"error"}
SECRET_VARS = ("PYHOROVOD_SECRET", "PYHOROVOD_SECRET_FILE", "PYHOROVOD_SECRET_FILE_ONCE")
DERIVED_SECRET_HINT = (
    "pyhorovod: the ranks span hosts and no PYHOROVOD_SECRET is set, so the store's secret is derived from "
    "MASTER_ADDR and MASTER_PORT: any process that can read them can compute it, join the job or pose as a "
    "rank. Give every rank a real secret: PYHOROVOD_SECRET=<random text>, or PYHOROVOD_SECRET_FILE=<a 0600 "
    "file holding it>")


@dataclasses.dataclass
class Rendezvous:
    host: str
    port: int
    secret: bytes
    how: str               # "external", "private", "torchrun", "mpi4py"
    server: object = None  # the _core.TcpStoreServer when this process hosts the store

    def close(self):
        if self.server is not None:
            self.server.close()
            self.server = None


# The job secret as this process last read it. The variables leave os.environ once read (forget_secret),
# so a later locate() in this process -- another job of init(comm=...) on the same store -- finds it here.
_remembered_secret: Optional[bytes] = None


def read_secret(env: Mapping[str, str]) -> Optional[bytes]:
    global _remembered_secret
    secret = _secret_from(env)
    if secret is not None:
        _remembered_secret = secret
    elif env is os.environ:
        secret = _remembered_secret
    return secret


def use_secret(secret: bytes) -> None:
    """Gives this process the job secret without the environment (a launcher that starts ranks in
    processes it controls, as Ray actors): init() then uses it as if PYHOROVOD_SECRET had been read."""
    global _remembered_secret
    _remembered_secret = bytes(secret)


def _secret_from(env: Mapping[str, str]) -> Optional[bytes]:
    text = get_str(env, "PYHOROVOD_SECRET")
    if text is not None:
        return text.encode()
    path = get_str(env, "PYHOROVOD_SECRET_FILE")
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read().rstrip(b"\r\n")
    except OSError as e:
        raise ValueError(f"environment variable PYHOROVOD_SECRET_FILE={path!r}: cannot read it ({e})") from None
    if not data:
        raise ValueError(f"environment variable PYHOROVOD_SECRET_FILE={path!r}: the file is empty")
    return data


def forget_secret(env: Mapping[str, str]) -> None:
    """After a successful locate(): a one-time secret file is deleted (with its directory, once empty) and
    the secret variables leave os.environ."""
    path = get_str(env, "PYHOROVOD_SECRET_FILE")
    if path and get_str(env, "PYHOROVOD_SECRET_FILE_ONCE") == "1":
        for remove, target in ((os.unlink, path), (os.rmdir, os.path.dirname(path))):
            try:
                remove(target)
            except OSError:
                pass  # the directory still holds other ranks' files: the last rank (or launcher) removes it
    if env is os.environ:
        for name in SECRET_VARS:
            os.environ.pop(name, None)


def host_store(host: str, port: int, secret: bytes, env: Mapping[str, str]):
    """A _core.TcpStoreServer with the limits of the PYHOROVOD_STORE_* variables."""
    from pyhorovod import _core
    return _core.TcpStoreServer(host, port, secret, **store_limits(env))


def resolve_ipv4(host: str, var: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError as e:
        raise ValueError(f"{var}={host!r}: cannot resolve it to an IPv4 address ({e})") from None


def iface_address(iface: str) -> str:
    """IPv4 address of a network interface (Linux SIOCGIFADDR). Horovod allows "eth0,eth1": first wins."""
    import fcntl
    import struct

    name = iface.split(",")[0].strip()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
        except OSError:
            raise ValueError(f"PYHOROVOD_IFACE/HOROVOD_GLOO_IFACE={iface!r}: interface {name!r} has no "
                             f"IPv4 address") from None
    return socket.inet_ntoa(packed[20:24])


def route_address(host: Optional[str] = None, port: int = 9) -> str:
    """Our source address towards host (default: the default route). A UDP connect sends no packet."""
    target = host or "10.255.255.255"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, port or 9))
            addr = s.getsockname()[0]
    except OSError:
        addr = socket.gethostbyname(socket.gethostname())
    if addr.startswith("0."):
        raise ValueError("cannot find an address to bind to; set PYHOROVOD_IFACE to a network interface")
    return addr


def bind_address(local_size: Optional[int], size: int, iface: Optional[str], toward: Optional[str],
                 port: int = 9) -> str:
    if local_size is not None and local_size == size:
        return LOOPBACK
    if iface:
        return iface_address(iface)
    return route_address(toward, port)


def _no_store_error(source: str, extra: str = "") -> ValueError:
    return ValueError(
        f"pyhorovod.init(): rank variables come from {source}, but no rendezvous store address was given{extra}. "
        "Set PYHOROVOD_STORE_ADDR, PYHOROVOD_STORE_PORT and PYHOROVOD_SECRET (or PYHOROVOD_SECRET_FILE) "
        "to a running pyhorovod store (as `pyhorovod run` does), or launch with mpirun and install mpi4py, "
        "or with torchrun (MASTER_ADDR and MASTER_PORT).")


def has_store(env: Mapping[str, str]) -> bool:
    """Does the environment name a running store (case 1)?"""
    return first(env, ["PYHOROVOD_STORE_ADDR", "HOROVOD_GLOO_RENDEZVOUS_ADDR"]) is not None


def locate(info, config, env: Mapping[str, str], mpi_comm=None, port_offset: int = 0) -> Rendezvous:
    """Finds or creates the store for this job (collective under mpi4py and torchrun at rank 0).
    mpi_comm: the communicator of a job of some of the launched ranks (init(comm=...)); port_offset:
    such a job's torchrun store port lies this far above the default."""
    rdv = _find_store(info, config, env, mpi_comm, port_offset)
    forget_secret(env)
    return rdv


def _find_store(info, config, env: Mapping[str, str], mpi_comm, port_offset: int) -> Rendezvous:
    addr = first(env, ["PYHOROVOD_STORE_ADDR", "HOROVOD_GLOO_RENDEZVOUS_ADDR"])
    port_var = "PYHOROVOD_STORE_PORT" if get_str(env, "PYHOROVOD_STORE_PORT") else "HOROVOD_GLOO_RENDEZVOUS_PORT"
    port = get_int(env, port_var, minimum=1)
    if port is not None and port > 65535:
        raise ValueError(f"environment variable {port_var}={port} is not a TCP port")
    secret = read_secret(env)

    if addr is not None:
        if port is None:
            raise ValueError("PYHOROVOD_STORE_ADDR is set but PYHOROVOD_STORE_PORT is not")
        if secret is None:
            raise ValueError("PYHOROVOD_STORE_ADDR is set but neither PYHOROVOD_SECRET nor "
                             "PYHOROVOD_SECRET_FILE is: the store only talks to holders of the job secret")
        return Rendezvous(resolve_ipv4(addr, "PYHOROVOD_STORE_ADDR"), port, secret, "external")

    if info.size == 1:
        secret = secret or secrets.token_hex(16).encode()
        server = host_store(LOOPBACK, 0, secret, env)
        return Rendezvous(LOOPBACK, server.port, secret, "private", server)

    if info.source == "torchrun":
        master = get_str(env, "MASTER_ADDR")
        master_port = get_int(env, "MASTER_PORT", minimum=1)
        if master is None or master_port is None:
            raise _no_store_error("torchrun (RANK, WORLD_SIZE)", " and MASTER_ADDR/MASTER_PORT are not set")
        host = resolve_ipv4(master, "MASTER_ADDR")
        store_port = (port if port is not None else master_port + 1) + port_offset
        if secret is None:
            job = f"pyhorovod-torchrun:{master}:{master_port}:{get_str(env, 'TORCHELASTIC_RUN_ID') or ''}"
            secret = hashlib.sha256(job.encode()).hexdigest().encode()
            if info.rank == 0 and info.local_size != info.size:
                log.warning(DERIVED_SECRET_HINT)
            else:
                log.info("pyhorovod: no PYHOROVOD_SECRET set; the store secret is derived from the job id "
                         "(unauthenticated, like torch.distributed's store)")
        server = host_store(host, store_port, secret, env) if info.rank == 0 else None
        return Rendezvous(host, store_port, secret, "torchrun", server)

    if info.source in ("openmpi", "pmi"):
        return _share_via_mpi(info, config, port, env, mpi_comm)

    raise _no_store_error(info.source)


def _share_via_mpi(info, config, port: Optional[int], env: Mapping[str, str], comm=None) -> Rendezvous:
    try:
        from mpi4py import MPI
    except ImportError:
        raise _no_store_error(info.source, " and mpi4py is not importable to share rank 0's address") from None
    comm = MPI.COMM_WORLD if comm is None else comm
    if comm.Get_size() != info.size or comm.Get_rank() != info.rank:
        raise ValueError(f"mpi4py sees rank {comm.Get_rank()} of {comm.Get_size()} but the environment says "
                         f"{info.rank} of {info.size} ({info.source}); is mpi4py built for this MPI?")
    buf = bytearray(_MPI_BUF)
    server = None
    if info.rank == 0:
        # Rank 0 must broadcast even when it fails: the others block in MPI_Bcast, which has no timeout.
        try:
            host = bind_address(info.local_size, info.size, config.iface, None)
            secret = secrets.token_hex(16)
            server = host_store(host, port or 0, secret.encode(), env)
            record = {"host": host, "port": server.port, "secret": secret}
        except Exception as e:  # noqa: BLE001 -- forwarded to every rank, then re-raised here
            record = {"error": f"rank 0 could not host the rendezvous store: {e}"}
        data = json.dumps(record).encode()
        buf[:len(data)] = data
    comm.Bcast([buf, MPI.BYTE], root=0)
    record = json.loads(bytes(buf).rstrip(b"\0").decode())
    if "error" in record:
        raise ValueError(record["error"])
    log.debug("pyhorovod: store at %s:%d shared through mpi4py", record["host"], record["port"])
    return Rendezvous(record["host"], int(record["port"]), record["secret"].encode(), "mpi4py", server)
