"""`python -m pyhorovod.run -np 2 python train.py`: the launcher, as `pyhorovod run` / `horovodrun`."""
import sys

from pyhorovod.runner.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command(sys.argv[1:], prog="python -m pyhorovod.run"))
