"""Window refresh after a concept drift: the median forest on ``agrawal-drift`` with the newest
two windows kept, against the same forest keeping every window. Writes a PNG of the
prequential accuracy per block of records.

Usage: python benchmarks/median_forest_drift.py [--out docs/img/agrawal_drift.png] [--repeats 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dpstream.stream.bench import run_drift  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="docs/img/agrawal_drift.png")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    runs = {"newest 2 windows (max_windows=2)": {"max_windows": 2},
            "every window (max_windows=None)": {"max_windows": None}}
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, params in runs.items():
        res = run_drift("median-forest", 2.0, repeats=a.repeats, seed=0, params=params)
        xs = [(i + 1) * res["block"] for i in range(len(res["curve"]))]
        ax.plot(xs, res["curve"], marker="o", ms=3, label=f"{label}: {res['mean']:.3f} after")
        print(f"{label}: accuracy before the drift {res['accuracy_before_drift']:.4f}, "
              f"after {res['mean']:.4f} +- {res['std']:.4f}")
    ax.axvline(30_000, color="grey", ls="--", lw=1)
    ax.text(30_500, 0.77, "concept drift (Agrawal f0 -> f2)", color="grey", fontsize=8)
    ax.set_xlabel("records seen (windows of 5,000; epsilon = 2)")
    ax.set_ylabel(f"prequential accuracy per {res['block']:,} records")
    ax.set_title("Median forest on a drifting stream: retiring old windows recovers")
    ax.set_ylim(0.3, 0.8)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"plot written to {out}")


if __name__ == "__main__":
    main()
