"""`pyhorovod run --mpi`: delegate process start-up to Open MPI's mpirun.

mpirun starts the ranks (locally or through its own ssh/batch-system plumbing) and tells each its rank
through OMPI_COMM_WORLD_* variables, which pyhorovod's bootstrap reads. The launcher still hosts the
rendezvous store, so ranks need neither mpi4py nor a fixed port: its address, port and the secret reach the
ranks as `-x NAME` (export by name: mpirun copies the value from its own environment, so the secret is
not on mpirun's command line). mpirun itself provides fail-fast and output tagging (`--tag-output`); the
launcher reads mpirun's output and reassembles each rank's lines (output.MpiTaggedDemux), since mpirun tags
every write, not every line, and lines written in pieces would otherwise run together.
"""
from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import threading
from typing import Dict, List, Optional, Sequence, Set

from . import output
from .hosts import HostSpec
from .launch import start_store

# After mpirun was asked to stop (it forwards SIGTERM to the ranks), how long before it is killed.
STOP_GRACE_S = 10.0


def mpirun_argv(np: int, hosts: Optional[Sequence[HostSpec]], export_names: Sequence[str],
                command: Sequence[str], network_interfaces: Sequence[str] = (),
                extra_args: str = "", as_root: bool = False, mpirun: str = "mpirun",
                output_dir: Optional[str] = None, binding_args: Optional[str] = None) -> List[str]:
    argv = [mpirun]
    if as_root:
        argv.append("--allow-run-as-root")
    binding = shlex.split(binding_args) if binding_args else ["--bind-to", "none", "--map-by", "slot"]
    argv += ["-np", str(np), *binding, "--tag-output"]
    if hosts:
        argv += ["-H", ",".join(f"{h.hostname}:{h.slots}" for h in hosts)]
    else:
        argv.append("--oversubscribe")  # one host, more ranks than cores is a common test set-up
    if network_interfaces:
        ifaces = ",".join(network_interfaces)
        argv += ["--mca", "btl_tcp_if_include", ifaces, "--mca", "oob_tcp_if_include", ifaces]
    if output_dir:
        argv += ["--output-filename", output_dir]  # Open MPI: DIR/1/rank.N/{stdout,stderr}
    for name in export_names:
        argv += ["-x", name]
    argv += shlex.split(extra_args)
    argv += list(command)
    return argv


def run_mpi(np: int, hosts: Optional[Sequence[HostSpec]], command: Sequence[str], bind_host: str,
            knobs: Dict[str, str], network_interfaces: Sequence[str] = (), extra_args: str = "",
            verbose: bool = False, output_dir: Optional[str] = None, binding_args: Optional[str] = None,
            prefix_timestamp: bool = False, console_ranks: Optional[Set[int]] = None) -> int:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("--mpi needs `mpirun` (Open MPI) on PATH")
    secret_hex = secrets.token_hex(32)
    store = start_store(bind_host, secret_hex.encode())
    try:
        env = dict(os.environ)
        env.update(knobs)
        env.update({"PYHOROVOD_STORE_ADDR": bind_host, "PYHOROVOD_STORE_PORT": str(store.port),
                    "PYHOROVOD_SECRET": secret_hex})
        names = sorted(set(knobs) | {"PYHOROVOD_STORE_ADDR", "PYHOROVOD_STORE_PORT", "PYHOROVOD_SECRET"})
        argv = mpirun_argv(np, hosts, names, command, network_interfaces, extra_args,
                           as_root=os.geteuid() == 0, mpirun=mpirun, output_dir=output_dir,
                           binding_args=binding_args)
        if verbose:
            print(f"[pyhorovod] {' '.join(shlex.quote(a) for a in argv)}", flush=True)
        return _run_mpirun(argv, env, prefix_timestamp, console_ranks)
    finally:
        store.close()


def _run_mpirun(argv: List[str], env: Dict[str, str], prefix_timestamp: bool = False,
                console_ranks: Optional[Set[int]] = None) -> int:
    """Runs mpirun with its output relayed line by line; SIGTERM to the launcher is passed on to mpirun
    (which passes it to the ranks); Ctrl-C reaches mpirun from the terminal by itself."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pumps = [output.pump_mpi_stream(proc.stdout, output.stdout_sink(), prefix_timestamp, console_ranks),
             output.pump_mpi_stream(proc.stderr, output.stderr_sink(), prefix_timestamp, console_ranks)]
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda signum, _frame: proc.send_signal(signum))
    try:
        code = proc.wait()
    except BaseException:  # KeyboardInterrupt: stop mpirun (and so the ranks) before leaving
        proc.terminate()
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        for pump in pumps:
            # mpirun has exited, so its pipes reach EOF unless a rank's orphan holds them: do not wait long.
            pump.join(5.0)
    return code
