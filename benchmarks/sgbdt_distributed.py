"""Distributed S-GBDT (k parties, secure aggregation over a local Kafka broker) vs single-process
S-GBDT on the union, on Adult at the same epsilon; and the coordination cost of a round.

Each party is its own OS process holding one equal shard of ``adult.data``; the parties train
``n_trees + extra_trees`` rounds over a one-partition board topic on a local tansu broker
(loopback). The single-process model trains on the union of the shards with the same
hyper-parameters and the same epsilon. Both are scored on ``adult.test``. A round's
*coordination overhead* is its wall time minus the party's own computation (DPLeaf, masking,
applying the tree): the time spent waiting for the board.

    python benchmarks/sgbdt_distributed.py [--parties 3] [--epsilons 0.5 1] [--repeats 3]

Writes ``benchmarks/results/distributed.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import tempfile
import time
from pathlib import Path

import numpy as np


def _party(name: str, shard: list[int], epsilon: float, seed: int, bootstrap: str,
           topic: str, k: int, aggregation: str, keys: str, queue) -> None:
    from dpstream.connectors.bulletin import KafkaBoard
    from dpstream.models import SGBDTClassifier
    from dpstream.models.boosting.sgbdt_party import SGBDTParty
    from dpstream.stream import load_adult
    from dpstream.stream.distributed import DistributedParty, Roster, SigningKey

    X, y, schema = load_adult("train")
    Xt, _, _ = load_adult("test")
    model = SGBDTClassifier(schema=schema, epsilon=epsilon, seed=seed)
    party = SGBDTParty(model, aggregation=aggregation)
    party.learn_many([X[i] for i in shard], [y[i] for i in shard])
    board = KafkaBoard(bootstrap, topic)
    board.connect()
    dist = DistributedParty(party, board, name=name, session=topic, expected=k,
                            roster=Roster.load(Path(keys) / "roster.json"),
                            key=SigningKey.load(Path(keys) / f"{name}.key"),
                            params={"epsilon": epsilon, "k": k, "aggregation": aggregation},
                            join_timeout=10.0, round_timeout=30.0)
    dist.start()
    rounds = model.n_trees + model.extra_trees
    t0 = time.perf_counter()
    for _ in range(rounds + 1):   # round 0: the initial score
        dist.run_round()
    wall = time.perf_counter() - t0
    board.close()
    queue.put({"name": name, "pred": np.asarray(party.predict_many(Xt)).tolist(),
               "timings": dist.timings, "wall_s": wall,
               "report": {k_: v for k_, v in party.privacy_report().items()
                          if isinstance(v, (int, float, str, bool))}})


def run_distributed(k: int, epsilon: float, seed: int, bootstrap: str,
                    aggregation: str = "sums") -> dict:
    from dpstream.stream import load_adult
    from dpstream.stream.distributed import keygen

    X, y, _ = load_adult("train")
    _, yt, _ = load_adult("test")
    shards = np.array_split(np.random.default_rng(seed).permutation(len(y)), k)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    topic = f"board-{k}-{epsilon}-{seed}-{aggregation}"
    keys = tempfile.mkdtemp(prefix="dpstream-keys-")   # each party's signing key, one roster
    for i in range(k):
        keygen(f"party{i}", Path(keys) / f"party{i}.key", roster=Path(keys) / "roster.json")
    procs = [ctx.Process(target=_party, args=(f"party{i}", shards[i].tolist(), epsilon,
                                               1000 * seed + i, bootstrap, topic, k,
                                               aggregation, keys, queue)) for i in range(k)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=900) for _ in procs]
    for p in procs:
        p.join(60)
    first = sorted(results, key=lambda r: r["name"])[0]
    pred = np.asarray(first["pred"], dtype=object)
    agree = all(r["pred"] == first["pred"] for r in results)
    timings = [t for r in results for t in r["timings"] if t["round"] > 0]
    coord = np.array([t["coordination_s"] for t in timings])
    return {"error": float(np.mean(pred != np.asarray(yt, dtype=object))),
            "parties_agree": agree, "rounds": len(first["timings"]),
            "coordination_median_s": float(np.median(coord)),
            "coordination_p95_s": float(np.percentile(coord, 95)),
            "round_median_s": float(np.median([t["seconds"] for t in timings])),
            "wall_s": max(r["wall_s"] for r in results),
            "complete_rounds": sum(t["status"] == "complete" for t in first["timings"]),
            "epsilon_reported": max(r["report"]["epsilon"] for r in results)}


def run_single(epsilon: float, seed: int) -> dict:
    from dpstream.models import SGBDTClassifier
    from dpstream.stream import load_adult

    X, y, schema = load_adult("train")
    Xt, yt, _ = load_adult("test")
    model = SGBDTClassifier(schema=schema, epsilon=epsilon, seed=seed)
    t0 = time.perf_counter()
    model.learn_many(X, y)
    wall = time.perf_counter() - t0
    pred = np.asarray(model.predict_many(Xt), dtype=object)
    return {"error": float(np.mean(pred != np.asarray(yt, dtype=object))), "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--aggregations", nargs="+", default=["sums", "values"])
    ap.add_argument("--out", default="benchmarks/results/distributed.json")
    args = ap.parse_args()

    from dpstream.connectors.local_broker import LocalBroker

    rows = []
    with LocalBroker() as broker:
        for eps in args.epsilons:
            for seed in range(args.repeats):
                single = run_single(eps, seed)
                rows.append({"kind": "single", "epsilon": eps, "seed": seed, **single})
                print(f"eps {eps} seed {seed}: single {single['error']:.4f}", flush=True)
                for agg in args.aggregations:
                    d = run_distributed(args.parties, eps, seed, broker.bootstrap, agg)
                    rows.append({"kind": f"distributed-{agg}", "epsilon": eps, "seed": seed,
                                 "parties": args.parties, **d})
                    print(f"  k={args.parties} {agg}: {d['error']:.4f}, coordination median "
                          f"{1000 * d['coordination_median_s']:.1f} ms / p95 "
                          f"{1000 * d['coordination_p95_s']:.1f} ms per round", flush=True)
    out = {"date": time.strftime("%Y-%m-%d"), "machine": platform.platform(),
           "python": platform.python_version(), "parties": args.parties, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("\n| ε | single-process error | " + " | ".join(
        f"k={args.parties} {a} error | Δ (pp) | coordination / round (median, p95)"
        for a in args.aggregations) + " |")
    print("|---|---|" + "---|---|---|" * len(args.aggregations))
    for eps in args.epsilons:
        s = [r["error"] for r in rows if r["kind"] == "single" and r["epsilon"] == eps]
        cells = [f"{eps}", f"{100 * np.mean(s):.2f} ± {100 * np.std(s):.2f}"]
        for a in args.aggregations:
            d = [r for r in rows if r["kind"] == f"distributed-{a}" and r["epsilon"] == eps]
            e = [r["error"] for r in d]
            cells += [f"{100 * np.mean(e):.2f} ± {100 * np.std(e):.2f}",
                      f"{100 * (np.mean(e) - np.mean(s)):+.2f}",
                      f"{1000 * np.median([r['coordination_median_s'] for r in d]):.0f} ms, "
                      f"{1000 * np.max([r['coordination_p95_s'] for r in d]):.0f} ms"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
