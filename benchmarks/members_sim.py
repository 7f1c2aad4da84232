"""Accuracy of k window-forest members against one process, in process and seeded.

Usage: python benchmarks/members_sim.py [--stream adult|agrawal] [--records N] [--members 1,2,3]
[--seeds N] [--whole-windows] [--delay N] [--relevance-delay N] [--json]

The broker runs of ``examples/scale_out.py`` draw their noise from OS entropy, and one member's
accuracy alone scatters by a point or more from run to run, so a gap of a fraction of a point
between k members and one cannot be read from a few of them. This script runs the same models
and the same merging without a broker (:func:`dpstream.stream.bench.member_sim.prequential`:
6 partitions dealt round-robin, partition ``p`` to member ``p mod k``, median forests at
epsilon 1 with ``n_trees=5``, each window adopted by the others as it closes; each member's share
and partitions set as an assignment sets them, so it sizes its windows by its share and
releases the attribute relevance of the attributes its partitions own; with
``--whole-windows`` neither is set). Accuracy is prequential: each record is
predicted by its member before it learns it. Seeds are 3, 4, ... (the members' seeds derived
from them), so a run is repeatable.

Prints one line per k: the mean accuracy over the seeds, each seed's, and the mean over
records 0-10k, 10k-40k and 40k on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings

from dpstream.stream import load_adult
from dpstream.stream.bench.member_sim import prequential

SLICES = ((0, 10_000), (10_000, 40_000), (40_000, None))


def load(stream: str, records: int | None) -> tuple[list, list, object]:
    if stream == "adult":
        X, y, schema = load_adult("all")
    else:
        from river.datasets import synth

        from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA as schema

        rows = list(synth.Agrawal(classification_function=2, seed=0).take(records or 120_000))
        X, y = [x for x, _ in rows], [label for _, label in rows]
    n = min(records or len(X), len(X))
    return X[:n], y[:n], schema


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", choices=("adult", "agrawal"), default="adult")
    parser.add_argument("--records", type=int, help="default: all of Adult, 120,000 Agrawal")
    parser.add_argument("--members", default="1,2,3")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--whole-windows", action="store_true",
                        help="full-size windows in every member (no shares)")
    parser.add_argument("--delay", type=int, default=0,
                        help="the others adopt a window this many records of the stream "
                             "after it closed (default 0)")
    parser.add_argument("--relevance-delay", type=int,
                        help="its relevance histograms after this many instead (default: "
                             "--delay)")
    parser.add_argument("--hold", action="store_true",
                        help="members hold closed windows: relevance out at the close, trees "
                             "grown once the others' releases for the stretch arrived")
    parser.add_argument("--lag", type=int, default=0,
                        help="member m reads each of its records m * LAG steps late (members "
                             "apart in the stream, as draining a backlog)")
    parser.add_argument("--json", action="store_true", help="one JSON object per k")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    X, y, schema = load(args.stream, args.records)
    for k in (int(v) for v in args.members.split(",")):
        runs = [prequential(X, y, schema, k=k, seed=seed, whole=args.whole_windows,
                            delay=args.delay, relevance_delay=args.relevance_delay,
                            hold=args.hold,
                            lags=tuple(m * args.lag for m in range(k)))
                for seed in range(3, 3 + args.seeds)]
        acc = [float(h.mean()) for h in runs]
        slices = [round(statistics.mean(float(h[a:b].mean()) for h in runs), 4)
                  for a, b in SLICES if a < len(y)]
        line = {"stream": args.stream, "records": len(y), "members": k,
                "member_windows": "whole" if args.whole_windows else "share",
                "seeds": args.seeds, "accuracy": round(statistics.mean(acc), 4),
                "per_seed": [round(a, 4) for a in acc], "slices": slices}
        print(json.dumps(line) if args.json else
              f"k={k} {line['member_windows']}: {line['accuracy']:.4f} "
              f"(seeds {', '.join(f'{a:.4f}' for a in acc)}; records 0-10k, 10k-40k, 40k-: "
              f"{', '.join(map(str, slices))})", flush=True)


if __name__ == "__main__":
    main()
