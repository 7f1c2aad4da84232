"""Delayed labels for the suite: prequential accuracy when each label comes ``d`` records after
its record, run and rendered (the delayed-label section of ``docs/benchmarks.md``).

:func:`prequential_delayed` predicts each record on arrival and learns it ``d`` records later
(river's ``progressive_val_score(..., delay=d)``); :data:`DELAYED_SCENARIOS` (Elec2 and Adult
in their order) and :data:`DELAYED_MODELS` (S-GBDT and the window forests at ε = 1, river's
HoeffdingTree) set the cells; :func:`delayed_section` renders a table per stream and a plot of
accuracy against the delay.

Scenarios, models and the rendering: docs/bench_internals.md#delayed-labels.
"""

from __future__ import annotations

import warnings
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DELAYED_MODELS", "DELAYED_SCENARIOS", "DELAYED_SEEDS", "delayed_section",
           "prequential_delayed", "run_delayed"]

#: stream -> the label delays (records) it runs, 0 first (labels at once)
DELAYED_SCENARIOS: dict[str, tuple[int, ...]] = {"elec2": (0, 48, 336), "adult": (0, 1000)}
#: the DP models (library defaults) and river's Hoeffding tree (non-private, one run)
DELAYED_MODELS = ("sgbdt", "median-forest", "greedy-forest", "rdt", "random-forest",
                  "hoeffding-tree")
DELAYED_SEEDS = 3

_NAMES = {"sgbdt": "S-GBDT", "median-forest": "median forest", "greedy-forest": "greedy forest",
          "rdt": "RDT", "random-forest": "random forest",
          "hoeffding-tree": "river Hoeffding tree (non-private)"}
_TITLES = {"elec2": "Elec2, time order (45,312 records)",
           "adult": "Adult, adult.data in file order (32,561 records)"}
_DELAY_NAMES = {48: "a day", 336: "a week"}


def prequential_delayed(model: Any, rows: Sequence[tuple[dict, Any]], delay: int,
                        progress: Callable[[int], None] | None = None) -> float:
    """Accuracy of predictions made on arrival, each record learned ``delay`` records later
    (the last ``delay`` records are predicted and never learned, as river's evaluation).

    Examples
    --------
    >>> from river import tree
    >>> prequential_delayed(tree.HoeffdingTreeClassifier(), [({"a": 0.0}, 0)] * 10, delay=3)
    0.6
    """
    right, waiting = 0, deque()
    for i, (x, y) in enumerate(rows):
        right += model.predict_one(x) == y
        waiting.append((x, y))
        if len(waiting) > delay:
            model.learn_one(*waiting.popleft())
        if progress is not None and (not (i + 1) % 1000 or i + 1 == len(rows)):
            progress(i + 1)
    return right / len(rows)


def _rows(dataset: str) -> tuple[list, Any]:
    from ..datasets import load_adult, load_elec2

    if dataset not in DELAYED_SCENARIOS:
        raise ValueError(f"unknown delayed-label stream {dataset!r}: choose from "
                         f"{sorted(DELAYED_SCENARIOS)}")
    X, y, schema = load_elec2() if dataset == "elec2" else load_adult("train")
    return list(zip(X, y, strict=True)), schema


def _build(model: str, schema: Any, epsilon: float, seed: int) -> Any:
    if model == "hoeffding-tree":
        from river import tree

        return tree.HoeffdingTreeClassifier()
    from .protocols import BENCH_MODELS

    return BENCH_MODELS[model]["accuracy"](schema=schema, epsilon=epsilon, seed=seed)


def run_delayed(model: str, dataset: str, delay: int, *, epsilon: float = 1.0,
                seeds: Sequence[int] = (0, 1, 2), n: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict:
    """Prequential accuracy of ``model`` on ``dataset`` with labels ``delay`` records late.

    Parameters
    ----------
    model
        A name of :data:`DELAYED_MODELS` (``"hoeffding-tree"``: river's, non-private, one run
        whatever ``seeds``: it draws no noise).
    dataset
        ``"elec2"`` or ``"adult"`` (:data:`DELAYED_SCENARIOS`).
    delay
        Records between a record's prediction and its learning (0: at once).
    epsilon
        The DP models' budget.
    seeds
        The DP models' seeds.
    n
        Only the first ``n`` records (default: the whole stream).
    progress
        Called with ``(records done, records in all runs)``.

    Returns
    -------
    dict
        The bench fields (:data:`~dpstream.stream.bench.protocols.RESULT_FIELDS`; ``mean``:
        accuracy over the seeds, ``std`` across them) plus ``per_seed``, ``n`` and ``params``
        (``{"delay": delay}``).
    """
    if model not in DELAYED_MODELS:
        raise ValueError(f"unknown model {model!r}: choose from {list(DELAYED_MODELS)}")
    if delay < 0:
        raise ValueError(f"delay must be >= 0, got {delay}")
    rows, schema = _rows(dataset)
    rows = rows if n is None else rows[:n]
    private = model != "hoeffding-tree"
    seeds = list(seeds) if private else [0]
    total = len(rows) * len(seeds)
    accs = []
    for k, seed in enumerate(seeds):
        def tick(i: int, k: int = k) -> None:
            if progress is not None:
                progress(k * len(rows) + i, total)

        with warnings.catch_warnings():   # the first records of a stream are few on purpose
            warnings.simplefilter("ignore")
            accs.append(prequential_delayed(_build(model, schema, epsilon, seed), rows, delay,
                                            tick))
    return {"model": model, "dataset": dataset, "epsilon": epsilon if private else None,
            "metric": "accuracy", "mean": float(np.mean(accs)), "std": float(np.std(accs)),
            "repeats": len(accs), "per_seed": [float(a) for a in accs], "n": len(rows),
            "params": {"delay": int(delay)}, "protocol": "delayed",
            "kind": "dp" if private else "non-private",
            "description": _TITLES[dataset]}


def _pct(v: float, std: float | None = None) -> str:
    return f"{100 * v:.1f}%" + ("" if std is None else f" ± {100 * std:.1f}")


def _order(model: str) -> int:
    return DELAYED_MODELS.index(model) if model in DELAYED_MODELS else len(DELAYED_MODELS)


def plot_delayed(rows: list[dict], path: Path) -> None:
    """Accuracy against the label delay, one panel per stream, one line per model."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    streams = [d for d in DELAYED_SCENARIOS if any(r["dataset"] == d for r in rows)]
    fig, axes = plt.subplots(1, len(streams), figsize=(5 * len(streams), 4.6), squeeze=False)
    for ax, stream in zip(axes[0], streams, strict=True):
        by: dict[str, list] = defaultdict(list)
        for r in rows:
            if r["dataset"] == stream:
                by[r["model"]].append((r["params"]["delay"], 100 * r["mean"], 100 * r["std"]))
        for model in sorted(by, key=_order):
            d, m, s = zip(*sorted(by[model]), strict=True)
            ax.errorbar(d, m, yerr=s, marker="o", ms=3, capsize=2,
                        linestyle="--" if model == "hoeffding-tree" else "-",
                        color="black" if model == "hoeffding-tree" else None,
                        label=_NAMES.get(model, model))
        ax.set_title(_TITLES.get(stream, stream), fontsize=10)
        ax.set_xlabel("label delay (records)")
        ax.set_ylabel("prequential accuracy (%)")
        ax.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(6, len(names)), fontsize=7,
               frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def delayed_section(rows: list[dict], img_dir: Path | None, img_prefix: str) -> list[str]:
    """Markdown lines of the delayed-label section for ``rows`` (every delayed cell); the plot
    to ``img_dir`` (``None``: none).

    Examples
    --------
    >>> rows = [{"model": m, "dataset": "adult", "params": {"delay": d}, "mean": v, "std": 0.01,
    ...          "repeats": 3, "epsilon": e, "n": 32561}
    ...         for m, e, d, v in [("rdt", 1.0, 0, 0.78), ("rdt", 1.0, 1000, 0.77),
    ...                            ("hoeffding-tree", None, 0, 0.83),
    ...                            ("hoeffding-tree", None, 1000, 0.80)]]
    >>> md = "\\n".join(delayed_section(rows, None, "img/"))
    >>> "| RDT | 78.0% ± 1.0 | 77.0% ± 1.0 | −1.0 |" in md
    True
    """
    seeds = max(r["repeats"] for r in rows)
    eps = next((r["epsilon"] for r in rows if r.get("epsilon") is not None), 1.0)
    out = ["## Delayed labels: predicted on arrival, learned when the label comes", "",
           "Each record is predicted when it arrives and learned d records later, river's "
           "`progressive_val_score(..., delay=d)` protocol (issue 66; the service joins a "
           "late label message to its held record the same way: docs/service.md, \"Delayed "
           f"labels\"). The DP models at ε = {eps:g} with their library defaults, mean ± std "
           f"over {seeds} seed(s); river's HoeffdingTreeClassifier, non-private, with the same "
           "delay. *Loss*: points of accuracy from labels at once to the longest delay. "
           "Reproduce: `dpstream suite --profile full --render-docs --only \"(delayed)\"`; the "
           "service with labels on a second topic: `benchmarks/delayed_labels.py` "
           "(benchmark notes, \"Delayed labels\").", ""]
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[r["dataset"]].append(r)
    for stream in [d for d in DELAYED_SCENARIOS if d in by] + [
            d for d in by if d not in DELAYED_SCENARIOS]:
        rs = by[stream]
        delays = sorted({r["params"]["delay"] for r in rs})
        out += [f"### {_TITLES.get(stream, stream)}", "",
                "| model | " + " | ".join("at once" if d == 0 else
                                          f"d = {d:,}" + (f" ({_DELAY_NAMES[d]})"
                                                          if d in _DELAY_NAMES else "")
                                          for d in delays) + " | loss |",
                "|---" * (len(delays) + 2) + "|"]
        cells: dict[str, dict[int, dict]] = defaultdict(dict)
        for r in rs:
            cells[r["model"]][r["params"]["delay"]] = r
        for model in sorted(cells, key=_order):
            c = cells[model]
            row = [_pct(c[d]["mean"], c[d]["std"] if c[d]["repeats"] > 1 else None)
                   if d in c else "–" for d in delays]
            lo, hi = delays[0], delays[-1]
            loss = (f"{100 * (c[hi]['mean'] - c[lo]['mean']):+.1f}".replace("-", "−")
                    if lo in c and hi in c and hi != lo else "–")
            out.append(f"| {_NAMES.get(model, model).split(' (')[0]} | " + " | ".join(row)
                       + f" | {loss} |")
        out.append("")
    if img_dir is not None:
        name = "bench_delayed_labels.png"
        plot_delayed(rows, img_dir / name)
        out += [f"![prequential accuracy against the label delay]({img_prefix}{name})", ""]
    return out
