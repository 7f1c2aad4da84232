"""``dpstream run`` — the main job: UCI Adult replayed as a stream through S-GBDT.

Every record is first predicted (progressive validation: the model has never seen it), then
learned; :class:`~dpstream.models.SGBDTClassifier` trains one tree per ``round_size`` arrivals
under its individual Rényi filter. The job shows a progress bar, prints the final accuracy, the
guarantee (epsilon, delta per record, within the budget) and the throughput, and writes
``report.json`` (the model's privacy report, the accuracy curve, timings) and ``report.png``
(accuracy over the stream) to a folder it names. The report's privacy section is public by default
(:func:`~dpstream.stream.metrics.public_report`: no per-record budget statistics such as
``spend_by_age``); ``curator=True`` (``--curator``) keeps the whole report, with a warning.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ..accounting import check_delta, check_epsilon
from ..models import SGBDTClassifier
from .datasets import load_adult
from .metrics import CURATOR_WARNING, public_report

__all__ = ["main_job"]


def _progress(disabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), TimeElapsedColumn(), disable=disabled)


def main_job(*, epsilon: float = 0.5, delta: float = 5e-8, out: str | None = None,
             seed: int | None = None, as_json: bool = False, round_size: int = 256,
             curator: bool = False) -> int:
    """Run the job; ``curator`` writes the whole privacy report (curator-only statistics
    included) to ``report.json`` instead of its public part. Returns the exit status."""
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    say = (lambda *a, **k: None) if as_json else (lambda *a, **k: print(*a, **k))
    X, y, schema = load_adult("all")
    n = len(X)
    model = SGBDTClassifier(schema=schema, epsilon=eps, delta=d, round_size=round_size,
                            seed=seed)
    plan = model.privacy_report()
    say(f"dpstream run: UCI Adult as a stream, {n:,} records, {len(schema.features)} public "
        f"features (domains declared in the schema, never read from the data)")
    say(f"S-GBDT, epsilon = {eps:g}, delta = {d:g}: sigma_leaf = {plan['sigma']:.4g}, "
        f"alpha-hat = {plan['alpha']:g}, per-record Rényi bound {plan['rho_bound']:.4g} "
        f"(rho_max {plan['rho_max']:.4g} + the initial score's {plan['epsilon_init']:g}); "
        f"one tree per {round_size} arrivals; progressive validation (predict, then learn)")

    step = max(1, n // 100)
    curve, correct, recent = [], 0, []
    positives = 0
    t0 = time.perf_counter()
    with _progress(as_json) as progress:
        task = progress.add_task("records", total=n, status="")
        for i, (xi, yi) in enumerate(zip(X, y, strict=True), start=1):
            hit = model.predict_one(xi) == yi
            correct += hit
            recent.append(hit)
            positives += yi
            model.learn_one(xi, yi)
            if i % step == 0 or i == n:
                window = recent[-step:]
                recent = []
                curve.append({"records": i, "accuracy": correct / i,
                              "window_accuracy": float(np.mean(window)),
                              "majority_baseline": max(positives, i - positives) / i,
                              "trees": len(model.engine.forest) if model._engine else 0})
                progress.update(task, completed=i,
                                status=f"accuracy {correct / i:.3f}, "
                                       f"{curve[-1]['trees']} trees")
    elapsed = time.perf_counter() - t0
    report = model.privacy_report()
    summary = {"accuracy": correct / n, "error": 1 - correct / n, "records": n,
               "epsilon_spent": report["epsilon"], "delta": report["delta"],
               "seconds": round(elapsed, 3), "rows_per_s": round(n / elapsed, 1)}
    say(f"final progressive accuracy {summary['accuracy']:.4f} (majority class "
        f"{curve[-1]['majority_baseline']:.4f}); guarantee: ({report['epsilon']:.4g}, "
        f"{report['delta']:g})-DP per record, budget epsilon {eps:g}; {report['rounds']} rounds; "
        f"{summary['rows_per_s']:,.0f} rows/s")

    folder = Path(out) if out else Path("reports") / (
        "run-" + datetime.now().strftime("%Y%m%d-%H%M%S"))
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"job": "dpstream run: S-GBDT on UCI Adult with progressive validation",
           "created": datetime.now(UTC).isoformat(timespec="seconds"),
           "dataset": {"name": "adult", "split": "all (adult.data then adult.test)",
                       "records": n},
           "model": {"class": "SGBDTClassifier", "params": {
               k: v for k, v in model._get_params().items() if k != "schema"}},
           "summary": summary, "privacy": report if curator else public_report(report),
           "curve": curve}
    if curator:
        print(f"dpstream run: warning: --curator: report.json holds all: {CURATOR_WARNING}",
              file=sys.stderr)
    (folder / "report.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    _plot(folder / "report.png", curve, report, eps)
    say(f"report: {folder / 'report.json'} and {folder / 'report.png'}")
    if as_json:
        print(json.dumps({"report": str(folder / "report.json"), **summary}))
    sys.stdout.flush()
    return 0


def _plot(path: Path, curve: list[dict], report: dict, eps: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    r = [c["records"] for c in curve]
    ax.plot(r, [c["accuracy"] for c in curve], lw=2, label="progressive accuracy (cumulative)")
    ax.plot(r, [c["window_accuracy"] for c in curve], lw=1, alpha=0.7,
            label="accuracy of the last 1% of records")
    ax.plot(r, [c["majority_baseline"] for c in curve], "--", color="gray",
            label="majority class (non-private)")
    ax.set_xlabel("records seen")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0.5, 1.0)
    ax.set_title(f"S-GBDT on Adult as a stream: epsilon {report['epsilon']:.3g} "
                 f"(budget {eps:g}), delta {report['delta']:g}, {report['rounds']} trees")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
