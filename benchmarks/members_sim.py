"""Accuracy of k window-forest members against one process, in process and seeded.

Usage: python benchmarks/members_sim.py [--stream adult|agrawal] [--records N] [--members 1,2,3]
[--seeds N] [--first-seed S] [--partitions P] [--assignment range|roundrobin] [--workers W]
[--whole-windows] [--delay N] [--relevance-delay N] [--hold] [--lag N] [--lag-after N]
[--service] [--params JSON] [--json]

The same models and merging as ``examples/scale_out.py``, without a broker
(:func:`dpstream.stream.bench.member_sim.prequential`), with seeded noise so that a gap of a
fraction of a point between k members and one can be read. Prints one line per k: the mean
prequential accuracy over the seeds, each seed's, and (k = 1 first) each later k's paired
difference from one member. The setup and options:
docs/benchmark_notes.md#members-simulation-script.
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings

from dpstream.stream import load_adult
from dpstream.stream.bench.member_sim import SERVICE_POLICY as SERVICE
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
    parser.add_argument("--lag-after", type=int, default=0, metavar="N",
                        help="the members are in step until stream record N, then --lag "
                             "apart (a group that waits for its members through the warm-up)")
    parser.add_argument("--first-seed", type=int, default=3, help="the first seed (default 3)")
    parser.add_argument("--partitions", type=int, default=6,
                        help="partitions of the topic (default 6)")
    parser.add_argument("--assignment", choices=("range", "roundrobin"), default="range",
                        help="how the group deals the partitions (default range: contiguous "
                             "blocks, kafka-python's default assignor)")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes running seeds at once (default 1)")
    parser.add_argument("--service", action="store_true",
                        help="the median forest's own defaults (as serve runs it)")
    parser.add_argument("--params", type=json.loads, default={},
                        help="model parameters as a JSON object (after --service)")
    parser.add_argument("--json", action="store_true", help="one JSON object per k")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    X, y, schema = load(args.stream, args.records)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    base: list[float] | None = None
    for k in (int(v) for v in args.members.split(",")):
        kw = dict(k=k, whole=args.whole_windows, delay=args.delay,
                  relevance_delay=args.relevance_delay, hold=args.hold,
                  lags=tuple(m * args.lag for m in range(k)), partitions=args.partitions,
                  assignment=args.assignment, lag_after=args.lag_after,
                  **(SERVICE if args.service else {}), **args.params)
        runs = _runs(X, y, schema, seeds, kw, args.workers)
        acc = [float(h.mean()) for h in runs]
        slices = [round(statistics.mean(float(h[a:b].mean()) for h in runs), 4)
                  for a, b in SLICES if a < len(y)]
        line = {"stream": args.stream, "records": len(y), "members": k,
                "member_windows": "whole" if args.whole_windows else "share",
                "seeds": args.seeds, "accuracy": round(statistics.mean(acc), 4),
                "per_seed": [round(a, 4) for a in acc], "slices": slices,
                "partitions": args.partitions, "assignment": args.assignment,
                "first_seed": args.first_seed,
                **({"params": {**(SERVICE if args.service else {}), **args.params}}
                   if args.service or args.params else {})}
        if k == 1 and base is None:
            base = acc
        elif base is not None:
            diff = [100 * (a - b) for a, b in zip(acc, base, strict=True)]
            line["vs_one_pp"] = round(statistics.mean(diff), 2)
            if len(diff) > 1:
                line["vs_one_se_pp"] = round(statistics.stdev(diff) / len(diff) ** 0.5, 2)
        vs = (f"; vs one process {line['vs_one_pp']:+.2f} pp"
              + (f" ± {line['vs_one_se_pp']:.2f}" if "vs_one_se_pp" in line else "")
              if "vs_one_pp" in line else "")
        print(json.dumps(line) if args.json else
              f"k={k} {line['member_windows']}: {line['accuracy']:.4f} "
              f"(seeds {', '.join(f'{a:.4f}' for a in acc)}; records 0-10k, 10k-40k, 40k-: "
              f"{', '.join(map(str, slices))}{vs})", flush=True)


def _one(job: tuple) -> object:
    X, y, schema, seed, kw = job
    warnings.filterwarnings("ignore")
    return prequential(X, y, schema, seed=seed, **kw)


def _runs(X: list, y: list, schema: object, seeds: list[int], kw: dict, workers: int) -> list:
    """Each seed's per-record hits, in seed order (``workers`` processes at once)."""
    jobs = [(X, y, schema, seed, kw) for seed in seeds]
    if workers <= 1:
        return [_one(job) for job in jobs]
    from multiprocessing import get_context

    with get_context("fork").Pool(workers) as pool:
        return pool.map(_one, jobs)


if __name__ == "__main__":
    main()
