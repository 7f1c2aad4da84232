"""How much a process's CPU per unit of work grows when independent copies run at once.

Usage: python benchmarks/members_machine_contention.py [--copies 1,2,4,6] [--work spin|member]
[--spin N] [--records N] [--repeat R]

``examples/scale_out.py`` runs k members as separate processes, and on the lent 16-core
machine their CPU per record grew 10-20% from one member to four. Some of that could be the
members' own work (the other members' windows, the model topic) and some the machine: cores
that share caches, memory bandwidth and, on a virtual machine, physical cores with other
guests. This separates the two: it runs ``n`` copies of a fixed piece of work that share
nothing (no broker, no files, no messages) at the same time, and reports each copy's CPU
seconds against one copy alone. What the copies lose is what the machine takes from any
``n`` processes, so a scale-out loss of that size is the machine's, not the members'.

``--work spin`` (default): a pure-Python loop of ``--spin`` steps (the interpreter's own
speed; no numpy, no memory traffic to speak of). ``--work member``: ``benchmarks/members_cpu.py
--members 1 --records N`` (one window-forest member's whole in-process path: decoding,
predictions, learning, windows, checkpoints, publishing), whose ``us_per_record`` is the copy's
measure.

Prints one JSON line per ``n`` (each value of ``--copies``, ``--repeat`` times, in turn):
``copies``, ``work``, ``per_copy`` (each copy's CPU seconds, or µs per record for ``member``),
``mean`` and ``max``, and ``mean_vs_alone``: ``mean`` over the mean of the one-copy runs so far
(1.00 when the copies lose nothing). The copies start together (each waits for a shared start
time after its imports).
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
