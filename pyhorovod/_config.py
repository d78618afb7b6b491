"""The engine's and transport's settings, parsed from the environment.

Which variables exist, their types, defaults and Horovod aliases are declared once, in
pyhorovod/_knobs.py; this module turns the knobs that carry a `field` into a plain dataclass
(`Config.from_env()`: no side effects, so it is unit-testable with a dict) and fills a
`_core.EngineOptions` from it (`Config.engine_options()`). An unparsable value raises ValueError naming the
variable. Empty values count as unset.

Rank variables (PYHOROVOD_RANK, HOROVOD_RANK, RANK, OMPI_COMM_WORLD_RANK, ...) are read by
pyhorovod/_bootstrap.py, which uses the readers re-exported below; the README lists all variables.
"""
import dataclasses
import os
from typing import Mapping, Optional

from pyhorovod._env_values import first, get_bool, get_float, get_int, get_str  # noqa: F401 (re-exported)
from pyhorovod._knobs import CONFIG_KNOBS, LOG_LEVELS, STORE_KNOBS  # noqa: F401 (LOG_LEVELS re-exported)

_STORE_MAX_VALUE_BYTES = 64 << 20


def store_limits(env: Mapping[str, str]) -> dict:
    """Keyword arguments for _core.TcpStoreServer (csrc/rendezvous/tcp_store.h; unset: its defaults)."""
    limits = {k.option.split(".", 1)[1]: k.read(env) for k in STORE_KNOBS}
    if (limits["max_value_bytes"] or 0) > _STORE_MAX_VALUE_BYTES:
        raise ValueError("environment variable PYHOROVOD_STORE_MAX_VALUE_BYTES must be <= 67108864 (64 MiB)")
    return {k: v for k, v in limits.items() if v is not None}


class _ConfigMethods:
    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "Config":
        env = os.environ if env is None else env
        c = cls()
        for knob in CONFIG_KNOBS:
            value = knob.read(env)
            if value is not None:
                setattr(c, knob.field, value)
        return c

    def engine_options(self, *, rank, size, local_rank, local_size, cross_rank, cross_size, store_host,
                       store_port, secret: bytes, bind_host, store_prefix, process_sets=()):
        """A filled _core.EngineOptions for this process (topology and rendezvous from the bootstrap)."""
        from pyhorovod import _core

        tuning, connect, opts = _core.Tuning(), _core.ConnectOptions(), _core.EngineOptions()
        targets = {"tuning": tuning, "connect": connect, "engine": opts}
        for knob in CONFIG_KNOBS:
            if not knob.option:
                continue
            where, attr = knob.option.split(".", 1)
            target = targets[where]
            if knob.newer_core and not hasattr(target, attr):
                continue
            value = getattr(self, knob.field)
            if value is None and knob.kind != "str":
                continue  # unset, and the core chooses (PYHOROVOD_SHM_DIRECT_BYTES)
            setattr(target, attr, "" if value is None else value)

        connect.rank, connect.size = rank, size
        connect.local_rank, connect.local_size = local_rank, local_size
        connect.store_host, connect.store_port = store_host, store_port
        connect.secret = secret
        connect.bind_host = bind_host
        connect.store_prefix = store_prefix
        # The bindings copy nested structs on assignment: fill them first.
        connect.tuning = tuning
        opts.connect = connect
        opts.cross_rank, opts.cross_size = cross_rank, cross_size
        opts.process_sets = [list(r) for r in process_sets]
        return opts


_TYPES = {"int": int, "float": float, "bool": bool, "str": Optional[str], "choice": object, "tristate": int,
          "timeline": str}

Config = dataclasses.make_dataclass(
    "Config", [(k.field, _TYPES[k.kind], dataclasses.field(default=k.default)) for k in CONFIG_KNOBS],
    bases=(_ConfigMethods,), namespace={"__module__": __name__})
Config.__doc__ = ("Engine and transport knobs, one field per knob of pyhorovod/_knobs.py that names one. "
                  "Defaults equal the C++ defaults (csrc/engine/engine.h, tuning.h).")
