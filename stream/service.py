"""``dpstream serve`` and ``dpstream replay``: the runner around a Kafka topic or a file.

Configuration comes from command-line flags or ``DPSTREAM_*`` environment variables
(:class:`ServeSettings`, pydantic-settings; flags win). SIGTERM / SIGINT stop the service
gracefully: the current record is finished, a checkpoint written, checkpointed offsets
committed, exit status 0. See ``docs/service.md``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..connectors import (
    CheckpointStore,
    JsonlDeadLetterSink,
    read_checkpoint,
)
from .http.api import MAX_BODY_BYTES, MAX_RECORDS, SERVE_CONCURRENCY, SERVE_SHARE
from .http.page import StatusPage, checkpoint_page
from .labels import DEFAULT_MAX_HELD, DEFAULT_MAX_HELD_MESSAGES, LabelPacer
from .messages import MAX_ID_BYTES, MAX_MESSAGE_BYTES, Schema
from .metrics import (
    MAX_DEAD_LETTER_SHARE,
    format_replay,
    replay_verdict,
    stop_lines,
    summary_warnings,
)
from .run import _chunks, replay
from .runner import Runner, describe, streaming_gc

__all__ = ["ServeSettings", "serve", "replay", "install_signal_handlers", "serve_command",
           "replay_command", "replay_verdict", "format_replay", "default_replay_dir",
           "status_command"]

log = logging.getLogger("dpstream.service")


class ServeSettings(BaseSettings):
    """Settings of ``dpstream serve`` (each also ``DPSTREAM_<NAME>`` in the environment)."""

    model_config = SettingsConfigDict(env_prefix="DPSTREAM_", extra="forbid",
                                      populate_by_name=True)

    bootstrap: str = Field(description="HOST:PORT of a Kafka broker")
    topic: str = Field(description="topic to consume")
    group: str = Field("dpstream", description="consumer group")
    schema_path: str = Field(validation_alias=AliasChoices("schema_path", "DPSTREAM_SCHEMA"),
                             description="schema JSON file")
    model: str = "sgbdt"
    epsilon: float = Field(gt=0)
    checkpoint_dir: str
    dead_letter_topic: str | None = None
    dead_letter_file: str | None = Field(
        None, description="JSONL dead letters (default: DIR/dead-letters.jsonl when no topic)")
    predictions_topic: str | None = None
    hold_predictions: bool = Field(
        False, description="with a predictions topic: hold the predictions made with trees "
        "newer than the last checkpoint until the next one (at most checkpoint_interval "
        "seconds) instead of checkpointing after every training round")
    max_message_bytes: int = Field(MAX_MESSAGE_BYTES, gt=0, description="a longer message is a "
                                   "dead letter (which keeps its first 4 KiB)")
    max_id_bytes: int = Field(MAX_ID_BYTES, gt=0, description="a longer record id (UTF-8 "
                              "bytes, or digits of an integer) is a dead letter")
    label_topic: str | None = Field(None, description="label messages {id, y} on this topic "
                                    "too (keyed by record id, as many partitions as --topic; "
                                    "not with --board-topic)")
    hold_unlabeled: bool | None = Field(None, description="hold records without a label for "
                                        "a later label message {id, y} (default: yes, but for "
                                        "the median forest, which learns them unlabeled)")
    max_held: int = Field(DEFAULT_MAX_HELD, gt=0, description="records held for their labels "
                          "at most (the oldest expires first)")
    held_messages: int | None = Field(DEFAULT_MAX_HELD_MESSAGES, gt=0, description="a held "
                                      "record expires after this many messages")
    held_seconds: float | None = Field(None, gt=0, description="a held record expires after "
                                       "this many seconds (default: never)")
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = Field(9108, description="0: any free port; unset: no server")
    curator_metrics: bool = Field(False, description="also export the curator-only series on "
                                  "/metrics (exact functions of private data, not DP: "
                                  "stream.metrics.CURATOR_SERIES)")
    http_predict: bool = Field(False, description="also answer POST /predict and GET /model "
                               "on the metrics port, from the model as of the last "
                               "checkpoint (docs/service.md, 'HTTP predictions')")
    http_token: str | None = Field(None, min_length=1, description="bearer token that "
                                   "/predict and /model require (DPSTREAM_HTTP_TOKEN)")
    http_refresh: float = Field(1.0, ge=0, description="seconds between rebuilds of the "
                                "served model at least (at a checkpoint, when asked)")
    http_max_bytes: int = Field(MAX_BODY_BYTES, gt=0, description="largest /predict body")
    http_max_records: int = Field(MAX_RECORDS, gt=0, description="most records per request")
    http_concurrency: int = Field(SERVE_CONCURRENCY, gt=0, description="requests worked "
                                  "on at once")
    http_share: float = Field(SERVE_SHARE, gt=0, le=1, description="share of its time a "
                              "prediction slot may work (it rests the rest)")
    seed: int | None = Field(None, description="makes the noise reproducible by anyone who "
                             "knows it: refused unless allow_seed (tests and benchmarks)")
    allow_seed: bool = Field(False, description="accept --seed (DPSTREAM_ALLOW_SEED=1; tests "
                             "and benchmarks only: a known seed reveals every noise draw)")
    params: dict[str, Any] = Field(default_factory=dict, description="model parameters")
    checkpoint_interval: float = Field(5.0, gt=0)
    connect_timeout: float = Field(60.0, gt=0, description="seconds from the first attempt to "
                                   "reach the broker at start before giving up (exit status 1)")
    kafka_client: str = Field("auto", pattern="^(auto|kafka-python|confluent)$",
                              description="Kafka client of the records, predictions and dead "
                              "letters: auto (confluent when installed), kafka-python or "
                              "confluent (pip install 'dpstream[fast]')")
    accept_behind: bool = Field(False, description="start a partition whose checkpoint "
                                "position is below the group's committed offset at that "
                                "offset (its records in between never trained by this model) "
                                "instead of exiting with status 2 (docs/reliability.md)")
    session_timeout_ms: int = Field(6000, gt=0)
    heartbeat_interval_ms: int = Field(1000, gt=0)
    board_topic: str | None = Field(None, description="distributed S-GBDT: the board topic")
    party: str | None = Field(None, description="distributed S-GBDT: this party's name")
    session: str = Field("dpstream", description="distributed S-GBDT: the job's name")
    parties: int | None = Field(None, gt=0, description="parties to wait for at the start")
    join_timeout: float = Field(5.0, gt=0)
    round_timeout: float = Field(20.0, gt=0)
    aggregation: str = Field("values", pattern="^(sums|values)$")
    roster: str | None = Field(None, description="distributed S-GBDT: the roster file (every "
                                                 "party's public key, the threshold)")
    board_key: str | None = Field(None, description="distributed S-GBDT: this party's "
                                                    "signing key (PEM)")
    model_topic: str | None = Field(None, description="window forests across group members: "
                                                      "the compacted topic of every window")
    member_id: str | None = Field(None, description="this member's id (unique in the group, "
                                                    "stable across restarts; default: host "
                                                    "name and checkpoint directory)")
    held_topic: str | None = Field(None, description="with --model-topic: the topic where a "
                                   "member offers its held records (waiting for labels) to a "
                                   "partition's next owner at a rebalance; private: it holds "
                                   "records' features (default: MODEL_TOPIC-held)")
    whole_windows: bool = Field(False, description="with --model-topic: windows and trees of "
                                "the model's full sizes in every member, instead of sizes "
                                "scaled by the member's share of the partitions")
    hold_windows: bool = Field(True, description="with --model-topic: hold each closed window "
                               "until the other members' relevance releases of its stretch "
                               "arrive (DPSTREAM_HOLD_WINDOWS=false: grow trees at the close)")
    await_windows: bool = Field(False, description="with --model-topic: while draining a "
                                "backlog, wait after each close for the other members' windows "
                                "of the same stretch (better predictions while the group "
                                "catches up, at a cost in its rate)")
    warm_up: bool = Field(True, description="before joining the group, run a throwaway copy "
                          "of the model on made-up records from the schema's public domains, "
                          "so that the first records of an assignment do not pay for loading "
                          "compiled kernels (about half a second; no private data)")

    @model_validator(mode="after")
    def _one_dead_letter_sink(self) -> ServeSettings:
        if self.seed is not None and not self.allow_seed:
            raise ValueError("serve refuses --seed: whoever knows the seed can recompute every "
                             "noise draw and subtract it. Production noise comes from an AES-CTR "
                             "generator keyed from OS entropy; for tests and benchmarks set "
                             "DPSTREAM_ALLOW_SEED=1")
        if self.dead_letter_topic and self.dead_letter_file:
            raise ValueError("give --dead-letter-topic or --dead-letter-file, not both")
        if self.label_topic is not None and self.board_topic:
            raise ValueError("--label-topic is not for distributed S-GBDT (--board-topic): "
                             "send its labels inside the records")
        if self.label_topic is not None and self.label_topic == self.topic:
            raise ValueError("--label-topic names the records topic: labels on the records "
                             "topic need no flag")
        if self.hold_predictions and (not self.predictions_topic or self.board_topic
                                      or self.model_topic):
            raise ValueError("--hold-predictions needs --predictions-topic (and is for one "
                             "process: not with --board-topic or --model-topic)")
        if self.board_topic is not None:
            if not self.party:
                raise ValueError("--board-topic needs --party (this party's unique name)")
            if not (self.roster and self.board_key):
                raise ValueError("--board-topic needs --roster and --board-key: every board "
                                 "message is signed (see docs/distributed.md)")
            if self.model != "sgbdt":
                raise ValueError(f"distributed training runs the sgbdt model, not "
                                 f"{self.model!r}")
        if self.http_predict and self.metrics_port is None:
            raise ValueError("--http-predict answers on the metrics port: give --metrics-port")
        if self.whole_windows and self.model_topic is None:
            raise ValueError("--whole-windows needs --model-topic (it sizes a member's windows)")
        if self.model_topic is not None:
            if not self.member_id:   # one checkpoint directory on one host: one member
                digest = hashlib.sha256(str(Path(self.checkpoint_dir).resolve()).encode())
                self.member_id = f"{socket.gethostname()}-{digest.hexdigest()[:10]}"
            if "/" in self.member_id:
                raise ValueError(f"a member id has no '/', got {self.member_id!r}")
            if self.seed is not None:   # members never share noise (differences would cancel it)
                mixed = hashlib.sha256(f"{self.seed}/{self.member_id}".encode()).hexdigest()
                self.seed = int(mixed[:8], 16)
            if self.held_topic is None:
                self.held_topic = f"{self.model_topic}-held"
            if self.model == "sgbdt" or self.board_topic is not None:
                raise ValueError("--model-topic merges window forests (median-forest, "
                                 "random-forest, rdt, greedy-forest); S-GBDT across processes "
                                 "is --board-topic (docs/distributed.md)")
        return self

    def shared_params(self, schema: Schema) -> dict:
        """What every party of one distributed job must agree on (posted as its config)."""
        digest = hashlib.sha256(schema.model_dump_json().encode()).hexdigest()[:16]
        return {"model": self.model, "epsilon": self.epsilon, "params": self.params,
                "aggregation": self.aggregation, "schema": digest}


def install_signal_handlers(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` (the loop finishes its batch of records and shuts down)."""
    def handler(signum, frame):
        log.info("received %s: finishing the current batch of records, then checkpoint and exit",
                 signal.Signals(signum).name)
        stop.set()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


@contextlib.contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """:func:`install_signal_handlers` for the block, the previous handlers after it (in the
    main thread; elsewhere signals cannot be handled and nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    install_signal_handlers(stop)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def serve(settings: ServeSettings, *, stop: threading.Event | None = None) -> int:
    """Consume ``settings.topic`` until stopped; returns the exit status. A broker not
    reachable within ``settings.connect_timeout`` seconds of the first attempt raises
    :class:`~dpstream.connectors.kafka.BrokerUnreachable`."""
    from ..connectors.kafka import FollowerSource, connect_deadline
    from ..connectors.kafka_clients import (
        client_version,
        kafka_dead_letter_sink,
        kafka_sink,
        kafka_source,
        resolve_kafka_client,
    )
    from .members import FollowedLabels
    from .metrics import CURATOR_WARNING, MetricsServer, ServiceCollector

    stop = stop or threading.Event()
    client = resolve_kafka_client(settings.kafka_client)
    log.info("Kafka client: %s (records, predictions, dead letters)", client_version(client))
    schema = Schema.load(settings.schema_path)
    store = CheckpointStore(settings.checkpoint_dir)
    sinks: list[Any] = []
    metrics = source = dist = member = labels = None
    startup = contextlib.ExitStack()   # the connect deadline holds until the source is in
    startup.enter_context(connect_deadline(settings.connect_timeout))
    try:
        if settings.dead_letter_topic:   # room for a message just under the size limit
            dead = kafka_dead_letter_sink(
                client, settings.bootstrap, settings.dead_letter_topic, stop=stop,
                producer_config={"max_request_size": max(1 << 20,
                                                         settings.max_message_bytes + 65536)})
        else:
            dead = JsonlDeadLetterSink(settings.dead_letter_file
                                       or Path(settings.checkpoint_dir) / "dead-letters.jsonl")
        sinks.append(dead)
        preds = None
        if settings.predictions_topic:
            preds = kafka_sink(client, settings.bootstrap, settings.predictions_topic,
                               stop=stop)
            sinks.append(preds)
        if stop.is_set():
            return 0
        runner = Runner.create(settings.model, schema, store=store, epsilon=settings.epsilon,
                               seed=settings.seed, params=settings.params, dead_letters=dead,
                               predictions=preds, hold_predictions=settings.hold_predictions,
                               checkpoint_interval=settings.checkpoint_interval,
                               party=settings.aggregation if settings.board_topic else None,
                               max_id_bytes=settings.max_id_bytes,
                               max_message_bytes=settings.max_message_bytes,
                               hold_unlabeled=settings.hold_unlabeled,
                               max_held=settings.max_held, held_messages=settings.held_messages,
                               held_seconds=settings.held_seconds)
        if settings.board_topic:
            dist = _start_party(settings, schema, runner, stop)
            sinks.append(dist.board)
        if settings.model_topic:
            member = _start_member(settings, runner, stop)
            sinks.append(member.topic)
            if member.held_topic is not None:
                sinks.append(member.held_topic)
        labels = follower = None
        if settings.label_topic:
            check_copartitioned(settings.bootstrap, settings.topic, settings.label_topic)
        pacer = LabelPacer()   # a label waits for the records produced before it
        if settings.label_topic and member is not None:   # labels follow the records' partitions
            follower = labels = FollowedLabels(member, pacer, FollowerSource(
                settings.bootstrap, settings.label_topic))
        source = kafka_source(client, settings.bootstrap, settings.topic, settings.group,
                              position_of=runner.position_of if member is None
                              else member.position_of if follower is None
                              else follower.position_of,
                              on_revoke=runner.checkpoint if member is None
                              else member.on_revoke if follower is None else follower.on_revoke,
                              consumer_config={
                                  "session_timeout_ms": settings.session_timeout_ms,
                                  "heartbeat_interval_ms": settings.heartbeat_interval_ms},
                              exclusive=member is None,
                              on_assigned=None if member is None or settings.whole_windows
                              else member.on_assigned, checkpoint_id=runner.checkpoint_id,
                              accept_behind=runner.skip_to if settings.accept_behind
                              else None)
        if settings.label_topic and member is None:
            labels = kafka_source(client, settings.bootstrap, settings.label_topic,
                                  f"{settings.group}.labels", position_of=runner.position_of,
                                  on_revoke=runner.checkpoint,
                                  consumer_config={
                                      "session_timeout_ms": settings.session_timeout_ms,
                                      "heartbeat_interval_ms": settings.heartbeat_interval_ms},
                                  exclusive=True, checkpoint_id=runner.checkpoint_id,
                                  accept_behind=runner.skip_to if settings.accept_behind
                                  else None)

        def lag() -> int | None:
            return source.lag(runner.positions) if source.consumer is not None else None

        if member is not None:   # waiting for the others' windows reads the consumer's lag
            member.backlog = lag
            # an eviction publishes nothing unpublished
            source.on_lost = member.on_lost if follower is None else follower.on_lost
        api = None if not settings.http_predict else _predict_api(settings, runner)
        if settings.metrics_port is not None:
            collector = ServiceCollector(runner, lag=lag,
                                         contact=lambda: source.last_contact,
                                         union_published=None if member is None
                                         else member.ensemble.newest_published,
                                         board=None if dist is None else lambda: dist.counters,
                                         group_shared=None if member is not None
                                         else lambda: source.shared,
                                         ensemble=None if member is None
                                         else member.ensemble.privacy_report,
                                         curator=settings.curator_metrics)
            page = StatusPage(runner, collector, source=f"dpstream serve, topic {settings.topic}")
            metrics = MetricsServer(collector, host=settings.metrics_host,
                                    port=settings.metrics_port, api=[api, page])
            if settings.curator_metrics:
                log.warning("--curator-metrics on, /metrics exports all: %s", CURATOR_WARNING)
            log.info("metrics on http://%s:%d/metrics (health: /healthz)",
                     settings.metrics_host, metrics.port)
        if settings.warm_up and not stop.is_set():
            _warm_up(settings, schema, member=member is not None)
        if not source.connect(stop) or (labels is not None and not labels.connect(stop)):
            log.info("stopped before the broker was reachable")
        startup.close()   # later connections (a broker lost mid-run) retry as long as it takes
        committed: dict[str, int] = {}
        with streaming_gc():   # the loop allocates per record; few cyclic passes
            while not stop.is_set():
                first = labels is not None and pacer.labels_first(labels)
                records = [] if first else source.poll(timeout_ms=200)
                for chunk in _chunks(records, stop):
                    if member is None:
                        runner.process_many(chunk)
                    else:
                        member.process_adopting(chunk)
                if labels is not None:   # after the records: a label finds its record held
                    pacer.saw(records, runner.positions)
                    if pacer.wants_more():
                        pacer.add(labels.poll(timeout_ms=200 if first else 0))
                    caught_up = not records and source.lag(runner.positions) == 0
                    for chunk in _chunks(pacer.ready(caught_up), stop):
                        if member is None:
                            runner.process_many(chunk)
                        else:
                            member.process_adopting(chunk)
                if member is not None:
                    member.poll()
                if dist is not None:
                    party = runner.model
                    out = dist.poll(want=party.new_records >= party.model._round_size)
                    if out is not None and out.get("status") in ("complete", "abandoned"):
                        runner.checkpoint()   # the round's tree is saved before it is used
                runner.maybe_checkpoint()
                if metrics is not None:
                    metrics.beat()
                saved = runner.saved_positions if member is None else member.committable()
                if saved != committed:
                    source.commit(saved)
                    if labels is not None:
                        labels.commit(saved)
                    committed = dict(saved)
        if dist is not None:   # apply rounds the board resolved meanwhile, then save
            dist.poll(want=False, join=False)
        if member is not None:   # close and publish the open window: nothing left unpublished
            member.stop()
        runner.checkpoint()
        if source.consumer is not None:
            source.commit(runner.saved_positions if member is None else member.committable())
        if labels is not None and labels.consumer is not None:
            labels.commit(runner.saved_positions)
        s = runner.summary()
        log.info("stopped: %d messages seen; checkpoint in %s", s["records_seen"],
                 settings.checkpoint_dir)   # public counts only: `dpstream status --curator`
        for line in stop_lines(s, curator=settings.curator_metrics):   # (curator: marked)
            log.info("%s", line)
        return 0
    finally:
        startup.close()
        if source is not None:
            source.close()
        if labels is not None:
            labels.close()
        for sink in sinks:
            try:
                sink.close()
            except Exception as exc:  # a sink whose broker is gone: the checkpoint is written
                log.warning("closing a sink: %s", exc)
        if metrics is not None:
            metrics.close()
        store.close()


def check_copartitioned(bootstrap: str, topic: str, label_topic: str,
                        timeout: float = 30.0) -> int:
    """The partition count both topics share; a clear error when they differ (a label must
    reach the partition, hence the process, of its record: labels are keyed by record id and
    the label topic has as many partitions as the records topic). A topic not created yet is
    waited for up to ``timeout`` seconds."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + timeout
        while True:
            counts = {t: len(consumer.partitions_for_topic(t) or ()) for t in (topic, label_topic)}
            if all(counts.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        consumer.close()
    if counts[topic] != counts[label_topic]:
        raise ValueError(f"--label-topic {label_topic!r} has {counts[label_topic]} partitions "
                         f"and --topic {topic!r} {counts[topic]}: labels are keyed by record "
                         f"id and must be co-partitioned with their records (the same "
                         f"partition count and the default partitioner); recreate "
                         f"{label_topic!r} with {counts[topic]}")
    return counts[topic]


def _predict_api(settings: ServeSettings, runner: Runner) -> Any:
    """``POST /predict`` and ``GET /model`` of ``--http-predict``: the runner publishes its
    model (or a member's union) at start and after checkpoints (stream/http/api.py)."""
    from .http.api import PredictAPI, SnapshotPublisher, exposure_warning

    publisher = SnapshotPublisher(settings.http_refresh)
    publisher.follow(runner)
    api = PredictAPI(publisher, token=settings.http_token, max_bytes=settings.http_max_bytes,
                     max_records=settings.http_max_records,
                     concurrency=settings.http_concurrency, share=settings.http_share)
    warning = exposure_warning(settings.metrics_host, settings.http_token)
    if warning:
        log.warning("%s", warning)
    log.info("HTTP predictions on /predict and /model (%s)%s",
             "bearer token required" if settings.http_token else "no token",
             "" if publisher.unavailable is None else f"; not yet: {publisher.unavailable}")
    return api


def _warm_up(settings: ServeSettings, schema: Schema, member: bool) -> None:
    """:func:`~dpstream.stream.run.warm_up` before the group is joined; a failure is
    logged and the service goes on (it only costs the first records' speed)."""
    from .run import warm_up

    try:
        with warnings.catch_warnings():   # a throwaway model: its warnings are not the service's
            warnings.simplefilter("ignore")
            stats = warm_up(settings.model, schema, epsilon=settings.epsilon,
                            params=settings.params, member=member)
    except Exception as exc:   # never worth a service that does not start
        log.warning("warm-up skipped (%s: %s)", type(exc).__name__, exc)
        return
    log.info("warmed up in %.2f s on %d made-up records from the schema's public domains "
             "(a throwaway model; no private data)", stats["seconds"], stats["records"])


def _start_party(settings: ServeSettings, schema: Schema, runner: Runner,
                 stop: threading.Event):
    """Connect the board and join the distributed job (docs/distributed.md)."""
    from ..connectors.bulletin import KafkaBoard
    from .distributed.party import DistributedParty
    from .distributed.roster import Roster, SigningKey

    roster, key = Roster.load(settings.roster), SigningKey.load(settings.board_key)
    board = KafkaBoard(settings.bootstrap, settings.board_topic, stop=stop)
    if not board.connect():
        raise RuntimeError("stopped before the board was reachable")
    dist = DistributedParty(runner.model, board, name=settings.party, roster=roster, key=key,
                            session=settings.session, params=settings.shared_params(schema),
                            join_timeout=settings.join_timeout,
                            round_timeout=settings.round_timeout, expected=settings.parties,
                            before_post=runner.checkpoint, lock=runner.lock, stop=stop)
    dist.start()
    log.info("party %s joined session %s on board %s", settings.party, settings.session,
             settings.board_topic)
    return dist


def _start_member(settings: ServeSettings, runner: Runner, stop: threading.Event):
    """Connect the model topic and join the window ensemble (stream/members.py)."""
    import os

    from ..connectors.model_topic import ModelTopic
    from .members import WindowMember

    key = os.environ.get("DPSTREAM_MODEL_TOPIC_KEY")
    topic = ModelTopic(settings.bootstrap, settings.model_topic, stop=stop,
                       key=None if key is None else key.encode())
    if not topic.connect():
        raise RuntimeError("stopped before the model topic was reachable")
    held = None
    if runner.held is not None:   # records wait for labels: hand them over at a rebalance
        held = ModelTopic(settings.bootstrap, settings.held_topic, stop=stop,
                          key=None if key is None else key.encode())
        if not held.connect():
            raise RuntimeError("stopped before the held topic was reachable")
    member = WindowMember(runner, topic, settings.member_id, hold=settings.hold_windows,
                          await_windows=settings.await_windows, held_topic=held)
    member.start()
    log.info("member %s: %d windows of members %s on model topic %s", settings.member_id,
             len(member.ensemble.windows), member.ensemble.members(), settings.model_topic)
    return member


# ---------------------------------------------------------------------------- replay
# ---------------------------------------------------------------------------- the commands
def configure_logging() -> None:
    """Log lines to stderr for the long-running commands (kafka-python's own: errors only,
    and none while a first connection is attempted: :mod:`dpstream.connectors.kafka`)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.ERROR)


def serve_command(options: dict[str, Any]) -> int:
    """``dpstream serve``: settings from ``options`` (the flags given) and the environment."""
    from pydantic import ValidationError

    configure_logging()
    try:
        settings = ServeSettings(**options)
    except ValidationError as exc:
        lines = [f"  {'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}"
                 for e in exc.errors()]
        raise ValueError("invalid settings (flag or DPSTREAM_* variable):\n"
                         + "\n".join(lines)) from None
    from ..connectors.kafka import BrokerUnreachable

    stop = threading.Event()
    install_signal_handlers(stop)
    try:
        return serve(settings, stop=stop)
    except BrokerUnreachable as exc:   # one line, naming the address; exit status 1
        log.error("%s", exc)
        return 1


def default_replay_dir(root: str | Path = "reports") -> Path:
    """``reports/replay-<time>`` (``-2``, ``-3``... if taken): where ``dpstream replay`` keeps
    its checkpoint and dead letters when no ``--checkpoint-dir`` is given."""
    base = Path(root) / ("replay-" + datetime.now().strftime("%Y%m%d-%H%M%S"))
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def replay_command(source: str, *, as_json: bool = False,
                   max_dead_letter_share: float = MAX_DEAD_LETTER_SHARE,
                   keep_checkpoint: bool = False, **kwargs: Any) -> int:
    """``dpstream replay``: :func:`replay` with a progress line (on a terminal only) and a
    printed summary. Without ``checkpoint_dir`` the checkpoint (which holds records: S-GBDT's
    pool, a window's buffer) and the dead letters live in a temporary folder removed at exit,
    unless ``keep_checkpoint`` puts them in :func:`default_replay_dir`. Exit status 1 when
    :func:`replay_verdict` finds a failure (each reason on stderr), else 0."""
    if not 0 <= max_dead_letter_share <= 1:
        raise ValueError(f"--max-dead-letter-share is a share in [0, 1], got "
                         f"{max_dead_letter_share!r}")
    configure_logging()
    kwargs.setdefault("evaluate", True)
    if kwargs.get("checkpoint_dir") is None and keep_checkpoint:
        kwargs["checkpoint_dir"] = str(default_replay_dir())
    shown = [0]
    progress = None
    if not as_json and sys.stderr.isatty():   # a pipe or a log file gets no progress line
        def progress(done: int, total: int | None) -> None:
            if done // 5000 != shown[0] // 5000:   # every 5,000 records (batches of up to 2,000)
                shown[0] = done
                of = f"/{total}" if total else ""
                print(f"\r  {done}{of} records", end="", file=sys.stderr, flush=True)
    kwargs.setdefault("stop", threading.Event())
    try:
        with _stopped_by_signals(kwargs["stop"]):   # SIGTERM / Ctrl-C: the temporary folder goes
            res = replay(source, progress=progress, **kwargs)
    finally:
        if shown[0]:
            print(file=sys.stderr, flush=True)   # the progress line ends before anything else
    failures = replay_verdict(res, max_dead_letter_share)
    # whole counts, curator-only ones included (stream.metrics.CURATOR_SUMMARY_KEYS): whoever
    # replays a file or topic to its end is the curator of that data, and this summary goes
    # to that operator's terminal only (unlike `serve`'s /metrics or `status`, which others read)
    if as_json:
        print(json.dumps({**res, "failures": failures, "curator_only": True}))
    else:
        print(format_replay(res))
    for failure in failures:
        print(f"dpstream replay: failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


def status_command(checkpoint_dir: str, *, as_json: bool = False,
                   curator: bool = False, html: str | None = None) -> int:
    """``dpstream status``: a checkpoint's public counters, positions and privacy report;
    ``curator`` adds the curator-only counts (:data:`~dpstream.stream.metrics.CURATOR_SUMMARY_KEYS`
    and :data:`~dpstream.stream.metrics.CURATOR_REPORT_KEYS`) with a warning on stderr."""
    from .metrics import CURATOR_WARNING, format_status, public_summary

    state, info = read_checkpoint(checkpoint_dir)   # checked, decoded safely, never unpickled
    if state is None:
        raise ValueError(f"no checkpoint in {checkpoint_dir}")
    if html is not None:   # the status page, public only (stream/http/page.py)
        Path(html).write_text(checkpoint_page(state, source=f"checkpoint {checkpoint_dir}"),
                              encoding="utf-8")
        print(f"status page: {html}")
        return 0
    out = {"checkpoint_dir": str(checkpoint_dir), **describe(state),
           "checkpoint_age_s": round(time.time() - state["written"], 3),
           "checkpoint_integrity": info["integrity"]}
    if curator:
        print(f"dpstream status: warning: --curator: {CURATOR_WARNING}", file=sys.stderr)
        out["warnings"] = summary_warnings(out)
    else:
        out = public_summary(out)
    print(json.dumps(out) if as_json else format_status(out))
    return 0


def export_command(checkpoint_dir: str, output: str, fmt: str | None = None) -> int:
    """``dpstream export``: the public model file of a checkpoint's model (its DP release
    only: :mod:`dpstream.models.public`), or its ONNX graph when ``fmt`` is ``"onnx"`` or
    ``output`` ends with ``.onnx`` (:mod:`dpstream.models.onnx_export`; the ``onnx`` extra);
    prints where it went and what it holds. A consumer group member's checkpoint holds its
    own windows; the union it predicts with is ``GET /model`` of the running member."""
    from ..models.public import describe as describe_release
    from ..models.public import export_model, public_model

    state, _info = read_checkpoint(checkpoint_dir)   # checked, decoded safely, never unpickled
    if state is None:
        raise ValueError(f"no checkpoint in {checkpoint_dir}")
    if fmt == "onnx" or (fmt is None and output.lower().endswith(".onnx")):
        from ..models.onnx_export import export_onnx

        obj, what = public_model(state["model"]), "ONNX model"
        export_onnx(obj, output)
    else:
        obj, what = export_model(state["model"], output), "public model file"
    print(f"{what}: {output} ({describe_release(obj)}, {obj['digest'][:19]}...)")
    return 0
