"""`python -m pyhorovod ...`: the `pyhorovod` command (pyhorovod/runner/cli.py main)."""
import sys

from pyhorovod.runner.cli import main

sys.exit(main())
