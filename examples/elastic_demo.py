"""`make elastic-demo`: elastic Fashion-MNIST with one worker killed and one host added mid-training,
then the same training without elasticity, and the two test accuracies side by side.

    python examples/elastic_demo.py [--epochs 2] [--limit 0] [--np 4]

The "hosts" are loopback addresses of this machine (127.0.0.1 ... 127.0.0.5): the launcher starts their
workers locally, and the discovery script (examples/elastic_hosts.sh) reads them from a file that this
script edits. The elastic run starts with --np hosts; worker 1 SIGKILLs itself partway through the first
epoch (its host is then blacklisted, the others go back to their last commit and carry on); once rank 0
reports the smaller size, one new host is added to the file, and the next commit grows the job back.
The run without elasticity is examples/fashion_mnist.py on --np ranks under plain `pyhorovod run`.
Exit status 1 when the elastic run's final test accuracy is more than 1 point off.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE_POINTS = 1.0


def launcher(args):
    return [sys.executable, "-m", "pyhorovod.run", *args]


def stream(argv, env, on_line=None):
    """Runs argv, echoing its output; on_line(line) sees each line. Returns the exit status."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if on_line is not None:
            on_line(line)
    return proc.wait()


def final_accuracy(path):
    with open(path) as f:
        return json.load(f)["history"][-1]["test_acc"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--limit", type=int, default=0, help="training images (0: all 60000)")
    p.add_argument("--np", type=int, default=4, help="workers at the start (and of the run without elasticity)")
    p.add_argument("--lr", type=float, default=0.025,
                   help="LR per 64 examples (linearly scaled; the examples' 0.05 is noisier at the end of epoch 2)")
    p.add_argument("--kill-at-batch", type=int, default=60, help="the job's batch after which worker 1 dies")
    args = p.parse_args()
    if args.np < 2:
        raise SystemExit("--np must be at least 2 (one worker is killed)")
    work = tempfile.mkdtemp(prefix="elastic-demo-")
    hosts_file = os.path.join(work, "hosts")
    with open(hosts_file, "w") as f:
        f.write("".join(f"127.0.0.{i + 1}\n" for i in range(args.np)))
    env = dict(os.environ, ELASTIC_HOSTS_FILE=hosts_file)
    common = ["--epochs", str(args.epochs), "--limit", str(args.limit), "--lr", str(args.lr)]

    added = []

    def add_host_once_smaller(line):
        if not added and f"now {args.np - 1} workers" in line:
            with open(hosts_file, "a") as f:
                f.write(f"127.0.0.{args.np + 1}\n")
            added.append(True)
            print(f"elastic-demo: host 127.0.0.{args.np + 1} added to the discovery file", flush=True)

    print(f"elastic-demo: elastic run, {args.np} workers, worker 1 killed after batch {args.kill_at_batch}, "
          f"one host added after that", flush=True)
    elastic_json = os.path.join(work, "elastic.json")
    code = stream(launcher(["-np", str(args.np), "--min-np", "2", "--max-np", str(args.np),
                            "--host-discovery-script", os.path.join(HERE, "elastic_hosts.sh"),
                            sys.executable, os.path.join(HERE, "elastic_fashion_mnist.py"), *common,
                            "--kill-worker", "1", "--kill-at-batch", str(args.kill_at_batch),
                            "--metrics-json", elastic_json]), env, add_host_once_smaller)
    if code != 0:
        raise SystemExit(f"elastic-demo: the elastic run failed (exit {code})")
    print(f"elastic-demo: the same training without elasticity, {args.np} ranks", flush=True)
    fixed_json = os.path.join(work, "fixed.json")
    code = stream(launcher(["-np", str(args.np), sys.executable, os.path.join(HERE, "fashion_mnist.py"),
                            *common, "--metrics-json", fixed_json]), env)
    if code != 0:
        raise SystemExit(f"elastic-demo: the run without elasticity failed (exit {code})")

    with open(elastic_json) as f:
        sizes = [h["workers"] for h in json.load(f)["history"]]
    elastic, fixed = 100 * final_accuracy(elastic_json), 100 * final_accuracy(fixed_json)
    print(f"\nelastic-demo: test accuracy after {args.epochs} epoch(s)")
    print(f"  elastic (worker killed, host added; workers at each epoch's end: {sizes}): {elastic:.2f}%")
    print(f"  fixed   ({args.np} ranks, plain pyhorovod run):{' ' * 27}{fixed:.2f}%")
    off = abs(elastic - fixed)
    ok = off <= TOLERANCE_POINTS and added
    print(f"  difference {off:.2f} points ({'within' if off <= TOLERANCE_POINTS else 'MORE than'} "
          f"{TOLERANCE_POINTS:g}){'' if added else '; the job never ran at the smaller size (no host added)'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
