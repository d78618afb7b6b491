"""Hosts for the launcher: `-H` lists and hostfiles, slot assignment, local vs remote, interface addresses.

Terms (as in Horovod):
  slot        a place for one rank on a host (`host:2` or `host slots=2` means two slots).
  local rank  index of a rank among the ranks of its host; local size = ranks on that host.
  cross rank  index of the host among the hosts that run a rank with the same local rank; cross size =
              the number of such hosts. With 2 hosts x 2 ranks: local ranks 0,1,0,1; cross ranks 0,0,1,1.
Ranks are given out host by host in the order the hosts are listed, filling each host's slots first.
"""
from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class HostSpec:
    hostname: str
    slots: int


@dataclass(frozen=True)
class SlotInfo:
    """Where one rank runs and its coordinates in the job."""
    rank: int
    size: int
    hostname: str
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


def parse_slots(text: str, where: str) -> int:
    try:
        slots = int(text)
    except ValueError:
        raise ValueError(f"{where}: slot count {text!r} is not an integer") from None
    if slots < 1:
        raise ValueError(f"{where}: slot count must be >= 1, got {slots}")
    return slots


def parse_hosts(text: str) -> List[HostSpec]:
    """Parses `-H host1:2,host2:2` (a host without `:N` has one slot)."""
    hosts: List[HostSpec] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        # IPv6 literals in brackets: [::1]:2
        if item.startswith("["):
            end = item.find("]")
            if end < 0:
                raise ValueError(f"-H: unterminated '[' in {item!r}")
            name, rest = item[1:end], item[end + 1:]
            slots = parse_slots(rest[1:], "-H") if rest.startswith(":") else 1
        elif item.count(":") == 1:
            name, count = item.split(":")
            slots = parse_slots(count, "-H")
        else:
            name, slots = item, 1
        if not name:
            raise ValueError(f"-H: empty host name in {text!r}")
        hosts.append(HostSpec(name, slots))
    if not hosts:
        raise ValueError(f"-H: no hosts in {text!r}")
    return _merge_duplicates(hosts)


def parse_hostfile(path: str) -> List[HostSpec]:
    """Parses a hostfile: one `hostname slots=N` per line (`slots=` optional: 1); `#` starts a comment."""
    hosts: List[HostSpec] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            slots = 1
            for field in fields[1:]:
                key, sep, value = field.partition("=")
                if not sep:
                    raise ValueError(f"{path}:{lineno}: expected 'host slots=N', got {line!r}")
                if key in ("slots", "max_slots", "max-slots"):
                    if key == "slots":
                        slots = parse_slots(value, f"{path}:{lineno}")
                else:
                    raise ValueError(f"{path}:{lineno}: unknown field {key!r} (expected slots=N)")
            hosts.append(HostSpec(fields[0], slots))
    if not hosts:
        raise ValueError(f"{path}: hostfile lists no hosts")
    return _merge_duplicates(hosts)


def _merge_duplicates(hosts: Sequence[HostSpec]) -> List[HostSpec]:
    """A host listed twice gets the sum of its slots, at the position of its first mention."""
    order: List[str] = []
    slots: Dict[str, int] = {}
    for h in hosts:
        if h.hostname not in slots:
            order.append(h.hostname)
            slots[h.hostname] = 0
        slots[h.hostname] += h.slots
    return [HostSpec(name, slots[name]) for name in order]


def assign_slots(hosts: Sequence[HostSpec], np: int) -> List[SlotInfo]:
    """Places np ranks on the hosts in order; ValueError when the hosts have fewer slots than np."""
    if np < 1:
        raise ValueError(f"-np must be >= 1, got {np}")
    total = sum(h.slots for h in hosts)
    if np > total:
        listed = ",".join(f"{h.hostname}:{h.slots}" for h in hosts)
        raise ValueError(f"-np {np} needs {np} slots but the hosts offer only {total} ({listed})")
    placed: List[tuple] = []  # (hostname, local_rank)
    remaining = np
    for h in hosts:
        take = min(h.slots, remaining)
        placed.extend((h.hostname, lr) for lr in range(take))
        remaining -= take
        if remaining == 0:
            break
    return slots_for([name for name, _ in placed])


def slots_for(hostnames: Sequence[str]) -> List[SlotInfo]:
    """The coordinates of ranks 0, 1, ... placed on hostnames[0], hostnames[1], ...: a rank's local rank
    counts the ranks before it on its host; hosts are ordered by their first rank."""
    local_size: Dict[str, int] = {}
    placed = []
    for name in hostnames:
        placed.append((name, local_size.get(name, 0)))
        local_size[name] = local_size.get(name, 0) + 1
    host_order = list(dict.fromkeys(hostnames))
    slots_out = []
    for rank, (name, lr) in enumerate(placed):
        # Hosts with at least lr+1 ranks, in host order: this host's position among them is the cross rank.
        peers = [n for n in host_order if local_size[n] > lr]
        slots_out.append(SlotInfo(rank=rank, size=len(hostnames), hostname=name, local_rank=lr,
                                  local_size=local_size[name], cross_rank=peers.index(name),
                                  cross_size=len(peers)))
    return slots_out


# ---- interfaces and addresses -------------------------------------------------------------------

_SIOCGIFADDR = 0x8915  # Linux ioctl: IPv4 address of an interface


def interface_address(ifname: str) -> str:
    """IPv4 address of a network interface, e.g. 'eth0' -> '10.0.0.5'. ValueError if it has none."""
    if ifname not in interface_names():
        raise ValueError(f"network interface {ifname!r} does not exist (have: {', '.join(interface_names())})")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            raise ValueError(f"network interface {ifname!r} has no IPv4 address") from None
    return socket.inet_ntoa(packed[20:24])


def interface_names() -> List[str]:
    return [name for _, name in socket.if_nameindex()]


def local_addresses() -> Dict[str, str]:
    """IPv4 address -> interface name, for every interface of this host (network namespace)."""
    out: Dict[str, str] = {}
    for name in interface_names():
        try:
            out[interface_address(name)] = name
        except ValueError:
            continue
    return out


def _resolve(hostname: str) -> List[str]:
    try:
        infos = socket.getaddrinfo(hostname, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return sorted({info[4][0] for info in infos})


def is_local(hostname: str, addresses: Optional[Dict[str, str]] = None) -> bool:
    """True when the host is this machine: a loopback name, our host name, or one of our addresses."""
    # (No socket.getfqdn(): a reverse lookup can hang for seconds where DNS is unreachable. A fully
    # qualified name of ours is recognised below, by the address it resolves to.)
    if hostname in LOCAL_NAMES or hostname == socket.gethostname():
        return True
    try:
        if ipaddress.ip_address(hostname).is_loopback:
            return True
    except ValueError:
        pass
    addresses = local_addresses() if addresses is None else addresses
    if hostname in addresses:
        return True
    # A name that resolves to one of our addresses (or to loopback) is us too; a name that does not
    # resolve is treated as remote, and ssh will say what is wrong with it.
    for addr in _resolve(hostname):
        if addr in addresses or ipaddress.ip_address(addr).is_loopback:
            return True
    return False


class LocalHosts:
    """`name in LocalHosts()`: is_local(name), asked once per name (hosts that discovery adds later)."""

    def __init__(self):
        self._addresses = local_addresses()
        self._known: Dict[str, bool] = {}

    def __contains__(self, hostname: str) -> bool:
        if hostname not in self._known:
            self._known[hostname] = is_local(hostname, self._addresses)
        return self._known[hostname]


def route_source_address(remote_host: str) -> str:
    """The local address the kernel would use to reach remote_host (no packet is sent: a UDP
    connect only selects a route). This is the address remote ranks can reach the launcher on when
    no --network-interfaces were given."""
    addrs = _resolve(remote_host)
    if not addrs:
        raise ValueError(f"cannot resolve host {remote_host!r}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((addrs[0], 9))
        except OSError as e:
            raise ValueError(f"no route to host {remote_host!r} ({addrs[0]}): {e}") from None
        return s.getsockname()[0]
