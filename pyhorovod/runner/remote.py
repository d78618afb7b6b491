"""Starting a rank on another host through ssh (or any ssh-like "rsh agent").

The command line that ssh runs on the remote host is fixed and holds no secret:

    cd <cwd> && exec sh -c '<WRAPPER>' pyhorovod-rank <user command...>

Everything else travels on ssh's standard input, which the launcher writes right after starting ssh:
one `export NAME='value'` line per environment variable (the job's rank variables, the per-job secret,
and the launcher's environment less host-specific names), ended by END_MARK. So the secret never shows up
in any process's command line, on either host, nor in ssh's.

The wrapper then starts the user's command with stdin from /dev/null, and keeps reading ssh's stdin:
the launcher holds it open for the life of the rank, so end-of-file means the launcher (or ssh) is gone,
and the wrapper then SIGTERMs the rank (SIGKILL 5 s later). This is what stops remote ranks when the
launcher is killed or the job fails: killing the local ssh client closes the channel.

The agent is any command that takes `HOST COMMAND-STRING` like ssh does; tests use `ip netns exec`.
"""
from __future__ import annotations

import re
import shlex
from typing import Dict, List, Mapping, Optional, Sequence

END_MARK = "#pyhorovod-env-end"

# Names that describe the launcher's own host or session and must not be copied to another host.
_HOST_SPECIFIC = {
    "HOSTNAME", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "DISPLAY",
    "MAIL", "LS_COLORS", "PS1", "PS2", "PROMPT_COMMAND", "TMUX", "TMUX_PANE", "STY", "WINDOWID",
}
_HOST_SPECIFIC_PREFIXES = ("SSH_", "XDG_", "BASH_FUNC_", "DBUS_", "KRB5", "OMPI_", "PMIX_", "SLURM_")
_NAME_OK = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

DEFAULT_AGENT = ("ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR")

# Runs on the remote host under `sh -c`, with the user's command as "$@". Fd 3 keeps ssh's stdin for the
# watcher after the environment has been read from it.
WRAPPER = f"""exec 3<&0
script=
while IFS= read -r line <&3; do
  [ "$line" = '{END_MARK}' ] && break
  script="$script
$line"
done
eval "$script"
"$@" </dev/null &
child=$!
( while read -r _ <&3; do :; done; kill -TERM "$child" 2>/dev/null; sleep 5; kill -KILL "$child" 2>/dev/null ) &
watcher=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM HUP INT
while :; do
  wait "$child"; rc=$?
  kill -0 "$child" 2>/dev/null || break
done
kill "$watcher" 2>/dev/null
exit $rc
"""


def forwardable_env(environ: Mapping[str, str]) -> Dict[str, str]:
    """The launcher's environment as copied to remote ranks (Horovod forwards it the same way)."""
    out = {}
    for name, value in environ.items():
        if name in _HOST_SPECIFIC or name.startswith(_HOST_SPECIFIC_PREFIXES):
            continue
        if not _NAME_OK.match(name):
            continue  # e.g. exported shell functions: not expressible as `export NAME=...`
        out[name] = value
    return out


def agent_argv(agent: Optional[str], ssh_port: Optional[int] = None,
               identity_file: Optional[str] = None) -> List[str]:
    """The rsh agent as an argv prefix: DEFAULT_AGENT, or the user's `--rsh-agent` string split by shlex."""
    argv = list(DEFAULT_AGENT) if not agent else shlex.split(agent)
    if not argv:
        raise ValueError("--rsh-agent is empty")
    if ssh_port is not None:
        argv += ["-p", str(int(ssh_port))]
    if identity_file:
        argv += ["-i", identity_file]
    return argv


def remote_command(command: Sequence[str], cwd: str) -> str:
    """The single string the agent asks the remote shell to run (no secret, no environment)."""
    if not command:
        raise ValueError("empty command")
    parts = ["exec", "sh", "-c", shlex.quote(WRAPPER), "pyhorovod-rank"] + [shlex.quote(a) for a in command]
    return f"cd {shlex.quote(cwd)} && " + " ".join(parts)


def ssh_argv(agent: Sequence[str], host: str, command: Sequence[str], cwd: str) -> List[str]:
    """Full argv of the local process that starts one remote rank."""
    return list(agent) + [host, remote_command(command, cwd)]


def stdin_payload(env: Mapping[str, str]) -> bytes:
    """What the launcher writes to the agent's stdin: the rank's environment, then END_MARK."""
    lines = []
    for name in sorted(env):
        if not _NAME_OK.match(name):
            raise ValueError(f"environment variable name {name!r} cannot be exported to a remote host")
        value = env[name]
        if "\0" in value:
            raise ValueError(f"environment variable {name} contains a NUL byte")
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(END_MARK)
    return ("\n".join(lines) + "\n").encode()
