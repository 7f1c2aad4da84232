"""Render a benchmark-suite results file into a Markdown page and its PNG plots.

:func:`render_markdown` writes the page (``reports/suite-PROFILE/benchmarks.md`` by default,
the project's own ``docs/benchmarks.md`` with ``dpstream suite --render-docs``; :mod:`.commands`
picks the path): per table the paper rows and the ε grid beside the baselines, with a plot of
the metric against ε; then the stream, speed, drift (:mod:`._drift_report`), young-stream
(:mod:`.young_streams`) and delayed-label (:mod:`.delayed`) sections. A cell that could not
run here shows as ``skipped`` with the pip line that fills it in.

What each part of the page holds: docs/bench_internals.md#rendering-the-report.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from ._drift_report import drift_section
from .delayed import delayed_section
from .scale_report import scale_out_section
from .suite import PAPER, PAPER_NONPRIVATE, RELEASED, summarize, variant_label
from .young_streams import young_section

__all__ = ["plot_stream_curves", "render_markdown", "write_report"]

_PROTOCOLS = {
    "cv": "Kirschte et al.'s protocol (S-GBDT): {folds}-fold cross-validation, {repeats} repeat(s)",
    "holdout": "Huang et al.'s protocol (median forest; also RDT): random 90/10 splits, "
               "{repeats} repeat(s)",
    "kfold": "Fletcher & Islam's protocol (random forest; also the greedy forest): {folds}-fold "
             "cross-validation, {repeats} repeat(s)",
}
_METRIC = {"error": "test error, lower is better", "accuracy": "accuracy, higher is better",
           "r2": "R², higher is better"}
_DATASETS = {"adult": "Adult", "abalone": "Abalone", "adult-late": "Adult, late arrivals",
             "abalone-late": "Abalone, late arrivals", "iris": "Iris", "wine": "Wine",
             "agrawal-drift": "Agrawal with a concept drift",
             "elec2": "Elec2 (NSW electricity prices)",
             "waveform": "Waveform (3 classes)", "led": "LED (10 classes, 10% noise)",
             "random-rbf": "RandomRBF (5 classes)"}


def _fmt(metric: str, v: float | None, std: float | None = None) -> str:
    if v is None:
        return "—"
    if metric == "r2":
        return f"{v:.3f}" + ("" if std is None else f" ± {std:.3f}")
    return f"{100 * v:.2f}%" + ("" if std is None else f" ± {100 * std:.2f}")


def _better(metric: str, ours: float, theirs: float) -> bool:
    return ours <= theirs if metric == "error" else ours >= theirs


def _variant(r: dict) -> str:
    return variant_label(r["model"], r.get("params") or {})


def _params_key(r: dict) -> tuple:
    return tuple(sorted((r.get("params") or {}).items()))


def _table_key(r: dict) -> tuple:
    table = r.get("table", "stream")
    lf = 1.0 if table == "stream" else float(r.get("labeled_fraction", 1.0))
    return (r["dataset"], table, lf)


def _title(dataset: str, lf: float) -> str:
    name = _DATASETS.get(dataset, dataset)
    return name + (f", {lf:.0%} of the training labels" if lf < 1 else "")


def _slug(key: tuple) -> str:
    dataset, table, lf = key
    return f"bench_{dataset}_{table}" + (f"_{round(lf * 100)}pct" if lf < 1 else "")


def _plot(key: tuple, rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = rows[0]["metric"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    lines: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("epsilon") is not None:
            lines[_variant(r)].append(r)
    colors = {}
    for label, rs in lines.items():
        rs.sort(key=lambda r: r["epsilon"])
        scale = 1 if metric == "r2" else 100
        style = {"dp-anchor": "--", "dp-baseline": ":"}.get(rs[0].get("kind"), "-")
        h = ax.errorbar([r["epsilon"] for r in rs], [scale * r["mean"] for r in rs],
                        yerr=[scale * r["std"] for r in rs], marker="o", ms=3, capsize=2,
                        linestyle=style, label=label)
        colors[(rs[0]["model"], _params_key(rs[0]))] = h[0].get_color()
    dataset, _, lf = key
    # the papers' quoted figures (stars) and the S-GBDT authors' released results (diamonds)
    for figures, marker, size, source in ((PAPER, "*", 12, "paper"),
                                          (RELEASED, "D", 6, "authors' released")):
        for (model, params, d, f), points in figures.items():
            if d != dataset or f != lf or (model, params) not in colors:
                continue
            scale = 1 if metric == "r2" else 100
            ax.plot(list(points), [scale * v for v in points.values()], linestyle="none",
                    marker=marker, ms=size, color=colors[(model, params)],
                    markeredgecolor="black",
                    label=f"{source}: {variant_label(model, dict(params))}")
    for r in rows:
        if r.get("kind") == "non-private":
            scale = 1 if metric == "r2" else 100
            ax.axhline(scale * r["mean"], color="grey", linewidth=1,
                       linestyle="-." if "hist" in r["model"] else (0, (1, 1)),
                       label=f"{r['model']} (non-private)")
    ax.set_xscale("log")
    ax.set_xlabel("ε (privacy budget)")
    ax.set_ylabel({"error": "test error %", "accuracy": "accuracy %", "r2": "R²"}[metric])
    ax.set_title(f"{_title(dataset, lf)} — {rows[0].get('protocol', '')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _pip(whys: Iterable[str]) -> str:
    """Reasons a cell was skipped, the pip line of each in backticks."""
    return "; ".join(re.sub(r"(pip install .*)$", r"`\1`", why) for why in whys)


def _skipped_table(skipped: list) -> list[str]:
    """The page's summary of what did not run here: one row per baseline or model."""
    if not skipped:
        return []
    cells = list(skipped)
    out = []
    if cells:
        by: dict[tuple, list] = defaultdict(list)
        for cell, why in cells:
            by[(variant_label(cell.name, dict(cell.params)), why)].append(cell)
        out += [f"**Skipped here: {len(cells)} cell(s)** — their optional packages are not "
                "installed. Install them and rerun the same command: only these cells run, "
                "then the page is redrawn.", "",
                "| skipped | cells | tables | why, and the fix |", "|---|---|---|---|"]
        for (name, why), cs in by.items():
            tables = sorted({_title(c.dataset, c.labeled_fraction) + f" ({c.protocol})"
                             for c in cs})
            out.append(f"| {name} | {len(cs)} | {', '.join(tables)} | skipped: {_pip([why])} |")
        out.append("")
    return out


def _section(key: tuple, rows: list[dict], img_dir: Path | None, img_prefix: str,
             skipped: Iterable[tuple] = ()) -> list[str]:
    dataset, table, lf = key
    metric = rows[0]["metric"]
    dp = [r for r in rows if r.get("kind") == "dp"]
    repeats = max(r["repeats"] for r in rows)
    folds = max(r["folds"] for r in rows)
    out = [f"### {_title(dataset, lf)}", "",
           f"{_PROTOCOLS[table].format(folds=folds, repeats=repeats)}; {_METRIC[metric]}."]
    fewer = sorted({(_variant(r), r["repeats"]) for r in dp if r["repeats"] < repeats})
    if fewer:
        out[-1] += " Fewer repeats: " + ", ".join(f"{v} {n}" for v, n in fewer) + "."
    out.append("")
    at = defaultdict(dict)          # variant -> eps -> row
    for r in rows:
        if r.get("epsilon") is not None:
            at[_variant(r)][r["epsilon"]] = r
    gaps = defaultdict(dict)        # variant -> eps -> why it was skipped here
    for cell, why in skipped:
        gaps[variant_label(cell.name, dict(cell.params))][cell.epsilon] = why
    nonpriv = [r for r in rows if r.get("kind") == "non-private"]
    ceiling = ", ".join(f"{r['model']} {_fmt(metric, r['mean'])}" for r in nonpriv) or "—"

    def peer(name: str, e: float) -> str:
        row = at.get(name, {}).get(e)
        if row is None and e in gaps.get(name, {}):
            return "skipped"
        return _fmt(metric, row and row["mean"])
    quoted = []
    for r in dp:
        k = (r["model"], _params_key(r), dataset, lf)
        fig = PAPER.get(k, {}).get(r["epsilon"])
        rel = RELEASED.get(k, {}).get(r["epsilon"])
        if fig is not None or rel is not None:
            quoted.append((r, fig, rel))
    quoted.sort(key=lambda q: (_variant(q[0]), q[0]["epsilon"]))   # results arrive in any order
    if quoted:
        def fmt(v):
            return "—" if v is None else f"{v:.3f}" if metric == "r2" else f"{100 * v:.2f}%"

        def beats(r, v):
            return "" if v is None else "✓" if _better(metric, r["mean"], v) else "✗"
        out += ["| model | ε | ours | paper | ratio | beats paper | authors' released | "
                "beats released | diffprivlib RF | DP-EBM | DP Mean | non-private |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r, fig, rel in quoted:
            e = r["epsilon"]
            ratio = "—" if fig is None else f"{r['mean'] / fig:.2f}"
            out.append(f"| {_variant(r)} | {e:g} | {_fmt(metric, r['mean'], r['std'])} | "
                       f"{fmt(fig)} | {ratio} | {beats(r, fig)} | {fmt(rel)} | "
                       f"{beats(r, rel)} | "
                       f"{peer('diffprivlib-random-forest', e)} | {peer('dp-ebm', e)} | "
                       f"{peer('dp-mean', e)} | {ceiling} |")
        ref = PAPER_NONPRIVATE.get(key)
        out += ["", "Ratio = ours ÷ paper (" + ("below 1 is better for error" if metric ==
                                                 "error" else "above 1 is better") + ")."
                + (f" The paper's non-private reference: {_fmt(metric, ref[0])} ({ref[1]})."
                   if ref else "")
                + (" Authors' released: the best row per ε of the result tables Kirschte et "
                   "al. publish with their code (their protocol picks it on the test folds)."
                   if any(rel is not None for _, _, rel in quoted) else ""), ""]
    variants = list(at) + [v for v, whys in gaps.items()
                           if v not in at and any(e is not None for e in whys)]
    eps = sorted({e for v in at.values() for e in v})
    if eps:
        out += ["| ε | " + " | ".join(variants) + " |", "|---" * (len(variants) + 1) + "|"]
        for e in eps:
            cells = [_fmt(metric, at[v][e]["mean"], at[v][e]["std"]) if e in at.get(v, {})
                     else "skipped" if e in gaps.get(v, {}) else "—" for v in variants]
            out.append(f"| {e:g} | " + " | ".join(cells) + " |")
        out.append("")
    for v, whys in gaps.items():
        at_eps = sorted(e for e in whys if e is not None)
        where = f" at ε = {', '.join(f'{e:g}' for e in at_eps)}" if at_eps else ""
        out += [f"**skipped: {v}**{where} — {_pip(sorted(set(whys.values())))}.", ""]
    tuned = [r for r in dp if "error_best_threshold" in r]
    if tuned:
        out += ["Kirschte et al. score a classifier at its best decision threshold on the test "
                "fold (their code's `ACC`); at that threshold: " + "; ".join(
                    f"{_variant(r)} (ε={r['epsilon']:g}) "
                    f"{_fmt(metric, r['error_best_threshold'], r['error_best_threshold_std'])}"
                    for r in tuned) + ". The table's figures use the model's own decision.", ""]
    if nonpriv:
        out += ["Non-private on the same splits: " + "; ".join(
            f"{r['model']} {_fmt(metric, r['mean'], r['std'])}" for r in nonpriv) + ".", ""]
    if img_dir is not None and eps:
        name = _slug(key) + ".png"
        _plot(key, rows, img_dir / name)
        out += [f"![{_title(dataset, lf)}: metric against ε]({img_prefix}{name})", ""]
    return out


def _plot_speed(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["rows_per_s"])
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    y = range(len(rows))
    ax.barh([i - 0.2 for i in y], [r["rows_per_s"] for r in rows], height=0.4,
            label="predict_one + learn_one")
    ax.barh([i + 0.2 for i in y], [r["predict_many_rows_per_s"] for r in rows], height=0.4,
            label="predict_many (river: a predict_one loop)")
    ax.set_yticks(list(y), [f"{r['model']}" + ("" if r.get("epsilon") is None else
                                               f" (ε={r['epsilon']:g})") for r in rows])
    ax.set_xscale("log")
    ax.set_xlabel("rows per second (log)")
    ax.set_title(f"Throughput on the {rows[0]['dataset']} stream ({rows[0]['n']:,} records)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _rss(r: dict) -> str:
    peak, start = r.get("peak_rss_mib"), r.get("rss_start_mib")
    if peak is None:
        return "—"
    return f"{peak:,.0f} MiB" + ("" if start is None else f" (+{max(peak - start, 0):,.0f})")


def _stream_section(dataset: str, rows: list[dict], img_dir: Path | None,
                    img_prefix: str) -> list[str]:
    metric = rows[0]["metric"]
    out = [f"### {_DATASETS.get(dataset, dataset)} stream", "",
           f"{rows[0]['protocol']}; prequential {_METRIC[metric]}.", "",
           "| model | kind | ε | prequential | predict_one + learn_one | predict_many | "
           "peak RSS (+ added by the run) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = "—" if r.get("epsilon") is None else f"{r['epsilon']:g}"
        loop = " (loop)" if r.get("kind") == "non-private" else ""
        lf = r.get("labeled_fraction", 1.0)
        name = r["model"] + (f" ({lf:.0%} labeled, the rest public)" if lf < 1 else "")
        out.append(f"| {name} | {r['kind']} | {eps} | {_fmt(metric, r['mean'])} | "
                   f"{r['rows_per_s']:,.0f} rows/s | {r['predict_many_rows_per_s']:,.0f} "
                   f"rows/s{loop} | {_rss(r)} |")
    out.append("")
    if img_dir is not None:
        name = f"bench_stream_{dataset}.png"
        _plot_speed(rows, img_dir / name)
        out += [f"![throughput on the {dataset} stream]({img_prefix}{name})", ""]
    curves = [r for r in rows if r.get("accuracy_curve")]
    if img_dir is not None and curves:
        name = f"bench_stream_{dataset}_accuracy.png"
        plot_stream_curves(curves, img_dir / name)
        window = curves[0].get("curve_window", 1000)
        every = curves[0].get("curve_every", curves[0]["accuracy_curve"][0][0])
        out += [f"![prequential accuracy over the {dataset} stream]({img_prefix}{name})", "",
                f"Prequential accuracy over the {_DATASETS.get(dataset, dataset)} stream: "
                f"each point is the accuracy of the last {window:,} predictions (fewer at the "
                f"start), one point every {every:,} records; dpstream's DP models solid, "
                "river's non-private learners dashed in greys.", ""]
    return out


#: river's learners in the accuracy plot: dashed, in greys (the DP models: solid, in colour)
_RIVER_STYLE = {"hoeffding-tree": ("black", (0, (5, 2))),
                "hoeffding-adaptive-tree": ("dimgray", (0, (8, 2, 2, 2))),
                "arf": ("darkgray", (0, (3, 1.5)))}


def plot_stream_curves(rows: list[dict], path: Path) -> None:
    """Every row's prequential accuracy curve (``accuracy_curve``: ``[records seen,
    accuracy]`` pairs) in one plot, river's non-private learners dashed in greys.

    Examples
    --------
    >>> import tempfile
    >>> rows = [{"model": "rdt", "kind": "dp", "epsilon": 1.0, "dataset": "elec2",
    ...          "accuracy_curve": [[500, 0.6], [1000, 0.7]], "curve_window": 1000},
    ...         {"model": "arf", "kind": "non-private", "epsilon": None, "dataset": "elec2",
    ...          "accuracy_curve": [[500, 0.8], [1000, 0.85]], "curve_window": 1000}]
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plot_stream_curves(rows, Path(d) / "curves.png")
    ...     (Path(d) / "curves.png").stat().st_size > 0
    True
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 4.4))
    for r in sorted(rows, key=lambda r: (r.get("kind") == "non-private", r["model"])):
        xs = [p[0] for p in r["accuracy_curve"]]
        ys = [100 * p[1] for p in r["accuracy_curve"]]
        if r.get("kind") == "non-private":
            color, dash = _RIVER_STYLE.get(r["model"], ("gray", "--"))
            ax.plot(xs, ys, color=color, linestyle=dash, linewidth=1.6,
                    label=f"{r['model']} (river, non-private)")
        else:
            eps = "" if r.get("epsilon") is None else f" (ε={r['epsilon']:g})"
            ax.plot(xs, ys, linestyle="-", linewidth=1.1, label=r["model"] + eps)
    window = rows[0].get("curve_window", 1000)
    ax.set_xlabel("records seen")
    ax.set_ylabel(f"prequential accuracy % (last {window:,} records)")
    ax.set_title(f"{_DATASETS.get(rows[0]['dataset'], rows[0]['dataset'])}: accuracy over "
                 "the stream", fontsize=10)
    ax.set_ylim(top=100)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


#: row order of the speed table
_SPEED_ORDER = ("sgbdt", "dpboost", "median-forest", "greedy-forest", "rdt", "random-forest",
                "hoeffding-tree", "arf")


def _mib(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f} MiB"


def _speed_section(rows: list[dict], img_dir: Path | None, img_prefix: str) -> list[str]:
    rows = sorted(rows, key=lambda r: (_SPEED_ORDER.index(r["model"]) if r["model"] in
                                       _SPEED_ORDER else len(_SPEED_ORDER), r["model"]))
    first = rows[0]
    stream = _DATASETS.get(first["dataset"], first["dataset"])
    out = ["## Speed and memory with the library defaults", "",
           "Every stream model with its estimator's defaults (no window override: the window "
           f"forests keep their own window sizes) over the {stream} stream, {first['n']:,} "
           "records in a seeded random order, each model in a fresh "
           "Python process (`python -m dpstream.stream.bench.speed MODEL`), so no other run's "
           "heap or data is in its figures. The process first trains and drops a throwaway "
           f"model on {first.get('warmup_records', 0):,} records of another order (kernels "
           "loaded), then measures. *predict_one + learn_one*: progressive validation, all "
           "training included; *predict_many*: the whole stream scored once it has ended "
           "(river's learners: a loop of `predict_one`). *Start*: resident memory when the "
           "model is built (interpreter, libraries, the stream loaded); *peak*: the "
           "high-water mark from then on (the mark reset there); *added*: peak − start, what "
           "the model and its predictions cost; *end*: resident memory after the run, the "
           "model alive. DP models at ε = "
           f"{next((r['epsilon'] for r in rows if r.get('epsilon') is not None), 1):g}. "
           "Rows/s depend on the machine's load (these ran beside other jobs on a shared "
           "machine: repeated runs moved by up to a third); the memory figures repeat "
           "within a few MiB. Reproduce: `dpstream suite --profile full --only "
           "\"(speed)\"`, one model alone: `python -m dpstream.stream.bench.speed MODEL`.",
           "",
           "| model | estimator | kind | ε | prequential accuracy | predict_one + learn_one | "
           "predict_many | RSS start | peak RSS | added | RSS end |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = "—" if r.get("epsilon") is None else f"{r['epsilon']:g}"
        loop = " (loop)" if r.get("kind") == "non-private" else ""
        peak, start = r.get("peak_rss_mib"), r.get("rss_start_mib")
        added = "—" if peak is None or start is None else f"+{max(peak - start, 0):,.0f} MiB"
        out.append(f"| {r['model']} | `{r.get('estimator', '')}` | {r['kind']} | {eps} | "
                   f"{_fmt('accuracy', r['mean'])} | {r['rows_per_s']:,.0f} rows/s | "
                   f"{r['predict_many_rows_per_s']:,.0f} rows/s{loop} | {_mib(start)} | "
                   f"{_mib(peak)} | {added} | {_mib(r.get('rss_end_mib'))} |")
    out.append("")
    if img_dir is not None:
        name = f"bench_speed_{first['dataset']}.png"
        _plot_speed(rows, img_dir / name)
        out += [f"![rows/s with the library defaults on the {first['dataset']} stream]"
                f"({img_prefix}{name})", ""]
    return out


def render_markdown(rows: Iterable[dict], *, img_dir: str | Path | None = None,
                    img_prefix: str = "img/", profile: str | None = None,
                    skipped: Iterable[tuple] = (), scale_rows: Iterable[dict] = (),
                    command: str | None = None, results: str | None = None,
                    links: str | None = "") -> str:
    """The benchmarks page for ``rows`` (see the module).

    Parameters
    ----------
    rows
        The results file's lines.
    img_dir, img_prefix
        Where the plots go (``None``: no plots) and how the page links them.
    profile, command, results
        For the header: the profile, the command that regenerates the page (default
        ``dpstream suite --profile PROFILE``) and the results file as shown.
    skipped
        ``(cell, reason)`` pairs of cells that could not run here (:func:`.suite.skipped_cells`),
        shown as ``skipped`` with their pip line.
    scale_rows
        The scale-out runs (:mod:`.scale_report`).
    links
        The path from the page to the project's docs/ (``""``: the page is in it), for the
        links to the benchmark notes and the references; ``None``: names without links.

    Examples
    --------
    >>> rows = [{"model": "sgbdt", "dataset": "abalone", "epsilon": 0.54, "metric": "r2",
    ...          "mean": 0.35, "std": 0.03, "repeats": 3, "folds": 5, "params": {},
    ...          "labeled_fraction": 1.0, "kind": "dp", "table": "cv", "protocol": "5-fold CV"}]
    >>> md = render_markdown(rows, img_dir=None)
    >>> "| sgbdt | 0.54 | 0.350 ± 0.030 | 0.470 | 0.74 | ✗ |" in md
    True
    """
    rows = list(rows)
    img = None if img_dir is None else Path(img_dir)
    info = summarize(rows)

    def link(text: str, page: str) -> str:
        return f"{text} (docs/{page})" if links is None else f"[{text}]({links}{page})"

    cmd = command or (f"dpstream suite --profile {profile}" if profile else "dpstream suite")
    source = f"`{results}`" if results else "the results file"
    out = ["# Benchmarks", "",
           f"Generated by `{cmd}` from the {info['cells']} cells of {source}: measured "
           f"{', '.join(info['dates'])} on {'; '.join(info['machines'])}; "
           f"{info['wall_s'] / 60:.1f} min of benchmark time. Every dpstream row and every "
           "baseline of a table ran on the same splits. The page is regenerated from that "
           "file; do not edit it by hand. `make bench` renders the full profile into the "
           "project's docs/benchmarks.md (`dpstream suite --profile full --render-docs`); "
           "`make bench-quick` and any `dpstream suite` without `--render-docs` write to "
           "`reports/suite-PROFILE/` (or `--docs PATH`), never into the project's files. "
           "Analyses, ablations and the per-issue measurements are in "
           f"{link('benchmark notes', 'benchmark_notes.md')}.", ""]
    skipped = list(skipped)
    out += _skipped_table(skipped)
    gaps: dict[tuple, list[tuple]] = defaultdict(list)
    for cell, why in skipped:
        gaps[(cell.dataset, cell.protocol, float(cell.labeled_fraction))].append((cell, why))
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[_table_key(r)].append(r)
    tables = [k for k in groups if k[1] not in ("stream", "drift", "speed", "young", "delayed")]
    if tables:
        out += ["## Accuracy against ε", "",
                "Kinds: dpstream (solid lines), diffprivlib's DP random forest and "
                "InterpretML's DP-EBM (the DP peers, dashed), Kirschte et al.'s DP Mean "
                "(the floor: a DP constant, dotted), "
                "scikit-learn non-private (grey horizontal lines). Stars: the papers' quoted "
                "figures. Mean ± std over all fits.", ""]
        for key in tables:
            out += _section(key, groups[key], img, img_prefix, gaps.get(key, []))
    streams = [k for k in groups if k[1] == "stream"]
    if streams:
        out += ["## Streams: progressive validation, throughput and memory", "",
                "Each record is predicted, then learned (river's progressive validation), "
                "by every dpstream model and by river's HoeffdingTree and ARF (non-private; "
                "on Elec2 also HoeffdingAdaptiveTree). "
                "Rows/s of `predict_one` + `learn_one` include all training; `predict_many` "
                "scores the stream's records once it has ended. Peak RSS: the resident "
                "memory high-water mark of the benchmark process during the run (it "
                "includes the interpreter, the libraries and the loaded data); in brackets "
                "what the run added to the resident memory it started with.", ""]
        for key in streams:
            out += _stream_section(key[0], groups[key], img, img_prefix)
    speeds = [r for r in rows if r.get("table") == "speed"]
    if speeds:
        out += _speed_section(speeds, img, img_prefix)
    drifts = [r for r in rows if r.get("table") == "drift"]
    if drifts:
        out += drift_section(drifts, img, img_prefix)
    young = [r for r in rows if r.get("table") == "young"]
    if young:
        out += young_section(young, img, img_prefix)
    delayed = [r for r in rows if r.get("table") == "delayed"]
    if delayed:
        out += delayed_section(delayed, img, img_prefix)
    out += scale_out_section(list(scale_rows), img, img_prefix)
    out.append(_HOW.replace("[references.md](references.md)",
                            link("references.md", "references.md")))
    return "\n".join(out).rstrip() + "\n"


_HOW = """## How this page is made

* **The matrix** (`dpstream.stream.bench.suite`): each table is a dataset under the protocol of the
  seed its models come from — S-GBDT: 5-fold cross-validation on Adult (adult.data +
  adult.test, error) and Abalone (R²), and the §VIII-E late-arrival scenarios at the paper's ε
  with and without the individual Rényi filter; median forest and RDT / RDT#: random 90/10
  splits of Huang et al.'s datasets (accuracy; Adult is adult.data), with 20% of the labels for
  the semi-supervised rows; random forest and greedy forest: 10-fold cross-validation on
  adult.data and SynthA–G. ε runs over 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10 plus each paper's
  quoted ε (the quick profile: 0.1, 1 and up to two quoted ε, fewer repeats, 5-fold
  cross-validation and no scikit-learn baselines for the random and greedy forests, Adult and
  Abalone only, a 5,000-record stream).
* **Baselines on the same splits**: scikit-learn `HistGradientBoosting*` and
  `RandomForest*` (100 trees), non-private; diffprivlib `RandomForestClassifier` (its
  defaults, the schema's public bounds and classes, never bounds from the data); InterpretML's
  DP-EBM on Adult and Abalone (`DPExplainableBoosting*`, its defaults, S-GBDT's δ, the
  schema's feature types, `privacy_bounds` and target range); Kirschte et al.'s
  DP Mean (a Laplace class histogram, or a Laplace mean of the labels, at the row's ε). With a
  labeled fraction the baselines train on the labeled rows only. Matrices for scikit-learn
  and diffprivlib one-hot the categories; a missing value becomes its column's lower bound.
* **Streams**: the datasets in a seeded random order (and river's Agrawal generator with a
  drift; the full profile also Elec2, Harries' NSW electricity stream of 45,312 records, in its
  time order, never shuffled, with river's HoeffdingAdaptiveTree (seed 0) beside HoeffdingTree
  and ARF (10 models, seed 0)), predicted then learned record by record; the accuracy plot
  gives each model's accuracy over the last 1,000 records every 500 records; window forests use
  windows of `min(5000, n / 5)` records, the newest 2 kept; S-GBDT its defaults. river's
  regressors get categories one-hot (their linear leaf models take numbers only).
* **Late arrivals** (Kirschte et al. §VIII-E, built as in the authors' code): each training
  fold splits by its label — Adult's ≤ 50K records (Abalone: rings ≤ 9) train first, then the
  rest of the fold (Adult: every > 50K record; Abalone: rings ≥ 10) arrives as the late batch
  and as many rounds again run; without the individual filter the late batch alone trains
  them. The authors' figures score a classifier at the best decision threshold on the test
  fold; the Adult late table quotes that figure next to ours.
* **Speed and memory** (`dpstream.stream.bench.speed`): every stream model with its
  estimator's defaults over the Adult stream (48,842 records; not in the quick profile), each
  in a fresh Python process after a throwaway 4,000-record warm-up; the resident-memory mark
  is reset when the measured model is built.
* **Drifting streams**: river's Agrawal (functions 1 → 3 and 4 → 0), SEA (variant 0 → 2, 10%
  label noise) and Hyperplane (10 features, a new random hyperplane), each with an abrupt
  drift (a step) and a gradual one (river's `ConceptDriftStream`, width 1,000 or 5,000), at
  record 15,000 of 30,000 (the quick profile: three scenarios, one seed, no ARF). Arms: S-GBDT
  adaptive and faithful, the four window forests with their library defaults (no window
  size set by the suite, unlike the stream section above), river's HoeffdingTree and ARF.
* **Results**: one JSON line per cell as it finishes, in `benchmarks/results/PROFILE.jsonl`
  for the project's page (`--render-docs`) and in `reports/suite-PROFILE/PROFILE.jsonl` beside
  the page and its `img/` for a run of your own (`--docs PATH`: beside that page; `--results
  PATH`: there): the bench result fields (model, dataset, epsilon, delta, metric, mean,
  std, repeats, folds, seconds, rows_per_s), plus params, protocol, labeled_fraction, kind,
  peak_rss_mib, wall_s, profile, date and machine. A rerun skips every cell already there
  (resume after an interruption, or fill in the cells skipped for a missing package: they
  show as *skipped* with their pip line); `--list` shows what is done, `--only TEXT` runs a
  subset, `--render-only` redraws this page.
* **Paper figures** are the numbers the papers quote in their text or tables (Kirschte et al.
  2023 for S-GBDT; Huang et al.'s Tables 1–2 for SPE, SSPE and — measured by Huang et al. — RDT
  and SSRDT/RDT#). Xin et al. (2019), Jagannathan et al. (2013) and Fletcher & Islam (2017)
  report figures only as plots or on datasets we do not ship, so their rows have no paper
  column. Full citations: [references.md](references.md).
* **Authors' released** (S-GBDT only) is the best row per ε of the result tables Kirschte et
  al. publish with their code (github.com/kirschte/sbdt; `../shared/anchors/sbdt/`): their own
  runs, below the paper's headline figures, chosen per ε on the test folds as in their
  protocol. The full profile adds their ε (0.01–0.5) to S-GBDT's tables; the plots mark them
  with diamonds. What differs between their code and ours: docs/sgbdt.md, "Differences from
  the authors' code".
"""


def write_report(rows: Iterable[dict], docs: str | Path, *, img_dir: str | Path | None = None,
                 profile: str | None = None, skipped: Iterable[tuple] = (),
                 scale_rows: Iterable[dict] = (), command: str | None = None,
                 results: str | None = None, links: str | None = "") -> Path:
    """Render and write the page ``docs`` atomically; plots go to ``img_dir`` (default: the
    page's ``img/``). The other arguments are :func:`render_markdown`'s."""
    docs = Path(docs)
    img = docs.parent / "img" if img_dir is None else Path(img_dir)
    prefix = os.path.relpath(img, docs.parent).replace(os.sep, "/") + "/"
    text = render_markdown(rows, img_dir=img, img_prefix=prefix, profile=profile,
                           skipped=skipped, scale_rows=scale_rows, command=command,
                           results=results, links=links)
    docs.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=docs.parent, prefix=".bench-", suffix=".md")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, docs)
    return docs
