"""One consumer-group member of a window forest trained by several processes.

:class:`WindowMember` trains windows on the partitions it owns, publishes every finished
window to the model topic and predicts with the windows of all members; each published window
carries handoff positions, so a partition's next owner starts where the windows end. Claims
fence ownership, closed windows are held until the other members' relevance releases arrive,
and a departed member's windows are retired. :class:`FollowedLabels` is here too.

How this stays exactly once across rebalances, crashes and frozen members, and why no
record's relevance is released twice: docs/stream_internals.md#members-of-a-window-forest.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..connectors.kafka import partition_key
from ..connectors.model_topic import ModelTopic
from ..models.windows.window_exchange import (
    WindowEnsemble,
    close_open_window,
    discard_open_window,
    record_ranges,
)
from .labels import HELD_FORMAT
from .runner import Runner

__all__ = ["FollowedLabels", "WindowMember"]

log = logging.getLogger("dpstream.members")


#: how long a member waits for the model topic's news right before one of its windows closes
#: (:meth:`WindowMember.process_adopting`)
PRE_CLOSE_MS = 50

#: a member adopts the model topic's news at least every this many of its records
#: (:meth:`WindowMember.process_adopting`)
ADOPT_EVERY = 256

#: the longest a member holds a closed window's trees for the other members' releases
#: (a quiet topic, the stream's end, or a member that is gone)
HOLD_MAX_S = 2.0

#: a member this many records or more behind its partitions' ends drains a backlog
BACKLOG_MIN = 1024

#: draining a backlog, the longest a member waits after one of its closes for the other
#: members' windows of the same stretch (:meth:`WindowMember.await_windows`)
WINDOWS_MAX_S = 2.0


class WindowMember:
    """A runner's window forest as one member of a multi-process ensemble
    (docs/stream_internals.md#members-of-a-window-forest).

    Parameters
    ----------
    runner
        The member's runner (its model a window forest; its own checkpoint directory).
    topic
        The connected model topic.
    member
        This member's id: unique in the group and the same across restarts of one
        checkpoint directory.
    hold
        Hold closed windows while other members train
        (docs/stream_internals.md#relevance-before-trees); ``False``: grow each window's
        trees at its close, with the evidence that has arrived by then.
    await_windows
        While draining a backlog, wait after each close for the other members' windows of
        the same stretch (:meth:`await_windows`; it reads :attr:`backlog`, which the service
        sets): predictions as good as one process's while the group catches up, at a cost in
        its rate; ``False`` (the default): never wait.
    """

    def __init__(self, runner: Runner, topic: ModelTopic, member: str, hold: bool = True,
                 await_windows: bool = False, held_topic: ModelTopic | None = None):
        self.runner, self.topic, self.member = runner, topic, member
        #: the private topic of held records handed over at a rebalance (``None``: none)
        self.held_topic = held_topic
        self.held_offers: dict[str, Any] = {}   # held-topic key -> its newest offer read
        self.hold = bool(hold)
        self.ensemble = WindowEnsemble(runner.model, member)
        self.handoff: dict[str, int] = {}       # partition -> newest published position
        self.owned: set[str] = set()            # partitions assigned since the last revoke
        self.unverified: set[str] = set()       # assigned, the model topic not read since
        # (partition, offset) of each record in the open window, kept on the model so that
        # the checkpoint holds it too (one entry per buffered record)
        self.pending: list[tuple[str, int]] = runner.model.__dict__.setdefault(
            "member_pending", [])
        self.topic_lock = threading.Lock()      # the model topic's reader is not thread-safe
        self.discarded = 0
        self.published_positions: dict[str, int] = {}   # handoff positions at the last publish
        # partition -> offset below which records are in a published held-window release
        self.spent: dict[str, int] = {}
        self._tombstones: list[str | None] = []  # own windows voided after their publish
        self.claimed: set[str] = set()           # partitions whose own claim is the newest read
        self.own_released: set[int] = set()      # seqs of own releases read on the topic
        #                                          (the current hold's and newer)
        self._held_since: tuple[int, float] | None = None   # (seq, monotonic time)
        #: the records behind the ends of this member's partitions (``None``: not known);
        #: the service sets it to its consumer's lag
        self.backlog: Callable[[], int | None] | None = None
        self.await_closes = bool(await_windows)
        self._awaited = 0   # own closes the member has waited after
        self.await_stats = {"waits": 0, "waited_s": 0.0, "timeouts": 0}
        runner.on_learned = self._learned

    # ------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Read the model topic to its end; after a crash, drop the checkpoint's open window
        (docs/stream_internals.md#exactly-once-across-rebalances, step 4); publish what the
        checkpoint has and the topic does not."""
        self.merge()
        runner, model = self.runner, self.runner.model
        with runner.lock:
            if model._buffer_y and len(self.pending) != len(model._buffer_y) \
                    + model.held_records:
                # a checkpoint made without --model-topic: no other member can have read
                # these records (no handoff was ever published), so train them now
                log.info("member %s: closing the open window of a single-process checkpoint",
                         self.member)
                close_open_window(model)
                self.pending.clear()
            if model._buffer_y or model.held_records:
                self._discard_unfinished()
                log.warning("member %s: discarded the unpublished open window of a crash; "
                            "partitions rewound to %s", self.member, runner.positions)
                runner.checkpoint()
            self.publish()
        runner.predictor = self.ensemble   # predictions come from every member's windows

    def stop(self) -> None:
        """Close and publish the open window (a graceful stop leaves nothing unpublished)."""
        self.on_revoke()

    def _unpublished(self) -> dict[str, list[int]]:
        """Per partition, ``[first, end)`` of the records in this member's finished windows
        not yet published (kept on the model, so a checkpoint between a window's close and
        its publish knows them: a restart may find them claimed by another member)."""
        return self.runner.model.__dict__.setdefault("member_unpublished", {})

    def _discard_unfinished(self, fenced: bool = False) -> int:
        """Forget untrained the records in no published window - the held and open windows
        and, when ``fenced``, the finished windows not yet published (voided: their trees
        go) - and rewind each partition to the first of them; returns how many. Their ids
        leave the runner's memory (the newest ones) and its learned count."""
        runner, model = self.runner, self.runner.model
        n_open = len(model._buffer_y) + model.held_records
        gone = self.pending if fenced else self.pending[len(self.pending) - n_open:]
        starts = {p: r[0] for p, r in record_ranges(gone).items()}
        if fenced:
            for p, (first, _end) in self._unpublished().items():
                starts[p] = min(starts.get(p, first), first)
            self._unpublished().clear()
        for p, first in starts.items():
            runner.positions[p] = min(runner.positions.get(p, first), first)
        n = 0
        if fenced:
            first = model.windows_closed - len(model._windows)
            for index in range(first, model.windows_closed):
                if index not in self.ensemble._own:
                    n += int(model._windows[index - first].records)
                    self.ensemble.void(index)
        n += model.drop_held(model.__dict__.get("windows_held", 0) in self.own_released)
        n += discard_open_window(model)
        if fenced and getattr(model, "_drift", None) is not None:
            # the voided windows' losses fed its releases too: what it read of them must
            # influence nothing it publishes later (their next owner's read is the only one)
            model._drift.forget()
        self.pending.clear()
        self.discarded += n
        runner.ids.drop_newest(n)   # their ids: the last n remembered
        runner.counters["learned"] -= n
        return n

    def _lose(self, partitions: set[str], why: str) -> None:
        """This member no longer owns ``partitions`` (another member claimed them, or the
        group took them: an eviction): nothing it read of them after its last publish may
        enter a release. Its open and held windows and its finished windows not yet
        published are dropped untrained, every partition rewound to its last handoff, and it
        trains nothing until its next assignment (which reads the partitions it gets from
        there: :meth:`position_of`)."""
        partitions = set(partitions) & (self.owned | {p for p, _ in self.pending}
                                        | set(self._unpublished()))
        if not partitions:
            return
        # the group has moved on: train nothing until the next assignment, which seeks the
        # consumer to the rewound positions (position_of)
        self.owned.clear()
        self.unverified.clear()
        self.claimed.clear()
        self._discard_unfinished(fenced=True)
        self.runner.checkpoint()
        log.warning("member %s: lost partitions %s (%s); its unpublished windows were dropped "
                    "untrained and its partitions rewound to %s", self.member,
                    sorted(partitions), why, self.runner.positions)

    # ------------------------------------------------------------ the model topic
    def merge(self, timeout: float = 30.0) -> int:
        """Read the model topic to its end and adopt what arrived; returns the changes."""
        with self.topic_lock:
            updates = self.topic.catch_up(timeout)
        return self._adopt(updates)

    def poll(self, timeout_ms: int = 0) -> int:
        """Adopt what the model topic has now (waiting at most ``timeout_ms`` for it); grow a
        held window whose wait is over."""
        with self.topic_lock:
            updates = self.topic.poll(timeout_ms=timeout_ms)
        changed = self._adopt(updates)
        with self.runner.lock:
            if self._grow_if_ready():
                self.publish()
        return changed

    def _grow_if_ready(self) -> bool:
        """Grow the held window if the others' releases for its stretch are in, or it has
        waited :data:`HOLD_MAX_S`; returns whether it grew (the caller publishes)."""
        model = self.runner.model
        if model.held is None:
            self._held_since = None
            return False
        seq = model.__dict__.get("windows_held", 0)
        if self._held_since is None or self._held_since[0] != seq:
            self._held_since = (seq, time.monotonic())
        ready = self.ensemble.hold_ready()
        if ready or time.monotonic() - self._held_since[1] >= HOLD_MAX_S:
            stats = model.__dict__.setdefault("hold_stats", {"ready": 0, "waited": 0})
            stats["ready" if ready else "waited"] += 1   # (the rest grew at the next close)
            return model.grow_held()
        return False

    def _adopt(self, updates: dict[str, Any]) -> int:
        changed = 0
        lost: dict[str, str] = {}
        with self.runner.lock:
            for key, state in updates.items():
                fenced = (state is not None and "/claim-" not in key
                          and self.ensemble.fences(str(state.get("member")),
                                                   state.get("ranges")))
                try:
                    changed += self.ensemble.adopt(key, state)
                except ValueError as exc:
                    self.topic.rejected += 1
                    log.warning("model topic: %s", exc)
                    continue
                if "/claim-" in key and state is not None:
                    p = str(state["partition"])
                    if state["member"] == self.member:
                        self.claimed.add(p)   # the records from its start on are ours
                    elif p in self.claimed:   # claimed after us: it trains them now
                        self.claimed.discard(p)
                        lost[p] = str(state["member"])
                    continue
                if fenced:   # its records are another member's: no handoff moves for it
                    log.warning("model topic: %s refused: partitions %s were claimed by "
                                "another member before it", key, fenced)
                    if key.partition("/")[0] == self.member and "/window-" in key:
                        self._tombstones.append(self.ensemble.void(int(state["index"])))
                    if "/relevance-" not in key:
                        continue
                if "/relevance-" in key and state is not None:   # (checked by adopt)
                    for p, off in (state.get("spent") or {}).items():
                        self.spent[p] = max(self.spent.get(p, 0), int(off))
                    if key.partition("/")[0] == self.member:
                        self._note_released(int(state["seq"]))
                    continue
                if state is not None:
                    for p, off in state.get("positions", {}).items():
                        self.handoff[p] = max(self.handoff.get(p, 0), int(off))
            if lost:
                self._lose(set(lost), "claimed by " + ", ".join(sorted(set(lost.values()))))
            if changed:
                self._note_union()
        return changed

    def _note_released(self, seq: int) -> None:
        """One of this member's own held-window releases, read back on the topic. Only the
        current hold's counts (:meth:`start` asks whether its release was published), so
        the set keeps none older than it: a member runs for months."""
        current = self.runner.model.__dict__.get("windows_held", 0)
        if seq >= current:
            self.own_released.add(seq)
        if len(self.own_released) > 64:
            self.own_released = {s for s in self.own_released if s >= current}

    def _note_union(self) -> None:
        """Keep a summary of the union this member predicts with on its model, so that its
        checkpoint — and ``dpstream status`` — shows it (public: released windows' metadata)."""
        windows = self.ensemble.windows.values()
        self.runner.model.__dict__["member_union"] = {
            "member": self.member, "members": self.ensemble.members(),
            "windows_known": len(self.ensemble.windows),
            "windows_kept": len(self.ensemble.kept()),
            "records_in_windows": sum(int(s["records"]) for s in windows),
            "epsilon": max([float(s["epsilon"]) for s in windows], default=0.0),
            "holds": dict(self.runner.model.__dict__.get("hold_stats", {})),
            "awaits": {k: round(v, 2) for k, v in self.await_stats.items()},
            "members_retired": list(self.runner.model.__dict__.get("members_retired", []))}

    def handoff_positions(self) -> dict[str, int]:
        """Per partition, the offset after the last record inside a finished window."""
        out = dict(self.runner.positions)
        for p, off in self.pending:
            out[p] = min(out.get(p, off), off)
        return out

    def publish(self) -> int:
        """Checkpoint, then publish this member's finished and retired windows; returns how
        many messages were published."""
        with self.runner.lock:
            model = self.runner.model
            n = len(model._buffer_y) + model.held_records   # records in no finished window
            done = max(0, len(self.pending) - n)
            ranges = self._unpublished()   # finished windows' records, until published
            for p, (first, end) in record_ranges(self.pending[:done]).items():
                r = ranges.setdefault(p, [first, end])
                r[0], r[1] = min(r[0], first), max(r[1], end)
            del self.pending[:done]   # in place: the model holds it
            held = record_ranges(self.pending[:model.held_records])
            fenced = {*self.ensemble.fences(self.member, ranges),
                      *self.ensemble.fences(self.member, held)}
            if fenced:   # another member claimed them: nothing of it may be published
                self._lose(fenced, "claimed by another member before this publish")
                held = {}
            updates = self.ensemble.local_updates()
            updates.update({key: None for key in self._tombstones if key})
            self._tombstones.clear()
            departed = self.ensemble.departed_updates()   # (a member that left)
            if departed:
                gone = sorted({key.partition("/")[0] for key in departed})
                log.info("member %s: retiring %d windows of %s, which left the group",
                         self.member, len(departed), ", ".join(gone))
                retired = self.runner.model.__dict__.setdefault("members_retired", [])
                retired.extend(m for m in gone if m not in retired)
                del retired[:-100]   # (the newest hundred)
            updates.update(departed)
            if not updates:
                return 0
            self._note_union()
            self.runner.checkpoint()    # saved before any member may use them
            positions = self.handoff_positions()
            for key, state in updates.items():
                if state is None:
                    continue
                if "/relevance-" in key:   # its records: the held window's, first in pending
                    state["spent"] = {p: end for p, (_, end) in held.items()}
                    state["ranges"] = held
                else:
                    state["positions"] = dict(positions)
                    if "/window-" in key:   # (the windows of this publish, together)
                        state["ranges"] = {p: list(r) for p, r in ranges.items()}
            self.topic.publish(updates)   # waits for the broker's acks
            ranges.clear()
            for p, off in positions.items():
                self.handoff[p] = max(self.handoff.get(p, 0), off)
            self.published_positions = positions
            return len(updates)

    def committable(self) -> dict[str, int]:
        """Offsets Kafka may hold as committed: those of the last published window (only
        records inside published windows lie below them)."""
        with self.runner.lock:
            return dict(self.published_positions)

    # ------------------------------------------------------------ records
    def process(self, rec: Any) -> bool:
        """The runner processes ``rec`` if its partition is owned (else it is dropped: it was
        fetched before a revoke); returns whether it was processed."""
        runner = self.runner
        with runner.lock:
            if rec.partition not in self.owned:
                return False
            if self.unverified and not self._verify():
                return False
            runner.process(rec)   # _learned tracks the window and publishes after a round
            return True

    def process_many(self, recs: list) -> int:
        """:meth:`process` for each record of ``recs``, the owned ones through
        :meth:`Runner.process_many <dpstream.stream.runner.Runner.process_many>`. Without a
        predictions sink the windows that close in the batch are published once, at its end,
        with handoff positions below the open window's first record (every record below
        them is in one of those windows); with one, after each round, before the next
        prediction. Returns how many records were processed."""
        runner = self.runner
        with runner.lock:
            recs = [rec for rec in recs if rec.partition in self.owned]
            if not recs or (self.unverified and not self._verify()):
                return 0
            if self.spent and any(self._is_spent(rec) for rec in recs):
                self._process_spent(recs)
            else:
                runner.process_many(recs)
            return len(recs)

    def _is_spent(self, rec: Any) -> bool:
        """Whether ``rec`` is new here and in a published held-window release."""
        return (self.runner.positions.get(rec.partition, 0) <= rec.offset
                < self.spent.get(rec.partition, -1))

    def _process_spent(self, recs: list) -> None:
        """Records, some of them in a published held-window release of a member that crashed:
        one at a time, marking the open window that takes such a record so that it releases
        no relevance (it may close at the record, or before it by time: marked again while
        it may hold it)."""
        model = self.runner.model
        for rec in recs:
            spent = self._is_spent(rec)
            if spent:
                model.relevance_spent = True
            self.runner.process_many([rec])
            if spent and model._buffer_y:
                model.relevance_spent = True

    def process_adopting(self, recs: list) -> int:
        """:meth:`process_many` in pieces of at most :data:`ADOPT_EVERY` records, adopting
        what the model topic has between them, when other members train (it holds some of
        the partitions): the other members' windows serve, and their releases reach a held
        window, within a few hundred of this member's records, not a whole batch of up to
        2,000 (several windows at a low share). A member that does not hold its windows also
        polls (up to :data:`PRE_CLOSE_MS`) right before the record that closes its window,
        so that its trees draw split attributes from the freshest evidence. A poll, not a
        read to the topic's end: that waits for this member's own large windows too
        (150-450 ms each, measured). Returns how many records were processed."""
        model = self.runner.model
        held, total = getattr(model, "partitions", (None, None))
        if held is None or len(held) >= total:   # no other member trains
            return self.process_many(recs)
        done = 0
        while recs:
            self.await_windows()
            size = model.current_window_size
            due = None if size is None else size - len(model._buffer_y)
            if due == 1 and not model.hold:
                self.poll(timeout_ms=PRE_CLOSE_MS)
                done += self.process_many(recs[:1])
                recs = recs[1:]
                continue
            n = ADOPT_EVERY if due is None or model.hold else min(ADOPT_EVERY, due - 1)
            done += self.process_many(recs[:n])   # (a revoked partition's records: dropped)
            recs = recs[n:]
            if recs:
                self.poll()
        return done

    def await_windows(self) -> float:
        """While this member drains a backlog: after each of its closes, wait until the
        other members' windows for the same stretch of the stream have arrived
        (:meth:`~dpstream.models.windows.window_exchange.WindowEnsemble.windows_ready`), at most
        :data:`WINDOWS_MAX_S`; returns the seconds waited."""
        closes = self.ensemble.closes
        if not self.await_closes or closes == self._awaited:
            return 0.0
        self._awaited = closes
        backlog = None if self.backlog is None else self.backlog()
        if backlog is None or backlog < BACKLOG_MIN:
            return 0.0
        start = time.monotonic()
        waited = 0.0
        while not self.ensemble.windows_ready():
            if waited >= WINDOWS_MAX_S:
                self.await_stats["timeouts"] += 1
                break
            self.poll(timeout_ms=20)
            waited = time.monotonic() - start
        if waited:
            self.await_stats["waits"] += 1
            self.await_stats["waited_s"] += waited
            with self.runner.lock:
                self._note_union()   # (dpstream status shows the waits)
        return waited

    def _learned(self, recs: list, rounded: bool) -> None:
        """The runner's ``on_learned``: the open (and held) window's records, the stream
        time, and a publish after a round (a held window's release, or trees)."""
        self.pending.extend((rec.partition, rec.offset) for rec in recs)
        ts = recs[-1].meta.get("timestamp") if recs else None
        if ts is not None:
            self.ensemble.observe(ts, recs[0].meta.get("timestamp"))
        if rounded:
            self._grow_if_ready()   # the others may be ahead of this member
            self.publish()   # before the next prediction, which may use it

    def _verify(self) -> bool:
        """Read the model topic to its end (in the main loop: the rebalance listener must not
        do network calls of another client) and move each newly assigned partition to the
        newest published handoff position; records below it are then skipped untrained."""
        runner = self.runner
        try:
            self.merge()
            self._move_to_handoff()
            claims = {}
            seq = runner.model.__dict__.get("member_claims", 0)
            for p in sorted(self.unverified):   # records from here on: this member's
                key, state = self.ensemble.claim(p, runner.positions.get(p, 0), seq)
                claims[key] = state
                seq += 1
            runner.model.__dict__["member_claims"] = seq
            self.topic.publish(claims)
            self.merge()   # to the claims: windows published before them move the start
            self._move_to_handoff()
            self._take_over_held()
        except TimeoutError as exc:   # stopping, or the broker is away: process nothing yet
            log.warning("member %s: %s", self.member, exc)
            return False
        self.unverified.clear()
        return True

    def _take_over_held(self) -> None:
        """The held records of each newly assigned partition (records waiting for a label
        that will come on this partition, docs/service.md "Delayed labels"): the previous
        owner's offer on the held topic is adopted when it was made at the position this
        member starts the partition at (nobody trained the partition since); this member's
        own held records of the partition are dropped when another member has trained it
        since this member's checkpoint (they may have been learned there) or an offer
        replaces them. So a record is held by one member at a time, and learned once."""
        runner = self.runner
        if self.held_topic is None or runner.held is None:
            return
        self.held_offers.update(self.held_topic.catch_up())
        for p in sorted(self.unverified):
            start = runner.positions.get(p, 0)
            offer = self.held_offers.get(f"held/{p}")
            fresh = (offer is not None and offer.get("format") == HELD_FORMAT
                     and int(offer["position"]) == start)
            stale = self.handoff.get(p, -1) > runner.saved_positions.get(p, -1)
            if fresh or stale:
                dropped = runner.held.drop_partitions({p})
                if dropped and not fresh:
                    runner.counters["held_dropped"] += len(dropped)
                    log.info("member %s: dropped %d held records of %s, trained by another "
                             "member since", self.member, len(dropped), p)
            if fresh and offer["ids"]:
                for key, _ in runner.held.adopt(offer, p, seen=runner.counters["seen"]):
                    runner._expired(key)
                for key in zip(offer["kinds"], offer["ids"], strict=True):
                    runner.ids.add(key)
                runner.counters["held_adopted"] += len(offer["ids"])
                log.info("member %s: took over %d held records of %s from %s", self.member,
                         len(offer["ids"]), p, offer.get("member"))

    def _hand_over(self, partitions: set[str]) -> None:
        """Offer this member's held records of ``partitions`` (being revoked) to their next
        owner on the held topic, at the handoff position it starts from; they leave this
        member's store (checkpointed first: a crash in between loses them, never doubles
        them)."""
        runner = self.runner
        if self.held_topic is None or runner.held is None or not partitions:
            return
        packs = runner.held.hand_over(partitions, seen=runner.counters["seen"])
        if not packs:
            return
        n = sum(len(pack["ids"]) for pack in packs.values())
        runner.counters["held_handed_over"] += n
        runner.checkpoint()
        self.held_topic.publish({
            f"held/{p}": {"format": HELD_FORMAT, "member": self.member, "partition": p,
                          "position": int(self.handoff.get(p, runner.positions.get(p, 0))),
                          **pack} for p, pack in packs.items()})
        log.info("member %s: handed over %d held records of %s", self.member, n,
                 sorted(packs))

    def _move_to_handoff(self) -> None:
        """Each newly assigned partition starts at the newest handoff position read."""
        runner = self.runner
        for p in self.unverified:
            pos = self.handoff.get(p)
            if pos is not None and runner.positions.get(p, 0) < pos:
                runner.positions[p] = pos

    # ------------------------------------------------------------ rebalances
    def position_of(self, partition: str) -> int | None:
        """Where this member starts an assigned partition (KafkaSource's ``position_of``, on
        the rebalance listener): the larger of its checkpoint's position and the newest
        handoff position read so far. Before the partition's first record is trained the
        model topic is read to its end (:meth:`process`), so a handoff published by the
        member that held it before is never missed."""
        runner = self.runner
        with runner.lock:
            known = [v for v in (runner.saved_positions.get(partition),
                                 self.handoff.get(partition)) if v is not None]
            self.owned.add(partition)
            self.unverified.add(partition)
            if not known:
                return None
            pos = max(known)
            if runner.positions.get(partition, 0) < pos:
                runner.positions[partition] = pos
            return pos

    def on_assigned(self, partitions: list[int], total: int) -> None:
        """After an assignment: this member reads ``partitions`` of the topic's ``total``,
        so its windows and trees take that share of the model's sizes and it releases the
        attribute relevance of the attributes those partitions own
        (:meth:`~dpstream.models.windows.window_forest.WindowForestBase.set_share`). The open window
        was closed at the revoke before, so the new sizes start with a new window."""
        partitions = sorted(int(p) for p in partitions)
        share = max(1, min(len(partitions), total)) / max(total, 1)
        with self.runner.lock:
            model = self.runner.model
            if share != model.share or partitions != model.partitions[0]:
                log.info("member %s: partitions %s of %d; windows and trees at %.4g of the "
                         "model's sizes", self.member, partitions, total, share)
            model.set_share(share, partitions, total)
            # others train too: hold closed windows for their relevance (window_forest's
            # held windows)
            model.hold = self.hold and len(partitions) < total

    def on_lost(self) -> None:
        """The group took this member's partitions without a revoke (its session expired:
        an eviction): another member may be training them already, so nothing unpublished
        is published (:meth:`_lose`)."""
        with self.runner.lock:
            self._lose(set(self.owned), "lost to the group: session expired")
            self.owned.clear()
            self.unverified.clear()

    def on_revoke(self) -> None:
        """Before partitions are revoked: close the open window, checkpoint, publish; then
        offer the held records of the partitions to their next owner (:meth:`_hand_over`)."""
        with self.runner.lock:
            owned = set(self.owned)
            self.owned.clear()
            self.unverified.clear()
            self.claimed.clear()   # a claim read from now on takes nothing of ours
            if close_open_window(self.runner.model):
                self.pending.clear()
            self.publish()
            self._hand_over(owned)


class FollowedLabels:
    """A label topic (``serve --label-topic``) read by a group member: partition ``p`` of it
    while partition ``p`` of the records topic is the member's, from the member's position of
    it (its checkpoint, or the newest handoff another member published), through a
    :class:`~dpstream.connectors.kafka.FollowerSource` (no consumer group: the records' group
    decides). A label joins its held record in the member that holds it because both topics
    are co-partitioned (labels keyed by record id; the service checks the partition counts).
    The label partitions are the member's partitions too: their messages' positions go into
    the windows' handoff positions and claims, so a label is learned once across rebalances
    as a record is. The records source calls :meth:`position_of`, :meth:`on_revoke` and
    :meth:`on_lost` in place of the member's; the service loop reads it as a source.
    """

    #: the label partitions follow the records' group (LabelPacer.labels_first)
    joins_group = False

    def __init__(self, member: WindowMember, pacer: Any, source: Any):
        self.member, self.pacer, self.source = member, pacer, source

    @property
    def consumer(self) -> Any:
        return self.source.consumer

    @property
    def assigned(self) -> set[str]:
        return self.source.assigned

    def lag(self, positions: dict[str, int]) -> int | None:
        return self.source.lag(positions)

    def position_of(self, partition: str) -> int | None:
        """The member's start of records ``partition``; label partition of the same number
        followed from the member's start of it."""
        pos = self.member.position_of(partition)
        number = int(partition.rpartition(":")[2])
        key = partition_key(self.source.topic, number)
        self.member.position_of(key)   # (owned by the member from now on)
        self.source.follow(number, self.member.runner.positions.get(key))
        return pos

    def on_revoke(self) -> None:
        self.member.on_revoke()
        self.source.unfollow_all()
        self.pacer.clear()   # labels read before: the next owner reads them

    def on_lost(self) -> None:
        self.member.on_lost()
        self.source.unfollow_all()
        self.pacer.clear()

    def connect(self, stop: threading.Event) -> bool:
        return self.source.connect(stop)

    def poll(self, timeout_ms: int = 0) -> list:
        return self.source.poll(timeout_ms)

    def commit(self, positions: dict[str, int]) -> None:
        """Nothing: a followed topic's positions live in the checkpoint and the windows."""

    def close(self) -> None:
        self.source.close()
