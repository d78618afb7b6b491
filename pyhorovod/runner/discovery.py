"""Host discovery for elastic jobs: which hosts may run workers now, and how many slots each offers.

A discovery script (`--host-discovery-script`) is an executable that prints one `host` or `host:slots`
per line (blank lines and `#` comments ignored; a bare host gets `--slots-per-host` slots, default 1).
It runs every `interval_s` on a thread of its own; a run that fails (non-zero status, garbage, a timeout)
is logged once per kind of failure and the last good answer is kept, so a flaky script never takes
hosts away. Without a script the hosts are fixed: the `-H`/`--hostfile` list.

The first run happens at construction, in the caller's thread: a script that is missing, not executable
or prints garbage is a ValueError before any worker starts.
"""
from __future__ import annotations

import os
import subprocess
import threading
from typing import Dict, Optional

from . import output
from .hosts import parse_slots

SCRIPT_TIMEOUT_S = 10.0


def parse_discovery_output(text: str, default_slots: int, where: str = "the discovery script") -> Dict[str, int]:
    """{host: slots} in the order printed; ValueError naming the line on garbage."""
    hosts: Dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, slots_text = line.partition(":")
        name = name.strip()
        if not name or any(c.isspace() for c in name) or "," in name:
            raise ValueError(f"{where}, line {n}: expected `host` or `host:slots`, got {raw!r}")
        slots = parse_slots(slots_text.strip(), f"{where}, line {n}") if sep else default_slots
        hosts[name] = hosts.get(name, 0) + slots
    return hosts


def check_script(path: str) -> None:
    if not os.path.exists(path):
        raise ValueError(f"--host-discovery-script {path!r}: no such file")
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise ValueError(f"--host-discovery-script {path!r}: not an executable file (chmod +x it)")


class HostDiscovery:
    """current() -> {host: slots}, refreshed every interval_s from the script (or fixed hosts)."""

    def __init__(self, script: Optional[str] = None, fixed: Optional[Dict[str, int]] = None,
                 default_slots: int = 1, interval_s: float = 1.0):
        self._script = os.path.abspath(script) if script else None
        self._default_slots = default_slots
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_error: Optional[str] = None
        self.runs = 0                      # completed runs of the script (tests and logs)
        self.changed = threading.Event()   # set whenever the answer changes
        if self._script is None:
            self._hosts = dict(fixed or {})
            self._thread = None
            return
        check_script(self._script)
        self._hosts = self._run_script(first=True)
        self._thread = threading.Thread(target=self._loop, name="host-discovery", daemon=True)
        self._thread.start()

    @property
    def dynamic(self) -> bool:
        """False for fixed hosts: the answer never changes."""
        return self._script is not None

    def current(self) -> Dict[str, int]:
        with self._lock:
            return dict(self._hosts)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(SCRIPT_TIMEOUT_S + 1.0)

    def _run_script(self, first: bool = False) -> Dict[str, int]:
        where = f"--host-discovery-script {self._script!r}"
        try:
            done = subprocess.run([self._script], capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ValueError(f"{where} did not finish within {SCRIPT_TIMEOUT_S:g} s") from None
        except OSError as e:
            raise ValueError(f"{where} cannot be run: {e}") from None
        if done.returncode != 0:
            err = done.stderr.strip().splitlines()[-1:] or ["(no output on stderr)"]
            raise ValueError(f"{where} exited with status {done.returncode}: {err[0]}")
        hosts = parse_discovery_output(done.stdout, self._default_slots, where)
        if first and not hosts:
            output.emit(f"{where} lists no hosts yet; waiting for some")
        return hosts

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                hosts = self._run_script()
            except ValueError as e:
                text = str(e)
                if text != self._last_error:   # one message per kind of failure, not one a second
                    output.emit(f"host discovery failed, keeping the last good answer: {text}")
                    self._last_error = text
                continue
            self._last_error = None
            with self._lock:
                self.runs += 1
                if hosts != self._hosts:
                    self._hosts = hosts
                    self.changed.set()
