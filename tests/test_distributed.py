"""Distributed S-GBDT (Kirschte et al., 2023, Alg. 9) with authenticated secure aggregation and
drop-out recovery (Bonawitz et al., 2017), against the real broker.

The masking arithmetic, Shamir sharing, keys and the board's decisions are tested on their
own; the signature layer on a real tansu broker (forged, unsigned, replayed messages); the
protocol runs three parties (threads, each with its own board connection) on the broker while
an intruder replays and forges messages; three party *processes* train while one is killed with
SIGKILL mid-round; and three ``dpstream serve`` processes train while one of them is killed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpstream.connectors import CheckpointStore
from dpstream.connectors.bulletin import KafkaBoard
from dpstream.connectors.local_broker import LocalBroker
from dpstream.models import SGBDTClassifier
from dpstream.models.boosting.sgbdt_party import SGBDTParty
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.distributed import (
    BoardState,
    DistributedParty,
    Roster,
    SignedBoard,
    SigningKey,
    keygen,
)
from dpstream.stream.distributed.__main__ import main as distributed_main
from dpstream.stream.distributed.party import KEEP_ROUNDS
from dpstream.stream.distributed.secure_aggregation import (
    FRACTION_BITS,
    KeyPair,
    RoundSecrets,
    decode,
    encode,
    mask_vector,
    open_share,
    recover_sum,
    round_context,
    seal_share,
    unmask_sum,
)
from dpstream.stream.distributed.shamir import (
    PRIME,
    reconstruct,
    share_from_bytes,
    share_to_bytes,
    split,
)
from dpstream.stream.distributed.signed_board import DOMAIN

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]
PARTY_PROC = Path(__file__).resolve().parent / "distributed_party_proc.py"
NAMES = ("alice", "bob", "carol")


def _round_secrets(names=NAMES):
    secrets_ = {p: RoundSecrets.generate() for p in names}
    publics = {p: s.mask_public for p, s in secrets_.items()}
    return secrets_, {p: secrets_[p].pair_keys(publics, p) for p in names}, publics


# ----------------------------------------------------------------- Shamir sharing
@settings(max_examples=60, deadline=None)
@given(secret=st.integers(0, 2 ** 256 - 1), k=st.integers(1, 7), data=st.data())
def test_any_t_of_k_shares_reconstruct_the_secret_and_fewer_refuse(secret, k, data):
    t = data.draw(st.integers(1, k), label="threshold")
    holders = data.draw(st.lists(st.integers(1, 2 ** 40), min_size=k, max_size=k, unique=True))
    shares = split(secret, holders=holders, threshold=t)
    subset = data.draw(st.permutations(holders))[:data.draw(st.integers(t, k))]
    assert reconstruct({x: shares[x] for x in subset}, t) == secret
    assert all(share_from_bytes(share_to_bytes(v)) == v for v in shares.values())
    if t > 1:
        with pytest.raises(ValueError, match=f"{t - 1} shares cannot reconstruct a {t}-of-k"):
            reconstruct({x: shares[x] for x in subset[:t - 1]}, t)


def test_fewer_than_t_shares_are_uniform_whatever_the_secret():
    """2-of-3: one share alone follows the same (uniform) law for secret 0 and secret 2**256-1
    (chi-square of its top byte against uniform; two-sample KS between the secrets)."""
    tops = {}
    for secret in (0, 2 ** 256 - 1):
        tops[secret] = np.array([split(secret, holders=[1, 2, 3], threshold=2)[2] >> 513
                                 for _ in range(4000)])
        assert stats.chisquare(np.bincount(tops[secret], minlength=256)).pvalue > 1e-4
    assert stats.ks_2samp(tops[0], tops[2 ** 256 - 1]).pvalue > 1e-4


def test_shamir_edge_cases():
    shares = split(42, holders=[1, 2, 3], threshold=3)   # t = k: every share is needed
    assert reconstruct(shares, 3) == 42
    with pytest.raises(ValueError, match="2 shares cannot reconstruct a 3-of-k"):
        reconstruct({1: shares[1], 3: shares[3]}, 3)
    assert split(9, holders=[5], threshold=1) == {5: 9}
    for bad in ({"holders": [1, 1, 2], "threshold": 2}, {"holders": [0, 1], "threshold": 1},
                {"holders": [1, 2], "threshold": 3}, {"holders": [1, 2], "threshold": 0}):
        with pytest.raises(ValueError):
            split(1, **bad)
    with pytest.raises(ValueError, match="secret"):
        split(PRIME, holders=[1, 2], threshold=2)
    with pytest.raises(ValueError):
        share_from_bytes(b"\x00" * 65)


# ----------------------------------------------------------------- secure aggregation
def test_masks_cancel_or_are_recovered_exactly():
    """Pairwise masks alone cancel over all members; with self masks and one member dropped,
    :func:`recover_sum` returns exactly the survivors' fixed-point sum."""
    rng = np.random.default_rng(0)
    for t in range(10):
        secrets_, keys, publics = _round_secrets()
        W = {p: rng.normal(0, 10.0 ** rng.integers(-3, 6), size=32) for p in NAMES}
        ctx = round_context("s", t, NAMES)
        plain = [mask_vector(W[p], me=p, keys=keys[p], members=NAMES, context=ctx)
                 for p in NAMES]
        assert np.allclose(unmask_sum(plain), sum(W.values()), rtol=0,
                           atol=3 * 2.0 ** -FRACTION_BITS)
        y = {p: mask_vector(W[p], me=p, keys=keys[p], members=NAMES, context=ctx,
                            self_seed=secrets_[p].self_seed) for p in NAMES}
        gone = NAMES[t % 3]
        alive = [p for p in NAMES if p != gone]
        words = recover_sum({p: y[p] for p in alive},
                            self_seeds={p: secrets_[p].self_seed for p in alive},
                            dropped={gone: secrets_[gone].mask_private},
                            mask_publics=publics, context=ctx)
        assert np.array_equal(words, encode(W[alive[0]]) + encode(W[alive[1]]))
        # without the dropped member's key the sum stays masked
        masked = recover_sum({p: y[p] for p in alive},
                             self_seeds={p: secrets_[p].self_seed for p in alive},
                             dropped={}, mask_publics=publics, context=ctx)
        assert np.abs(decode(masked) - (W[alive[0]] + W[alive[1]])).max() > 1e6


def test_fixed_point_keys_and_sealed_shares_refuse_what_they_cannot_hold():
    assert decode(encode(np.array([-1.5, 0.0, 2.25]))).tolist() == [-1.5, 0.0, 2.25]
    for bad in (np.array([1e300]), np.array([np.nan])):
        with pytest.raises(ValueError, match="fixed point"):
            encode(bad)
    for public in (bytes(32), b"\x01"):   # a low-order point; a wrong length
        with pytest.raises(ValueError, match="public key"):
            KeyPair.generate().shared_key(public)
    a, b = KeyPair.generate(), KeyPair.generate()
    key = a.shared_key(b.public, b"share")
    assert key == b.shared_key(a.public, b"share") != a.shared_key(b.public, b"mask")
    token = seal_share(key, share_to_bytes(5) + share_to_bytes(7), b"s|1|a|b")
    assert open_share(key, token, b"s|1|a|b") == (5, 7)
    with pytest.raises(ValueError, match="does not decrypt"):
        open_share(key, token, b"s|2|a|b")      # moved to another round
    with pytest.raises(ValueError, match="does not decrypt"):
        open_share(KeyPair.generate().shared_key(b.public, b"share"), token, b"s|1|a|b")


def test_a_masked_vector_is_statistically_independent_of_its_plaintext():
    """The masked words of two very different plaintexts (all zeros; large, varied values)
    follow the same — uniform — distribution: chi-square on the top byte and on the low byte
    against uniform, and a two-sample test between the plaintexts, on 4,000 words each."""
    rng = np.random.default_rng(1)
    loud = rng.normal(0, 1e6, size=8)
    samples = {}
    for name, plain in (("zeros", np.zeros(8)), ("loud", loud)):
        words = []
        for t in range(500):
            secrets_, keys, _ = _round_secrets()
            words.append(mask_vector(plain, me="bob", keys=keys["bob"], members=NAMES,
                                     context=round_context("stat", t, NAMES),
                                     self_seed=secrets_["bob"].self_seed))
        samples[name] = np.concatenate(words)
    for name, w in samples.items():
        for shift in (56, 0):
            byte = ((w >> np.uint64(shift)) & np.uint64(255)).astype(np.int64)
            assert stats.chisquare(np.bincount(byte, minlength=256)).pvalue > 1e-4, name
    a = (samples["zeros"] >> np.uint64(48)).astype(np.float64)
    b = (samples["loud"] >> np.uint64(48)).astype(np.float64)
    assert stats.ks_2samp(a, b).pvalue > 1e-4
    plain = np.tile(encode(loud), 500).astype(np.float64)
    assert abs(np.corrcoef(plain, b)[0, 1]) < 0.1


# ----------------------------------------------------------------- keys and roster
def test_keygen_command_builds_a_roster_and_never_overwrites_a_key(tmp_path, capsys):
    for name in NAMES:
        assert distributed_main(["keygen", "--party", name, "--key-file",
                                 str(tmp_path / f"{name}.key"), "--roster",
                                 str(tmp_path / "roster.json"), "--json"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    roster = Roster.load(tmp_path / "roster.json")
    assert roster.names == sorted(NAMES) and roster.threshold == 2
    for out in printed:
        key = SigningKey.load(out["key_file"])
        assert roster.verify(out["party"], key.sign(b"m"), b"m")
        assert stat.S_IMODE(os.stat(out["key_file"]).st_mode) == 0o600
    before = (tmp_path / "bob.key").read_bytes()
    assert distributed_main(["keygen", "--party", "bob", "--key-file",
                             str(tmp_path / "bob.key")]) == 1
    assert "never overwritten" in capsys.readouterr().err
    assert (tmp_path / "bob.key").read_bytes() == before
    # the fingerprint binds keys and threshold; impossible thresholds are refused
    strict = Roster(roster.parties, threshold=3)
    assert strict.fingerprint != roster.fingerprint
    for t in (1, 4):
        with pytest.raises(ValueError, match="threshold must be in"):
            _ = Roster(roster.parties, threshold=t).threshold
    with pytest.raises(ValueError, match="party name"):
        keygen("a,b", tmp_path / "x.key")


def test_no_member_ever_has_both_of_its_secrets_revealed():
    """Bonawitz's double-masking rule, twice: the board ignores (and counts) a reveal of the
    wrong kind, and a party refuses to reveal the other kind of a member it already revealed."""
    roster, keys = Roster.generate(NAMES)
    state = BoardState("s", roster)
    zero = base64.b64encode(bytes(32)).decode()
    log = [{"type": "hello", "party": p, "enc_public": zero} for p in NAMES]
    log += [{"type": "join", "round": 1, "party": p, "nonce": p, "mask_public": zero,
             "shares": {q: zero for q in NAMES}} for p in NAMES]
    log += [{"type": "seal", "round": 1, "party": "alice"}]
    log += [{"type": "masked", "round": 1, "party": p,
             "data": base64.b64encode(bytes(16)).decode()} for p in NAMES]
    for msg in log:
        state.apply({"session": "s", **msg})
    r = state.rounds[1]
    assert r.status == "unmasking" and r.survivors == list(NAMES) and r.dropped == []
    share = base64.b64encode(share_to_bytes(1)).decode()
    state.apply({"session": "s", "type": "unmask", "round": 1, "party": "bob",
                 "b": {"alice": share, "bob": share}, "s": {"carol": share}})
    assert state.ignored["invalid"] == 1 and r.reveals == {}
    party = SGBDTParty(SGBDTClassifier(schema=ADULT_SCHEMA, epsilon=1.0, seed=0))
    dist = DistributedParty(party, KafkaBoard("127.0.0.1:1", "unused"), name="bob",
                            session="s", roster=roster, key=keys["bob"])
    dist.proto["revealed"][1] = {"alice": "s"}   # as if alice had been dropped before
    with pytest.raises(RuntimeError, match="refusing to reveal both shares of 'alice'"):
        dist._reveal(r)


# ----------------------------------------------------------------- the board's signatures
@pytest.fixture(scope="module")
def broker():
    b = LocalBroker().start()
    yield b
    b.stop()


def _read_all(board, n: int, timeout: float = 30.0) -> list:
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(board.read(100))
    return out


def test_forged_unsigned_and_replayed_messages_are_ignored_and_counted(broker):
    roster, keys = Roster.generate(["alice", "bob"])
    topic = "board-auth"
    raw = KafkaBoard(broker.bootstrap, topic)                 # an intruder who can write
    assert raw.connect()
    alice = SignedBoard(KafkaBoard(broker.bootstrap, topic), roster, "auth",
                        key=keys["alice"], name="alice")
    assert alice.transport.connect()
    alice.post("join", {"nonce": "n1"}, round=1)
    genuine = _read_all(raw, 1)[0]
    raw.post(genuine)                                          # replayed: same seq
    env = json.loads(genuine["msg"])
    env["body"]["nonce"] = "n2"                                # tampered payload
    raw.post({"msg": json.dumps(env), "sig": genuine["sig"]})
    fake_roster, fake_keys = Roster.generate(["alice"])        # forged: wrong key
    SignedBoard(raw, fake_roster, "auth", key=fake_keys["alice"], name="alice").post(
        "seal", round=1)
    mallory_roster, mallory = Roster.generate(["mallory"])     # not in the roster
    SignedBoard(raw, mallory_roster, "auth", key=mallory["mallory"], name="mallory").post(
        "seal", round=1)
    raw.post({"type": "seal", "session": "auth", "round": 1, "party": "alice"})   # unsigned
    raw.post({"msg": "{not json", "sig": genuine["sig"]})      # malformed envelope
    broker.produce(topic, [b"\x00garbage"])                    # not JSON at all
    SignedBoard(raw, roster, "other-job", key=keys["alice"], name="alice").post(
        "join", {"nonce": "x"}, round=1)                       # another session
    alice.post("join", {"nonce": "n3"}, round=3)
    alice.post("seal", {}, round=2)                            # older round than her last
    SignedBoard(raw, roster, "auth", key=keys["bob"], name="bob").post(
        "join", {"nonce": "b1"}, round=3)
    expected = {"unsigned": 1, "malformed": 2, "wrong_session": 1, "unknown_sender": 1,
                "bad_signature": 2, "replayed": 1, "stale_round": 1}
    for attempt in range(2):   # a later reader replaying the log reaches the same verdicts
        reader = SignedBoard(KafkaBoard(broker.bootstrap, topic), roster, "auth")
        assert reader.transport.connect()
        accepted, deadline = [], time.monotonic() + 30
        while reader.accepted + sum(reader.rejected.values()) < 12 \
                and time.monotonic() < deadline:
            accepted.extend(reader.read(100))
        assert [(m["party"], m["type"], m["round"], m.get("nonce")) for m in accepted] == [
            ("alice", "join", 1, "n1"), ("alice", "join", 3, "n3"), ("bob", "join", 3, "b1")]
        assert dict(reader.rejected) == expected, attempt
        reader.close()
    for board in (raw, alice):
        board.close()


# ----------------------------------------------------------------- the protocol, real broker
def _shards(k=3, n=15000):
    X, y, schema = load_adult("train")
    parts = np.array_split(np.random.default_rng(0).permutation(n), k)
    return [([X[i] for i in p], [y[i] for i in p]) for p in parts], schema


class _Recorder:
    """The raw board, except that its party dies just before posting its vector of a round."""

    def __init__(self, board, dies_at_round=None):
        self.board, self.dies_at_round = board, dies_at_round

    def post(self, msg):
        env = json.loads(msg["msg"])
        if env["type"] == "masked" and env["round"] == self.dies_at_round:
            raise SystemExit
        self.board.post(msg)

    def read(self, timeout_ms=20):
        return self.board.read(timeout_ms)


def _waveform_shards(k=3, n=4500):
    """Three parties' shares of river's Waveform stream (three classes, issue 52)."""
    from river.datasets import synth
    rows = list(synth.Waveform(seed=4).take(n))
    schema = {"features": {f: {"type": "numeric", "min": -5, "max": 10} for f in rows[0][0]},
              "target": {"type": "categorical", "values": [0, 1, 2]}}
    parts = np.array_split(np.arange(n), k)
    return [([rows[i][0] for i in p], [rows[i][1] for i in p]) for p in parts], schema


def _run_parties(broker, topic, rounds, *, dies=None, round_timeout=20.0, threshold=None,
                 shards=None, join_timeout=3.0, hold=None):
    """Three party threads; with ``hold`` (an Event) each waits for it before its last round,
    so whatever was posted before the event is set is read before the session ends."""
    shards, schema = _shards() if shards is None else shards
    roster, keys = Roster.generate(NAMES, threshold)
    out, errors = {}, []

    def run(i, name):
        try:
            # Alg. 9's setting: the batch learning rate, no (stream-only) drift signal
            party = SGBDTParty(SGBDTClassifier(schema=schema, epsilon=1.0, seed=i,
                                               learning_rate=0.5, drift=False))
            party.learn_many(*shards[i])
            board = KafkaBoard(broker.bootstrap, topic)
            assert board.connect()
            rec = _Recorder(board, dies_at_round=dies if name == "carol" else None)
            dist = DistributedParty(party, rec, name=name, session=topic, roster=roster,
                                    key=keys[name], params={"k": 3}, expected=3,
                                    join_timeout=join_timeout, round_timeout=round_timeout)
            out[name] = {"dist": dist, "party": party, "plain": {}, "rounds": {}}
            dist.start(catch_up_s=0.3)
            for k in range(rounds + 1):
                if hold is not None and k == rounds:
                    assert hold.wait(120), "the hold was never released"
                summary = dist.run_round()
                t = summary["round"]
                if getattr(dist, "last_plaintext", None) is not None:
                    out[name]["plain"][t] = encode(dist.last_plaintext)
                    dist.last_plaintext = None
                out[name]["rounds"][t] = {**summary, "words": dist.last_words}
            board.close()
        except SystemExit:
            out[name]["died"] = True
        except Exception as exc:   # surfaced by the main thread
            errors.append((name, exc))

    threads = [threading.Thread(target=run, args=(i, n)) for i, n in enumerate(NAMES)]
    for t in threads:
        t.start()
    return threads, out, errors, roster


def _join_all(threads, errors):
    for t in threads:
        t.join(180)
    assert not errors, errors


def test_three_parties_sum_exactly_and_agree_while_an_intruder_replays_and_forges(broker):
    """40 rounds; meanwhile an intruder with write access to the board re-posts every 5th
    message it reads and posts forged ``cut`` / ``abandon`` messages in alice's name. Every
    round completes with the exact sum, and every party counts exactly what was injected."""
    topic = "board-sum"
    # the parties' last round waits for the intruder: its every post lands before that round
    # (a loaded machine could otherwise let a party end before it reads a late replay)
    hold = threading.Event()
    # honest parties never time out here: the timeouts only allow for a loaded CI machine
    # (two pytest workers on two cores), and a stall shows as a round's reason below
    threads, out, errors, roster = _run_parties(broker, topic, rounds=40, hold=hold,
                                                join_timeout=30.0, round_timeout=90.0)
    injected = {"replayed": 0, "bad_signature": 0}
    fake_roster, fake = Roster.generate(["alice"])
    intruder = KafkaBoard(broker.bootstrap, topic)
    assert intruder.connect()
    forger = SignedBoard(intruder, fake_roster, topic, key=fake["alice"], name="alice")
    genuine: set[tuple[str, int]] = set()
    last_round = 0
    while last_round < 15 and any(t.is_alive() for t in threads):
        for msg in intruder.read(50):
            env = json.loads(msg["msg"])
            key = (env["sender"], env["seq"])
            if key in genuine or not roster.verify(env["sender"], base64.b64decode(msg["sig"]),
                                                   DOMAIN + msg["msg"].encode()):
                continue   # the intruder's own copies and forgeries
            genuine.add(key)
            last_round = max(last_round, env["round"])
            if last_round >= 15:
                break
            if len(genuine) % 5 == 0:
                intruder.post(msg)
                injected["replayed"] += 1
            if env["type"] == "seal":   # try to cut the round short and to abandon it
                forger.post("cut", round=env["round"])
                forger.post("abandon", round=env["round"])
                injected["bad_signature"] += 2
    intruder.close()   # (every post was acknowledged by the broker)
    hold.set()
    _join_all(threads, errors)
    assert injected["replayed"] >= 20 and injected["bad_signature"] >= 20
    for t in range(41):
        statuses = {out[p]["rounds"][t]["status"] for p in NAMES}
        assert statuses == {"complete"}, (t, {p: {k: out[p]["rounds"][t][k] for k in (
            "status", "reason", "members", "survivors", "seconds")} for p in NAMES})
        plain_sum = sum(out[p]["plain"][t] for p in NAMES)
        for p in NAMES:
            assert np.array_equal(out[p]["rounds"][t]["words"], plain_sum)   # exact
    for p in NAMES:
        counters = out[p]["dist"].counters
        assert counters["replayed"] == injected["replayed"], (p, counters)
        assert counters["bad_signature"] == injected["bad_signature"], (p, counters)
        assert counters["unsigned"] == counters["stale_round"] == counters["invalid"] == 0
    # every party holds the same ensemble, and it predicts better than the majority class
    X, y, _ = load_adult("test")
    preds = [np.asarray(out[p]["party"].predict_many(X[:3000])) for p in NAMES]
    assert all((preds[0] == q).all() for q in preds[1:])
    forests = [out[p]["party"].engine.forest for p in NAMES]
    assert all(np.array_equal(forests[0].value, f.value) for f in forests[1:])
    err = np.mean(preds[0] != np.asarray(y[:3000]))
    assert err < 0.22, err
    for p in NAMES:
        rep = out[p]["party"].privacy_report()
        assert rep["records_learned"] == 5000 and rep["epsilon"] <= 1.0
        assert rep["rounds_contributed"] == 40 and rep["init_contributed"]
        assert rep["scope"].startswith("this party's records")
        # 41 rounds, and the party keeps the last KEEP_ROUNDS of them (a job runs for months)
        dist = out[p]["dist"]
        assert dist.state.floor == 41 - KEEP_ROUNDS
        assert sorted(dist.state.rounds) == list(range(41 - KEEP_ROUNDS, 41))
        assert min(t for _, t in dist.posted) >= dist.state.floor


@pytest.mark.filterwarnings("ignore::dpstream.models.params.SmallStreamWarning")
def test_three_parties_train_one_three_class_model_through_the_board(broker):
    """A K-class model (softmax, K-vector leaves) over the real broker: round 0 sums the
    noisy class counts, every round the leaves' K-vectors, each sum exact; the parties end
    with one model that beats chance."""
    threads, out, errors, _ = _run_parties(broker, "board-multiclass", rounds=15,
                                           shards=_waveform_shards(),
                                           join_timeout=10.0)   # (a loaded CI machine)
    _join_all(threads, errors)
    for t in range(16):
        assert {out[p]["rounds"][t]["status"] for p in NAMES} == {"complete"}
        plain_sum = sum(out[p]["plain"][t] for p in NAMES)
        for p in NAMES:
            assert np.array_equal(out[p]["rounds"][t]["words"], plain_sum)
    parties = [out[p]["party"] for p in NAMES]
    assert parties[0].vector_size() == parties[0].engine.leaves.size * 3
    assert parties[0].engine.init_score.shape == (3,)
    shards, _ = _waveform_shards(k=1, n=5500)
    test, labels = shards[0][0][4500:], shards[0][1][4500:]   # records no party learned
    preds = [np.asarray(p.predict_many(test)) for p in parties]
    assert all((preds[0] == q).all() for q in preds[1:])
    acc = float(np.mean(preds[0] == np.asarray(labels)))
    assert acc > 0.5, acc           # three classes: about 0.34 by chance
    for p in parties:
        assert p.privacy_report()["epsilon"] <= 1.0


def test_fewer_than_t_survivors_abandon_the_round_and_say_why(broker):
    """Threshold 3 of 3: carol dies before posting her vector in round 3, so the dropped mask
    cannot be recovered; the round is abandoned with its reason, the next one cannot gather
    three parties, and the contributions' charges stand."""
    threads, out, errors, _ = _run_parties(broker, "board-t3", rounds=4, dies=3,
                                           round_timeout=2.0, threshold=3)
    _join_all(threads, errors)
    assert out["carol"].get("died")
    for p in ("alice", "bob"):
        rounds = out[p]["rounds"]
        assert [rounds[t]["status"] for t in range(5)] == ["complete"] * 3 + ["abandoned"] * 2
        assert set(rounds[3]["survivors"]) == {"alice", "bob"}
        assert rounds[3]["reason"] == ("2 of 3 members sent their vector before the cut; the "
                                       "threshold is 3, so the dropped members' masks cannot "
                                       "be recovered")
        assert rounds[4]["reason"] == "2 parties joined; the threshold is 3"
        rep = out[p]["party"].privacy_report()
        assert rep["rounds_contributed"] == 3 and rep["rounds_abandoned"] == 1
        assert rep["trees"] == 2
    forests = [out[p]["party"].engine.forest for p in ("alice", "bob")]
    assert np.array_equal(forests[0].value, forests[1].value)


def test_parties_with_different_settings_refuse_to_train_together(broker):
    shards, schema = _shards()
    roster, keys = Roster.generate(["p1", "p2"])
    boards = []
    for params in ({"epsilon": 1.0}, {"epsilon": 2.0}):
        board = KafkaBoard(broker.bootstrap, "board-config")
        assert board.connect()
        boards.append(board)
        name = f"p{len(boards)}"
        party = SGBDTParty(SGBDTClassifier(schema=schema, epsilon=1.0, seed=0))
        dist = DistributedParty(party, board, name=name, session="cfg", params=params,
                                roster=roster, key=keys[name])
        if len(boards) == 1:
            dist.start(catch_up_s=0.3)
        else:
            with pytest.raises(ValueError, match="config .* differs"):
                dist.start(catch_up_s=0.3)
    with pytest.raises(ValueError, match="does not match"):
        DistributedParty(party, board, name="p1", session="cfg", roster=roster,
                         key=keys["p2"])
    for b in boards:
        b.close()


# ----------------------------------------------------------------- party processes, SIGKILL
def _keys_for(tmp_path: Path, names=NAMES) -> Path:
    for name in names:
        keygen(name, tmp_path / f"{name}.key", roster=tmp_path / "roster.json")
    return tmp_path


def _stopped(proc: subprocess.Popen) -> bool:
    try:
        return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.kafka
@pytest.mark.parametrize("when", ["after", "before"])
def test_a_party_killed_mid_round_leaves_the_survivors_exact_sum(broker, tmp_path, when):
    """Three party processes; carol freezes right after (or right before) posting her masked
    vector of round 2 and the test kills her with SIGKILL. Round 2 still completes: with her
    vector (posted: the survivors reveal her self-mask seed) or without it (the survivors
    reveal her mask key and take her pairwise masks out) - in both cases the sum is exactly
    the fixed-point sum of the vectors it holds. Rounds 3 and 4 go on with two parties."""
    keys = _keys_for(tmp_path)
    topic = f"board-proc-{when}"
    procs = {}
    for i, name in enumerate(NAMES):
        cmd = [sys.executable, str(PARTY_PROC), "--bootstrap", broker.bootstrap, "--topic",
               topic, "--name", name, "--keys", str(keys), "--shard", str(i), "--rounds", "4",
               "--out", str(tmp_path / f"{name}.jsonl")]
        if name == "carol":
            cmd += [f"--stop-{when}-masked", "2"]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                       stderr=open(tmp_path / f"{name}.log", "wb"))
    try:
        deadline = time.monotonic() + 120
        while not _stopped(procs["carol"]):
            assert procs["carol"].poll() is None and time.monotonic() < deadline, \
                (tmp_path / "carol.log").read_text()[-3000:]
            time.sleep(0.05)
        procs["carol"].send_signal(signal.SIGKILL)
        assert procs["carol"].wait(30) == -signal.SIGKILL
        for name in ("alice", "bob"):
            assert procs[name].wait(120) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    logs = {n: _lines(tmp_path / f"{n}.jsonl") for n in NAMES}
    plain = {n: {r["plain"]: np.array(r["words"], dtype=np.uint64)
                 for r in logs[n] if "plain" in r} for n in NAMES}
    assert 2 in plain["carol"] and 3 not in plain["carol"]
    rounds = {n: {r["round"]: r for r in logs[n] if "round" in r} for n in ("alice", "bob")}
    expected_survivors = set(NAMES) if when == "after" else {"alice", "bob"}
    for n in ("alice", "bob"):
        assert [rounds[n][t]["status"] for t in range(5)] == ["complete"] * 5
        assert set(rounds[n][2]["survivors"]) == expected_survivors
        for t in range(5):
            survivors = rounds[n][t]["survivors"]
            exact = sum((plain[p][t] for p in survivors), np.zeros_like(plain["alice"][t]))
            assert np.array_equal(np.array(rounds[n][t]["words"], dtype=np.uint64), exact), t
        assert set(rounds[n][3]["survivors"]) == set(rounds[n][4]["survivors"]) == \
            {"alice", "bob"}
    # the reveals on the board: one kind per member, never both (Bonawitz's rule)
    reader = SignedBoard(KafkaBoard(broker.bootstrap, topic), Roster.load(keys / "roster.json"),
                         topic)
    assert reader.transport.connect()
    messages = []
    while not reader.caught_up() or not messages:
        messages.extend(reader.read(200))
    reader.close()
    for t in range(5):
        reveals = [m for m in messages if m["type"] == "unmask" and m["round"] == t]
        b = {u for m in reveals for u in m["b"]}
        s_ = {u for m in reveals for u in m["s"]}
        assert len(reveals) >= 2 and not b & s_, t
        if t == 2:
            assert b == expected_survivors and s_ == set(NAMES) - expected_survivors
    ends = {n: logs[n][-1] for n in ("alice", "bob")}
    assert ends["alice"]["forest"] == ends["bob"]["forest"]
    assert ends["alice"]["report"]["trees"] == 4
    assert ends["alice"]["counters"]["bad_signature"] == 0


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
           "--parties", "3", "--join-timeout", "2", "--round-timeout", "3",
           "--roster", str(tmp_path / "roster.json"), "--board-key",
           str(tmp_path / f"{name}.key")]
    return subprocess.Popen(cmd, stdout=log, stderr=log)


class _Watcher:
    """Reads and verifies the board log incrementally, as a party would."""

    def __init__(self, broker, roster):
        self.state = BoardState("e2e", roster)
        self.board = SignedBoard(KafkaBoard(broker.bootstrap, "board-serve"), roster, "e2e")
        assert self.board.transport.connect()

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


def _metrics(tmp_path: Path, name: str) -> str:
    found = re.search(r"metrics on http://([\d.]+):(\d+)/metrics",
                      (tmp_path / f"{name}.log").read_text(errors="replace"))
    assert found, f"{name} did not log its metrics address"
    with urllib.request.urlopen(f"http://{found[1]}:{found[2]}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.mark.kafka
def test_three_serve_processes_survive_a_party_killed_mid_round(broker, tmp_path):
    for name in NAMES:
        broker.create_topic(f"records-{name}")
    roster = Roster.load(_keys_for(tmp_path) / "roster.json")
    stop = threading.Event()
    _trickle(broker, stop)
    procs = {n: _serve_party(broker, tmp_path, n) for n in NAMES}
    watcher = _Watcher(broker, roster)

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
        # an intruder replays a party's message and posts an unsigned one
        intruder = KafkaBoard(broker.bootstrap, "board-serve")
        assert intruder.connect()
        first = next(m for m in _read_all(intruder, 1))
        intruder.post(first)
        intruder.post({"type": "abandon", "session": "e2e", "round": 1, "party": "alice"})
        intruder.close()
        # freeze carol right after a join of hers that she has not followed with her vector
        killed_in = None
        while time.monotonic() < deadline and killed_in is None:
            for r in list(watcher.rounds(10).values()):
                if not r.resolved and any(p == "carol" for p, _ in r.joins) \
                        and "carol" not in r.masked:
                    procs["carol"].send_signal(signal.SIGSTOP)
                    time.sleep(0.3)
                    after = watcher.rounds(50)[r.number]
                    if "carol" not in after.masked and after.status in ("open", "sealed"):
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
        # she had joined, so she is a member; the round is recovered without her vector
        assert "carol" in rounds[killed_in].members
        assert rounds[killed_in].status == "complete"
        assert rounds[killed_in].survivors == [p for p in rounds[killed_in].members
                                               if p != "carol"]
        metrics = _metrics(tmp_path, "alice")
        assert 'dpstream_board_messages_ignored_total{reason="replayed"} 1.0' in metrics
        assert 'dpstream_board_messages_ignored_total{reason="unsigned"} 1.0' in metrics
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
    assert watcher.board.rejected["replayed"] == watcher.board.rejected["unsigned"] == 1
    # privacy reports per party, from each checkpoint (what `dpstream status` prints)
    reports = {}
    for n in NAMES:
        out = subprocess.run([*DPSTREAM, "status", "--json", "--curator", "--checkpoint-dir",
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
