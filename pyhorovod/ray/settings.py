"""The executor's settings (RayExecutor.create_settings) and the checks of its worker counts."""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class RaySettings:
    """timeout_s: the deadline of the workers' rendezvous (each rank's connect timeout) and, unless
    placement_group_timeout_s is given, of the wait for Ray to place the workers. nics: the network
    interface(s) the workers bind to ("eth0" or "eth0,eth1": the first), as PYHOROVOD_IFACE. ssh_*: accepted
    for Horovod's signature; Ray starts the workers, so nothing uses them."""
    timeout_s: float = 30.0
    placement_group_timeout_s: Optional[float] = None
    nics: Optional[str] = None
    verbose: int = 0
    ssh_identity_file: Optional[str] = None
    ssh_str: Optional[str] = None

    @property
    def placement_timeout_s(self) -> float:
        return self.timeout_s if self.placement_group_timeout_s is None else self.placement_group_timeout_s


def create_settings(timeout_s: float = 30, ssh_identity_file: Optional[str] = None, ssh_str: Optional[str] = None,
                    placement_group_timeout_s: Optional[float] = None, nics=None, verbose: int = 0) -> RaySettings:
    for name, value in (("timeout_s", timeout_s), ("placement_group_timeout_s", placement_group_timeout_s)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise ValueError(f"RayExecutor.create_settings: {name} must be a positive number of seconds, "
                             f"got {value!r}")
    if nics is not None and not isinstance(nics, str):
        nics = ",".join(nics)   # Horovod takes a set of interface names too
    return RaySettings(float(timeout_s),
                       None if placement_group_timeout_s is None else float(placement_group_timeout_s),
                       nics or None, int(verbose), ssh_identity_file, ssh_str)


def positive_count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"RayExecutor: {name} must be a positive int, got {value!r}")
    return value


def amount(name: str, value, allow_zero: bool = False) -> float:
    """A resource amount per worker (CPUs, GPUs): positive, or also zero when allow_zero."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"RayExecutor: {name} must be a {'non-negative' if allow_zero else 'positive'} number, "
                         f"got {value!r}")
    return value
