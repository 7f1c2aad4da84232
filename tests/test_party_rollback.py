"""A distributed S-GBDT party restored from a checkpoint older than its own releases refuses to
start (issue 62, finding 4).

Three parties train on an in-memory board (threads; each party a real
:class:`~dpstream.stream.runner.Runner` with a real checkpoint directory, written before every
vector it posts and after every round, as ``dpstream serve`` does). Carol's checkpoint is copied
after round 3; she posts her vectors of rounds 4..8 and dies right after posting round 8's. A
start from the copy is refused before it posts anything: her records were charged for rounds
4..8 in the state the copy lacks, so following those rounds "for free" and training on would
spend them again. A start from her newest checkpoint (written ahead of round 8's vector, which
is on the board: the pending round) goes on with the others. The last test runs the refusal
through ``dpstream serve`` against a real broker: exit status 2 and the message.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from dpstream.connectors import CheckpointStore
from dpstream.connectors.bulletin import KafkaBoard
from dpstream.connectors.checkpoint import FILENAME
from dpstream.stream import ADULT_SCHEMA, Schema, load_adult
from dpstream.stream.distributed import DistributedParty, RollbackError, Roster
from dpstream.stream.runner import Runner
from dpstream.stream.service import ServeSettings

NAMES = ("alice", "bob", "carol")
COPIED_AT, DIES_AT = 3, 8          # carol's old copy: round 3 applied; her last vector: 8
# few trees: each round costs a record about a tenth of its bound, so re-spending shows
PARAMS = {"n_trees": 10, "learning_rate": 0.5, "drift": False}
pytestmark = pytest.mark.filterwarnings("ignore::dpstream.models.params.SmallStreamWarning")


class _Log:
    """An in-memory board: one append-only log; every party reads it from its own position."""

    def __init__(self):
        self.items: list[dict] = []
        self.cond = threading.Condition()

    def senders(self, name: str) -> list[tuple[str, int]]:
        envs = [json.loads(m["msg"]) for m in self.items]
        return [(e["type"], e["round"]) for e in envs if e["sender"] == name]


class _Board:
    """A party's connection to the :class:`_Log`; ``dies_after`` (a round): raise SystemExit
    right after posting this party's vector of that round (a crash)."""

    def __init__(self, log: _Log, dies_after: int | None = None):
        self.log, self.pos, self.dies_after = log, 0, dies_after

    def post(self, msg: dict) -> None:
        with self.log.cond:
            self.log.items.append(msg)
            self.log.cond.notify_all()
        env = json.loads(msg["msg"])
        if env["type"] == "masked" and env["round"] == self.dies_after:
            raise SystemExit

    def read(self, timeout_ms: int = 20) -> list[dict]:
        with self.log.cond:
            if self.pos == len(self.log.items) and timeout_ms:
                self.log.cond.wait(timeout_ms / 1000)
            out, self.pos = self.log.items[self.pos:], len(self.log.items)
        return out

    def caught_up(self) -> bool:
        return self.pos == len(self.log.items)


def _settings(tmp_path: Path) -> ServeSettings:
    """What ``dpstream serve`` would run carol with (its shared params are the job's config)."""
    schema = tmp_path / "schema.json"
    if not schema.exists():
        ADULT_SCHEMA.dump(schema)
    return ServeSettings(bootstrap="127.0.0.1:1", topic="records-carol", group="dp-carol",
                         schema_path=str(schema), epsilon=1.0, params=PARAMS,
                         checkpoint_dir=str(tmp_path / "carol"), board_topic="board-rollback",
                         party="carol", session="rollback", roster=str(tmp_path / "roster.json"),
                         board_key=str(tmp_path / "carol.key"))


class _Job:
    """Three runner-backed parties on one in-memory board (see the module docstring)."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.roster, self.keys = Roster.generate(NAMES)
        self.roster.save(tmp_path / "roster.json")
        self.keys["carol"].save(tmp_path / "carol.key")
        self.params = _settings(tmp_path).shared_params(Schema.load(tmp_path / "schema.json"))
        self.log = _Log()
        self.dists: dict[str, DistributedParty] = {}
        self.runners: dict[str, Runner] = {}
        X, y, _ = load_adult("train")
        self.shards = {n: (X[600 * i:600 * (i + 1)], y[600 * i:600 * (i + 1)])
                       for i, n in enumerate(NAMES)}

    def party(self, name: str, directory: Path, *, learn: bool = True,
              dies_after: int | None = None) -> DistributedParty:
        """A runner resuming (or starting) ``directory``'s checkpoint, and its board party."""
        store = CheckpointStore(directory)
        runner = Runner.create("sgbdt", ADULT_SCHEMA, store=store, epsilon=1.0,
                               seed=NAMES.index(name), params=PARAMS, party="values")
        if learn:
            runner.model.learn_many(*self.shards[name])
        self.runners[name] = runner
        self.dists[name] = DistributedParty(
            runner.model, _Board(self.log, dies_after), name=name, session="rollback",
            roster=self.roster, key=self.keys[name], params=self.params, expected=3,
            join_timeout=2.0, round_timeout=5.0, before_post=runner.checkpoint,
            lock=runner.lock)
        return self.dists[name]

    def run(self, rounds: dict[str, int], copy_at: int | None = None) -> dict:
        """Each party starts (if new) and runs its rounds; returns errors and who died."""
        out: dict[str, object] = {}

        def go(name: str) -> None:
            dist, runner = self.dists[name], self.runners[name]
            try:
                if not dist.posted and not dist.timings:
                    dist.start(catch_up_s=0)
                for _ in range(rounds[name]):
                    dist.run_round()
                    runner.checkpoint()   # as serve does after each round it ran
                    if name == "carol" and dist.proto["applied"] == copy_at:   # a backup
                        (self.tmp / "old").mkdir()
                        shutil.copy(self.tmp / "carol" / FILENAME, self.tmp / "old" / FILENAME)
            except SystemExit:
                out[name] = "died"
            except Exception as exc:   # surfaced by the test
                out[name] = exc

        threads = [threading.Thread(target=go, args=(n,)) for n in rounds]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "the parties did not finish"
        return out

    def train(self) -> None:
        """Rounds 0..DIES_AT; carol's backup after round COPIED_AT, her crash after posting
        her vector of round DIES_AT (before it is applied)."""
        for name in NAMES:
            self.party(name, self.tmp / name, dies_after=DIES_AT if name == "carol" else None)
        out = self.run({n: DIES_AT + 1 for n in NAMES}, copy_at=COPIED_AT)
        assert out == {"carol": "died"}, out
        self.runners["carol"].store.close()   # the process is gone


def _spend(party) -> dict[int, float]:
    """Each pool record's Rényi spend, by its arrival number."""
    e = party.engine
    return dict(zip(e.ids[:len(e)].tolist(), e.filter.spent[:len(e)].tolist(), strict=True))


def _within_budget(party) -> None:
    e = party.engine
    assert e.filter.spent[:len(e)].max() <= e.filter.bound
    assert party.privacy_report()["epsilon"] <= 1.0


def test_a_party_restored_from_an_older_checkpoint_refuses_and_its_newest_resumes(tmp_path):
    job = _Job(tmp_path)
    job.train()
    newest = CheckpointStore.read(tmp_path / "carol")["model"]
    assert newest.protocol["applied"] == DIES_AT - 1                # written ahead of round 8
    assert newest.protocol["post"]["round"] == DIES_AT              # ... whose vector is out
    assert ("masked", DIES_AT) in job.log.senders("carol")
    old = CheckpointStore.read(tmp_path / "old")["model"]
    assert old.protocol["applied"] == COPIED_AT and old.protocol["post"] is None

    # the backup: refused before it posts anything; its records keep the spend it knows
    posted = len(job.log.senders("carol"))
    restored = job.party("carol", tmp_path / "old", learn=False)
    before = _spend(restored.party)
    with pytest.raises(RollbackError) as refused:
        restored.start(catch_up_s=0)
    text = str(refused.value)
    assert f"last applied round is {COPIED_AT}" in text
    assert f"vectors for {DIES_AT - COPIED_AT} round(s) after it, the newest for round " \
        f"{DIES_AT}." in text
    assert f"newest checkpoint (last applied round {DIES_AT - 1} or later" in text
    assert len(job.log.senders("carol")) == posted                   # nothing posted
    assert restored.party.engine.rounds == COPIED_AT and _spend(restored.party) == before
    assert restored.party.privacy_report()["rounds_followed"] == 0
    job.runners["carol"].store.close()
    # every record's spend is that of carol's one line of states, within the bound
    assert all(before[i] <= s for i, s in _spend(newest).items() if i in before)
    _within_budget(newest)

    # her newest checkpoint with another payload for the pending round: refused as well
    forged = CheckpointStore.read(tmp_path / "carol")["model"]
    forged.protocol["post"]["body"]["data"] = base64.b64encode(bytes(8)).decode()
    other = DistributedParty(forged, _Board(job.log), name="carol", session="rollback",
                             roster=job.roster, key=job.keys["carol"], params=job.params)
    with pytest.raises(RollbackError, match=f"1 round.s. after it, the newest for round {DIES_AT}"):
        other.start(catch_up_s=0)

    # her newest checkpoint: the pending round's vector is hers, so she resumes and trains on
    carol = job.party("carol", tmp_path / "carol", learn=False)
    out = job.run({"alice": 2, "bob": 2, "carol": 2})
    assert not out, out
    assert carol.proto["applied"] == DIES_AT + 2
    for t in (DIES_AT + 1, DIES_AT + 2):
        assert carol.state.rounds[t].status == "complete"
        assert sorted(carol.state.rounds[t].members) == list(NAMES)
    report = carol.party.privacy_report()
    assert report["rounds_contributed"] == DIES_AT + 2 and report["rounds_followed"] == 0
    assert report["rounds_excluded"] == 0 and report["init_contributed"]
    forests = [job.dists[n].party.engine.forest.value for n in NAMES]
    assert all(np.array_equal(forests[0], f) for f in forests[1:])
    for name in NAMES:
        _within_budget(job.dists[name].party)
        job.runners[name].store.close()


@pytest.mark.kafka
def test_serve_refuses_a_restored_party_checkpoint_with_exit_status_2(tmp_path):
    """The same backup under ``dpstream serve`` (the board copied to a real broker): exit
    status 2, and the message names the rounds and the way out."""
    from dpstream.connectors.local_broker import LocalBroker

    job = _Job(tmp_path)
    job.train()
    shutil.rmtree(tmp_path / "carol")
    shutil.copytree(tmp_path / "old", tmp_path / "carol")             # the restore
    broker = LocalBroker().start()
    try:
        board = KafkaBoard(broker.bootstrap, "board-rollback")
        assert board.connect()
        for msg in job.log.items:
            board.post(msg)
        board.close()
        s = _settings(tmp_path)
        cmd = [sys.executable, "-m", "dpstream.stream.cli", "serve", "--bootstrap",
               broker.bootstrap, "--topic", s.topic, "--group", s.group, "--schema",
               s.schema_path, "--epsilon", "1.0", "--checkpoint-dir", s.checkpoint_dir,
               "--metrics-port", "0", "--board-topic", s.board_topic, "--party", "carol",
               "--session", s.session, "--parties", "3", "--roster", s.roster,
               "--board-key", s.board_key, "--connect-timeout", "30"]
        for name, value in PARAMS.items():
            cmd += ["--set", f"{name}={json.dumps(value)}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    finally:
        broker.stop()
    assert done.returncode == 2, done.stderr[-3000:]
    assert "dpstream serve: error: party 'carol' refuses to start" in done.stderr
    assert f"last applied round is {COPIED_AT}" in done.stderr
    assert f"the newest for round {DIES_AT}" in done.stderr
    state = CheckpointStore.read(tmp_path / "carol")
    assert state["model"].protocol["applied"] == COPIED_AT          # the checkpoint is as it was
