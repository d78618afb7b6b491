"""Reading one environment variable as a typed value, with the error that names it.

Empty values count as unset. An unparsable value raises ValueError naming the variable, so a typo in a
launcher script is reported before any connection is made. These readers know nothing about which
variables exist: pyhorovod/_knobs.py declares those.
"""
from typing import Mapping, Optional

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}


def get_str(env: Mapping[str, str], name: str) -> Optional[str]:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def get_int(env: Mapping[str, str], name: str, minimum: Optional[int] = None) -> Optional[int]:
    value = get_str(env, name)
    if value is None:
        return None
    try:
        parsed = int(value, 10)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None
    if minimum is not None and parsed < minimum:
        raise ValueError(f"environment variable {name}={value!r} must be >= {minimum}")
    return parsed


def get_float(env: Mapping[str, str], name: str, minimum: Optional[float] = None) -> Optional[float]:
    value = get_str(env, name)
    if value is None:
        return None
    try:
        parsed = float(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not a number") from None
    if parsed != parsed or parsed in (float("inf"), float("-inf")):
        raise ValueError(f"environment variable {name}={value!r} must be finite")
    if minimum is not None and parsed < minimum:
        raise ValueError(f"environment variable {name}={value!r} must be >= {minimum}")
    return parsed


def get_bool(env: Mapping[str, str], name: str) -> Optional[bool]:
    value = get_str(env, name)
    if value is None:
        return None
    low = value.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"environment variable {name}={value!r} is not a boolean (use 1/0, true/false)")


def first(env: Mapping[str, str], names, getter=get_str, **kw):
    """Value of the first variable in `names` that is set (PYHOROVOD_ before HOROVOD_), else None."""
    for name in names:
        value = getter(env, name, **kw)
        if value is not None:
            return value
    return None
