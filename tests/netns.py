"""Test helper: a few "hosts" on one machine, as Linux network namespaces joined by veth pairs and bridges.

    from tests.netns import Network, require_netns
    require_netns()                               # pytest.skip with the reason when not possible
    with Network(hosts=3, subnets=2) as net:      # hosts h0..h2; subnet s: 10.77+s.<nonce>.0/24
        a, b = net.hosts[0], net.hosts[1]
        a.addr("hv0")                             # 10.77.N.1 ; every host has interfaces hv0, hv1, ...
        p = b.popen(["python3", "-c", "..."])     # any command inside the namespace (subprocess.Popen)
        a.run(["ss", "-ltn"], timeout=5)          # subprocess.run inside the namespace
        a.shape("hv0", rate_mbit=1000)            # tbf; delay_ms=/jitter_ms=/loss_pct= need sch_netem
        a.listening()                             # [(addr, port, process)] of listening TCP sockets
        a.link("hv0", up=False)                   # cut a link (and up=True to restore)
        net.rsh_agent()                           # `pyhorovod run --rsh-agent ...` value: runs "remote"
                                                  # ranks in the namespace that owns the host address

Topology: subnet s is one bridge in the root namespace (no address: the root namespace takes no part in the
traffic); host i joins it with a veth pair whose inside end is named hv<s> and has address
10.(77+s).<nonce>.(i+1)/24. The nonce (from the pid) keeps concurrent test runs apart in logs; the
namespaces isolate them anyway. Every namespace has `lo` up. Commands also get their own UTS namespace
whose hostname is the namespace name (via `unshare --uts`), so each "host" has its own host name and
ranks on different hosts do not pair up through shared memory.

Cleanup always happens: close() (context manager exit), an atexit hook, and cleanup_stale() which removes
namespaces and bridges of test processes that died (names carry the creating pid).

Limits found on the reference machine: the kernel has tbf and htb but no sch_netem, so delay and loss
raise NetemUnavailable (tests skip with that reason); rate limits work.

Also a command line, used as the rsh agent:  python3 tests/netns.py rsh HOST-ADDRESS COMMAND-STRING
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

PREFIX = "phv"          # namespace names: phv<pid>h<i>; bridges: pb<pid>s<s>; root-side veths: pv<pid>h<i>s<s>
_live: List["Network"] = []


class NetemUnavailable(RuntimeError):
    """The kernel lacks sch_netem, so delay/loss cannot be emulated here."""


def _ip(*args: str, check: bool = True, timeout: float = 10.0) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=timeout)


def netns_unavailable_reason() -> Optional[str]:
    """None when network namespaces can be made here, else why not."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` tool (iproute2) is not installed"
    probe = f"{PREFIX}{os.getpid()}probe"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        return f"`ip netns add` fails here: {getattr(e, 'stderr', '') or e}".strip()
    _ip("netns", "del", probe, check=False)
    return None


def require_netns() -> None:
    import pytest
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(reason)


_netem_cache: Optional[bool] = None


def netem_available() -> bool:
    """Whether `tc qdisc ... netem` works on this kernel (probed once on a throwaway veth pair)."""
    global _netem_cache
    if _netem_cache is None:
        ns = f"{PREFIX}{os.getpid()}nq"
        try:
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "add", "q0", "type", "veth", "peer", "name", "q1")
            r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "q0", "root", "netem",
                                "delay", "1ms"], capture_output=True, timeout=10)
            _netem_cache = r.returncode == 0
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, FileNotFoundError):
            _netem_cache = False
        finally:
            _ip("netns", "del", ns, check=False)
    return _netem_cache


def _own_hostname(name: str) -> List[str]:
    """argv prefix giving the command its own UTS namespace with hostname `name`: without it every
    namespace would share this machine's host name and boot id, and pyhorovod's shared-memory transport
    (which pairs ranks by exactly that) would carry the traffic instead of the links under test."""
    if shutil.which("unshare") is None:
        return []  # then set PYHOROVOD_SHM=0 to keep the traffic on the network
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', name]


class Host:
    """One namespace: a "host" with interfaces hv0, hv1, ..."""

    def __init__(self, name: str, addrs: Dict[str, str]):
        self.name = name              # the namespace name
        self.addrs = addrs            # interface -> IPv4 address

    def addr(self, iface: str = "hv0") -> str:
        return self.addrs[iface]

    def argv(self, command: Sequence[str]) -> List[str]:
        return ["ip", "netns", "exec", self.name, *_own_hostname(self.name), *command]

    def popen(self, command: Sequence[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.argv(command), **kw)

    def run(self, command: Sequence[str], timeout: float, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(self.argv(command), timeout=timeout, **kw)

    def shape(self, iface: str = "hv0", rate_mbit: Optional[float] = None, delay_ms: Optional[float] = None,
              jitter_ms: Optional[float] = None, loss_pct: Optional[float] = None) -> None:
        """Shapes what this host sends on iface (shape both ends for a symmetric link). Rate alone uses
        tbf; delay, jitter or loss use netem (NetemUnavailable if the kernel lacks it)."""
        if delay_ms is None and jitter_ms is None and loss_pct is None:
            if rate_mbit is None:
                raise ValueError("shape(): give rate_mbit, delay_ms, jitter_ms or loss_pct")
            # burst: at least one 10 ms worth of bytes (and 64 KiB) so tbf does not throttle below the rate
            burst = max(65536, int(rate_mbit * 1e6 / 8 * 0.01))
            qdisc = ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "100ms"]
        else:
            if not netem_available():
                raise NetemUnavailable("this kernel has no sch_netem: delay/loss cannot be emulated")
            qdisc = ["netem"]
            if delay_ms is not None or jitter_ms is not None:
                qdisc += ["delay", f"{delay_ms or 0}ms"] + ([f"{jitter_ms}ms"] if jitter_ms else [])
            if loss_pct is not None:
                qdisc += ["loss", f"{loss_pct}%"]
            if rate_mbit is not None:
                qdisc += ["rate", f"{rate_mbit}mbit"]
        self.run(["tc", "qdisc", "replace", "dev", iface, "root", *qdisc], timeout=10, check=True)

    def unshape(self, iface: str = "hv0") -> None:
        self.run(["tc", "qdisc", "del", "dev", iface, "root"], timeout=10)  # error if none: fine

    def link(self, iface: str, up: bool) -> None:
        self.run(["ip", "link", "set", iface, "up" if up else "down"], timeout=10, check=True)

    def listening(self) -> List[Tuple[str, int, str]]:
        """Listening TCP sockets in this namespace: (local address, port, process column of ss)."""
        out = self.run(["ss", "-H", "-ltnp"], timeout=10, check=True).stdout
        return parse_ss(out)


def parse_ss(text: str) -> List[Tuple[str, int, str]]:
    """Parses `ss -H -ltnp` lines: State Recv-Q Send-Q Local:Port Peer:Port [Process]."""
    result = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        local = fields[3]
        addr, _, port = local.rpartition(":")
        addr = addr.strip("[]")
        if "%" in addr:
            addr = addr.split("%", 1)[0]  # 127.0.0.1%lo: bound to a device
        result.append((addr, int(port), " ".join(fields[5:])))
    return result


class Network:
    """hosts namespaces x subnets bridges. Use as a context manager; close() is idempotent."""

    def __init__(self, hosts: int = 2, subnets: int = 1):
        if not 1 <= hosts <= 8 or not 1 <= subnets <= 4:
            raise ValueError("Network: 1..8 hosts and 1..4 subnets")
        reason = netns_unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        Network._count = getattr(Network, "_count", 0) + 1
        self.tag = f"{os.getpid()}{chr(ord('a') + Network._count % 26)}"
        nonce = (os.getpid() + Network._count) % 250 + 1
        self.hosts: List[Host] = []
        self._bridges: List[str] = []
        self._closed = False
        _live.append(self)
        try:
            for s in range(subnets):
                br = f"pb{self.tag}s{s}"
                _ip("link", "add", br, "type", "bridge")
                _ip("link", "set", br, "up")
                self._bridges.append(br)
            for i in range(hosts):
                ns = f"{PREFIX}{self.tag}h{i}"
                _ip("netns", "add", ns)
                _ip("-n", ns, "link", "set", "lo", "up")
                addrs = {}
                for s in range(subnets):
                    outside, inside = f"pv{self.tag}{i}{s}", f"pi{self.tag}{i}{s}"
                    _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
                    _ip("link", "set", inside, "netns", ns)
                    _ip("-n", ns, "link", "set", inside, "name", f"hv{s}")
                    _ip("link", "set", outside, "master", self._bridges[s])
                    _ip("link", "set", outside, "up")
                    addr = f"10.{77 + s}.{nonce}.{i + 1}"
                    _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", f"hv{s}")
                    _ip("-n", ns, "link", "set", f"hv{s}", "up")
                    addrs[f"hv{s}"] = addr
                self.hosts.append(Host(ns, addrs))
        except BaseException:
            self.close()
            raise

    def rsh_agent(self) -> str:
        """Value for `pyhorovod run --rsh-agent`: `AGENT HOST CMD` runs CMD in HOST's namespace."""
        return f"{sys.executable} {os.path.abspath(__file__)} rsh"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for h in self.hosts:
            _ip("netns", "del", h.name, check=False)   # also removes the veth pairs
        for br in self._bridges:
            _ip("link", "del", br, check=False)
        if self in _live:
            _live.remove(self)

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    for net in list(_live):
        net.close()


def cleanup_stale() -> None:
    """Removes namespaces and bridges left behind by test processes that no longer exist."""
    def dead(pid: str) -> bool:
        return not os.path.exists(f"/proc/{pid}")
    names = _ip("netns", "list", check=False).stdout.split("\n")
    for line in names:
        m = re.match(rf"{PREFIX}(\d+)[a-z]h\d+", line.strip())
        if m and dead(m.group(1)):
            _ip("netns", "del", line.split()[0], check=False)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        m = re.match(r"\d+: pb(\d+)[a-z]s\d+", line)
        if m and dead(m.group(1)):
            _ip("link", "del", line.split(":")[1].strip(), check=False)


def namespace_of(address: str) -> str:
    """The namespace (of ours) that has this address on one of its interfaces."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.strip() else ""
        if not ns.startswith(PREFIX):
            continue
        out = _ip("-n", ns, "-o", "-4", "addr", "show", check=False).stdout
        if re.search(rf"inet {re.escape(address)}/", out):
            return ns
    raise LookupError(f"no {PREFIX}* namespace has address {address}")


def _rsh_main(argv: List[str]) -> int:
    """`netns.py rsh HOST COMMAND`: what ssh would do on HOST, in HOST's namespace."""
    if len(argv) != 2:
        print("usage: netns.py rsh HOST COMMAND-STRING", file=sys.stderr)
        return 255
    try:
        ns = namespace_of(argv[0])
    except LookupError as e:
        print(f"netns rsh: {e}", file=sys.stderr)
        return 255
    os.execvp("ip", ["ip", "netns", "exec", ns, *_own_hostname(ns), "sh", "-c", argv[1]])
    return 255  # not reached


if __name__ == "__main__":
    if sys.argv[1:2] == ["rsh"]:
        sys.exit(_rsh_main(sys.argv[2:]))
    print(__doc__)
    sys.exit(2)
