"""The runner: source -> validate -> predict (optional sink) -> learn -> checkpoint -> commit.

:class:`Runner` owns a model, its source positions, counters, recent record ids and held
records, and checkpoints all of it atomically, so a restart resumes exactly: a record is in
the model iff its offset lies below the saved position. Also here: :func:`build_model`,
:func:`csv_message`, :class:`PrequentialScore` and :func:`describe`.

When the runner checkpoints, why predictions never leave before their trees are saved, and
the outbox of ``hold_predictions``: docs/stream_internals.md#the-runner.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np

from ..connectors import CheckpointStore, SourceRecord, sink_key
from ..connectors.idmemory import IdMemory
from ..connectors.safe_state import refresh_generators
from ..models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
    SGBDTClassifier,
    SGBDTRegressor,
)
from ..models.boosting.sgbdt_party import SGBDTParty
from ..models.encoding import EncodedRows
from ..models.params import quiet_clipped_inputs, quiet_small_stream
from .labels import DEFAULT_MAX_HELD, DEFAULT_MAX_HELD_MESSAGES, LABEL_COUNTERS, Joined, LabelJoin
from .labels import held_count as _held_count
from .labels import jsonable as _jsonable
from .labels import release_epoch as _release_epoch
from .messages import (
    MAX_ID_BYTES,
    MAX_MESSAGE_BYTES,
    LabelMessage,
    RecordValidator,
    RejectedRecord,
    Schema,
    ValidRecord,
    coerce_schema,
)

__all__ = ["Runner", "build_model", "describe", "SERVICE_MODELS", "COUNTERS", "csv_message",
           "DEAD_LETTER_PREFIX", "streaming_gc", "PrequentialScore"]

#: bytes of an over-long message that its dead letter keeps (the reason gives the full size)
DEAD_LETTER_PREFIX = 4096
#: held predictions that force a checkpoint (``hold_predictions``)
HOLD_LIMIT = 20_000

log = logging.getLogger("dpstream.runner")

class Blank(NamedTuple):
    """A message the model does not learn (a dead letter, or a duplicate id): it still takes
    its place in the model's public schedule (``model.advance``) and gets a prediction, so
    nothing published tells it from a valid record (issue 63)."""
    id: Any
    x: Mapping   # what is predicted for it: a duplicate's features, or no feature at all


#: models the service can run, by name -> (target type -> class)
SERVICE_MODELS: dict[str, dict[str, type]] = {
    "sgbdt": {"numeric": SGBDTRegressor, "binary": SGBDTClassifier,
              "categorical": SGBDTClassifier},
    "median-forest": {"binary": MedianForestClassifier, "categorical": MedianForestClassifier},
    "random-forest": {"binary": RandomDecisionForestClassifier,
                      "categorical": RandomDecisionForestClassifier},
    "rdt": {"binary": RDTClassifier, "categorical": RDTClassifier},
    "greedy-forest": {"binary": GreedyForestClassifier, "categorical": GreedyForestClassifier},
}

COUNTERS = ("seen", "learned", "dead_letters", "duplicates", "unlabeled", "clipped",
            "predictions", "checkpoints", "missing_features", "coerced_labels",
            *LABEL_COUNTERS)


def build_model(name: str, schema: Schema | dict | str, *, epsilon: float,
                seed: int | None = None, params: dict | None = None) -> Any:
    """The model called ``name`` for the schema's target type, with ``params`` overrides."""
    schema = coerce_schema(schema)
    if name not in SERVICE_MODELS:
        raise ValueError(f"unknown model {name!r}; the service runs {sorted(SERVICE_MODELS)}")
    by_target = SERVICE_MODELS[name]
    kind = schema.target.type
    if kind not in by_target:
        raise ValueError(f"model {name!r} does not take a {kind!r} target "
                         f"(it takes {sorted(by_target)})")
    return by_target[kind](schema=schema, epsilon=epsilon, seed=seed, **(params or {}))


def csv_message(row: dict[str, str], schema: Schema, *, label: str | None,
                id_value: Any) -> dict:
    """A CSV row (column -> text) as a message: numbers parsed for numeric features and a
    numeric target, empty cells missing, the ``label`` column as ``y``. Text that is not a
    number stays text, so the validator rejects it with the column's name."""
    x: dict[str, Any] = {}
    for col, text in row.items():
        if col == label:
            continue
        x[col] = _cell(text, schema.features[col].type == "numeric"
                       if col in schema.features else False)
    y = None
    if label is not None and label in row:
        target = schema.target
        cell = row[label]
        if target.values is not None:
            y = _class_cell(cell, target.values)
        else:
            y = _cell(cell, True)
    return {"id": id_value, "x": x, "y": y}


def _cell(text: str, numeric: bool) -> Any:
    text = text.strip()
    if text == "":
        return None
    if numeric:
        try:
            return float(text)
        except ValueError:
            return text
    return text


def _class_cell(text: str, values: list) -> Any:
    text = text.strip()
    if text == "":
        return None
    for v in values:   # the class whose text form matches (True <- "True"/"true"/"1")
        if str(v) == text or (isinstance(v, bool) and text.lower() in (
                ("true", "1") if v else ("false", "0"))):
            return v
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        return text


class Runner(LabelJoin):
    """Feeds records into a model with exactly-once checkpoints.

    How and when it checkpoints: docs/stream_internals.md#checkpoints-and-predictions.

    Parameters
    ----------
    model
        A dpstream model (``learn_one`` / ``predict_one`` / ``privacy_report``).
    store
        The checkpoint store (holds the directory lock).
    dead_letters
        Sink with ``send(raw, reason, position, key=...)`` and ``flush()``; ``None`` counts only.
    predictions
        Sink with ``send_json(dict, key=...)`` and ``flush()``; ``None``: no predictions are
        published.
    id_memory
        How many recent record ids are remembered to reject redelivered duplicates.
    checkpoint_interval
        Seconds between checkpoints when no training round forces one.
    csv_label
        For CSV sources: the column holding the label.
    checkpoint_every_round
        Checkpoint right after each training round. Default: when ``predictions`` is set and
        ``hold_predictions`` is not.
    hold_predictions
        With ``predictions``: hold the predictions made with unsaved trees in the outbox until
        the next checkpoint instead of checkpointing after every round
        (docs/stream_internals.md#checkpoints-and-predictions).
    max_id_bytes, max_message_bytes
        The validator's caps (:class:`~dpstream.stream.messages.RecordValidator`).
    scorer
        Called as ``scorer(y, prediction)`` for every labeled record, with the prediction
        made before the model learned the record (a :class:`PrequentialScore`: what a replay
        reports; a held record's prediction is scored when its label joins it); nothing is
        published and no checkpoint is added for it.
    hold_unlabeled
        Hold records without a label for a later label message
        (:mod:`~dpstream.stream.labels`). Default: for every model but the median forest,
        which learns unlabeled records (semi-supervised) at once unless this is ``True``.
    max_held, held_messages, held_seconds
        The held records' bounds: how many (the oldest expires first), and after how many
        messages or seconds one expires (``None``: never).

    Examples
    --------
    >>> import tempfile
    >>> from dpstream.connectors import CheckpointStore, SourceRecord
    >>> from dpstream.stream import ADULT_SCHEMA
    >>> store = CheckpointStore(tempfile.mkdtemp())
    >>> runner = Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=1.0, seed=0)
    >>> runner.process(SourceRecord(b'{"id": 1, "x": {"age": 39}, "y": false}', "t:0", 0))
    >>> runner.process(SourceRecord(b'{"id": 2, "x": {"age": "old"}}', "t:0", 1))
    >>> runner.process(SourceRecord(b'{"id": 1, "x": {"age": 39}, "y": false}', "t:0", 2))
    >>> c = runner.counters
    >>> c["learned"], c["dead_letters"], c["duplicates"]
    (1, 1, 1)
    >>> runner.checkpoint(); store.close()
    >>> resumed = Runner.resume(CheckpointStore(store.directory))
    >>> resumed.positions, resumed.counters["seen"]
    ({'t:0': 3}, 3)
    """

    def __init__(self, model: Any, *, store: CheckpointStore, model_name: str = "sgbdt",
                 dead_letters: Any = None, predictions: Any = None, id_memory: int = 100_000,
                 checkpoint_interval: float = 5.0, csv_label: str | None = "y",
                 checkpoint_every_round: bool | None = None, max_id_bytes: int = MAX_ID_BYTES,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, hold_predictions: bool = False,
                 scorer: Callable[[Any, Any], None] | None = None,
                 hold_unlabeled: bool | None = None, max_held: int = DEFAULT_MAX_HELD,
                 held_messages: int | None = DEFAULT_MAX_HELD_MESSAGES,
                 held_seconds: float | None = None):
        self.model = model
        quiet_small_stream(model)   # its report is read at every checkpoint, from the start
        quiet_clipped_inputs(model)   # counted here (``clipped``), not warned about
        self.scorer = scorer
        #: the model's privacy report as of the last checkpoint (or as given): what public
        #: read-outs (``/metrics``) show, so no release a restart could redraw is visible
        #: before a checkpoint covers it
        self.saved_report: dict = model.privacy_report()
        self.model_name = model_name
        self.schema: Schema = model._encoder.schema
        self.validator = RecordValidator(self.schema, max_id_bytes=max_id_bytes,
                                         max_message_bytes=max_message_bytes)
        self.store = store
        self.dead_letters = dead_letters
        self.predictions = predictions
        self.id_memory = int(id_memory)
        if self.id_memory < 1:
            raise ValueError(f"id_memory must be >= 1, got {id_memory!r}")
        self.checkpoint_interval = float(checkpoint_interval)
        self.csv_label = csv_label
        self.hold_predictions = bool(hold_predictions)
        if self.hold_predictions and (predictions is None or checkpoint_every_round):
            raise ValueError("hold_predictions needs a predictions sink and replaces "
                             "checkpoint_every_round")
        self.checkpoint_every_round = (
            predictions is not None and not self.hold_predictions
            if checkpoint_every_round is None else bool(checkpoint_every_round))
        #: predictions made with trees newer than the last checkpoint: (message, key), saved
        #: with the next checkpoint and sent after it (``hold_predictions``)
        self.outbox: list[tuple[dict, bytes]] = []
        self.noise: dict = {}      # notes on the noise generator (public), kept in checkpoints
        self._unsaved_round = False
        #: this checkpoint's id: drawn when the model is created, kept across saves (a copy of
        #: the directory has the same one); committed with its offsets
        self.checkpoint_id = uuid.uuid4().hex[:16]
        self.positions: dict[str, int] = {}
        self.saved_positions: dict[str, int] = {}
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.ids = IdMemory(self.id_memory)
        self._init_labels(not isinstance(model, MedianForestClassifier)
                          if hold_unlabeled is None else bool(hold_unlabeled),
                          max_held, held_messages, held_seconds)
        self.lock = threading.RLock()
        self.last_checkpoint = time.monotonic()
        self.last_checkpoint_wall: float | None = None
        self.on_checkpoint: Callable[[dict], None] | None = None
        #: predicts instead of the model when set (a member's ensemble of every member's windows)
        self.predictor: Any = None
        #: called as ``on_learned(records, round_closed)`` after the model learned records
        #: (a member tracks its open window's records and publishes after a round)
        self.on_learned: Callable[[list[SourceRecord], bool], None] | None = None
        self.first_record_at: float | None = None   # monotonic time of this process's first
        #: with a dict: this thread's CPU seconds in each stage of :meth:`process_many`'s
        #: batched path and of checkpoints are added to it (``benchmarks/service_bench.py``)
        self.stage_seconds: dict[str, float] | None = None

    # ------------------------------------------------------------ life cycle
    @classmethod
    def create(cls, model_name: str, schema: Any, *, store: CheckpointStore, epsilon: float,
               seed: int | None = None, params: dict | None = None,
               party: str | None = None, **kwargs: Any) -> Runner:
        """A runner that resumes ``store``'s checkpoint if there is one, else starts fresh.

        ``party`` (an aggregation, ``"sums"`` or ``"values"``) makes the model a party of
        distributed S-GBDT (:class:`~dpstream.models.boosting.sgbdt_party.SGBDTParty`).

        A checkpoint made for another model, schema or epsilon is an error (resuming it
        under different settings would silently change the guarantee).
        """
        state = store.load()
        if state is None:
            model = build_model(model_name, schema, epsilon=epsilon, seed=seed, params=params)
            if party is not None:
                model = SGBDTParty(model, aggregation=party)
            return cls(model, store=store, model_name=model_name, **kwargs)
        runner = cls._from_state(state, store, **kwargs)
        schema = coerce_schema(schema)
        problems = []
        if (party is not None) != isinstance(runner.model, SGBDTParty):
            problems.append("a distributed party" if party is None else "a single process")
        if runner.model_name != model_name:
            problems.append(f"model {runner.model_name!r} (asked: {model_name!r})")
        if runner.model.epsilon != epsilon:
            problems.append(f"epsilon {runner.model.epsilon} (asked: {epsilon})")
        if runner.schema != schema:
            problems.append("a different schema")
        if problems:
            raise ValueError(f"the checkpoint in {store.directory} was made with "
                             f"{', '.join(problems)}; use another --checkpoint-dir or the same "
                             f"settings")
        return runner

    @classmethod
    def resume(cls, store: CheckpointStore, **kwargs: Any) -> Runner:
        """The runner saved in ``store`` (an error if there is no checkpoint)."""
        state = store.load()
        if state is None:
            raise FileNotFoundError(f"no checkpoint in {store.directory}")
        return cls._from_state(state, store, **kwargs)

    @classmethod
    def _from_state(cls, state: dict, store: CheckpointStore, **kwargs: Any) -> Runner:
        model, noise = state["model"], dict(state.get("noise") or {})
        if _model_seed(model) is None:     # production: noise from AES-CTR only
            model, replaced = refresh_generators(model)
            if replaced:
                noise["replaced"] = (f"{len(replaced)} {replaced[0]} generator(s) of a checkpoint "
                                     f"written before issue 65, replaced on resume by AES-CTR "
                                     f"generators keyed from OS entropy")
                log.warning("the checkpoint's noise came from %s; resuming with fresh AES-CTR "
                            "generators", replaced[0])
        runner = cls(model, store=store, model_name=state["model_name"], **kwargs)
        runner.noise = noise
        runner.checkpoint_id = state.get("checkpoint_id") or runner.checkpoint_id
        runner.positions = dict(state["positions"])
        runner.saved_positions = dict(state["positions"])
        runner.counters.update(state["counters"])
        runner.ids = IdMemory.from_state(state["ids"], runner.ids.size)
        runner._restore_labels(state.get("labels") or {})
        runner.last_checkpoint_wall = state.get("written")
        # predictions saved with their trees but maybe not sent before a crash: the next
        # checkpoint sends them again (a consumer drops repeats by key; maybe_checkpoint)
        runner.outbox = [(dict(msg), key) for msg, key in state.get("outbox", [])]
        log.info("resumed from %s: %d messages seen, positions %s",   # public counts only
                 store.directory, runner.counters["seen"], runner.positions)
        return runner

    # ------------------------------------------------------------ records
    def position_of(self, partition: str) -> int | None:
        with self.lock:
            return self.saved_positions.get(partition)

    def skip_to(self, partition: str, offset: int) -> None:
        """Go on from ``offset`` in ``partition``, never training the records before it
        (``serve --accept-behind``: a checkpoint behind its group's committed offset); the
        next checkpoint saves the new position."""
        with self.lock:
            if offset > self.positions.get(partition, 0):
                self.positions[partition] = offset

    def process(self, rec: SourceRecord) -> None:
        """One record: validate, deduplicate, predict, learn (or hold for its label, or join
        a held record with this label); checkpoint after a round."""
        with self.lock:
            record = self._check(rec)
            if record is None:
                return
            if self.held is not None:
                self._expire()
            model = self.model
            if type(record) is LabelMessage:
                self._join(rec, record)
                return
            pred = None
            if self.predictions is not None or self.scorer is not None:
                pred = self._predictor().predict_one(record.x)
                self._predicted(rec, record, pred)
            rounds, epoch = model.training_rounds, _release_epoch(model)
            if (type(record) is not Blank and self.held is not None
                    and not record.labeled):
                self._hold(rec, record, pred)
                self._advance([rec], rounds, epoch)
                return
            if type(record) is Blank or not self._accept(rec, record):
                self._advance([rec], rounds, epoch)
                return
            kwargs: dict[str, Any] = {"public": True} if record.public else {}
            if getattr(model, "window_seconds", None) is not None and "timestamp" in rec.meta:
                kwargs["t"] = rec.meta["timestamp"]   # time windows follow the broker's clock
            model.learn_one(record.x, record.y, **kwargs)
            self._learned([rec], model.training_rounds != rounds,
                          _release_epoch(model) != epoch)

    def _advance(self, blanks: list[SourceRecord], rounds: int, epoch: int,
                 learned: list[SourceRecord] | None = None, advanced: bool = False) -> None:
        """The model's schedule advances over messages it did not learn (``blanks``: dead
        letters, duplicates, unlabeled records of a supervised model), after it learned
        ``learned`` (the rest of a segment; ``advanced``: the model already advanced over
        ``blanks``); a round or release they end is handled as one that records end
        (:meth:`_learned`)."""
        model = self.model
        if blanks and not advanced:
            advance = getattr(model, "advance", None)
            if advance is not None:
                advance(len(blanks))
        if blanks or learned:
            self._learned(learned or [], model.training_rounds != rounds,
                          _release_epoch(model) != epoch, blanks)

    def process_many(self, recs: list[SourceRecord]) -> list[SourceRecord]:
        """Records in order, with the result of :meth:`process` on each; returns those the
        model learned.

        A model with ``learn_stream`` (the window forests) learns the admitted records with
        it, which gives the state ``learn_one`` one at a time would, vectorised. With a
        predictions sink the batch goes in *segments* that end where a round can happen (the
        record that fills the open window, or the labeled record whose drift-signal release
        may detect a change: :meth:`stream_room`); the model cannot change inside a
        segment, so one ``predict_many`` gives every record of it the prediction
        :meth:`process` would, and the checkpoint after a round holds exactly the records up
        to the one that ended it. Other models and time windows go record by record.

        The batch is validated at once into columns
        (:meth:`~dpstream.stream.messages.RecordValidator.validate_many`), and each segment's
        admitted records are laid out for the model once
        (:class:`~dpstream.models.encoding.EncodedRows`) for both ``predict_many`` and
        ``learn_stream``.
        """
        model = self.model
        predicting = self.predictions is not None or self.scorer is not None
        with self.lock:
            if (not hasattr(model, "learn_stream")
                    or getattr(model, "window_seconds", None) is not None):
                learned = []
                for rec in recs:
                    before = self.counters["learned"]
                    self.process(rec)
                    if self.counters["learned"] != before:
                        learned.append(rec)
                return learned
            clock = _Stages(self.stage_seconds)
            batch = self.validator.validate_many([rec.value for rec in recs],
                                                 slow=lambda k: self._validate(recs[k]))
            clock.lap("validate")
            encoder, decided = model._encoder, batch.records
            held = self.held
            positions, counters, ids = self.positions, self.counters, self.ids
            learns_unlabeled = bool(getattr(model, "learns_unlabeled", False))
            learned, i = [], 0
            while i < len(recs):
                if i:   # between segments the state is whole: let /metrics and /healthz in
                    # (a young S-GBDT's segments are one record each, with a checkpoint after
                    # each round when predictions are published: a whole batch under the lock
                    # kept scrapes waiting for seconds)
                    self.lock.release()
                    try:
                        time.sleep(0)   # (the GIL: a waiting reader takes the lock now)
                    finally:
                        self.lock.acquire()
                # messages until a round or a release can happen (public counts: every message
                # counts, learned or not); the model cannot change before
                room = min(r for r in model.stream_room() if r is not None)
                admitted: list = []   # (position in recs, valid record or Blank, learned?)
                while i < len(recs) and len(admitted) < room:
                    rec, record = recs[i], decided[i]
                    i += 1
                    if type(record) is ValidRecord and rec.offset >= positions.get(
                            rec.partition, 0) and (key := (type(record.id).__name__, record.id)
                                                   ) not in ids:
                        # the usual record, as _check and _accept take it, inline
                        if self.first_record_at is None:
                            self.first_record_at = time.monotonic()
                        counters["seen"] += 1
                        counters["clipped"] += record.clipped
                        counters["missing_features"] += record.missing
                        counters["coerced_labels"] += record.coerced
                        ids.add(key)
                        positions[rec.partition] = rec.offset + 1
                        if held is not None and len(held):
                            self._expire()
                        if record.y is None:
                            counters["unlabeled"] += 1
                            if held is None:
                                learn = learns_unlabeled
                            else:   # held for its label, with its row of the batch
                                self._hold_row(rec, record, key, (batch.numeric[i - 1].copy(),
                                                                  batch.codes[i - 1].copy()))
                                learn = False
                        else:
                            learn = True
                    else:
                        record = self._check(rec, record)
                        if record is None:
                            continue   # already processed: not a new message
                        if held is not None and len(held):
                            self._expire()
                        if type(record) is LabelMessage:   # a Joined pair, or counted
                            record = self._take_label(rec, record)
                            learn = type(record) is Joined
                        else:
                            learn = type(record) is not Blank and self._accept(rec, record)
                    admitted.append((i - 1, record, learn))
                clock.lap("bookkeeping")
                if not admitted:
                    continue
                # rows to encode: the valid records', and a batch-validated duplicate's (its
                # Blank keeps no features: x None); a dead letter is predicted from {}
                # (a label message has no row; a joined pair's row is its held record's)
                valid = [entry for entry in admitted if type(entry[1]) is not LabelMessage
                         and (type(entry[1]) is not Blank or entry[1].x is None)]
                at = np.fromiter((k for k, _, _ in valid), dtype=np.intp, count=len(valid))
                numeric, codes = batch.numeric[at], batch.codes[at]
                joined = self._joined_rows(valid, numeric, codes)
                rows = EncodedRows(encoder.expand({"numeric": numeric, "codes": codes}),
                                   encoder.columns)
                clock.lap("encode")
                if predicting:   # every record gets its prediction, in offset order
                    if joined:
                        asked = [j for j, entry in enumerate(valid) if type(entry[1]) is not Joined]
                        ask = rows.take(asked) if asked else None
                    else:
                        asked, ask = valid, rows
                    preds = iter(self._predictor().predict_many(ask) if asked else ())
                    clock.lap("predict")
                    made: dict = {}   # this segment's predictions of held records, by key
                    for k, record, _ in admitted:
                        kind = type(record)
                        if kind is LabelMessage:
                            continue
                        if kind is Joined:   # scored with its record's prediction
                            self._score_joined(record, made)
                            continue
                        pred = (next(preds) if kind is not Blank or record.x is None
                                else self._predictor().predict_one(record.x))
                        self._predicted(recs[k], record, pred)
                        if held is not None and kind is ValidRecord and record.y is None:
                            key = (type(record.id).__name__, record.id)
                            made[key] = _jsonable(pred)
                            held.set_prediction(key, made[key])
                    clock.lap("publish")
                rounds, epoch = model.training_rounds, _release_epoch(model)
                done, blanks = self._learn_runs(recs, admitted, valid, rows)
                clock.lap("learn")
                learned.extend(done)
                self._advance(blanks, rounds, epoch, done, advanced=True)
                clock.lap("checkpoint")   # after a round (or the member's publish)
            if self.held is not None and len(self.held):
                self._expire()   # (no label in the batch: the same records expire by its end)
            return learned

    def _learn_runs(self, recs: list[SourceRecord], admitted: list, valid: list,
                    rows: EncodedRows) -> tuple[list[SourceRecord], list[SourceRecord]]:
        """A segment's records learned and its other messages advanced over, in their order
        (runs of each: the state :meth:`process` one at a time gives); returns both lists."""
        model = self.model
        row_of = {id(entry): j for j, entry in enumerate(valid)}
        done, blanks, start = [], [], 0
        if (self.held is not None and len(admitted) > 2
                and any(type(r) is Joined for _, r, _ in admitted)):
            return self._learn_pairs(recs, admitted, valid, rows, row_of)
        while start < len(admitted):
            ok = admitted[start][2]
            end = start
            while end < len(admitted) and admitted[end][2] == ok:
                end += 1
            run = admitted[start:end]
            if ok:
                pick = [row_of[id(entry)] for entry in run]
                model.learn_stream(rows if len(pick) == len(valid) else rows.take(pick),
                                   [r.y for _, r, _ in run], public=[r.public for _, r, _ in run])
                done.extend(recs[k] for k, _, _ in run)
            else:
                advance = getattr(model, "advance", None)
                if advance is not None:
                    advance(len(run))
                blanks.extend(recs[k] for k, _, _ in run)
            start = end
        return done, blanks

    def _predictor(self) -> Any:
        return self.model if self.predictor is None else self.predictor

    def _predicted(self, rec: SourceRecord, record: Any, pred: Any) -> None:
        """A record's prediction, made before the model learned it: scored, and published."""
        if self.scorer is not None and type(record) is not Blank and record.labeled:
            self.scorer(record.y, pred)
        if self.predictions is not None:
            self._send_prediction(rec, record, pred)

    def _send_prediction(self, rec: SourceRecord, record: Any, pred: Any) -> None:
        msg = {"id": record.id, "prediction": _jsonable(pred), "partition": rec.partition,
               "offset": rec.offset}
        key = sink_key(rec.partition, rec.offset, record.id)
        if self._unsaved_round:   # made with unsaved trees: leaves after their checkpoint
            self.outbox.append((msg, key))
        else:
            self.predictions.send_json(msg, key=key)
        self.counters["predictions"] += 1

    def _release_outbox(self) -> None:
        """Send the held predictions (their trees are in the checkpoint on disk)."""
        for msg, key in self.outbox:
            self.predictions.send_json(msg, key=key)
        self.predictions.flush()
        self.outbox = []

    def _learned(self, recs: list[SourceRecord], rounded: bool, released: bool,
                 blanks: list[SourceRecord] = ()) -> None:
        """After the model learned ``recs``: count them, tell :attr:`on_learned`, then
        checkpoint after a round before any prediction can depend on it, unless
        ``on_learned`` just did; after any other noise the model drew (``released``: its
        :func:`_release_epoch` moved) hold the predictions until the next checkpoint.
        ``on_learned`` comes first: a window member notes the records in its state there, and
        a checkpoint saved before that would not restart consistently (and the member's
        publish checkpoints anyway: one save a round)."""
        self.counters["learned"] += len(recs)
        saves = self.counters["checkpoints"]
        if self.on_learned is not None:   # (a member's open window holds blanks' places too)
            self.on_learned([*recs, *blanks] if blanks else recs, rounded)
        if released and self.counters["checkpoints"] == saves:   # not saved yet
            if self.checkpoint_every_round and rounded:
                self.checkpoint()
            elif self.checkpoint_every_round or self.hold_predictions:
                # held: a release between rounds (a drift-signal window) — its predictions
                # wait for the next checkpoint, the next round's at the latest, instead of
                # a checkpoint of their own
                self._unsaved_round = True
        if len(self.outbox) >= HOLD_LIMIT:
            self.checkpoint()   # bounds the outbox's memory and the checkpoint that saves it

    def _check(self, rec: SourceRecord, decided: Any = None) -> Any:
        """The valid, new record in ``rec``; a :class:`Blank` for a dead letter or a duplicate
        id (its position moves past it here; the model's schedule still counts it); ``None``
        for an offset already processed. ``decided``: the record's
        validation outcome when a batch was validated at once (a :class:`ValidRecord` or
        the :class:`RejectedRecord`)."""
        if rec.offset < self.positions.get(rec.partition, 0):
            return None   # already processed (a re-fetch after a seek): never twice
        if self.first_record_at is None:
            self.first_record_at = time.monotonic()
        self.counters["seen"] += 1
        try:
            if decided is None:
                record = self._validate(rec)
            elif isinstance(decided, RejectedRecord):
                raise decided
            else:
                record = decided
        except RejectedRecord as exc:
            self.counters["dead_letters"] += 1
            if self.dead_letters is not None:
                raw = rec.raw
                if len(raw) > self.validator.max_message_bytes:
                    raw = raw[:DEAD_LETTER_PREFIX]
                self.dead_letters.send(raw, exc.reason, rec.position,
                                       key=sink_key(rec.partition, rec.offset, exc.id))
            self.positions[rec.partition] = rec.offset + 1
            return Blank(f"{rec.partition}@{rec.offset}" if exc.id is None else exc.id, {})
        label = self._as_label(record)
        if label is not None:
            return label
        if (type(record.id).__name__, record.id) in self.ids:
            self.counters["duplicates"] += 1
            self.positions[rec.partition] = rec.offset + 1
            return Blank(record.id, record.x)
        self.counters["clipped"] += record.clipped
        self.counters["missing_features"] += record.missing
        self.counters["coerced_labels"] += record.coerced
        return record

    def _accept(self, rec: SourceRecord, record: Any) -> bool:
        """Remember a checked record's id and move its position past it; whether the model
        learns it (not an unlabeled record for a supervised model)."""
        self._remember((type(record.id).__name__, record.id))
        self.positions[rec.partition] = rec.offset + 1
        if not record.labeled:
            self.counters["unlabeled"] += 1
            return bool(getattr(self.model, "learns_unlabeled", False))
        return True

    def _validate(self, rec: SourceRecord):
        value = rec.value
        if value is None:
            raise RejectedRecord(rec.meta.get("error", "empty record"))
        if isinstance(value, dict) and "x" not in value:   # a CSV row
            record = self.validator.validate(csv_message(
                value, self.schema, label=self.csv_label, id_value=f"{rec.partition}@{rec.offset}"))
            if type(record.y) is bool and str(record.y) != value[self.csv_label].strip():
                return record._replace(coerced=1)   # True read from "1" or "true": coerced
            return record
        return self.validator.validate(value)

    def _remember(self, key: tuple) -> None:
        self.ids.add(key)

    # ------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        return {"model_name": self.model_name, "model": self.model,
                "checkpoint_id": self.checkpoint_id,
                "positions": dict(self.positions), "counters": dict(self.counters),
                "ids": self.ids.state(), "outbox": [[msg, key] for msg, key in self.outbox],
                "labels": self._labels_state(),
                "noise": dict(self.noise)}

    def checkpoint(self) -> None:
        """Flush the sinks, then save everything atomically.

        A failed save (:class:`~dpstream.connectors.CheckpointError`: disk full, read-only
        directory) propagates and changes nothing: ``saved_positions`` — the only positions
        ever committed to the source — stay those of the last checkpoint on disk.
        """
        with self.lock:
            for sink in (self.dead_letters, self.predictions):
                if sink is not None:
                    sink.flush()
            self.counters["checkpoints"] += 1
            state = self.state()
            try:
                self.store.save(state)
            except BaseException:
                self.counters["checkpoints"] -= 1
                raise
            self.saved_positions = dict(self.positions)
            self.saved_report = self.model.privacy_report()
            self._unsaved_round = False
            if self.outbox and self.predictions is not None:
                self._release_outbox()
            self.last_checkpoint = time.monotonic()
            self.last_checkpoint_wall = time.time()
            if self.on_checkpoint is not None:
                self.on_checkpoint(self.saved_positions)

    def maybe_checkpoint(self) -> bool:
        """Checkpoint if ``checkpoint_interval`` passed and something changed (or held
        predictions restored from a checkpoint still wait to be sent)."""
        with self.lock:
            due = time.monotonic() - self.last_checkpoint >= self.checkpoint_interval
            if due and (self.positions != self.saved_positions or self.outbox):
                clock = _Stages(self.stage_seconds)
                self.checkpoint()
                clock.lap("checkpoint")
                return True
            return False

    def summary(self) -> dict:
        """Counters, offsets and the model's privacy report (see :func:`describe`)."""
        with self.lock:
            return describe(self.state())


class PrequentialScore:
    """The prequential ("predict, then learn") score of a stream: each labeled record is
    predicted by the model as it was before the record was learned (:class:`Runner`'s
    ``scorer``), so every prediction is on a record the model has not seen.

    Classifiers: accuracy, and the share of the most frequent label (what always predicting
    it would score). Regressors: R² (against the labels' own mean) and the mean absolute
    error. An exact function of the labels: curator-only, like the replay summary.

    Examples
    --------
    >>> score = PrequentialScore(classifier=True)
    >>> for y, pred in [(True, True), (False, True), (True, True)]:
    ...     score(y, pred)
    >>> score.summary()
    {'records': 3, 'accuracy': 0.6667, 'majority_share': 0.6667}
    >>> reg = PrequentialScore(classifier=False)
    >>> for y, pred in [(1.0, 2.0), (3.0, 3.0), (5.0, 4.0)]:
    ...     reg(y, pred)
    >>> reg.summary()
    {'records': 3, 'r2': 0.75, 'mae': 0.6667}
    """

    def __init__(self, classifier: bool):
        from river import metrics

        self.classifier = bool(classifier)
        self.n = 0
        self.labels: dict[Any, int] = {}
        self.metrics = ({"accuracy": metrics.Accuracy()} if self.classifier
                        else {"r2": metrics.R2(), "mae": metrics.MAE()})

    def __call__(self, y: Any, pred: Any) -> None:
        self.n += 1
        if self.classifier:
            self.labels[y] = self.labels.get(y, 0) + 1
        for metric in self.metrics.values():
            metric.update(y, _jsonable(pred))

    def summary(self) -> dict | None:
        """``{"records", "accuracy", "majority_share"}`` or ``{"records", "r2", "mae"}``
        (river's metrics, rounded to 4 digits); ``None`` before any labeled record."""
        if not self.n:
            return None
        out = {"records": self.n, **{k: round(m.get(), 4) for k, m in self.metrics.items()}}
        if self.classifier:
            out["majority_share"] = round(max(self.labels.values()) / self.n, 4)
        return out


def describe(state: dict) -> dict:
    """A runner state (live, or read from a checkpoint) as the flat summary the CLI prints."""
    counters = state["counters"]
    out = {"model": state["model_name"], "records_seen": counters["seen"],
           "records_learned": counters["learned"],
           **{k: v for k, v in counters.items() if k not in ("seen", "learned")},
           "offsets": dict(state["positions"]),
           "privacy": _quiet_report(state["model"]),
           "noise": _noise_source(state["model"], state.get("noise"))}
    held = (state.get("labels") or {}).get("held")
    if held is not None:   # records waiting for their labels (curator-only)
        out["records_held"] = _held_count(held)
    union = getattr(state["model"], "member_union", None)
    if union is not None:   # a group member: the union it predicts with, at the checkpoint
        out["union"] = dict(union)
    return out


def _model_seed(model: Any) -> int | None:
    """The seed a model (or the model a distributed party wraps) was built with."""
    inner = getattr(model, "model", None)
    return getattr(model, "seed", None if inner is None else getattr(inner, "seed", None))


def _noise_source(model: Any, noise: dict | None) -> dict:
    """Which generator the model's noise comes from (public: a class name and a note)."""
    seed = _model_seed(model)
    out = {"generator": ("AES-CTR (randomgen AESCounter), keyed from OS entropy"
                         if seed is None else
                         f"seeded (seed={seed}): reproducible, for tests and benchmarks")}
    out.update(noise or {})
    return out


@contextmanager
def streaming_gc(young: int = 50_000) -> Iterator[None]:
    """Fewer cyclic-GC passes while records stream; the old thresholds come back after.

    Every record allocates a few short-lived containers (the decoded message, its features,
    the source record); with CPython's default threshold (700 allocations) the young
    generation is collected every few dozen records and, every hundred young passes, the
    whole heap of a long-running service (the model's open window, the record-id memory,
    numba's and pydantic's module objects) is walked again: about a fifth of a Kafka replay's
    time (docs/benchmark_notes.md, "Stream service"). The hot path makes no reference cycles,
    so collecting every ``young`` allocations frees the same memory, later.

    Examples
    --------
    >>> import gc
    >>> before = gc.get_threshold()
    >>> with streaming_gc():
    ...     gc.get_threshold()[0]
    50000
    >>> gc.get_threshold() == before
    True
    """
    old = gc.get_threshold()
    gc.set_threshold(max(young, old[0]), 20, 10)
    try:
        yield
    finally:
        gc.set_threshold(*old)


class _Stages:
    """Adds this thread's CPU time since the last lap to ``seconds[stage]`` (nothing when
    ``seconds`` is ``None``)."""

    __slots__ = ("seconds", "last")

    def __init__(self, seconds: dict[str, float] | None):
        self.seconds = seconds
        self.last = time.thread_time() if seconds is not None else 0.0

    def lap(self, stage: str) -> None:
        if self.seconds is not None:
            now = time.thread_time()
            self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self.last
            self.last = now


def _quiet_report(model: Any) -> dict:
    """A model's privacy report for ``status``, without the small-stream warning."""
    quiet_small_stream(model)
    return model.privacy_report()
