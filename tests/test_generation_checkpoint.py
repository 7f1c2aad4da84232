"""S-GBDT's drift releases are checkpointed before anything that depends on them leaves the
process (issue 47, item 5; docs/reliability.md#checkpoints).

A drift-signal window release draws Laplace noise from a generator whose state is in the
checkpoint, and may start a new generation (every tree retires) — not a training round. If
predictions made after such a release were sent before a checkpoint covered it, a crash and a
restart that interleaves the partitions differently would replay the release over another
window sum with the *same* restored noise: two published functions of one draw. The runner now
checkpoints whenever the model's ``release_epoch`` (rounds plus drift releases) moves, so at
every prediction sent the checkpoint on disk already holds every release the live model has
made, and a restart never draws a released value's noise again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from river.datasets import synth

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.connectors.checkpoint import FILENAME
from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA as AGRAWAL
from dpstream.stream.runner import Runner

#: small drift windows with a large drift share: a release every 100 records and a detected
#: change a few windows after the labels flip
PARAMS = {"drift_window": 100, "drift_share": 0.3}


def _flipping(n: int = 3000, at: int = 1500) -> list[tuple[dict, int]]:
    """River's Agrawal (function 0), its labels flipped from record ``at`` on."""
    rows = synth.Agrawal(classification_function=0, seed=5).take(n)
    return [(x, int(y) if i < at else 1 - int(y)) for i, (x, y) in enumerate(rows)]


def _releases(model) -> tuple[int, int, int]:
    """What the model has drawn noise for: drift windows released, rounds, and the
    generation those releases started (a state that exists with or without the fix)."""
    e = model._engine
    return (model._drift.releases, model.training_rounds, 0 if e is None else e.generation)


class _CheckingSink:
    """A predictions sink that, at every prediction sent, reads the checkpoint file on disk
    (again only when a new one replaced it) and notes whether it covers the live model's
    releases."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILENAME
        self.runner: Runner | None = None
        self.sent: list[tuple[tuple, tuple]] = []   # (live, on disk) at each send
        self._file: tuple | None = None
        self._saved = (0, 0, 0)

    def send_json(self, value: dict, key: bytes | None = None) -> None:
        if self.path.exists():
            st = self.path.stat()
            if (st.st_ino, st.st_mtime_ns) != self._file:   # replaced atomically: re-read
                self._file = (st.st_ino, st.st_mtime_ns)
                self._saved = _releases(CheckpointStore.read(self.path.parent)["model"])
        self.sent.append((_releases(self.runner.model), self._saved))

    def flush(self) -> None:
        pass


def _records(rows: list, order: list[int], partition_of) -> list[SourceRecord]:
    """Source records for ``rows[i]``, ``i`` in ``order``; each partition's offsets count its
    own records."""
    offsets: dict[str, int] = {}
    out = []
    for i in order:
        p = partition_of(i)
        out.append(SourceRecord({"id": i, "x": rows[i][0], "y": rows[i][1]}, p,
                                offsets.setdefault(p, 0)))
        offsets[p] += 1
    return out


@pytest.mark.parametrize("mode", ["one-by-one", "batched", "held"])
def test_every_prediction_sent_after_a_release_is_covered_by_the_checkpoint(tmp_path, mode):
    """At each prediction sent, the checkpoint on disk holds the same drift releases, rounds
    and generation as the live model — also right after the generation switch, which is no
    round (before the fix 488 of 3,000 predictions, 184 held ones, went out with releases
    no checkpoint covered). A checkpoint follows each release (one when a round and a
    release come with one record), or with ``hold_predictions`` the predictions made after
    one wait for the next periodic checkpoint."""
    sink = _CheckingSink(tmp_path)
    held = mode == "held"   # held predictions, and a periodic checkpoint after each batch
    runner = Runner.create("sgbdt", AGRAWAL, store=CheckpointStore(tmp_path), epsilon=1.0,
                           seed=0, params=PARAMS, predictions=sink,
                           checkpoint_interval=0 if held else 3600, hold_predictions=held)
    sink.runner = runner
    rows = _flipping()
    recs = _records(rows, list(range(len(rows))), lambda i: "t:0")
    if mode == "one-by-one":
        for rec in recs:
            runner.process(rec)
    else:
        for a in range(0, len(recs), 49):   # batch ends fall between rounds and releases
            runner.process_many(recs[a:a + 49])
            runner.maybe_checkpoint()
    runner.checkpoint()   # sends what is still held
    runner.store.close()
    releases, rounds, generation = _releases(runner.model)
    assert generation >= 1 and releases == 30, (generation, releases)
    assert len(sink.sent) == len(rows)
    after_switch = [live for live, _ in sink.sent if live[2] >= 1]
    assert len(after_switch) > 500   # predictions from the new generation were sent
    uncovered = [(k, live, disk) for k, (live, disk) in enumerate(sink.sent) if live != disk]
    assert uncovered == [], f"{len(uncovered)} predictions sent before their release was " \
                            f"checkpointed; first: {uncovered[:3]}"
    if not held:   # a save per round, none for the drift releases between rounds
        assert runner.counters["checkpoints"] <= rounds + 1


def test_a_restart_after_a_switch_never_draws_a_released_value_again(tmp_path):
    """Two partitions, read alternately; the process dies (no final checkpoint) right after
    the first prediction of the new generation was sent (held after the switch, it leaves
    with the next checkpoint). The checkpoint it leaves holds the
    switch: the restored drift signal has made every release the dead process made, from the
    same generator state, and replaying the rest in another interleaving (all of one
    partition, then the other) releases new windows only — no release index gets a second
    value over another window sum."""
    rows = _flipping(3600)
    part = lambda i: "t:a" if i % 2 == 0 else "t:b"
    sink = _CheckingSink(tmp_path)
    runner = Runner.create("sgbdt", AGRAWAL, store=CheckpointStore(tmp_path), epsilon=1.0,
                           seed=1, params=PARAMS, predictions=sink, checkpoint_interval=3600)
    sink.runner = runner
    recs = _records(rows, list(range(len(rows))), part)
    k = 0
    while not sink.sent or sink.sent[-1][0][2] == 0:   # until a prediction of the new
        runner.process(recs[k])                         # generation is sent (held until
        k += 1                                          # the next round's checkpoint)
    assert sink.sent[-1][0][2] == 1
    dead = runner.model._drift
    dead_history, dead_rng = list(dead.history), dead.rng.bit_generator.state
    runner.store.close()   # the crash: no checkpoint after this point
    del runner

    resumed = Runner.resume(CheckpointStore(tmp_path), checkpoint_interval=3600,
                            predictions=_CheckingSink(tmp_path))
    resumed.predictions.runner = resumed
    restored = resumed.model._drift
    assert _releases(resumed.model)[::2] == (dead.releases, 1)   # the switch is on disk
    assert restored.history == dead_history
    assert restored.rng.bit_generator.state == dead_rng   # its next draw is a fresh one
    # the stream again, interleaved differently: partition a's records, then b's (those
    # below the saved positions are skipped)
    for r in sorted(recs, key=lambda r: r.partition):
        resumed.process(r)
    resumed.store.close()
    assert resumed.counters["learned"] == len(rows)   # each record learned once
    assert restored.releases > len(dead_history)
    assert restored.history[:len(dead_history)] == dead_history
