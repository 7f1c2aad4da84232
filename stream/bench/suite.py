"""The replay benchmark suite: every paper row, its baselines and the throughput, in one run.

``dpstream suite --profile quick|full|smoke`` (``make bench-quick`` / ``make bench``) runs the
*cells* of :func:`build_matrix` (one dpstream model, baseline or stream run at one ε; the paper
tables are :class:`Table` s) and appends one JSON line per finished cell to the results file;
a cell whose line is already there is skipped, so an interrupted run resumes. Besides the paper
tables and their baselines the matrix holds the stream variants (:mod:`.throughput`), the
drifting streams (:mod:`.drift_streams`), the speed cells (:mod:`.speed`), the young streams
(:mod:`.young_streams`) and the delayed labels (:mod:`.delayed`); :mod:`.report` renders the
results into a page with its plots.

The matrix, its sections and what a result line carries:
docs/bench_internals.md#the-suite-cells-matrix-and-results-file.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .baselines import (
    BASELINES,
    DP_PEER_DATASETS,
    baseline_available,
    missing_optional,
    run_baseline,
)
from .delayed import DELAYED_MODELS, DELAYED_SCENARIOS, DELAYED_SEEDS, run_delayed
from .drift_streams import DRIFT_SCENARIOS, WINDOW_FORESTS, run_drift_stream
from .protocols import DEFAULT_FOLDS, SGBDT_HOLDOUT, run_bench
from .scenarios import MULTICLASS_STREAMS
from .speed import SPEED_MODELS, peak_rss_mib, reset_peak, run_speed_isolated, status_mib, trim
from .throughput import RIVER_LEARNERS, RIVER_MODELS, run_stream
from .young_streams import (
    BEFORE,
    RESTART,
    YOUNG_SCENARIOS,
    YOUNG_SEEDS,
    before_params,
    run_young_stream,
    young_models,
)

__all__ = ["GRID", "PAPER", "PROFILES", "RELEASED", "STREAM_RIVER", "Cell", "Profile", "Row",
           "Table", "build_matrix", "load_results", "machine", "peak_rss_mib", "run_suite",
           "skipped_cells", "summarize", "variant_label"]

#: the ε grid: log-spaced over 0.05 .. 10 (1-2-5 steps)
GRID = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass(frozen=True)
class Row:
    """A dpstream model (with non-default ``params``) in a table; ``repeats`` caps the profile's."""

    model: str
    params: tuple = ()
    repeats: int | None = None


@dataclass(frozen=True)
class Table:
    """A dataset under one protocol, with the dpstream rows that share its splits."""

    dataset: str
    protocol: str
    rows: tuple[Row, ...]
    labeled_fraction: float = 1.0
    grid: bool = True          # the ε grid (else the papers' ε only)
    baselines: bool = True
    nonprivate: bool = True    # with the baselines: scikit-learn's non-private ones too


@dataclass(frozen=True)
class Profile:
    """How much of the matrix a run covers."""

    tables: tuple[Table, ...]
    grid: tuple[float, ...]
    repeats: dict
    folds: dict = field(default_factory=lambda: dict(DEFAULT_FOLDS))
    paper_points: int = 99     # at most this many of a table's paper ε (the largest)
    released_points: bool = True   # also the ε of the authors' released results (RELEASED)
    streams: tuple[tuple[str, tuple[str, ...]], ...] = ()
    stream_n: int | None = None
    stream_epsilon: float = 1.0
    drifts: tuple[str, ...] = ()       # drifting streams (:mod:`.drift_streams`)
    drift_n: int = 30_000
    drift_seeds: int = 3
    drift_skip: tuple[str, ...] = ()   # arms left out of the drifting streams
    speeds: tuple[str, ...] = ()       # speed and memory rows, library defaults (:mod:`.speed`)
    speed_dataset: str = "adult"
    speed_n: int | None = None
    dp_peer: bool = True               # DP-EBM next to S-GBDT on Adult and Abalone
    young: tuple[str, ...] = ()        # young streams, now and before (:mod:`.young_streams`)
    delayed: tuple[str, ...] = ()      # delayed-label streams (:mod:`.delayed`)


#: figures quoted by the papers: (model, params, dataset, labeled_fraction) -> {ε: value};
#: values are in the table's metric (error and accuracy as fractions, R²)
PAPER: dict[tuple, dict[float, float]] = {
    # Kirschte et al. (2023) §VIII-C / §VIII-E (abstract, text and figures 4 and 6)
    ("sgbdt", (), "adult", 1.0): {0.07: 0.187, 0.15: 0.181, 0.54: 0.171},
    ("sgbdt", (), "abalone", 1.0): {0.15: 0.39, 0.17: 0.44, 0.54: 0.47},
    ("sgbdt", (), "adult-late", 1.0): {0.54: 0.177},
    ("sgbdt", (), "abalone-late", 1.0): {0.55: 0.40},
    ("sgbdt", (("individual_filter", False),), "adult-late", 1.0): {0.54: 0.196},
    ("sgbdt", (("individual_filter", False),), "abalone-late", 1.0): {0.55: 0.34},
    # Kirschte et al.'s enhanced DPBoost (text of §I, §VIII-C and §VIII-E)
    ("dpboost", (), "adult", 1.0): {0.12: 0.247, 1.0: 0.187},
    ("dpboost", (), "abalone", 1.0): {0.1: 0.25, 10.0: 0.39},
    ("dpboost", (), "adult-late", 1.0): {0.5: 0.232},
    ("dpboost", (), "abalone-late", 1.0): {0.5: 0.23},
    # Huang et al. (2023) Table 1 (ε = 2): SPE, and its RDT column (Jagannathan et al.'s RDT)
    **{("median-forest", (), d, 1.0): {2.0: v} for d, v in
       [("adult", 0.8205), ("iris", 0.8187), ("wine", 0.7300), ("syn5d", 0.9041),
        ("syn10d", 0.8764), ("syn15d", 0.8711)]},
    **{("rdt", (), d, 1.0): {2.0: v} for d, v in
       [("adult", 0.7616), ("iris", 0.8120), ("wine", 0.7411), ("syn5d", 0.7978),
        ("syn10d", 0.7857), ("syn15d", 0.8024)]},
    # Huang et al. (2023) Table 2 (ε = 2, 20% labels): SSPE-1, SSPE-2, and SSRDT (= RDT#)
    ("median-forest", (), "adult", 0.2): {2.0: 0.8053},
    ("median-forest", (("privacy", "labels_only"),), "adult", 0.2): {2.0: 0.8088},
    ("rdt-sharp", (), "adult", 0.2): {2.0: 0.7597},
    ("median-forest", (), "syn10d", 0.2): {2.0: 0.8630},
    ("median-forest", (("privacy", "labels_only"),), "syn10d", 0.2): {2.0: 0.9051},
    ("rdt-sharp", (), "syn10d", 0.2): {2.0: 0.8393},
    # Fletcher & Islam (2017) Fig. 9 and §6: "over 85%" on SynthF (30,000 records) at ε = 1
    ("random-forest", (), "synth-f", 1.0): {1.0: 0.85},
}

#: the S-GBDT authors' own released results (github.com/kirschte/sbdt,
#: ``code/cpp_gbdt/results/``; the best row per ε, ``../shared/anchors/sbdt/README.md``): same
#: keys and units as :data:`PAPER`. They sit below the paper's headline figures, and are the
#: honest anchor for S-GBDT (issue 50; docs/sgbdt.md, "Differences from the authors' code")
RELEASED: dict[tuple, dict[float, float]] = {
    ("sgbdt", (), "abalone", 1.0): {0.05: 0.180, 0.1: 0.270, 0.2: 0.317, 0.3: 0.340,
                                    0.5: 0.359},
    ("sgbdt", (), "abalone-late", 1.0): {0.05: 0.191, 0.1: 0.275, 0.2: 0.323, 0.3: 0.342,
                                         0.5: 0.364},
    ("sgbdt", (("individual_filter", False),), "abalone-late", 1.0):
        {0.05: 0.153, 0.1: 0.248, 0.2: 0.280, 0.3: 0.292, 0.5: 0.293},
    ("sgbdt", (), "adult", 1.0): {0.01: 0.2360, 0.02: 0.2171, 0.03: 0.2018, 0.1: 0.1729,
                                  0.5: 0.1620},
    ("sgbdt", (), "adult-late", 1.0): {0.01: 0.2449, 0.02: 0.2247, 0.03: 0.2404, 0.1: 0.1797,
                                       0.5: 0.1625},
}

#: the papers' non-private references: (dataset, protocol, labeled_fraction) -> (value, what)
PAPER_NONPRIVATE: dict[tuple, tuple[float, str]] = {
    ("adult", "cv", 1.0): (0.137, "Kirschte et al.'s non-private GBDT"),
    ("abalone", "cv", 1.0): (0.55, "Kirschte et al.'s non-private GBDT"),
    **{(d, "holdout", 1.0): (v, "Huang et al.'s random forest") for d, v in
       [("adult", 0.8547), ("iris", 0.9533), ("wine", 1.0), ("syn5d", 0.9249),
        ("syn10d", 0.9452), ("syn15d", 0.9408)]},
}

_NO_IRF = (("individual_filter", False),)
_SSPE2 = (("privacy", "labels_only"),)
# Kirschte et al. (2023) §VIII-F: DPBoost's gradient-based data filtering
_GDF = (("data_filter", True),)
_HUANG_DATASETS = ("iris", "wine", "syn5d", "syn10d", "syn15d")

FULL_TABLES = (
    Table("adult", "cv", (Row("sgbdt"), Row("dpboost"))),
    Table("abalone", "cv", (Row("sgbdt"), Row("dpboost"), Row("dpboost", _GDF))),
    Table("adult-late", "cv", (Row("sgbdt"), Row("sgbdt", _NO_IRF), Row("dpboost")),
          grid=False, baselines=False),
    Table("abalone-late", "cv", (Row("sgbdt"), Row("sgbdt", _NO_IRF), Row("dpboost")),
          grid=False, baselines=False),
    Table("adult", "holdout", (Row("median-forest"), Row("rdt"))),
    # multi-class S-GBDT (issue 52) beside the median forest's Table 1 rows on Iris and Wine
    *(Table(d, "holdout", (Row("median-forest"), Row("rdt"),
                           *((Row("sgbdt"),) if d in SGBDT_HOLDOUT else ())))
      for d in _HUANG_DATASETS),
    Table("adult", "holdout", (Row("median-forest"), Row("median-forest", _SSPE2), Row("rdt"),
                               Row("rdt-sharp", repeats=2)), labeled_fraction=0.2),
    Table("syn10d", "holdout", (Row("median-forest"), Row("median-forest", _SSPE2), Row("rdt"),
                                Row("rdt-sharp", repeats=5)), labeled_fraction=0.2),
    Table("adult", "kfold", (Row("random-forest"), Row("greedy-forest"))),
    *(Table(f"synth-{k}", "kfold", (Row("random-forest"),)) for k in "abcdefg"),
)

QUICK_TABLES = (
    Table("adult", "cv", (Row("sgbdt"), Row("dpboost"))),
    Table("abalone", "cv", (Row("sgbdt"), Row("dpboost"))),
    Table("adult", "holdout", (Row("median-forest"), Row("rdt"))),
    # Adult's non-private ceiling is the holdout table's (adult.data as here)
    Table("adult", "kfold", (Row("random-forest"), Row("greedy-forest")), nonprivate=False),
)

_CLASSIFIERS = ("sgbdt", "median-forest", "random-forest", "rdt", "greedy-forest")
#: S-GBDT's two arms on the drifting streams: adapting to drift, and the paper's algorithm
#: (faithful: no drift signal, no feature grid and the paper's random splits; adaptive: the
#: defaults)
ADAPTIVE, FAITHFUL = (("drift", True),), (("drift", False), ("grid_share", 0.0),
                                            ("split_levels", 0))
#: the arms of every drift scenario: S-GBDT's two, the four window forests with their library
#: defaults (no window override: the defaults are what a user streaming these records gets),
#: river's HoeffdingTree and ARF
_DRIFT_ROWS = (("sgbdt", ADAPTIVE), ("sgbdt", FAITHFUL),
               *((m, ()) for m in WINDOW_FORESTS), ("hoeffding-tree", ()), ("arf", ()))
_STREAMERS = _CLASSIFIERS + ("rdt-sharp",)
#: the river learners beside the dpstream models on a stream (default: ``RIVER_MODELS``);
#: Elec2, the real drifting stream, adds the drift-adapting HoeffdingAdaptiveTree
STREAM_RIVER: dict[str, tuple[str, ...]] = {"elec2": RIVER_LEARNERS}

PROFILES: dict[str, Profile] = {
    "full": Profile(FULL_TABLES, GRID, {"cv": 5, "holdout": 10, "kfold": 2},
                    streams=(("adult", _STREAMERS), ("abalone", ("sgbdt",)),
                             ("agrawal-drift", _STREAMERS), ("elec2", _STREAMERS),
                             *((m, _CLASSIFIERS) for m in MULTICLASS_STREAMS)),
                    drifts=tuple(DRIFT_SCENARIOS),
                    speeds=SPEED_MODELS, young=YOUNG_SCENARIOS,
                    delayed=tuple(DELAYED_SCENARIOS)),
    # <= 5 minutes on 2 cores with the bench extra: 5-fold instead of 10-fold CV for the
    # random / greedy forest table, and no scikit-learn there (QUICK_TABLES); the drifting
    # streams without river's ARF (its 30,000 records cost more than everything else of the
    # drift section) and no speed section (its rows/s: the stream section's, here) --
    # `--profile full` has them all
    "quick": Profile(QUICK_TABLES, (0.1, 1.0), {"cv": 1, "holdout": 3, "kfold": 1},
                     {"cv": 5, "kfold": 5}, paper_points=2, released_points=False,
                     streams=(("adult", _STREAMERS),),
                     stream_n=5_000,
                     drifts=("agrawal-4-0-gradual", "sea-abrupt", "hyperplane-gradual"),
                     drift_seeds=1, drift_skip=("arf",), young=("phishing", RESTART)),
    # the CI smoke test of the harness: seconds, every kind of cell
    "smoke": Profile((Table("iris", "holdout", (Row("median-forest"),)),
                      Table("abalone", "cv", (Row("sgbdt", (("n_trees", 10),)),))),
                     (1.0,), {"cv": 1, "holdout": 2, "kfold": 1}, {"cv": 2, "kfold": 2},
                     paper_points=0, released_points=False,
                     streams=(("abalone", ("sgbdt",)),), stream_n=300,
                     dp_peer=False),
}


@dataclass(frozen=True)
class Cell:
    """One line of the results: a model, baseline or stream run at one ε."""

    kind: str   # "model" | "baseline" | "stream" | "drift" | "speed" | "young" | "delayed"
    name: str
    dataset: str
    protocol: str
    epsilon: float | None
    params: tuple = ()
    labeled_fraction: float = 1.0
    repeats: int = 1
    folds: int = 1
    n: int | None = None

    def key(self) -> str:
        """The identity a results line is matched on when a run resumes."""
        return json.dumps([self.kind, self.name, self.dataset, self.protocol, self.epsilon,
                           sorted(self.params), self.labeled_fraction, self.repeats,
                           self.folds, self.n])

    def describe(self) -> str:
        eps = "non-private" if self.epsilon is None else f"ε={self.epsilon:g}"
        label = variant_label(self.name, dict(self.params))
        lf = f", {self.labeled_fraction:.0%} labels" if self.labeled_fraction < 1 else ""
        return f"{label} · {self.dataset} ({self.protocol}{lf}) · {eps}"

    def run(self, progress: Callable[[int, int], None] | None = None) -> dict:
        if self.kind == "model":
            return run_bench(self.name, self.dataset, self.epsilon, repeats=self.repeats,
                             folds=self.folds, params=dict(self.params),
                             labeled_fraction=self.labeled_fraction, progress=progress)
        if self.kind == "baseline":
            return run_baseline(self.name, self.dataset, self.protocol, epsilon=self.epsilon,
                                repeats=self.repeats, folds=self.folds,
                                labeled_fraction=self.labeled_fraction, progress=progress)
        if self.kind == "speed":        # a fresh process: its own heap and peak RSS
            return run_speed_isolated(self.name, self.dataset, epsilon=self.epsilon, n=self.n)
        if self.kind == "young":
            return run_young_stream(self.name, self.dataset, epsilon=self.epsilon,
                                    seeds=tuple(range(self.repeats)), params=dict(self.params),
                                    progress=progress)
        if self.kind == "delayed":
            return run_delayed(self.name, self.dataset, dict(self.params)["delay"],
                               epsilon=self.epsilon, seeds=tuple(range(self.repeats)),
                               progress=progress)
        if self.kind == "drift":
            return run_drift_stream(self.name, self.dataset, epsilon=self.epsilon,
                                    n=self.n or 30_000, repeats=self.repeats,
                                    params=dict(self.params), progress=progress)
        return run_stream(self.name, self.dataset, epsilon=self.epsilon, n=self.n,
                          params=dict(self.params), progress=progress)


def variant_label(model: str, params: dict) -> str:
    """A readable name for a model with parameters (``sgbdt, no IRF``, ``SSPE-2`` ...)."""
    if model == "sgbdt" and params.get("individual_filter") is False:
        return "sgbdt, no IRF"
    if model == "sgbdt" and tuple(sorted(params.items())) in (ADAPTIVE, FAITHFUL):
        return "sgbdt adaptive" if params["drift"] else "sgbdt faithful"
    if model == "median-forest" and params.get("privacy") == "labels_only":
        return "median-forest SSPE-2 (public features)"
    if model == "dpboost" and params.get("data_filter") is True:
        return "dpboost, GDF"
    if params in BEFORE.values():
        return f"{model} before"
    return model + (f" {params}" if params else "")


def _table_eps(table: Table, profile: Profile) -> list[float]:
    quoted = sorted({e for row in table.rows
                     for e in PAPER.get((row.model, row.params, table.dataset,
                                         table.labeled_fraction), {})})
    quoted = quoted[len(quoted) - min(len(quoted), profile.paper_points):]
    if profile.released_points:
        quoted = sorted(set(quoted) | {e for row in table.rows for e in RELEASED.get(
            (row.model, row.params, table.dataset, table.labeled_fraction), {})})
    if not table.grid:
        return quoted or [profile.stream_epsilon]
    return sorted(set(profile.grid) | set(quoted))


def build_matrix(profile: str | Profile) -> list[Cell]:
    """Every cell of a profile, in run order (dpstream rows, then baselines, then streams,
    then the drifting streams, the speed rows and the young streams).

    Examples
    --------
    >>> cells = build_matrix("quick")
    >>> len(cells) > 30, cells[0].kind
    (True, 'model')
    >>> sorted({c.name for c in cells if c.kind == "model"})
    ['dpboost', 'greedy-forest', 'median-forest', 'random-forest', 'rdt', 'sgbdt']
    >>> cells[0].key() == build_matrix("quick")[0].key()
    True
    """
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    cells: list[Cell] = []
    for t in prof.tables:
        repeats = prof.repeats[t.protocol]
        folds = prof.folds.get(t.protocol, 1)
        eps = _table_eps(t, prof)
        common = dict(dataset=t.dataset, protocol=t.protocol,
                      labeled_fraction=t.labeled_fraction, folds=folds)
        for row in t.rows:
            r = repeats if row.repeats is None else min(repeats, row.repeats)
            cells += [Cell("model", row.model, epsilon=e, params=row.params, repeats=r,
                           **common) for e in eps]
        if not t.baselines:
            continue
        cells += [Cell("baseline", b, epsilon=None, repeats=repeats, **common)
                  for b, (kind, _) in BASELINES.items() if kind == "non-private"
                  and t.nonprivate]
        regression = t.dataset.startswith("abalone")
        for b in ("diffprivlib-random-forest", "dp-ebm", "dp-mean"):
            if b == "diffprivlib-random-forest" and regression:
                continue
            if b == "dp-ebm" and not (prof.dp_peer and t.protocol == "cv"
                                      and t.dataset in DP_PEER_DATASETS):
                continue
            cells += [Cell("baseline", b, epsilon=e, repeats=repeats, **common) for e in eps]
    for dataset, models in prof.streams:
        regression = dataset == "abalone"
        cells += [Cell("stream", m, dataset, "stream", prof.stream_epsilon, n=prof.stream_n)
                  for m in models if not (regression and m not in ("sgbdt", "dpboost"))]
        cells += [Cell("stream", m, dataset, "stream", None, n=prof.stream_n)
                  for m in STREAM_RIVER.get(dataset, RIVER_MODELS)]
    for scenario in prof.drifts:
        cells += [Cell("drift", m, scenario, "drift", None if m in RIVER_LEARNERS
                       else prof.stream_epsilon, params=p, repeats=prof.drift_seeds,
                       n=prof.drift_n) for m, p in _DRIFT_ROWS if m not in prof.drift_skip]
    cells += [Cell("speed", m, prof.speed_dataset, "speed", None if m in RIVER_LEARNERS
                   else prof.stream_epsilon, n=prof.speed_n) for m in prof.speeds]
    cells += [Cell("young", m, d, "young", prof.stream_epsilon, params=p, repeats=YOUNG_SEEDS)
              for d in prof.young for m in young_models(d)
              for p in ((), tuple(sorted(before_params(m, d).items())))]
    cells += [Cell("delayed", m, d, "delayed", None if m == "hoeffding-tree"
                   else prof.stream_epsilon, params=(("delay", delay),),
                   repeats=1 if m == "hoeffding-tree" else DELAYED_SEEDS)
              for d in prof.delayed for m in DELAYED_MODELS for delay in DELAYED_SCENARIOS[d]]
    return cells


# ------------------------------------------------------------------ memory, machine, results
def machine() -> str:
    """A one-line description of this machine (cores, CPU, memory, OS, Python, numpy)."""
    import numpy as np
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1])
        mem = f", {kib / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration):
        pass
    return (f"{os.cpu_count()} CPU cores ({cpu}){mem}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, numpy {np.__version__}")


def load_results(path: str | Path, *, keys: tuple[str, ...] = ("cell",)) -> list[dict]:
    """The result lines of a results file that hold ``keys`` (a torn last line from a crash
    is ignored)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return [r for r in rows if isinstance(r, dict) and all(k in r for k in keys)]


def _append(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torn = False
    if path.exists() and path.stat().st_size:
        with path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"       # a crash mid-line: end the fragment first
    with path.open("a") as f:
        f.write(("\n" if torn else "") + json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def run_suite(profile: str, results: str | Path, *, only: str | None = None,
              on_start: Callable[[Cell, int, int], None] | None = None,
              on_progress: Callable[[int, int], None] | None = None,
              on_done: Callable[[Cell, dict | None, str | None], None] | None = None
              ) -> tuple[list[dict], list[tuple[Cell, str]]]:
    """Run every cell of ``profile`` not yet in ``results``; return (all rows, skipped cells).

    ``only`` keeps the cells whose description contains it. A cell that cannot run here
    (diffprivlib missing, say, or scikit-learn for a dataset it generates) is skipped with
    its reason and the pip line that fixes it, and not written, so a later run with the
    dependency fills it in.
    """
    results = Path(results)
    done = {r["cell"] for r in load_results(results)}
    cells = [c for c in build_matrix(profile) if only is None or only in c.describe()]
    todo = [c for c in cells if c.key() not in done]
    skipped: list[tuple[Cell, str]] = []
    host, today = machine(), _dt.date.today().isoformat()
    exact_peak = True
    for i, cell in enumerate(todo, start=1):
        reason = baseline_available(cell.name) if cell.kind == "baseline" else None
        if reason is not None:
            skipped.append((cell, reason))
            if on_done is not None:
                on_done(cell, None, reason)
            continue
        if on_start is not None:
            on_start(cell, i, len(todo))
        trim()
        exact_peak = reset_peak() and exact_peak
        start = status_mib("VmRSS")
        t0 = time.perf_counter()
        try:
            row = cell.run(progress=on_progress)
        except ImportError as exc:          # an optional package: skip, say which and how
            reason = missing_optional(exc)
            if reason is None:
                raise
            skipped.append((cell, reason))
            if on_done is not None:
                on_done(cell, None, reason)
            continue
        own = {"peak_rss_mib": peak_rss_mib(), "rss_start_mib": start,
               "peak_rss_scope": "cell" if exact_peak else "process"}
        if row.get("peak_rss_scope") == "subprocess":    # measured in the cell's own process
            own = {}
        row.update({"cell": cell.key(), "kind": row.get("kind", "dp"), "table": cell.protocol,
                    **own, "wall_s": round(time.perf_counter() - t0, 3), "profile": profile,
                    "date": today, "machine": host})
        _append(results, row)
        if on_done is not None:
            on_done(cell, row, None)
    return load_results(results), skipped


def skipped_cells(profile: str, rows: Iterable[dict],
                  ran: Iterable[tuple[Cell, str]] = ()) -> list[tuple[Cell, str]]:
    """The cells of ``profile`` missing from ``rows`` that cannot run here, with the reason.

    ``ran``: the cells a run just skipped (:func:`run_suite`'s second value); to them come the
    baselines of the matrix whose optional package is missing, so a page rendered without
    running (``--render-only``) names them too.
    """
    done = {r.get("cell") for r in rows}
    out = {c.key(): (c, why) for c, why in ran if c.key() not in done}
    for cell in build_matrix(profile):
        if cell.kind == "baseline" and cell.key() not in done and cell.key() not in out:
            reason = baseline_available(cell.name)
            if reason is not None:
                out[cell.key()] = (cell, reason)
    return list(out.values())


def summarize(rows: Iterable[dict]) -> dict[str, Any]:
    """Totals of a results file: cells, wall time, date range, machines."""
    rows = list(rows)
    return {"cells": len(rows), "wall_s": round(sum(r.get("wall_s", 0.0) for r in rows), 1),
            "dates": sorted({r.get("date", "?") for r in rows}),
            "machines": sorted({r.get("machine", "?") for r in rows})}
