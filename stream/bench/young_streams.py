"""Young streams for the suite: the first records of a stream and those after a restart, run
and rendered (the young-stream section of ``docs/benchmarks.md``).

:func:`run_young_stream` runs a model of :data:`YOUNG_MODELS` (S-GBDT and the four window
forests) prequentially from the first record of a short stream of :data:`YOUNG_SCENARIOS`, or
after a drift restart, beside an *oracle-refit* reference (a batch fit on the first ``t``
records scored on the next ``t``; a yardstick, not a DP design). :func:`before_params` gives
the defaults from before the young-stream changes (the suite's *before* rows);
:func:`young_section` renders the tables and plots.

The streams, the reference and the rendering: docs/bench_internals.md#young-streams.
"""

from __future__ import annotations

import random
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
    SGBDTClassifier,
    SGBDTRegressor,
    SmallStreamWarning,
)
from ..datasets import load_abalone, load_adult, load_elec2
from .drift_streams import DRIFT_SCENARIOS, REFERENCE_N, drift_geometry, load_drift_stream

__all__ = ["BEFORE", "MODEL_ORDER", "ORACLE_START", "RESTART", "RESTART_AFTER", "RESTART_N",
           "RESTART_WINDOW", "YOUNG_DATASETS", "YOUNG_MODELS", "YOUNG_SCENARIOS", "YOUNG_SEEDS",
           "before_params", "describe_young", "load_young", "oracle_refit", "plot_restart",
           "plot_young", "run_young_stream", "young_models", "young_section"]

#: the young datasets (first records of a stream) and the drift-restart scenario
YOUNG_DATASETS = ("phishing", "bananas", "abalone", "adult-4k", "elec2-4k")
RESTART = "agrawal-4-0-restart"
YOUNG_SCENARIOS = (*YOUNG_DATASETS, RESTART)
#: the suite's seeds per cell (the oracle-refit reference uses the first two)
YOUNG_SEEDS = 3
#: the oracle-refit reference's first training length (then doubling)
ORACLE_START = 125
#: the restart scenario: records per run, records scored after the change, curve window
RESTART_N, RESTART_AFTER, RESTART_WINDOW = 20_000, 2_000, 250
_RESTART_OF = "agrawal-4-0-abrupt"      # the drift scenario whose stream the restart reuses

#: the models: S-GBDT (its regressor on Abalone) and the window forests, library defaults
YOUNG_MODELS = {"sgbdt": SGBDTClassifier, "median-forest": MedianForestClassifier,
                "random-forest": RandomDecisionForestClassifier, "rdt": RDTClassifier,
                "greedy-forest": GreedyForestClassifier}

#: the defaults before issue 64 (the *before* rows): the window forests' 1,000-record warm-up,
#: S-GBDT without its young phase (and the classifier's leaf floor of 20 and split selection
#: from the first round)
BEFORE: dict[str, dict[str, Any]] = {
    "window-forest": {"warmup": 1000},
    "sgbdt": {"warmup_rounds": 0, "min_leaf_records": 20.0, "split_after": 0},
    "sgbdt-regressor": {"warmup_rounds": 0, "min_leaf_records": 20.0},
}

_DESCRIBE = {
    "phishing": "Phishing (river, 1,250 records, features in [0, 1], its order)",
    "bananas": "Bananas (river, 5,300 records, two features, its order)",
    "abalone": "Abalone as a stream (4,177 records in a seeded random order, R²)",
    "adult-4k": "Adult, the first 4,000 records of adult.data (its order)",
    "elec2-4k": "Elec2, the first 4,000 records (time order)",
    RESTART: "Agrawal function 4 → 0 at record 15,000 (abrupt), 20,000 records",
}

Rows = list[tuple[dict, Any]]


def describe_young(dataset: str) -> str:
    """One line naming ``dataset`` (a name of :data:`YOUNG_SCENARIOS`)."""
    _check_dataset(dataset)
    return _DESCRIBE[dataset]


def _check_dataset(dataset: str) -> None:
    if dataset not in YOUNG_SCENARIOS:
        raise ValueError(f"unknown young-stream dataset {dataset!r}; choose from "
                         f"{list(YOUNG_SCENARIOS)}")


def young_models(dataset: str) -> tuple[str, ...]:
    """The models of ``dataset``'s cells: S-GBDT alone on Abalone (regression), else all five."""
    _check_dataset(dataset)
    return ("sgbdt",) if dataset == "abalone" else tuple(YOUNG_MODELS)


def before_params(model: str, dataset: str) -> dict[str, Any]:
    """The constructor parameters that restore ``model``'s defaults from before the
    young-stream changes (:data:`BEFORE`).

    Examples
    --------
    >>> before_params("rdt", "phishing"), sorted(before_params("sgbdt", "abalone"))
    ({'warmup': 1000}, ['min_leaf_records', 'warmup_rounds'])
    """
    if model not in YOUNG_MODELS:
        raise ValueError(f"unknown model {model!r}; choose from {list(YOUNG_MODELS)}")
    if model != "sgbdt":
        return dict(BEFORE["window-forest"])
    return dict(BEFORE["sgbdt-regressor" if dataset == "abalone" else "sgbdt"])


def _domains(rows: Rows, pad: float = 0.05) -> dict[str, dict]:
    out = {}
    for k in rows[0][0]:
        v = [x[k] for x, _ in rows]
        lo, hi = min(v), max(v)
        w = (hi - lo) or 1.0
        out[k] = {"type": "numeric", "min": lo - pad * w, "max": hi + pad * w}
    return out


def load_young(dataset: str, seed: int = 0) -> tuple[Rows, Any]:
    """``(rows, schema)`` of ``dataset``: ``rows`` a list of ``(x, y)`` in stream order.

    ``seed`` orders Abalone (``random.Random(seed)``) and picks the restart scenario's stream
    (Agrawal seeds ``21 + seed`` and ``22 + seed``); the other datasets keep their order.
    """
    _check_dataset(dataset)
    if dataset in ("phishing", "bananas"):
        from river import datasets
        rows = list(datasets.Phishing() if dataset == "phishing" else datasets.Bananas())
        features = ({k: {"type": "numeric", "min": 0, "max": 1} for k in rows[0][0]}
                    if dataset == "phishing" else _domains(rows))
        return rows, {"features": features, "target": {"type": "binary",
                                                       "values": [False, True]}}
    if dataset == "abalone":
        X, y, schema = load_abalone()
        idx = list(range(len(y)))
        random.Random(seed).shuffle(idx)
        return [(X[i], y[i]) for i in idx], schema
    if dataset == RESTART:
        base = load_drift_stream(_RESTART_OF, REFERENCE_N, seed=_restart_seed(seed))
        return list(zip(base.X[:RESTART_N], base.y[:RESTART_N], strict=True)), base.schema
    X, y, schema = load_adult("train") if dataset == "adult-4k" else load_elec2()
    return list(zip(X[:4000], y[:4000], strict=True)), schema


def _restart_seed(seed: int) -> int:
    return DRIFT_SCENARIOS[_RESTART_OF].seed + seed


def _build(model: str, dataset: str, schema: Any, epsilon: float, seed: int, params: dict):
    cls = SGBDTRegressor if dataset == "abalone" else YOUNG_MODELS[model]
    return cls(schema=schema, epsilon=epsilon, seed=seed, **params)


def _score(metric: str, y: Sequence, p: Sequence) -> float | None:
    """Accuracy, or R² over the predictions that are not ``None`` (``None`` below two)."""
    if metric == "accuracy":
        return float(np.mean([pi == yi for pi, yi in zip(p, y, strict=True)])) if y else None
    from river import metrics
    r2, n = metrics.R2(), 0
    for yi, pi in zip(y, p, strict=True):
        if pi is not None:
            r2.update(yi, pi)
            n += 1
    return float(r2.get()) if n >= 2 else None


def oracle_refit(model: str, dataset: str, rows: Rows, schema: Any, *, epsilon: float,
                 seed: int, params: dict) -> list[list[float]]:
    """The oracle-refit points of one seed: ``[t, metric, records scored]`` for ``t`` =
    :data:`ORACLE_START`, twice that, ... while ``t < len(rows)``; each a batch fit
    (``learn_many``) on ``rows[:t]`` scored on ``rows[t:2t]``."""
    metric = "r2" if dataset == "abalone" else "accuracy"
    out, t = [], ORACLE_START
    while t < len(rows):
        est = _build(model, dataset, schema, epsilon, seed, params)
        est.learn_many([x for x, _ in rows[:t]], [y for _, y in rows[:t]])
        test = rows[t:2 * t]
        score = _score(metric, [y for _, y in test], [est.predict_one(x) for x, _ in test])
        out.append([t, score, len(test)])
        t *= 2
    return out


def _mean_oracle(runs: list[list[list[float]]]) -> tuple[list[list[float]], float | None]:
    """Mean over seeds at each ``t`` and the overall figure weighted by records scored."""
    curve = []
    for points in zip(*runs, strict=True):
        vals = [p[1] for p in points if p[1] is not None]
        curve.append([points[0][0], float(np.mean(vals)) if vals else None, points[0][2]])
    scored = [(v, w) for _, v, w in curve if v is not None]
    overall = float(np.average([v for v, _ in scored], weights=[w for _, w in scored])) \
        if scored else None
    return [[t, None if v is None else round(v, 4), w] for t, v, w in curve], overall


def run_young_stream(model: str, dataset: str, *, epsilon: float = 1.0,
                     seeds: Sequence[int] = (0, 1, 2), params: dict | None = None,
                     window: int = 125, n: int | None = None,
                     progress: Callable[[int, int], None] | None = None) -> dict:
    """Prequential metric of ``model`` on a young stream, beside the oracle-refit reference.

    Parameters
    ----------
    model
        A name of :data:`YOUNG_MODELS` (on ``abalone``: ``"sgbdt"``, the regressor).
    dataset
        A name of :data:`YOUNG_SCENARIOS`.
    epsilon
        The model's budget (the oracle's refits: each the same).
    seeds
        The models' seeds (Abalone's order and the restart's stream follow them); the
        oracle-refit reference runs the first two.
    params
        Keyword arguments merged into the constructor (the prequential model and the oracle's):
        e.g. :func:`before_params`.
    window
        Records per point of the prequential curve (the restart: :data:`RESTART_WINDOW`).
    n
        Only the first ``n`` records of a young dataset (not for the restart scenario).
    progress
        Called with ``(records done, records in all prequential runs)`` every 1%.

    Returns
    -------
    dict
        The bench fields (:data:`~dpstream.stream.bench.protocols.RESULT_FIELDS`; ``mean``: the
        prequential accuracy or R² over the seeds, on the restart the accuracy of the
        :data:`RESTART_AFTER` records after the change; ``std`` across seeds) plus ``curve``
        (the mean metric of each full window of ``window`` records), ``oracle_curve``
        (``[t, metric, records scored]``, mean over the oracle's seeds), ``oracle`` (its
        weighted overall figure), ``first_batch`` (its point at ``t`` = 125), ``per_seed``,
        ``window``, ``n``, ``description`` and ``kind``; on the restart also ``drift_at``,
        ``after_rows``, ``overall`` (the whole stream), ``before_change`` (the
        :data:`RESTART_AFTER` records before it) and ``majority_after`` (the commonest label's
        share after it: a constant's accuracy).

    Examples
    --------
    >>> res = run_young_stream("median-forest", "phishing", seeds=(0,), n=500)
    >>> res["metric"], res["n"], len(res["curve"]), [p[0] for p in res["oracle_curve"]]
    ('accuracy', 500, 4, [125, 250])
    >>> 0.5 < res["mean"] <= 1 and 0.5 < res["oracle"] <= 1
    True
    """
    _check_dataset(dataset)
    if model not in young_models(dataset):
        raise ValueError(f"{model!r} does not run on {dataset!r}: choose from "
                         f"{list(young_models(dataset))}")
    if not seeds:
        raise ValueError("give at least one seed")
    params = dict(params or {})
    restart = dataset == RESTART
    if restart:
        if n is not None:
            raise ValueError(f"{RESTART} always runs {RESTART_N:,} records: n must be None")
        window = RESTART_WINDOW
    metric = "r2" if dataset == "abalone" else "accuracy"
    at = drift_geometry(_RESTART_OF, REFERENCE_N)[0] if restart else 0
    with warnings.catch_warnings():
        # the first records and single batches of 125 are small on purpose
        warnings.simplefilter("ignore", SmallStreamWarning)
        runs, oracles, stream_s, total, delta = [], [], 0.0, 0, None
        for k, seed in enumerate(seeds):
            rows, schema = load_young(dataset, seed)
            rows = rows if n is None else rows[:n]
            if len(rows) < 2 * window:
                raise ValueError(f"{len(rows)} records: need at least {2 * window}")
            model_seed = _restart_seed(seed) if restart else seed
            est = _build(model, dataset, schema, epsilon, model_seed, params)
            total = len(rows) * len(seeds)
            preds, step = [], max(1, total // 100)
            t0 = time.perf_counter()
            for i, (x, y) in enumerate(rows):
                preds.append(est.predict_one(x))
                est.learn_one(x, y)
                if progress is not None and (k * len(rows) + i + 1) % step == 0:
                    progress(k * len(rows) + i + 1, total)
            stream_s += time.perf_counter() - t0
            delta = est.privacy_report().get("delta")
            ys = [y for _, y in rows]
            runs.append((seed, ys, preds))
            if k < 2:
                ref = rows[at:at + RESTART_AFTER] if restart else rows
                oracles.append(oracle_refit(model, dataset, ref, schema, epsilon=epsilon,
                                            seed=model_seed, params=params))
    size = len(runs[0][1])
    curves, per_seed = [], []
    for seed, ys, preds in runs:
        curves.append([_score(metric, ys[j:j + window], preds[j:j + window])
                       for j in range(0, size - size % window, window)])
        entry = {"seed": seed, metric: _score(metric, ys, preds)}
        if restart:
            labels = np.asarray(ys[at:at + RESTART_AFTER])
            entry.update(majority_after=float(max(labels.mean(), 1 - labels.mean())),
                         after=_score(metric, ys[at:at + RESTART_AFTER],
                                      preds[at:at + RESTART_AFTER]),
                         before_change=_score(metric, ys[at - RESTART_AFTER:at],
                                              preds[at - RESTART_AFTER:at]))
        per_seed.append(entry)
    head = [p["after" if restart else metric] for p in per_seed]
    curve = [None if any(c[j] is None for c in curves) else round(float(np.mean(
        [c[j] for c in curves])), 4) for j in range(len(curves[0]))]
    oracle_curve, oracle = _mean_oracle(oracles)
    label = (f"prequential, {size:,} records, accuracy of the {RESTART_AFTER:,} after the "
             f"change at {at:,}" if restart else f"prequential from the first record, "
             f"{size:,} records")
    out = {"model": model, "dataset": dataset, "epsilon": epsilon, "delta": delta,
           "metric": metric, "mean": float(np.mean(head)), "std": float(np.std(head)),
           "repeats": len(seeds), "folds": 1, "seconds": round(stream_s, 3),
           "rows_per_s": round(total / stream_s, 1) if stream_s else None, "params": params,
           "protocol": label, "labeled_fraction": 1.0, "kind": "dp", "n": size,
           "window": window, "curve": curve, "oracle_curve": oracle_curve, "oracle": oracle,
           "oracle_seeds": [int(s) for s in seeds[:2]],
           "first_batch": oracle_curve[0][1] if oracle_curve else None,
           "per_seed": per_seed, "description": describe_young(dataset)}
    if restart:
        out.update(drift_at=at, after_rows=RESTART_AFTER,
                   overall=float(np.mean([p[metric] for p in per_seed])),
                   before_change=float(np.mean([p["before_change"] for p in per_seed])),
                   majority_after=float(np.mean([p["majority_after"] for p in per_seed])))
    return out


# ------------------------------------------------------------------ the section of the page
#: row order of the tables and the plots
MODEL_ORDER = ("sgbdt", "median-forest", "greedy-forest", "rdt", "random-forest")
#: one colour per model (the drift section's)
_COLORS = {"sgbdt": "tab:blue", "median-forest": "tab:green", "greedy-forest": "tab:red",
           "rdt": "tab:purple", "random-forest": "tab:brown"}


def _kwargs(params: dict) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in params.items())


def _before(r: dict) -> bool:
    return bool(r.get("params")) and r["params"] in BEFORE.values()


def _show(metric: str, v: float | None, std: float | None = None) -> str:
    if v is None:
        return "—"
    if metric == "r2":
        return f"{v:.3f}" + ("" if std is None else f" ± {std:.3f}")
    return f"{100 * v:.1f}%" + ("" if std is None else f" ± {100 * std:.1f}")


def _order(model: str) -> tuple[int, str]:
    return (MODEL_ORDER.index(model) if model in MODEL_ORDER else len(MODEL_ORDER), model)


def _oracle_steps(curve: list, offset: int = 0) -> tuple[list[float], list[float]]:
    """The oracle-refit points as steps: each refit's figure over the records it scores."""
    xs, ys = [], []
    for t, v, scored in curve:
        if v is not None:
            xs += [offset + t, offset + t + scored, float("nan")]
            ys += [v, v, float("nan")]
    return xs, ys


def _scale(metric: str) -> float:
    return 1.0 if metric == "r2" else 100.0


def plot_young(rows: list[dict], path: Path) -> None:
    """Each model's prequential curve (solid) and oracle-refit curve (dashed) on one dataset,
    against the record index (log scale)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric, first = rows[0]["metric"], rows[0]
    k = _scale(metric)
    fig, ax = plt.subplots(figsize=(9.5, 4.4))
    for r in sorted(rows, key=lambda r: _order(r["model"])):
        color, w = _COLORS.get(r["model"]), r["window"]
        xs = [(j + 0.5) * w for j, v in enumerate(r["curve"]) if v is not None]
        ax.plot(xs, [k * v for v in r["curve"] if v is not None], color=color, linewidth=1.3,
                marker="o", ms=2.5, label=f"{r['model']}: prequential")
        ox, oy = _oracle_steps(r["oracle_curve"])
        ax.plot(ox, [k * v for v in oy], color=color, linestyle="--", linewidth=1.6,
                label=f"{r['model']}: oracle-refit")
    ax.set_xscale("log", base=2)
    ticks = [t for t in (2 ** j * ORACLE_START // 2 for j in range(12)) if t <= first["n"]]
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.set_xlabel("record index (log scale)")
    name = "R²" if metric == "r2" else "accuracy %"
    ax.set_ylabel(f"{name} (windows of {first['window']:,}; refits: next t)")
    ax.set_title(f"{first.get('description', first['dataset'])}: ε = {first['epsilon']:g}, "
                 "library defaults", fontsize=9)
    if metric != "r2":
        ax.set_ylim(top=100)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_restart(rows: list[dict], path: Path) -> None:
    """Accuracy in windows around the restart's change: each model now (solid) and before
    (dotted), and the oracle refitted on the new concept (dashed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = rows[0]
    at, w = first["drift_at"], first["window"]
    lo = max(0, at - 2 * first["after_rows"])
    fig, ax = plt.subplots(figsize=(9.5, 4.4))
    ax.axvline(at, color="black", linestyle="--", linewidth=1, label=f"change at {at:,}")
    for r in sorted(rows, key=lambda r: (_order(r["model"]), _before(r))):
        color = _COLORS.get(r["model"])
        pts = [((j + 0.5) * w, 100 * v) for j, v in enumerate(r["curve"])
               if v is not None and (j + 1) * w > lo]
        style = (":", 1.0, "before") if _before(r) else ("-", 1.4, "now")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, linestyle=style[0],
                linewidth=style[1], label=f"{r['model']} {style[2]}")
        if not _before(r):
            ox, oy = _oracle_steps(r["oracle_curve"], at)
            ax.plot(ox, [100 * v for v in oy], color=color, linestyle="--", linewidth=1.6,
                    label=f"{r['model']}: oracle-refit")
    ax.set_xlim(lo, first["n"])
    ax.set_xlabel("record index")
    ax.set_ylabel(f"accuracy % (windows of {w:,})")
    ax.set_title(f"{first.get('description', first['dataset'])}: the restart", fontsize=9)
    ax.set_ylim(top=100)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _table(rows: list[dict], restart: bool) -> list[str]:
    now = {r["model"]: r for r in rows if not _before(r)}
    before = {r["model"]: r for r in rows if _before(r)}
    metric = rows[0]["metric"]
    if restart:
        head = ["| model | after the change: now | before | oracle-refit (new concept) | "
                "batch on its first 125 | the 2,000 before the change (now) | whole stream "
                "(now) |", "|---|---|---|---|---|---|---|"]
    else:
        head = ["| model | prequential now | before | oracle-refit | batch on first 125 |",
                "|---|---|---|---|---|"]
    out = list(head)
    for m in sorted(set(now) | set(before), key=_order):
        r, b = now.get(m), before.get(m)
        ref = r or b
        cells = [_show(metric, r and r["mean"], r and r["std"]), _show(metric, b and b["mean"]),
                 _show(metric, ref["oracle"]), _show(metric, ref.get("first_batch"))]
        if restart:
            cells += [_show(metric, r and r.get("before_change")),
                      _show(metric, r and r.get("overall"))]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return out + [""]


def young_section(rows: list[dict], img_dir: Path | None, img_prefix: str) -> list[str]:
    """Markdown lines of the young-stream section for ``rows`` (every young cell); plots to
    ``img_dir`` (``None``: no plots).

    Examples
    --------
    >>> now = {"model": "rdt", "dataset": "phishing", "params": {}, "metric": "accuracy",
    ...        "mean": 0.81, "std": 0.01, "repeats": 3, "n": 1250, "window": 125,
    ...        "curve": [0.7, 0.8], "oracle": 0.84, "first_batch": 0.75,
    ...        "oracle_curve": [[125, 0.75, 125], [250, 0.85, 250]], "epsilon": 1.0,
    ...        "description": "Phishing"}
    >>> before = dict(now, params={"warmup": 1000}, mean=0.7)
    >>> md = young_section([now, before], None, "img/")
    >>> "| rdt | 81.0% ± 1.0 | 70.0% | 84.0% | 75.0% |" in md
    True
    """
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[r["dataset"]].append(r)
    seeds = max(r["repeats"] for r in rows)
    eps = next((r["epsilon"] for r in rows if r.get("epsilon") is not None), 1.0)
    out = ["## Young streams: the first records and every drift restart", "",
           "A model that streams must predict well from its first hundred records, and again "
           "after each drift restart (issue 64). Each record is predicted, then learned, from "
           f"the first one, at ε = {eps:g}; mean over {seeds} seed(s). *Now*: the library "
           "defaults; *before*: the defaults before issue 64 (window forests "
           f"`{_kwargs(BEFORE['window-forest'])}` instead of warm-up windows of 125 records "
           "doubling — 250 for the random forest and RDT; S-GBDT classifier "
           f"`{_kwargs(BEFORE['sgbdt'])}`, regressor `{_kwargs(BEFORE['sgbdt-regressor'])}`: "
           "no young phase). "
           "*Oracle-refit*: the same model class with the same parameters at the same ε, "
           f"fitted in one batch (`learn_many`) on the first t records and scored on the next "
           f"t, t = {ORACLE_START}, {2 * ORACLE_START}, {4 * ORACLE_START}, … (the last "
           "segment may be shorter), weighted by the records scored, mean of the first two "
           "seeds; *batch on first 125*: its first point. It reuses every record in each "
           "refit — each refit spends the whole ε on records the previous ones already "
           "used — so it is an upper yardstick of what the model class makes of t records, "
           "not a DP design; and it scores no record before the 126th, where the "
           "prequential figure counts the first records too. Accuracy, or R² on Abalone. "
           "Plots: prequential accuracy in windows of the records (solid) against the "
           "record index on a log scale, each refit's figure as a dashed step over the "
           "records it scores (same colour). Reproduce: `dpstream suite --profile full "
           "--render-docs --only \"(young)\"` (the cells not yet in "
           "`benchmarks/results/full.jsonl` run, seconds each, then the page is redrawn); "
           "the targets of issue 64: `python ../shared/checks/young_streams.py`.", ""]
    for dataset in [d for d in YOUNG_DATASETS if d in by] + [
            d for d in by if d not in YOUNG_DATASETS and d != RESTART]:
        rs = by[dataset]
        out += [f"### {rs[0].get('description', dataset)}", ""]
        out += _table(rs, restart=False)
        now = [r for r in rs if not _before(r)]
        if img_dir is not None and now:
            name = f"bench_young_{dataset}.png"
            plot_young(now, img_dir / name)
            out += [f"![{dataset}: prequential and oracle-refit curves]({img_prefix}{name})",
                    ""]
    if RESTART in by:
        rs = by[RESTART]
        first = rs[0]
        out += ["### Drift restart: Agrawal 4 → 0", "",
                f"{first.get('description', RESTART)}, the suite's `agrawal-4-0-abrupt` "
                f"stream cut at its first {first['n']:,} records: the accuracy of the "
                f"{first['after_rows']:,} records after the change (the young stream a model "
                "restarts on once its drift signal fires), before and now, against the "
                "oracle refitted on the new concept's records after the change (t = "
                f"{ORACLE_START}, … within those {first['after_rows']:,}); beside them the "
                f"accuracy of the {first['after_rows']:,} records before the change and of "
                "the whole stream (now). A constant predicting the commonest label scores "
                f"{_show('accuracy', first.get('majority_after'))} after the change.", ""]
        out += _table(rs, restart=True)
        if img_dir is not None:
            name = "bench_young_restart.png"
            plot_restart(rs, img_dir / name)
            out += [f"![accuracy around the change, now and before]({img_prefix}{name})", ""]
    return out
