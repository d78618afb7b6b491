"""Command line: `pyhorovod run ...` (also `horovodrun ...` and `python -m pyhorovod.run ...`) and
`pyhorovod sweep ...` (pyhorovod.scaling.sweep).

The tuning flags are Horovod's and become the environment variables Horovod's own launcher exports, so a
rank reads the same names whichever way it was started."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional

from pyhorovod import _compat as horovod_alias

from . import hosts as hostlib
from . import output, remote
from .launch import LaunchOptions, run_job

DEFAULT_START_TIMEOUT = 30.0
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")


def build_parser(prog: str = "pyhorovod run") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Start a pyhorovod (Horovod-style) job: np ranks of COMMAND.",
        epilog="example: pyhorovod run -np 4 -H host1:2,host2:2 python train.py")
    p.add_argument("-np", "--num-proc", dest="np", type=int, help="number of ranks (default: all slots)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", help="host1:slots,host2:slots (default localhost:np)")
    where.add_argument("--hostfile", help="file with one 'hostname slots=N' per line")
    p.add_argument("--network-interfaces", "--network-interface", dest="network_interfaces",
                   default=os.environ.get("PYHOROVOD_IFACE") or os.environ.get("HOROVOD_GLOO_IFACE"),
                   help="comma-separated interfaces to use between hosts; the store and every rank bind "
                        "to the first one (default: env PYHOROVOD_IFACE or HOROVOD_GLOO_IFACE)")
    p.add_argument("--start-timeout", type=float,
                   help="seconds for every rank to reach rendezvous (init) after the launch (env "
                        "HOROVOD_START_TIMEOUT). Unset: 30 s after the first rank reached it")
    p.add_argument("--output-filename", help="directory: each rank's output also goes to DIR/rank.N/{stdout,stderr}")
    p.add_argument("--verbose", action="store_true", help="print what the launcher does")
    p.add_argument("--check-build", action="store_true", help="print what pyhorovod was built with and exit")
    p.add_argument("--max-restarts", type=int, default=0,
                   help="restart the whole job up to N times after a failure (exports PYHOROVOD_RESTART_COUNT)")
    p.add_argument("--mpi", action="store_true", help="start the ranks with Open MPI's mpirun")
    p.add_argument("--mpi-args", default="", help="extra arguments for mpirun (with --mpi)")
    p.add_argument("--horovod-compat", action="store_true",
                   help="ranks can `import horovod` (pyhorovod under Horovod's name; also PYHOROVOD_HOROVOD_COMPAT=1)")
    p.add_argument("--secret-file", action="store_true",
                   help="hand the job secret to local ranks in a 0600 file instead of the environment")
    ssh = p.add_argument_group("remote hosts")
    ssh.add_argument("-p", "--ssh-port", type=int, help="ssh port on the remote hosts")
    ssh.add_argument("-i", "--ssh-identity-file", help="ssh identity (private key) file")
    ssh.add_argument("--rsh-agent", default=os.environ.get("PYHOROVOD_RSH_AGENT"),
                     help="command used instead of ssh, called as AGENT HOST COMMAND (env PYHOROVOD_RSH_AGENT)")
    t = p.add_argument_group("tuning (Horovod's flags and environment variables)")
    t.add_argument("--fusion-threshold-mb", type=float, help="HOROVOD_FUSION_THRESHOLD, in MiB")
    t.add_argument("--cycle-time-ms", type=float, help="HOROVOD_CYCLE_TIME")
    t.add_argument("--cache-capacity", type=int, help="HOROVOD_CACHE_CAPACITY (responses cached)")
    t.add_argument("--disable-cache", action="store_true", help="HOROVOD_CACHE_CAPACITY=0")
    t.add_argument("--timeline-filename", help="HOROVOD_TIMELINE: Chrome-trace timeline written by rank 0")
    t.add_argument("--timeline-mark-cycles", action="store_true", help="HOROVOD_TIMELINE_MARK_CYCLES=1")
    t.add_argument("--no-stall-check", "--disable-stall-check", dest="no_stall_check", action="store_true",
                   help="HOROVOD_STALL_CHECK_DISABLE=1")
    t.add_argument("--stall-check-warning-time-seconds", type=float, help="HOROVOD_STALL_CHECK_TIME_SECONDS")
    t.add_argument("--stall-check-shutdown-time-seconds", type=float, help="HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")
    t.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper, help="HOROVOD_LOG_LEVEL")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program each rank runs, with its arguments")
    return p


def knob_env(args: argparse.Namespace) -> Dict[str, str]:
    """Tuning flags -> environment variables for every rank (only flags the user gave)."""
    env: Dict[str, str] = {}

    def pos(name: str, value, minimum=0.0):
        if value is not None and value < minimum:
            raise ValueError(f"--{name} must be >= {minimum}, got {value}")

    pos("fusion-threshold-mb", args.fusion_threshold_mb)
    pos("cycle-time-ms", args.cycle_time_ms)
    pos("cache-capacity", args.cache_capacity)
    if args.fusion_threshold_mb is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        env["HOROVOD_CYCLE_TIME"] = f"{args.cycle_time_ms:g}"
    if args.cache_capacity is not None:
        env["HOROVOD_CACHE_CAPACITY"] = str(args.cache_capacity)
    if args.disable_cache:
        env["HOROVOD_CACHE_CAPACITY"] = "0"
    if args.timeline_filename:
        env["HOROVOD_TIMELINE"] = os.path.abspath(args.timeline_filename)
    if args.timeline_mark_cycles:
        env["HOROVOD_TIMELINE_MARK_CYCLES"] = "1"
    if args.no_stall_check:
        env["HOROVOD_STALL_CHECK_DISABLE"] = "1"
    if args.stall_check_warning_time_seconds is not None:
        env["HOROVOD_STALL_CHECK_TIME_SECONDS"] = f"{args.stall_check_warning_time_seconds:g}"
    if args.stall_check_shutdown_time_seconds is not None:
        env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = f"{args.stall_check_shutdown_time_seconds:g}"
    if args.log_level:
        env["HOROVOD_LOG_LEVEL"] = args.log_level
    if args.network_interfaces:
        env["HOROVOD_GLOO_IFACE"] = interfaces(args)[0]
        env["PYHOROVOD_IFACE"] = interfaces(args)[0]
    if horovod_alias.wanted(args.horovod_compat, os.environ):
        env["PYTHONPATH"] = horovod_alias.python_path(os.environ.get("PYTHONPATH"))
    return env


def interfaces(args: argparse.Namespace) -> List[str]:
    return [s.strip() for s in (args.network_interfaces or "").split(",") if s.strip()]


def check_build() -> int:
    try:
        import pyhorovod
        info = pyhorovod.build_info()
    except Exception as e:  # noqa: BLE001 -- the point is to report any import problem
        print(f"pyhorovod: cannot load the extension: {type(e).__name__}: {e}")
        return 1
    import shutil
    print(f"pyhorovod v{info.get('version', '?')}:")
    print("\nAvailable frameworks:")
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    print(f"    [{'X' if have_torch else ' '}] PyTorch")
    print("\nAvailable controllers:")
    print("    [X] pyhorovod (TCP store)")
    print(f"    [{'X' if shutil.which('mpirun') else ' '}] MPI (mpirun, with --mpi)")
    print("\nAvailable tensor operations:")
    print("    [X] TCP ring")
    print(f"    [{'X' if info.get('shm') else ' '}] shared memory")
    # build_info's nccl is what is linked in (gpu_backend_built()), not a compile-time wish.
    print(f"    [{'X' if info.get('nccl') else ' '}] NCCL (CUDA tensors; "
          f"{'GPU backend built' if info.get('nccl') else 'not built: PYHOROVOD_WITH_NCCL=ON to require it'})")
    print("\nBuild:")
    for key in sorted(info):
        print(f"    {key}: {info[key]}")
    return 0


def _store_host(args, host_specs, local: set) -> str:
    """Address the rendezvous store binds to: loopback when all ranks are here, else the chosen
    interface's address, else the address this host uses to reach the first remote host."""
    ifaces = interfaces(args)
    if ifaces:
        return hostlib.interface_address(ifaces[0])
    remote_hosts = [h.hostname for h in host_specs if h.hostname not in local]
    if not remote_hosts:
        return "127.0.0.1"
    return hostlib.route_source_address(remote_hosts[0])


def run_command(argv: Optional[List[str]], prog: str = "pyhorovod run") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.check_build:
        return check_build()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("missing the command each rank runs (e.g. python train.py)")
    try:
        if args.hostfile:
            host_specs = hostlib.parse_hostfile(args.hostfile)
        elif args.hosts:
            host_specs = hostlib.parse_hosts(args.hosts)
        else:
            if args.np is None:
                parser.error("-np is required when no hosts are given")
            host_specs = [hostlib.HostSpec("localhost", args.np)]
        np = args.np if args.np is not None else sum(h.slots for h in host_specs)
        if args.max_restarts < 0:
            raise ValueError(f"--max-restarts must be >= 0, got {args.max_restarts}")
        strict = args.start_timeout is not None or bool(os.environ.get("HOROVOD_START_TIMEOUT"))
        start_timeout = args.start_timeout
        if start_timeout is None:
            start_timeout = float(os.environ.get("HOROVOD_START_TIMEOUT") or DEFAULT_START_TIMEOUT)
        if start_timeout <= 0:
            raise ValueError(f"--start-timeout must be > 0, got {start_timeout}")
        slots = hostlib.assign_slots(host_specs, np)
        addresses = hostlib.local_addresses()
        local = {h.hostname for h in host_specs if hostlib.is_local(h.hostname, addresses)}
        knobs = knob_env(args)
        bind_host = _store_host(args, [h for h in host_specs if h.hostname in {s.hostname for s in slots}], local)
        if args.mpi:
            from .mpi import run_mpi
            return run_mpi(np, None if not (args.hosts or args.hostfile) else host_specs, command, bind_host,
                           knobs, interfaces(args), args.mpi_args, args.verbose, args.output_filename)
        opts = LaunchOptions(
            command=command, slots=slots, local_hosts=sorted(local), bind_host=bind_host, env=knobs,
            start_timeout_s=start_timeout, start_timeout_strict=strict, output_dir=args.output_filename, verbose=args.verbose,
            max_restarts=args.max_restarts,
            agent=remote.agent_argv(args.rsh_agent, args.ssh_port, args.ssh_identity_file),
            secret_in_file=args.secret_file,
            kill_grace_s=float(os.environ.get("PYHOROVOD_KILL_GRACE_SECONDS", 3.0)))
    except (ValueError, RuntimeError, OSError) as e:
        output.emit(f"error: {e}")
        return 2
    try:
        return run_job(opts)
    except RuntimeError as e:
        output.emit(f"error: {e}")
        return 1


def main(argv: Optional[List[str]] = None) -> int:
    """`pyhorovod SUBCOMMAND ...`: `run` (the launcher) or `sweep` (pyhorovod.scaling.sweep)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: pyhorovod {run,sweep} ...   (pyhorovod run --help)"
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        return 0 if argv else 2
    sub, rest = argv[0], argv[1:]
    if sub == "run":
        return run_command(rest)
    if sub == "sweep":
        try:
            from pyhorovod.scaling.sweep import main as sweep_main
        except ImportError as e:
            print(f"pyhorovod sweep is not available: {e}", file=sys.stderr)
            return 2
        return sweep_main(rest)
    if sub == "--check-build":
        return check_build()
    print(f"pyhorovod: unknown subcommand {sub!r}\n{usage}", file=sys.stderr)
    return 2


def horovodrun_main(argv: Optional[List[str]] = None) -> int:
    """`horovodrun ...`: Horovod's launcher name, the same as `pyhorovod run ...`."""
    return run_command(list(sys.argv[1:] if argv is None else argv), prog="horovodrun")


if __name__ == "__main__":
    sys.exit(main())
