"""horovod.common.process_sets under pyhorovod's name (defined in pyhorovod/process_sets.py)."""
from pyhorovod.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set"]
