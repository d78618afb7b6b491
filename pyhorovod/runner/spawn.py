"""Starting one rank (or elastic worker) of a job: locally, or on a remote host through the rsh agent,
with its variables, the secret (environment, 0600 file or ssh's stdin -- never a command line) and its
output pumps. Shared by the fixed-size launcher (launch.py) and the elastic driver (elastic_driver.py)."""
from __future__ import annotations

import os
import subprocess
import threading
from typing import Callable, Dict, Optional

from . import output, remote
from .hosts import SlotInfo
from .ranks import RankProcess, feed, start_rank_process


def spawn_rank(opts, slot: SlotInfo, job_env: Dict[str, str], secret_hex: str, wake: threading.Event,
               on_output_closed: Callable[[], None], secret_dir: Optional[str] = None,
               header: Optional[str] = None) -> RankProcess:
    """opts: the LaunchOptions (command, local_hosts, output settings, agent, cwd). slot.rank is the number
    the output is prefixed with. secret_dir: the directory of per-rank secret files (local ranks get
    theirs through a file instead of the environment). header: a line at the top of the rank's log files."""
    is_remote = slot.hostname not in opts.local_hosts
    logs = [None, None]
    if opts.output_dir:
        d = output.rank_log_dir(opts.output_dir, slot.rank)
        logs = [os.path.join(d, "stdout"), os.path.join(d, "stderr")]
    if is_remote:
        env = remote.forwardable_env(os.environ)
        env.update(job_env)
        env["PYHOROVOD_SECRET"] = secret_hex  # travels on ssh's stdin, see remote.py
        argv = remote.ssh_argv(opts.agent, slot.hostname, opts.command, opts.cwd)
        proc = start_rank_process(argv, stdin=subprocess.PIPE)
        # On a thread: an agent that does not read (ssh still connecting) must not block the launcher.
        threading.Thread(target=feed, args=(proc.stdin, remote.stdin_payload(env)), daemon=True).start()
    else:
        env = dict(os.environ)
        env.pop("PYHOROVOD_SECRET", None)
        env.pop("PYHOROVOD_SECRET_FILE", None)
        env.pop("PYHOROVOD_SECRET_FILE_ONCE", None)
        env.update(job_env)
        if secret_dir:
            env["PYHOROVOD_SECRET_FILE"] = os.path.join(secret_dir, f"secret.{slot.rank}")
            env["PYHOROVOD_SECRET_FILE_ONCE"] = "1"
        else:
            env["PYHOROVOD_SECRET"] = secret_hex
        argv = list(opts.command)
        proc = start_rank_process(argv, stdin=subprocess.DEVNULL, env=env, cwd=opts.cwd)
    output.emit(f"rank {slot.rank} on {slot.hostname} ({'remote' if is_remote else 'local'}, "
                f"pid {proc.pid}): {argv!r}", verbose_only=True, verbose=opts.verbose)
    shown = opts.console_ranks is None or slot.rank in opts.console_ranks
    pumps = [output.StreamPump(slot.rank, name, pipe, sink() if shown else None, log, header,
                               opts.prefix_timestamp, on_sink_closed=on_output_closed)
             for name, pipe, sink, log in (("stdout", proc.stdout, output.stdout_sink, logs[0]),
                                           ("stderr", proc.stderr, output.stderr_sink, logs[1]))]
    return RankProcess(slot, proc, is_remote, pumps, wake)
