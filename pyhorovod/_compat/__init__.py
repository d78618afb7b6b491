"""The opt-in `horovod` alias: a folder holding a package named `horovod` whose modules are pyhorovod's
(`import horovod.torch as hvd` gives pyhorovod.torch). It is not on sys.path unless asked for:
`pyhorovod run --horovod-compat ...` or PYHOROVOD_HOROVOD_COMPAT=1 in the launcher's environment put it
first on the ranks' PYTHONPATH; with another launcher, prepend the folder that
`python -m pyhorovod._compat` prints."""
import os
from typing import Optional

ALIAS_DIR = os.path.dirname(os.path.abspath(__file__))


def python_path(existing: Optional[str]) -> str:
    """PYTHONPATH with the alias folder first (kept once)."""
    rest = [p for p in (existing or "").split(os.pathsep) if p and p != ALIAS_DIR]
    return os.pathsep.join([ALIAS_DIR] + rest)


def wanted(flag: bool, env) -> bool:
    """The --horovod-compat flag, or PYHOROVOD_HOROVOD_COMPAT=1 in `env`."""
    value = env.get("PYHOROVOD_HOROVOD_COMPAT", "0").strip()
    if value not in ("0", "1", ""):
        raise ValueError(f"PYHOROVOD_HOROVOD_COMPAT={value!r}: use 1 or 0")
    return bool(flag) or value == "1"
