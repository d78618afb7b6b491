"""Horovod's horovod.common module paths under pyhorovod's name (pyhorovod.common.exceptions,
pyhorovod.common.process_sets), for scripts that import from them."""
