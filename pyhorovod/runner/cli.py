"""Command line: `pyhorovod run ...` (also `horovodrun ...` and `python -m pyhorovod.run ...`),
`pyhorovod sweep ...` (pyhorovod.scaling.sweep) and `pyhorovod horovodrun-alias`; `python -m pyhorovod`
is `pyhorovod`.

The tuning flags are Horovod's and become the environment variables Horovod's own launcher exports, so a
rank reads the same names whichever way it was started."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Dict, List, Optional, Set

from pyhorovod import _compat as horovod_alias
from pyhorovod._config import Config, store_limits
from pyhorovod._knobs import BY_NAME as KNOBS

from . import autoscale_option, config_file, elastic_flags, horovod_flags, output, remote
from . import hosts as hostlib
from .launch import LaunchOptions, run_job

DEFAULT_START_TIMEOUT = KNOBS["HOROVOD_START_TIMEOUT"].default


def build_parser(prog: str = "pyhorovod run") -> argparse.ArgumentParser:
    # allow_abbrev=False: only whole flag names. An abbreviation valid for horovodrun may be ambiguous
    # among pyhorovod's flags (or mean another flag), and a new flag would break abbreviations that worked.
    p = argparse.ArgumentParser(
        prog=prog, allow_abbrev=False, description="Start a pyhorovod (Horovod-style) job: np ranks of COMMAND.",
        epilog="example: pyhorovod run -np 4 -H host1:2,host2:2 python train.py")
    p.add_argument("-v", "--version", action="store_true", help="print pyhorovod's version and exit")
    p.add_argument("-np", "--num-proc", dest="np", type=int, help="number of ranks (default: all slots)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", help="host1:slots,host2:slots (default localhost:np)")
    where.add_argument("-hostfile", "--hostfile", dest="hostfile", help="file with one 'hostname slots=N' per line")
    p.add_argument("--network-interfaces", "--network-interface", dest="network_interfaces",
                   default=os.environ.get("PYHOROVOD_IFACE") or os.environ.get("HOROVOD_GLOO_IFACE"),
                   help="comma-separated interfaces to use between hosts; the store and every rank bind "
                        "to the first one (default: env PYHOROVOD_IFACE or HOROVOD_GLOO_IFACE)")
    p.add_argument("--start-timeout", type=float,
                   help="seconds for every rank to reach rendezvous (init) after the launch (env "
                        "HOROVOD_START_TIMEOUT). Unset: 30 s after the first rank reached it")
    p.add_argument("--output-filename",
                   help="directory: each rank's output also goes, as the rank wrote it, to "
                        "DIR/rank.N/{stdout,stderr} (a tee: the console shows it too; every rank, whatever "
                        "--ranks-filter says)")
    p.add_argument("--ranks-filter", metavar="RANKS",
                   help="only these ranks' output reaches the console: a rank or a comma-separated list "
                        "(0 or 0,2); the launcher's own messages, a failing rank's last lines included, always do")
    p.add_argument("--verbose", action="store_true", help="print what the launcher does")
    p.add_argument("-cb", "--check-build", action="store_true", help="print what pyhorovod was built with and exit")
    p.add_argument("--config-file", help="Horovod's YAML file of launcher settings (flags given here win)")
    p.add_argument("--max-restarts", type=int, default=0,
                   help="restart the whole job up to N times after a failure (exports PYHOROVOD_RESTART_COUNT)")
    controller = p.add_mutually_exclusive_group()
    controller.add_argument("--gloo", action="store_true",
                            help="pyhorovod's own launcher and TCP controller (the default; there is no Gloo)")
    controller.add_argument("--mpi", action="store_true", help="start the ranks with Open MPI's mpirun")
    controller.add_argument("--jsrun", action="store_true", help="not supported (IBM jsrun)")
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
    horovod_flags.add_flags(p)
    elastic_flags.add_flags(p)
    autoscale_option.add_flags(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program each rank runs, with its arguments")
    return p


def knob_env(args: argparse.Namespace) -> Dict[str, str]:
    """Flags -> environment variables for every rank (only flags the user gave)."""
    env = horovod_flags.knob_env(args)
    if args.network_interfaces:
        env["HOROVOD_GLOO_IFACE"] = interfaces(args)[0]
        env["PYHOROVOD_IFACE"] = interfaces(args)[0]
    if horovod_alias.wanted(args.horovod_compat, os.environ):
        env["PYTHONPATH"] = horovod_alias.python_path(os.environ.get("PYTHONPATH"))
    return env


def interfaces(args: argparse.Namespace) -> List[str]:
    return [s.strip() for s in (args.network_interfaces or "").split(",") if s.strip()]


def print_version() -> int:
    from pyhorovod import __version__
    print(__version__)
    return 0


def check_build() -> int:
    try:
        import pyhorovod
        info = pyhorovod.build_info()
    except Exception as e:  # noqa: BLE001 -- the point is to report any import problem
        print(f"pyhorovod: cannot load the extension: {type(e).__name__}: {e}")
        return 1
    import shutil

    def mark(on) -> str:
        return "X" if on else " "
    print(f"pyhorovod v{info.get('version', '?')}:")
    print("\nAvailable frameworks:")
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    print(f"    [{mark(have_torch)}] PyTorch (pyhorovod.torch)")
    print("    [ ] TensorFlow\n    [ ] MXNet")
    print("\nAvailable controllers (who negotiates which tensors are ready):")
    print("    [X] pyhorovod's own, over TCP")
    print("    [ ] MPI (no MPI library is linked; mpirun can only start the ranks, with --mpi"
          f"{', found' if shutil.which('mpirun') else ', not found'})")
    print("    [ ] Gloo")
    print("\nAvailable tensor operations:")
    print("    [X] TCP ring")
    print(f"    [{mark(info.get('shm'))}] shared memory between the ranks of a host")
    # build_info's nccl is what is linked in (gpu_backend_built()), not a compile-time wish.
    print(f"    [{mark(info.get('nccl'))}] NCCL (CUDA tensors; "
          f"{'GPU backend built' if info.get('nccl') else 'not built: PYHOROVOD_WITH_NCCL=ON to require it'})")
    print("    [ ] MPI\n    [ ] Gloo\n    [ ] CCL\n    [ ] DDL")
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


def parse_ranks_filter(text: Optional[str], np: int) -> Optional[Set[int]]:
    """--ranks-filter "0,2" -> {0, 2}; None when not given."""
    if text is None:
        return None
    try:
        ranks = {int(part, 10) for part in text.split(",")}
    except ValueError:
        raise ValueError(f"--ranks-filter takes ranks separated by commas (e.g. 0 or 0,2), got {text!r}") from None
    outside = sorted(r for r in ranks if not 0 <= r < np)
    if outside:
        raise ValueError(f"--ranks-filter names rank(s) {outside}, but the job has ranks 0 to {np - 1}")
    return ranks


def check_rank_env(knobs: Dict[str, str]) -> None:
    """Parses the variables every rank will see, with the code the ranks use (Config.from_env at init(),
    store_limits for the stores), so that a bad value is one ValueError here and not a traceback on
    every rank."""
    env = dict(os.environ)
    env.update(knobs)
    Config.from_env(env)
    store_limits(env)


def run_command(argv: Optional[List[str]], prog: str = "pyhorovod run",
                extra_env: Optional[Callable[[str], Dict[str, str]]] = None) -> int:
    """The launcher. extra_env: called with the rendezvous store's address once the flags are checked,
    just before the ranks start; the variables it returns reach every rank (pyhorovod.run uses it)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.version:
        return print_version()
    if args.check_build:
        return check_build()
    if args.config_file:
        try:
            parser.set_defaults(**config_file.load(args.config_file))
        except ValueError as e:
            output.emit(f"error: {e}")
            return 2
        args = parser.parse_args(argv)
    if args.jsrun:
        output.emit("error: --jsrun is not supported; use pyhorovod's own launcher (the default) or --mpi")
        return 2
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("missing the command each rank runs (e.g. python train.py)")
    if elastic_flags.wanted(args):
        return _run_elastic(args, command, extra_env)
    try:
        autoscale_option.check(args)   # --autoscale without the elastic range it moves in
    except ValueError as e:
        output.emit(f"error: {e}")
        return 2
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
        env_timeout = KNOBS["HOROVOD_START_TIMEOUT"].read(os.environ)
        strict = args.start_timeout is not None or env_timeout is not None
        start_timeout = args.start_timeout
        if start_timeout is None:
            start_timeout = env_timeout if env_timeout is not None else DEFAULT_START_TIMEOUT
        if start_timeout <= 0:
            raise ValueError(f"--start-timeout must be > 0, got {start_timeout}")
        slots = hostlib.assign_slots(host_specs, np)
        addresses = hostlib.local_addresses()
        local = {h.hostname for h in host_specs if hostlib.is_local(h.hostname, addresses)}
        console_ranks = parse_ranks_filter(args.ranks_filter, np)
        kill_grace = KNOBS["PYHOROVOD_KILL_GRACE_SECONDS"].read(os.environ)
        knobs = knob_env(args)
        check_rank_env(knobs)
        for note in horovod_flags.inert_notes(args):
            output.emit(note)
        bind_host = _store_host(args, [h for h in host_specs if h.hostname in {s.hostname for s in slots}], local)
        if extra_env is not None:
            knobs.update(extra_env(bind_host))
        if args.mpi:
            from .mpi import run_mpi
            return run_mpi(np, None if not (args.hosts or args.hostfile) else host_specs, command, bind_host,
                           knobs, interfaces(args), args.mpi_args, args.verbose, args.output_filename,
                           binding_args=args.binding_args, prefix_timestamp=args.prefix_timestamp,
                           console_ranks=console_ranks)
        opts = LaunchOptions(
            command=command, slots=slots, local_hosts=sorted(local), bind_host=bind_host, env=knobs,
            start_timeout_s=start_timeout, start_timeout_strict=strict, output_dir=args.output_filename,
            console_ranks=console_ranks, verbose=args.verbose,
            prefix_timestamp=args.prefix_timestamp,
            max_restarts=args.max_restarts,
            agent=remote.agent_argv(args.rsh_agent, args.ssh_port, args.ssh_identity_file),
            secret_in_file=args.secret_file,
            kill_grace_s=3.0 if kill_grace is None else kill_grace)
    except (ValueError, RuntimeError, OSError) as e:
        output.emit(f"error: {e}")
        return 2
    return _run_reporting(run_job, opts)


def _run_reporting(run, opts) -> int:
    """run(opts), with a RuntimeError reported as the launcher's error (exit status 1)."""
    try:
        return run(opts)
    except RuntimeError as e:
        output.emit(f"error: {e}")
        return 1


def _run_elastic(args, command: List[str], extra_env) -> int:
    from .elastic_driver import ElasticOptions, run_elastic
    discovery = None
    try:
        if args.mpi:
            raise ValueError("--mpi cannot start an elastic job: mpirun's jobs have a fixed size")
        if args.max_restarts:
            raise ValueError("--max-restarts and elastic flags exclude each other: an elastic job re-forms "
                             "itself after a failure instead of restarting")
        host_specs = None
        if args.hostfile:
            host_specs = hostlib.parse_hostfile(args.hostfile)
        elif args.hosts:
            host_specs = hostlib.parse_hosts(args.hosts)
        autoscale_option.check(args)
        np, min_np, max_np, timeout, discovery = elastic_flags.options(args, host_specs)
        local = hostlib.LocalHosts()
        initial = [hostlib.HostSpec(h, n) for h, n in discovery.current().items()]
        bind_host = _store_host(args, initial, {h.hostname for h in initial if h.hostname in local})
        knobs = knob_env(args)
        knobs.update(autoscale_option.worker_env(args, discovery.current()))
        check_rank_env(knobs)
        for note in horovod_flags.inert_notes(args):
            output.emit(note)
        if extra_env is not None:
            knobs.update(extra_env(bind_host))
        kill_grace = KNOBS["PYHOROVOD_KILL_GRACE_SECONDS"].read(os.environ)
        launch = LaunchOptions(
            command=command, slots=[], local_hosts=local, bind_host=bind_host, env=knobs,
            output_dir=args.output_filename, console_ranks=parse_ranks_filter(args.ranks_filter, 1 << 30),
            verbose=args.verbose, prefix_timestamp=args.prefix_timestamp,
            agent=remote.agent_argv(args.rsh_agent, args.ssh_port, args.ssh_identity_file),
            secret_in_file=args.secret_file, kill_grace_s=3.0 if kill_grace is None else kill_grace)
        opts = ElasticOptions(launch=launch, discovery=discovery, np=np, min_np=min_np, max_np=max_np,
                              elastic_timeout_s=timeout, reset_limit=args.reset_limit,
                              cooldown_range=tuple(args.blacklist_cooldown_range)
                              if args.blacklist_cooldown_range else None,
                              reset_timeout_s=elastic_flags.reset_timeout_s(os.environ),
                              autoscaled=getattr(args, "autoscale", None) is not None)
    except (ValueError, RuntimeError, OSError) as e:
        if discovery is not None:
            discovery.close()
        output.emit(f"error: {e}")
        return 2
    return _run_reporting(run_elastic, opts)


SUBCOMMANDS = [
    ("run", "start a job: N ranks of a command, with rendezvous, prefixed output and fail-fast "
            "(pyhorovod run --help)"),
    ("sweep", "steps-to-result sweep over batch sizes (pyhorovod.scaling.sweep; pyhorovod sweep --help)"),
    ("horovodrun-alias", "write (or --remove) an opt-in `horovodrun` command that runs pyhorovod run"),
]


def main_help() -> str:
    width = max(len(name) for name, _ in SUBCOMMANDS)
    lines = [f"usage: pyhorovod {{{','.join(n for n, _ in SUBCOMMANDS)}}} ...",
             "       pyhorovod --version | --check-build | --help", "",
             "Horovod-style data-parallel training: the launcher and its tools.", "", "subcommands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, text in SUBCOMMANDS]
    lines += ["", "options:", "  -h, --help         this text", "  -v, --version      pyhorovod's version",
              "  -cb, --check-build what pyhorovod was built with"]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """`pyhorovod SUBCOMMAND ...` (also `python -m pyhorovod`): SUBCOMMANDS above."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(main_help(), file=sys.stderr)
        return 2
    sub, rest = argv[0], argv[1:]
    if sub in ("-h", "--help"):
        print(main_help())
        return 0
    if sub == "run":
        return run_command(rest)
    if sub == "sweep":
        try:
            from pyhorovod.scaling.sweep import main as sweep_main
        except ImportError as e:
            print(f"pyhorovod sweep is not available: {e}", file=sys.stderr)
            return 2
        return sweep_main(rest)
    if sub == "horovodrun-alias":
        from .horovodrun_alias import main as alias_main
        return alias_main(rest)
    if sub in ("--check-build", "-cb"):
        return check_build()
    if sub in ("--version", "-v"):
        return print_version()
    print(f"pyhorovod: unknown subcommand {sub!r} (pyhorovod --help lists them)", file=sys.stderr)
    return 2


def horovodrun_main(argv: Optional[List[str]] = None) -> int:
    """`horovodrun ...`: Horovod's launcher name, the same as `pyhorovod run ...`."""
    return run_command(list(sys.argv[1:] if argv is None else argv), prog="horovodrun")


if __name__ == "__main__":
    sys.exit(main())
