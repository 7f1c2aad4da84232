"""How much a process's CPU per unit of work grows when independent copies run at once.

Usage: python benchmarks/members_machine_contention.py [--copies 1,2,4,6] [--work spin|member]
[--spin N] [--records N] [--repeat R]

Runs ``n`` copies of a fixed piece of work that share nothing at the same time and reports
each copy's CPU against one copy alone, to tell the machine's share of a scale-out loss from
the members' own. ``--work spin`` (default): a pure-Python loop of ``--spin`` steps;
``--work member``: ``benchmarks/members_cpu.py --members 1 --records N``.

Prints one JSON line per ``n``: ``copies``, ``work``, ``per_copy``, ``mean``, ``max`` and
``mean_vs_alone`` (1.00 when the copies lose nothing). Why and how:
docs/benchmark_notes.md#machine-contention-script.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

SPIN = """
import sys, time
start = float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
t = time.process_time()
s = 0
for i in range(int(sys.argv[1])):
    s += i * i % 7
print(time.process_time() - t)
"""

MEMBER_CPU = Path(__file__).resolve().parent / "members_cpu.py"


def _launch(work: str, spin: int, records: int, start: float) -> subprocess.Popen:
    if work == "spin":
        cmd = [sys.executable, "-c", SPIN, str(spin), str(start)]
    else:   # (members_cpu.py starts timing after it has built its records: no shared start)
        cmd = [sys.executable, str(MEMBER_CPU), "--members", "1", "--records", str(records)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _measure(proc: subprocess.Popen, work: str) -> float:
    out, err = proc.communicate(timeout=1800)
    if proc.returncode:
        raise SystemExit(f"a copy failed (exit {proc.returncode}):\n{err[-2000:]}")
    last = out.strip().splitlines()[-1]
    return float(last) if work == "spin" else float(json.loads(last)["us_per_record"])


def run_copies(n: int, work: str, spin: int, records: int) -> list[float]:
    """Each of ``n`` copies' measure, run at once."""
    start = time.time() + 1.0 + 0.1 * n   # after every copy's interpreter has started
    procs = [_launch(work, spin, records, start) for _ in range(n)]
    return [_measure(p, work) for p in procs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", default="1,2,4,6",
                        help="numbers of copies run at once (default 1,2,4,6)")
    parser.add_argument("--work", choices=("spin", "member"), default="spin")
    parser.add_argument("--spin", type=int, default=30_000_000,
                        help="steps of the pure-Python loop (default 30,000,000)")
    parser.add_argument("--records", type=int, default=60_000,
                        help="records of members_cpu.py (default 60,000)")
    parser.add_argument("--repeat", type=int, default=1, help="passes over --copies")
    args = parser.parse_args()
    counts = [int(v) for v in args.copies.split(",")]
    if any(n < 1 for n in counts):
        parser.error("--copies takes positive numbers")
    alone: list[float] = []
    for _ in range(args.repeat):
        for n in counts:
            got = run_copies(n, args.work, args.spin, args.records)
            if n == 1:
                alone += got
            mean = statistics.mean(got)
            print(json.dumps({
                "copies": n, "work": args.work, "per_copy": [round(v, 3) for v in got],
                "mean": round(mean, 3), "max": round(max(got), 3),
                "mean_vs_alone": round(mean / statistics.mean(alone), 3) if alone else None}),
                flush=True)


if __name__ == "__main__":
    main()
