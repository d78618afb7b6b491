"""`python -m pyhorovod._compat` prints the folder to prepend to PYTHONPATH for `import horovod`."""
from pyhorovod._compat import ALIAS_DIR

print(ALIAS_DIR)
