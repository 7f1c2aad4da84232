"""The drifting-stream section of ``docs/benchmarks.md``: a table and one plot per scenario.

:func:`drift_section` renders, per scenario, the overall and last-records prequential accuracy
of each model and a plot of its windowed accuracy with the drift marked.

What the table and the plot show: docs/bench_internals.md#the-drift-section-of-the-report.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .suite import variant_label

#: column order of the table (other variants follow)
DRIFT_ORDER = ("sgbdt adaptive", "sgbdt faithful", "median-forest", "greedy-forest", "rdt",
               "random-forest", "hoeffding-tree", "arf")
#: the window forests: the plot's second panel, next to S-GBDT adaptive and HoeffdingTree
FORESTS = ("median-forest", "greedy-forest", "rdt", "random-forest")
#: one colour per variant, the same in both panels and every scenario
_COLORS = {"sgbdt adaptive": "tab:blue", "sgbdt faithful": "tab:cyan",
           "median-forest": "tab:green", "greedy-forest": "tab:red", "rdt": "tab:purple",
           "random-forest": "tab:brown", "hoeffding-tree": "tab:gray", "arf": "tab:olive"}


def _variant(r: dict) -> str:
    return variant_label(r["model"], r.get("params") or {})


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def _draw(ax, rows: list[dict], first: dict, title: str, legend: bool) -> None:
    at, width, window = first["drift_at"], first["drift_width"], first["window"]
    if width > 1:
        ax.axvspan(at - width / 2, at + width / 2, color="orange", alpha=0.15,
                   label=f"drift width ({width:,} records)")
    ax.axvline(at, color="black", linestyle="--", linewidth=1, label=f"drift at {at:,}")
    for r in sorted(rows, key=lambda r: _order(_variant(r))):
        xs = [(k + 0.5) * window for k in range(len(r["curve"]))]
        eps = "" if r.get("epsilon") is None else f" (ε={r['epsilon']:g})"
        style = ":" if r.get("kind") == "non-private" else "-"
        ax.plot(xs, [100 * v for v in r["curve"]], linestyle=style, linewidth=1.3,
                color=_COLORS.get(_variant(r)), label=_variant(r) + eps)
    ax.axhline(100 * first["majority_tail"], color="grey", linewidth=0.8,
               linestyle=(0, (1, 2)), label="majority rate of the last records")
    ax.set_ylabel(f"accuracy % (windows of {window:,})")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(top=100)
    ax.grid(True, alpha=0.3)
    if legend:              # beside the panel: the curves' dips after a drift stay visible
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def plot_drift(rows: list[dict], path: Path) -> None:
    """Windowed accuracy against the record index, drift marked. With window-forest rows: two
    panels sharing the axes — S-GBDT's arms with river's learners, then the four forests next
    to S-GBDT adaptive and HoeffdingTree — so no panel holds more than six lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = rows[0]
    scenario = first.get("scenario", first["dataset"])
    forests = [r for r in rows if _variant(r) in FORESTS]
    if not forests:
        fig, ax = plt.subplots(figsize=(9.5, 4.2))
        _draw(ax, rows, first, scenario, True)
        ax.set_xlabel("record index")
    else:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(9.5, 7.6), sharex=True, sharey=True)
        _draw(top, [r for r in rows if _variant(r) not in FORESTS], first,
              f"{scenario}: S-GBDT and river's learners", True)
        refs = [r for r in rows if _variant(r) in ("sgbdt adaptive", "hoeffding-tree")]
        _draw(bottom, forests + refs, first,
              "window forests (library defaults), S-GBDT adaptive and HoeffdingTree", True)
        bottom.set_xlabel("record index")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _order(variant: str) -> tuple[int, str]:
    return (DRIFT_ORDER.index(variant) if variant in DRIFT_ORDER else len(DRIFT_ORDER), variant)


def _forest_notes(by_scenario: dict[str, list[dict]]) -> list[str]:
    """What the window forests show: their last-records accuracy against S-GBDT adaptive and
    HoeffdingTree, computed from the rows, and the command that makes them."""
    tail: dict[str, dict[str, float]] = defaultdict(dict)   # variant -> scenario -> tail
    for scenario, rs in by_scenario.items():
        for r in rs:
            tail[_variant(r)][scenario] = r["tail_accuracy"]
    forests = [f for f in FORESTS if tail.get(f)]
    ref = tail.get("sgbdt adaptive", {})
    if not forests:
        return []

    def mean(v: str, scenarios) -> str:
        vals = [tail[v][s] for s in scenarios if s in tail[v]]
        return _pct(sum(vals) / len(vals)) if vals else "—"

    parts = []
    for f in forests:
        common = [s for s in tail[f] if s in ref]
        wins = sum(tail[f][s] >= ref[s] for s in common)
        worst = min(common, key=lambda s: tail[f][s] - ref[s], default=None)
        gap = "" if worst is None else (
            f", furthest behind on {worst} ({_pct(tail[f][worst])} against "
            f"{_pct(ref[worst])})" if tail[f][worst] < ref[worst] else "")
        parts.append(f"{f} {mean(f, tail[f])} (at or above S-GBDT adaptive in {wins} of "
                     f"{len(common)} scenarios{gap})")
    refs = "; ".join(f"{v} {mean(v, tail[v])}" for v in ("sgbdt adaptive", "hoeffding-tree",
                                                        "arf") if tail.get(v))
    return ["**What the window forests show.** Accuracy of the last records, mean over the "
            "scenarios: " + "; ".join(parts) + f". For reference: {refs}. A window forest "
            "re-fits only when a window closes: with its library defaults a new generation "
            "starts with a 1,000-record warm-up window, then the median and greedy forests "
            "close 2,000-record windows and RDT and the random forest windows of 1,000, "
            "2,000, 4,000 … up to 20,000 records, and a drift found by its DP drift signal starts "
            "a new generation and retires the old windows once the new one has trees; so "
            "after a drift each forest's curve stays low until its first new window has "
            "closed, then steps up, while S-GBDT and river's learners move record by record. "
            "Reproduce: `dpstream suite --profile full --only \"(drift)\"` "
            "(only the cells not yet in `benchmarks/results/full.jsonl` run; one cell: "
            "`--only \"median-forest · sea-abrupt (drift)\"`), then `dpstream suite "
            "--profile full --render-only`.", ""]


def drift_section(rows: list[dict], img_dir: Path | None, img_prefix: str) -> list[str]:
    """Markdown lines of the drift section for ``rows`` (every drift cell); plots to
    ``img_dir`` (``None``: no plots).

    Examples
    --------
    >>> row = {"model": "arf", "dataset": "sea-abrupt", "epsilon": None, "params": {},
    ...        "kind": "non-private", "mean": 0.85, "tail_accuracy": 0.88, "tail_rows": 5000,
    ...        "majority_tail": 0.64, "rows_per_s": 1500.0, "repeats": 3, "n": 30000,
    ...        "drift_at": 15000, "drift_width": 1, "window": 500, "curve": [0.8, 0.9],
    ...        "protocol": "prequential", "scenario": "SEA variant 0 → 2 (abrupt)"}
    >>> "| SEA variant 0 → 2 (abrupt) | 64.0% | 85.0% / 88.0% |" in "\\n".join(
    ...     drift_section([row], None, "img/"))
    True
    """
    by_scenario: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_scenario[r["dataset"]].append(r)
    variants = sorted({_variant(r) for r in rows}, key=_order)
    first = rows[0]
    seeds = max(r["repeats"] for r in rows)
    out = ["## Drifting streams: accuracy over the stream", "",
           f"River's synthetic generators (public data), {first['n']:,} records per run, the "
           f"concept drifting at record {first['drift_at']:,}; each record is predicted, then "
           f"learned. Mean over {seeds} seed(s) per scenario. S-GBDT at ε = "
           f"{next((r['epsilon'] for r in rows if r.get('epsilon') is not None), 1):g} with "
           "*adaptive* (its defaults: a DP drift signal starts a new generation, the root "
           "split comes from noisy gradient histograms, thresholds from a DP feature grid) "
           "and *faithful* (`drift=False, grid_share=0, split_levels=0`: the paper's "
           "algorithm on a stream); the window forests — "
           "median, greedy, RDT, random — at the same ε with their library defaults (their "
           "own window sizes, warm-up windows and drift signal; nothing tuned per "
           "scenario); river's HoeffdingTree and ARF (non-private, defaults) for "
           "reference. Each cell: overall "
           f"prequential accuracy / accuracy of the last {first['tail_rows']:,} records; "
           "*majority*: the commonest label's share of those last records (what a constant "
           "predictor scores there).", "",
           "| scenario | majority | " + " | ".join(variants) + " |",
           "|---" * (len(variants) + 2) + "|"]
    for scenario, rs in by_scenario.items():
        at = {_variant(r): r for r in rs}
        cells = [f"{_pct(at[v]['mean'])} / {_pct(at[v]['tail_accuracy'])}" if v in at else "—"
                 for v in variants]
        out.append(f"| {rs[0].get('scenario', scenario)} | {_pct(rs[0]['majority_tail'])} | "
                   + " | ".join(cells) + " |")
    speed = defaultdict(list)
    for r in rows:
        speed[_variant(r)].append(r["rows_per_s"])
    out += ["", "Rows/s of `predict_one` + `learn_one` (all training included, mean over the "
            "scenarios): " + "; ".join(f"{v} {sum(speed[v]) / len(speed[v]):,.0f}"
                                       for v in variants) + ".", ""]
    out += _forest_notes(by_scenario)
    if img_dir is not None:
        for scenario, rs in by_scenario.items():
            name = f"bench_drift_{scenario}.png"
            plot_drift(rs, img_dir / name)
            out += [f"![{rs[0].get('scenario', scenario)}: accuracy over the stream]"
                    f"({img_prefix}{name})", ""]
    return out
