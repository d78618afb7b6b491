"""The exception classes of horovod.common.exceptions (defined in pyhorovod/errors.py)."""
from pyhorovod.errors import HorovodInternalError, HorovodTimeoutError, HostsUpdatedInterrupt

__all__ = ["HorovodInternalError", "HorovodTimeoutError", "HostsUpdatedInterrupt"]
