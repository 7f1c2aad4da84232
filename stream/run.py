"""``dpstream run`` — the main job: UCI Adult replayed as a stream through S-GBDT; and
:func:`replay`, ``dpstream replay``'s engine: the service's runner over a file, a bundled
dataset or a Kafka topic to its end; and :func:`warm_up`, the service's warm-up before it
joins its group.

Every record is first predicted (progressive validation), then learned; the job writes
``report.json`` and ``report.png``, with a public privacy section unless ``--curator``. The
warm-up trains a throwaway model on records drawn from the schema's public domains only
(:func:`public_records`), so it releases and charges nothing; ``DPSTREAM_WARM_UP=false``
skips it.

The job's output, the warm-up and why it costs no privacy: docs/stream_internals.md#warm-up
and docs/stream_internals.md#the-run-and-replay-jobs.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import numpy as np

from ..accounting import check_delta, check_epsilon
from ..connectors import CheckpointStore, FileSource, JsonlDeadLetterSink, SourceRecord
from ..models import SGBDTClassifier
from ..models.schema import Schema
from .datasets import load_adult
from .labels import DEFAULT_MAX_HELD, DEFAULT_MAX_HELD_MESSAGES
from .messages import coerce_schema
from .metrics import CURATOR_WARNING, public_report, summary_warnings
from .runner import PrequentialScore, Runner, build_model, streaming_gc

__all__ = ["main_job", "replay", "BUNDLED", "warm_up", "public_records", "parse_sets"]

log = logging.getLogger("dpstream.service")


def parse_sets(items: list[str]) -> dict:
    """Model parameters from ``--set NAME=VALUE`` flags (a value is JSON, else a string).

    >>> parse_sets(["n_trees=5", "leaf_lambda=max", "drift=false"])
    {'n_trees': 5, 'leaf_lambda': 'max', 'drift': False}
    """
    params = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--set expects NAME=VALUE, got {item!r}")
        try:
            params[name] = json.loads(raw)
        except json.JSONDecodeError:
            params[name] = raw
    return params

#: made-up records a warm-up feeds (a window forest's throwaway copy closes its first windows
#: at 200 and 600 records, :data:`WARM_UP_WINDOW`; S-GBDT's first round comes after 32)
WARM_UP_RECORDS = 600

#: the first window of a window forest's throwaway copy (its ``warmup``; the model's own
#: windows are not changed)
WARM_UP_WINDOW = 200


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


BUNDLED = ("adult", "abalone")


def _bundled_records(name: str):
    from .datasets import load_abalone, load_adult

    X, y, schema = load_adult("all") if name == "adult" else load_abalone()
    partition = f"bundled:{name}"

    def records(start: int):
        for i in range(start, len(X)):
            yield SourceRecord(value={"id": i, "x": X[i], "y": y[i]}, partition=partition,
                               offset=i)
    return schema, records, len(X)


def replay(source: str, *, schema: Any = None, model: str = "sgbdt", epsilon: float,
           checkpoint_dir: str | None = None, dead_letter_file: str | None = None,
           label: str | None = "y", seed: int | None = None, params: dict | None = None,
           progress: Any = None, stop: threading.Event | None = None, evaluate: bool = False,
           connect_timeout: float | None = 60.0, kafka_client: str | None = "auto",
           accept_behind: bool = False, hold_unlabeled: bool | None = None,
           max_held: int = DEFAULT_MAX_HELD, held_messages: int | None = DEFAULT_MAX_HELD_MESSAGES,
           held_seconds: float | None = None, checkpoint_interval: float = 5.0,
           labels: str | None = None) -> dict:
    """Run the runner over a file (CSV / JSONL, optionally gzip), a bundled dataset
    (``adult``, ``abalone``) or a Kafka topic (``kafka://HOST:PORT/TOPIC?group=G``) until its
    end; returns the summary. With ``checkpoint_dir`` a second replay resumes where the first
    stopped (nothing is learned twice); without one, a temporary directory is used and
    deleted (the summary's ``checkpoint_dir`` and, unless ``dead_letter_file`` is given,
    ``dead_letter_file`` are then ``None``).

    Besides the runner's counters the summary holds this run's ``records_this_run``,
    ``learned_this_run`` and ``dead_letters_this_run``, the most frequent dead-letter
    reasons (``dead_letter_reasons``: ``{"reason", "count"}``, grouped by
    :func:`~dpstream.connectors.deadletter.reason_group`) and, with ``evaluate`` (as
    ``dpstream replay`` does; it costs the window forests about a fifth of their rate), the
    prequential score of this run's labeled records (``prequential``:
    :class:`~dpstream.stream.runner.PrequentialScore`; each record predicted before it is
    learned). All of it is the curator's: exact functions of the data, not DP.
    ``connect_timeout``: seconds a topic's broker may stay unreachable at start (then the
    summary's ``error`` says so). ``kafka_client``: a topic's client (``auto``,
    ``kafka-python`` or ``confluent``:
    :func:`~dpstream.connectors.kafka_clients.resolve_kafka_client`). A topic whose group
    committed past the checkpoint raises
    :class:`~dpstream.connectors.kafka.CheckpointBehindError` unless ``accept_behind``.
    ``hold_unlabeled``, ``max_held``, ``held_messages``, ``held_seconds``: delayed labels
    (:class:`~dpstream.stream.runner.Runner`; a label message in the file joins its record).
    A file or bundled replay checkpoints every ``checkpoint_interval`` seconds as well as at
    its end, so a replay killed midway resumes from the last one. ``labels``: a JSONL file of
    label messages read in turn with the records, a batch (2,000 lines) of each, each file
    from its own saved position.
    """
    from ..connectors.deadletter import ReasonTally

    stop = stop or threading.Event()
    file_source = label_source = None
    if source not in BUNDLED and not source.startswith("kafka://"):
        file_source = FileSource(source)   # an absent or unnamed file: a usage error, early
    if labels is not None:
        if file_source is None:
            raise ValueError("--labels goes with a file --source (a topic's labels come on "
                             "the topic, or serve --label-topic)")
        label_source = FileSource(labels)
        if label_source.partition == file_source.partition:
            raise ValueError("--labels names the records file: labels in it need no flag")
    elif source.startswith("kafka://"):   # a client not installed: a usage error, early
        from ..connectors.kafka_clients import resolve_kafka_client
        kafka_client = resolve_kafka_client(kafka_client)
    tmp = None
    if checkpoint_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="dpstream-replay-")
        checkpoint_dir = tmp.name
    bundled = source in BUNDLED
    if bundled:
        bundled_schema, records, total = _bundled_records(source)
        schema = schema if schema is not None else bundled_schema
    elif schema is None:
        raise ValueError("--schema is required unless the source is a bundled dataset "
                         f"({', '.join(BUNDLED)})")
    else:
        schema = coerce_schema(schema)
    store = CheckpointStore(checkpoint_dir)
    dead = ReasonTally(JsonlDeadLetterSink(dead_letter_file
                                           or Path(checkpoint_dir) / "dead-letters.jsonl"))
    score = PrequentialScore(schema.target.type != "numeric") if evaluate else None
    error = None
    try:
        runner = Runner.create(model, schema, store=store, epsilon=epsilon, seed=seed,
                               params=params, dead_letters=dead, csv_label=label, scorer=score,
                               hold_unlabeled=hold_unlabeled, max_held=max_held,
                               held_messages=held_messages, held_seconds=held_seconds,
                               checkpoint_interval=checkpoint_interval)
        before = dict(runner.counters)
        t0 = time.perf_counter()
        try:
            with streaming_gc():
                if source.startswith("kafka://"):
                    _replay_kafka(source, runner, stop, progress, connect_timeout,
                                  kafka_client, accept_behind, commit=tmp is None)
                else:
                    if bundled:
                        partition = f"bundled:{source}"
                        it = records(runner.positions.get(partition, 0))
                    else:
                        total = None
                        file_source.start = runner.positions.get(file_source.partition, 0)
                        it = iter(file_source)
                    chunks = _chunks(it, stop)
                    if label_source is not None:
                        label_source.start = runner.positions.get(label_source.partition, 0)
                        chunks = _in_turn(chunks, _chunks(iter(label_source), stop))
                    for chunk in chunks:
                        runner.process_many(chunk)
                        if checkpoint_dir is not None and tmp is None:
                            runner.maybe_checkpoint()   # a killed replay resumes from here
                        if progress is not None:
                            progress(runner.counters["seen"], total)
        except Exception as exc:   # a source that breaks: keep what was read, then report
            from ..connectors import SourceError
            from ..connectors.kafka import CheckpointBehindError
            if not isinstance(exc, SourceError) or isinstance(exc, CheckpointBehindError):
                raise
            error = str(exc)
            log.error("%s", error)
        runner.checkpoint()
        seconds = time.perf_counter() - t0
        out = runner.summary()
        seen = out["records_seen"] - before["seen"]
        streaming = (time.monotonic() - runner.first_record_at
                     if runner.first_record_at is not None else 0.0)
        out.update({"source": source, "seconds": round(seconds, 3),
                    "rows_per_s": round(seen / seconds) if seconds > 0 else None,
                    # from the first record on: excludes connecting and the group join
                    "rows_per_s_streaming": round(seen / streaming) if streaming > 0 else None,
                    "records_this_run": seen,
                    "learned_this_run": runner.counters["learned"] - before["learned"],
                    "dead_letters_this_run": (runner.counters["dead_letters"]
                                              - before["dead_letters"]),
                    "dead_letter_reasons": dead.top(),
                    "prequential": None if score is None else score.summary(),
                    "blank_lines_this_run": getattr(file_source, "blank_lines", 0),
                    "error": error,
                    # a signal (or the caller's event) ended the run, not the source's end
                    "stopped": stop.is_set(),
                    "checkpoint_dir": None if tmp else str(checkpoint_dir),
                    "dead_letter_file": (None if tmp and not dead_letter_file
                                         else str(dead.sink.path))})
        out["warnings"] = summary_warnings(out, out["prequential"])
        return out
    finally:
        dead.close()
        store.close()
        if tmp is not None:
            tmp.cleanup()


def _in_turn(*sources: Any):
    """One item of each iterator in turn, until all are exhausted."""
    live = [iter(s) for s in sources]
    while live:
        for it in list(live):
            try:
                yield next(it)
            except StopIteration:
                live.remove(it)


def _chunks(records: Any, stop: threading.Event, size: int = 2000):
    """``records`` in lists of up to ``size`` (one learning call each), until ``stop``."""
    it = iter(records)
    while not stop.is_set():
        chunk: list = []
        try:
            for rec in it:
                chunk.append(rec)
                if len(chunk) >= size:
                    break
        except Exception:   # a broken source: what it read before the error is processed
            if chunk:
                yield chunk
            raise
        if not chunk:
            return
        yield chunk


def _replay_kafka(url: str, runner: Runner, stop: threading.Event, progress: Any,
                  connect_timeout: float | None, kafka_client: str | None = "auto",
                  accept_behind: bool = False, commit: bool = True) -> None:
    from ..connectors.kafka import connect_deadline
    from ..connectors.kafka_clients import client_version, kafka_source, resolve_kafka_client

    u = urlparse(url)
    topic = u.path.strip("/")
    if not u.netloc or not topic:
        raise ValueError(f"expected kafka://HOST:PORT/TOPIC[?group=G], got {url!r}")
    group = parse_qs(u.query).get("group", ["dpstream-replay"])[0]
    client = resolve_kafka_client(kafka_client)
    log.info("Kafka client: %s", client_version(client))
    source = kafka_source(client, u.netloc, topic, group, position_of=runner.position_of,
                          on_revoke=runner.checkpoint, exclusive=True,
                          checkpoint_id=runner.checkpoint_id,
                          accept_behind=runner.skip_to if accept_behind else None)
    try:
        with connect_deadline(connect_timeout):
            if not source.connect(stop):
                return
        ends = source.end_offsets()
        while not stop.is_set():
            for chunk in _chunks(source.poll(timeout_ms=200), stop):
                runner.process_many(chunk)
            if progress is not None:
                progress(runner.counters["seen"], None)
            if all(runner.positions.get(k, 0) >= end for k, end in ends.items()):
                break
        runner.checkpoint()
        if commit:   # a model removed at exit owns no records: it commits none
            source.commit(runner.saved_positions)
    finally:
        source.close()


def public_records(schema: Schema, n: int, *, seed: int = 0) -> tuple[list[dict], list]:
    """``n`` made-up records and labels drawn from the schema's public domains only."""
    rng = np.random.default_rng(seed)
    cols: dict[Any, list] = {}
    for name, feat in schema.features.items():
        if feat.type == "numeric":
            cols[name] = rng.uniform(feat.min, feat.max, n).tolist()
        else:
            cols[name] = [feat.values[i] for i in rng.integers(0, len(feat.values), n)]
    t = schema.target
    y = (rng.uniform(t.min, t.max, n).tolist() if t.type == "numeric"
         else [t.values[i] for i in rng.integers(0, len(t.values), n)])
    return [{name: cols[name][i] for name in cols} for i in range(n)], y


class _Drop:
    """A predictions sink that drops what it is sent."""

    def send_json(self, msg: Any, key: Any = None) -> None:
        pass

    def flush(self) -> None:
        pass


def warm_up(model_name: str, schema: Schema, *, epsilon: float, params: dict | None = None,
            records: int = WARM_UP_RECORDS, member: bool = False) -> dict:
    """Run a throwaway runner of ``model_name`` on :func:`public_records` (nothing charged:
    docs/stream_internals.md#warm-up);
    returns ``{"records", "windows", "rounds", "seconds"}``. With ``member``, predict with a
    window ensemble and encode an exported window as the model topic does."""
    from ..connectors.model_topic import encode_message
    from ..models.windows.window_exchange import WindowEnsemble
    from ..models.windows.window_forest import WindowForestBase

    start = time.perf_counter()
    X, y = public_records(schema, records)
    values = [json.dumps({"id": f"warm-up-{i}", "x": x, "y": label}).encode()
              for i, (x, label) in enumerate(zip(X, y, strict=True))]
    with tempfile.TemporaryDirectory(prefix="dpstream-warm-up-") as tmp:
        store = CheckpointStore(tmp)
        try:
            model = build_model(model_name, schema, epsilon=epsilon, seed=0, params=params)
            if isinstance(model, WindowForestBase):   # close windows within the warm-up
                model = build_model(model_name, schema, epsilon=epsilon, seed=0, params={
                    **(params or {}), "warmup": max(WARM_UP_WINDOW, model.n_trees)})
            runner = Runner(model, store=store, model_name=model_name, predictions=_Drop(),
                            hold_predictions=True, checkpoint_interval=float("inf"))
            ensemble = None
            if member and isinstance(model, WindowForestBase):
                ensemble = WindowEnsemble(model, "warm-up")
                runner.predictor = ensemble
            for i in range(0, records, 256):
                runner.process_many([SourceRecord(value=v, partition="warm-up:0", offset=i + j)
                                     for j, v in enumerate(values[i:i + 256])])
                if ensemble is not None:
                    for state in ensemble.local_updates().values():
                        if state is not None:
                            encode_message(state)
            runner.checkpoint()
        finally:
            store.close()
    return {"records": records, "windows": int(getattr(model, "windows_closed", 0)),
            "rounds": int(getattr(model, "training_rounds", 0)),
            "seconds": round(time.perf_counter() - start, 3)}
