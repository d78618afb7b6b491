"""The autoscaler's trace: one CSV row per evaluation, a PNG of the run, and the worker-seconds.

Columns: step, seconds since the start, workers, global batch, B_simple, measured goodput (the current
count's measured throughput x the efficiency of its batch), predicted goodput of the current count and
of the best candidate, the count asked for ("" when none), the resize-cost rule's inputs (the seconds
left, "" when the script does not say, and the pause of a resize it assumes), and the decision's reason. Goodput here is
relative to one worker's batch b, throughput x (B_noise + b)/(B_noise + B), so that values from
different counts and times lie on one axis. Worker-seconds add workers x seconds from the start (time 0)
through every row; the final line, "# worker-seconds to target: W over T s", is written by `finish`.
"""
from __future__ import annotations

import csv
import os
from typing import List, Optional

COLUMNS = ("step", "time_s", "workers", "global_batch", "b_simple", "measured_goodput",
           "predicted_goodput", "best_predicted_goodput", "best_np", "target_np", "remaining_s",
           "resize_pause_s", "reason")


class AutoscaleTrace:
    def __init__(self, path_prefix: str):
        self.csv_path = path_prefix + ".csv"
        self.png_path = path_prefix + ".png"
        os.makedirs(os.path.dirname(os.path.abspath(self.csv_path)), exist_ok=True)
        self.rows: List[dict] = []
        self.worker_seconds = 0.0
        with open(self.csv_path, "w", newline="") as f:
            csv.writer(f).writerow(COLUMNS)

    def record(self, **row) -> None:
        missing = set(COLUMNS) - set(row)
        if missing:
            raise ValueError(f"trace row lacks {sorted(missing)}")
        if self.rows:
            prev = self.rows[-1]
            self.worker_seconds += prev["workers"] * (row["time_s"] - prev["time_s"])
        else:   # from the start of the run to the first row, at the first row's count
            self.worker_seconds += row["workers"] * row["time_s"]
        self.rows.append(row)
        with open(self.csv_path, "a", newline="") as f:
            csv.writer(f).writerow(["" if row[c] is None else row[c] for c in COLUMNS])

    def finish(self, time_s: float, workers: int, target: str = "target") -> float:
        """Closes the run at time_s (the target reached, or the end): the worker-seconds line and the PNG."""
        if self.rows:
            self.worker_seconds += self.rows[-1]["workers"] * max(0.0, time_s - self.rows[-1]["time_s"])
        with open(self.csv_path, "a") as f:
            f.write(f"# worker-seconds to {target}: {self.worker_seconds:.1f} over {time_s:.1f} s\n")
        self.plot(time_s, workers)
        return self.worker_seconds

    def plot(self, end_s: Optional[float] = None, workers: Optional[int] = None) -> None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
        t = [r["time_s"] for r in self.rows]
        n = [r["workers"] for r in self.rows]
        if end_s is not None and workers is not None:
            t, n = t + [end_s], n + [workers]

        def col(key):
            return [float("nan") if r[key] is None else r[key] for r in self.rows]
        fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
        axes[0].step(t, n, where="post", color="k")
        axes[0].set_ylabel("workers")
        axes[0].set_ylim(0.5, max(n, default=1) + 0.5)
        axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))
        ax = axes[0].twinx()
        batch = col("global_batch")
        ax.plot([r["time_s"] for r in self.rows], batch, "C1.", ms=3)
        ax.set_ylabel("global batch", color="C1")
        per_worker = [b / r["workers"] for b, r in zip(batch, self.rows) if b == b and r["workers"]]
        if per_worker:   # the batch axis lines up with the workers axis (a fixed batch per worker)
            lo, hi = axes[0].get_ylim()
            ax.set_ylim(lo * per_worker[0], hi * per_worker[0])
        axes[1].plot([r["time_s"] for r in self.rows], col("b_simple"), "C0")
        axes[1].set_ylabel("B_simple")
        axes[1].set_yscale("log")
        ts = [r["time_s"] for r in self.rows]
        axes[2].plot(ts, col("measured_goodput"), "C2.-", label="measured (current count)")
        axes[2].plot(ts, col("predicted_goodput"), "C3--", label="predicted (current count)")
        axes[2].plot(ts, col("best_predicted_goodput"), "C4:", label="predicted (best count)")
        axes[2].set_ylabel("goodput (examples/s at\none worker's efficiency)")
        axes[2].set_xlabel("seconds")
        axes[2].legend(fontsize=8)
        fig.suptitle(f"autoscale trace: {self.worker_seconds:.0f} worker-seconds")
        fig.tight_layout()
        fig.savefig(self.png_path, dpi=90)
        plt.close(fig)
