"""Distributed S-GBDT (Kirschte et al., 2023, Alg. 9) with secure aggregation, against the real
broker.

The masking arithmetic and the board's decisions are tested on their own; the protocol runs
three parties (threads, each with its own board connection) on a real tansu broker; and three
``dpstream serve`` processes train on their own topics while one of them is killed mid-round.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpstream.connectors import CheckpointStore
from dpstream.connectors.bulletin import KafkaBoard
from dpstream.connectors.local_broker import LocalBroker
from dpstream.models import SGBDTClassifier
from dpstream.models.sgbdt_party import SGBDTParty
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.distributed import BoardState, DistributedParty
from dpstream.stream.distributed.secure_aggregation import (
    FRACTION_BITS,
    KeyPair,
    decode,
    encode,
    mask_vector,
    round_context,
    unmask_sum,
)

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]
NAMES = ("alice", "bob", "carol")


def _keys(names=NAMES):
    pairs = {p: KeyPair.generate() for p in names}
    return {p: {q: pairs[p].shared_key(pairs[q].public) for q in names if q != p}
            for p in names}


# ----------------------------------------------------------------- secure aggregation
def test_masks_cancel_in_the_sum_to_fixed_point_precision():
    rng = np.random.default_rng(0)
    keys = _keys()
    for t in range(20):
        W = {p: rng.normal(0, 10.0 ** rng.integers(-3, 6), size=64) for p in NAMES}
        ctx = round_context("s", t, NAMES)
        masked = [mask_vector(W[p], me=p, keys=keys[p], members=NAMES, context=ctx)
                  for p in NAMES]
        total = unmask_sum(masked)
        assert np.allclose(total, sum(W.values()), rtol=0, atol=3 * 2.0 ** -FRACTION_BITS)
        # fewer than all members: a mask with the missing party survives
        partial = unmask_sum(masked[:2])
        assert np.abs(partial - (W["alice"] + W["bob"])).max() > 1e6


def test_fixed_point_refuses_what_it_cannot_hold():
    assert decode(encode(np.array([-1.5, 0.0, 2.25]))).tolist() == [-1.5, 0.0, 2.25]
    with pytest.raises(ValueError, match="fixed point"):
        encode(np.array([1e300]))
    with pytest.raises(ValueError, match="fixed point"):
        encode(np.array([np.nan]))
    with pytest.raises(ValueError, match="public key"):
        KeyPair.generate().shared_key(1)


def test_a_masked_vector_is_statistically_independent_of_its_plaintext():
    """The masked words of two very different plaintexts (all zeros; large, varied values)
    follow the same — uniform — distribution: chi-square on the top byte and on the low byte
    against uniform, and a two-sample test between the plaintexts, on 4,000 words each."""
    keys = _keys()
    rng = np.random.default_rng(1)
    zeros = np.zeros(8)
    loud = rng.normal(0, 1e6, size=8)
    samples = {}
    for name, plain in (("zeros", zeros), ("loud", loud)):
        words = []
        for t in range(500):
            ctx = round_context("stat", t, NAMES)
            words.append(mask_vector(plain, me="bob", keys=keys["bob"], members=NAMES,
                                     context=ctx))
        samples[name] = np.concatenate(words)
    for name, w in samples.items():
        for shift in (56, 0):
            byte = ((w >> np.uint64(shift)) & np.uint64(255)).astype(np.int64)
            counts = np.bincount(byte, minlength=256)
            assert stats.chisquare(counts).pvalue > 1e-4, (name, shift)
    # same distribution whatever the plaintext (the top 16 bits as numbers)
    a = (samples["zeros"] >> np.uint64(48)).astype(np.float64)
    b = (samples["loud"] >> np.uint64(48)).astype(np.float64)
    assert stats.ks_2samp(a, b).pvalue > 1e-4
    # and no linear trace of the plaintext word in the masked word
    plain = np.tile(encode(loud), 500).astype(np.float64)
    assert abs(np.corrcoef(plain, b)[0, 1]) < 0.1


# ----------------------------------------------------------------- the board's decisions
def _log(state, *messages):
    for m in messages:
        state.apply({"session": "s", **m})


def _masked(party, t, words):
    data = base64.b64encode(np.asarray(words, dtype="<u8").tobytes()).decode()
    return {"type": "masked", "round": t, "party": party, "data": data}


def test_board_rounds_complete_or_are_abandoned_by_log_order():
    state = BoardState("s")
    _log(state, *({"type": "hello", "party": p, "public": "ab"} for p in NAMES))
    _log(state, {"type": "join", "round": 1, "party": "alice", "nonce": "1"},
         {"type": "join", "round": 1, "party": "bob", "nonce": "2"},
         {"type": "seal", "round": 1, "party": "bob"},
         {"type": "join", "round": 1, "party": "carol", "nonce": "3"},   # too late
         _masked("alice", 1, [5]), _masked("bob", 1, [7]))
    r = state.rounds[1]
    assert r.members == ["alice", "bob"] and r.status == "complete"
    assert r.total().tolist() == [12 / 2 ** FRACTION_BITS]
    # round 2: carol never posts; the abandon comes first, her late vector changes nothing
    _log(state, *({"type": "join", "round": 2, "party": p, "nonce": p} for p in NAMES),
         {"type": "seal", "round": 2, "party": "alice"},
         _masked("alice", 2, [1]), _masked("bob", 2, [1]),
         {"type": "abandon", "round": 2, "party": "bob"}, _masked("carol", 2, [1]))
    assert state.rounds[2].status == "abandoned" and state.rounds[2].missing == ["carol"]
    assert state.live == {"alice", "bob"}          # not waited for at the next seal
    # a message of another session and a join without hello are ignored
    state.apply({"session": "other", "type": "seal", "round": 3, "party": "x"})
    _log(state, {"type": "join", "round": 3, "party": "mallory", "nonce": "0"})
    assert 3 not in state.rounds or not state.rounds[3].joins


# ----------------------------------------------------------------- the protocol, real broker
@pytest.fixture(scope="module")
def broker():
    b = LocalBroker().start()
    yield b
    b.stop()


def _shards(k=3, n=15000):
    X, y, schema = load_adult("train")
    parts = np.array_split(np.random.default_rng(0).permutation(n), k)
    return [([X[i] for i in p], [y[i] for i in p]) for p in parts], schema


class _Recorder:
    """A board that remembers what its party posted (the test needs the plaintexts too)."""

    def __init__(self, board, dies_at_round=None):
        self.board, self.dies_at_round = board, dies_at_round
        self.dead = threading.Event()

    def post(self, msg):
        if self.dead.is_set():
            return
        if self.dies_at_round is not None and msg.get("type") == "masked" \
                and msg.get("round") == self.dies_at_round:
            self.dead.set()      # the party dies between its join and its vector
            raise SystemExit
        self.board.post(msg)

    def read(self, timeout_ms=20):
        return self.board.read(timeout_ms)


def _run_parties(broker, topic, rounds, *, dies=None, round_timeout=20.0, epsilon=1.0):
    shards, schema = _shards()
    out, errors = {}, []

    def run(i, name):
        try:
            # Alg. 9's setting: the batch learning rate, no (stream-only) drift signal
            party = SGBDTParty(SGBDTClassifier(schema=schema, epsilon=epsilon, seed=i,
                                               learning_rate=0.5, drift=False))
            party.learn_many(*shards[i])
            board = KafkaBoard(broker.bootstrap, topic)
            assert board.connect()
            rec = _Recorder(board, dies_at_round=dies if name == "carol" else None)
            dist = DistributedParty(party, rec, name=name, session=topic, params={"k": 3},
                                    expected=3, join_timeout=3.0, round_timeout=round_timeout)
            out[name] = {"dist": dist, "party": party, "plain": {}, "totals": {}}
            dist.start()
            for _ in range(rounds + 1):
                summary = dist.run_round()
                t = summary["round"]
                if getattr(dist, "last_plaintext", None) is not None:
                    out[name]["plain"][t] = dist.last_plaintext
                    dist.last_plaintext = None
                out[name]["totals"][t] = (summary["status"], dist.last_total,
                                          summary["members"])
            board.close()
        except SystemExit:
            out[name]["died"] = True
        except Exception as exc:   # surfaced by the main thread
            errors.append((name, exc))

    threads = [threading.Thread(target=run, args=(i, n)) for i, n in enumerate(NAMES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    return out, schema


def test_three_parties_aggregate_exactly_the_plain_sum_and_agree(broker):
    out, schema = _run_parties(broker, "board-sum", rounds=40)
    for t in range(41):
        statuses = {out[p]["totals"][t][0] for p in NAMES}
        assert statuses == {"complete"}, (t, statuses)
        plain_sum = sum(out[p]["plain"][t] for p in NAMES)
        for p in NAMES:
            total = out[p]["totals"][t][1]
            assert np.allclose(total, plain_sum, rtol=0, atol=3 * 2.0 ** -FRACTION_BITS)
    # every party holds the same ensemble, and it predicts better than the majority class
    X, y, _ = load_adult("test")
    preds = [np.asarray(out[p]["party"].predict_many(X[:3000])) for p in NAMES]
    assert all((preds[0] == q).all() for q in preds[1:])
    forests = [out[p]["party"].engine.forest for p in NAMES]
    assert all(np.array_equal(forests[0].value, f.value) for f in forests[1:])
    err = np.mean(preds[0] != np.asarray(y[:3000]))
    assert err < 0.22, err
    # privacy reports per party: each its own records, all within the budget
    for p in NAMES:
        rep = out[p]["party"].privacy_report()
        assert rep["records_learned"] == 5000 and rep["epsilon"] <= 1.0
        assert rep["rounds_contributed"] == 40 and rep["init_contributed"]
        assert rep["scope"].startswith("this party's records")


def test_a_party_that_dies_mid_round_does_not_stall_the_others(broker):
    out, _ = _run_parties(broker, "board-drop", rounds=6, dies=3, round_timeout=6.0)
    assert out["carol"].get("died")
    for p in ("alice", "bob"):
        totals = out[p]["totals"]
        assert totals[3][0] == "abandoned"           # carol joined, then never posted
        assert totals[3][2] == ["alice", "bob", "carol"] or set(totals[3][2]) == set(NAMES)
        for t in (4, 5, 6):
            assert totals[t][0] == "complete" and set(totals[t][2]) == {"alice", "bob"}
            plain_sum = out["alice"]["plain"][t] + out["bob"]["plain"][t]
            assert np.allclose(totals[t][1], plain_sum, atol=1e-6)
        rep = out[p]["party"].privacy_report()
        # the abandoned round's charge stands: 6 contributions, one of them abandoned
        assert rep["rounds_contributed"] == 6 and rep["rounds_abandoned"] == 1
        assert rep["trees"] == 5
    forests = [out[p]["party"].engine.forest for p in ("alice", "bob")]
    assert np.array_equal(forests[0].value, forests[1].value)


def test_parties_with_different_settings_refuse_to_train_together(broker):
    shards, schema = _shards()
    boards = []
    for params in ({"epsilon": 1.0}, {"epsilon": 2.0}):
        board = KafkaBoard(broker.bootstrap, "board-config")
        assert board.connect()
        boards.append(board)
        party = SGBDTParty(SGBDTClassifier(schema=schema, epsilon=1.0, seed=0))
        dist = DistributedParty(party, board, name=f"p{len(boards)}", session="cfg",
                                params=params)
        if len(boards) == 1:
            dist.start(catch_up_s=0.3)
        else:
            with pytest.raises(ValueError, match="config .* differs"):
                dist.start(catch_up_s=0.3)
    for b in boards:
        b.close()


# ----------------------------------------------------------------- dpstream serve x 3
def _serve_party(broker, tmp_path: Path, name: str) -> subprocess.Popen:
    log = open(tmp_path / f"{name}.log", "ab")
    schema = tmp_path / "schema.json"
    if not schema.exists():
        ADULT_SCHEMA.dump(schema)
    cmd = [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", f"records-{name}",
           "--group", f"dp-{name}", "--schema", str(schema), "--epsilon", "1.0",
           "--checkpoint-dir", str(tmp_path / name), "--metrics-port", "0",
           "--checkpoint-interval", "0.5", "--set", "round_size=150",
           "--board-topic", "board-serve", "--party", name, "--session", "e2e",
           "--parties", "3", "--join-timeout", "2", "--round-timeout", "3"]
    return subprocess.Popen(cmd, stdout=log, stderr=log)


class _Watcher:
    """Reads the board log incrementally, as a party would."""

    def __init__(self, broker):
        self.state = BoardState("e2e")
        self.board = KafkaBoard(broker.bootstrap, "board-serve")
        assert self.board.connect()

    def rounds(self, timeout_ms: int = 20) -> dict:
        for msg in self.board.read(timeout_ms):
            self.state.apply(msg)
        return self.state.rounds


def _trickle(broker, stop: threading.Event) -> threading.Thread:
    """Keep records arriving on every party's topic, so rounds keep being wanted."""
    X, y, _ = load_adult("train")

    def run():
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
        sent = 0
        while not stop.is_set() and sent < 9000:
            for k, name in enumerate(NAMES):
                for i in range(k * 10000 + sent, k * 10000 + sent + 40):
                    producer.send(f"records-{name}",
                                  json.dumps({"id": i, "x": X[i], "y": y[i]}).encode())
            producer.flush()
            sent += 40
            stop.wait(0.25)
        producer.close()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.kafka
def test_three_serve_processes_survive_a_party_killed_mid_round(broker, tmp_path):
    for name in NAMES:
        broker.create_topic(f"records-{name}")
    stop = threading.Event()
    _trickle(broker, stop)
    procs = {n: _serve_party(broker, tmp_path, n) for n in NAMES}
    watcher = _Watcher(broker)

    def log_tail():
        return (tmp_path / "alice.log").read_text(errors="replace")[-3000:]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:   # rounds complete with all three parties
            full = [r for r in watcher.rounds(100).values() if r.status == "complete"
                    and len(r.members) == 3 and r.number > 0]
            if len(full) >= 2:
                break
        else:
            raise AssertionError("no complete 3-party rounds:\n" + log_tail())
        # freeze carol right after a join of hers that she has not followed with her vector
        killed_in = None
        while time.monotonic() < deadline and killed_in is None:
            for r in list(watcher.rounds(10).values()):
                if not r.resolved and any(p == "carol" for p, _ in r.joins) \
                        and "carol" not in r.masked:
                    procs["carol"].send_signal(signal.SIGSTOP)
                    time.sleep(0.3)
                    after = watcher.rounds(50)[r.number]
                    if "carol" not in after.masked and after.status != "complete":
                        killed_in = r.number
                    else:
                        procs["carol"].send_signal(signal.SIGCONT)
                    break
        assert killed_in is not None, "could not catch carol mid-round"
        procs["carol"].send_signal(signal.SIGKILL)
        procs["carol"].wait(30)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:   # the others go on without her
            rounds = watcher.rounds(100)
            if rounds[killed_in].resolved and any(
                    r.status == "complete" and set(r.members) == {"alice", "bob"}
                    and r.number > killed_in for r in rounds.values()):
                break
        else:
            raise AssertionError("the round did not proceed after carol was killed:\n"
                                 + log_tail())
        if "carol" in rounds[killed_in].members:
            assert rounds[killed_in].status == "abandoned"
        stop.set()
        for n in ("alice", "bob"):
            procs[n].send_signal(signal.SIGTERM)
            assert procs[n].wait(60) == 0
        rounds = watcher.rounds(500)
    finally:
        stop.set()
        watcher.board.close()
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    # privacy reports per party, from each checkpoint (what `dpstream status` prints)
    reports = {}
    for n in NAMES:
        out = subprocess.run([*DPSTREAM, "status", "--json", "--checkpoint-dir",
                              str(tmp_path / n)],
                             capture_output=True, text=True, check=True)
        reports[n] = json.loads(out.stdout)["privacy"]
    for n in ("alice", "bob"):
        rep = reports[n]
        assert rep["rounds_contributed"] >= 3 and rep["epsilon"] <= 1.0
        assert rep["aggregation"] == "values" and rep["records_learned"] > 0
        # its ensemble holds exactly the complete rounds it applied, as the board says
        applied = CheckpointStore.read(tmp_path / n)["model"].protocol["applied"]
        complete = sum(1 for r in rounds.values()
                       if 1 <= r.number <= applied and r.status == "complete")
        assert rep["trees"] == complete >= 2
    assert reports["carol"]["rounds_contributed"] >= 2
    # carol's last checkpoint is a consistent state of hers (write-ahead before each vector)
    state = CheckpointStore.read(tmp_path / "carol")
    assert state["model"].protocol["applied"] < killed_in
