"""A lying broker against secure aggregation, and seeds shared between parties (issue 63,
findings 4 and 5).

Finding 4: the survivors of a round are "whose vector precedes the cut in the log", and a broker
can serve each party its own log. Serving some parties the target's vector before the cut and
others after it made the first group reveal shares of its self-mask seed and the second shares
of its mask key: with k = 4, t = 2 both were recovered and the vector unmasked bit-exact; with
k = 3, t = 2 one restart between a party's reveal and the round's end did it (the "never both
kinds" memory was not checkpointed); and the parties applied different sums without an error.
Here the roster refuses 2t <= k, every survivor attests the survivors it saw (signed,
checkpointed) and reveals only after t matching attestations, a disagreement abandons the round
everywhere, and each party compares its digest of every round with the others'.

Finding 5: ``--seed`` reached every party unchanged, so parties drew the same noise. Now the
seed is mixed with the party's name, and equal seeds are refused through the hello's commitment.

The parties are real :class:`~dpstream.stream.runner.Runner` s with checkpoint directories (as
``dpstream serve`` runs them), in threads, on an in-memory log that a :class:`_Feed` serves to
each party in the order a lying broker chooses.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dpstream.connectors import CheckpointStore
from dpstream.models import SGBDTClassifier
from dpstream.models.boosting.sgbdt_party import SGBDTParty
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.distributed import DistributedParty, Roster, SignedBoard
from dpstream.stream.distributed import party as party_module
from dpstream.stream.distributed.secure_aggregation import (
    KeyPair,
    encode,
    int_to_secret,
    pair_mask,
    round_context,
    self_mask,
)
from dpstream.stream.distributed.shamir import reconstruct, share_from_bytes
from dpstream.stream.runner import Runner

PARAMS = {"n_trees": 10, "learning_rate": 0.5, "drift": False}
R = 1                      # the attacked round (round 0, the initial score, runs honestly)
SESSION = "lying-broker"
pytestmark = pytest.mark.filterwarnings("ignore::dpstream.models.params.SmallStreamWarning")


def _env(msg: dict) -> dict:
    return json.loads(msg["msg"])


class _Log:
    """The broker's one append-only log (the truth a later honest reader would see)."""

    def __init__(self):
        self.items: list[dict] = []
        self.cond = threading.Condition()

    def count(self, kind: str, round_number: int) -> int:
        return sum(1 for m in self.items
                   if (e := _env(m))["type"] == kind and e["round"] == round_number)


class _Feed:
    """What the broker serves one party: the log, except the messages ``hold(envelope, feed)``
    holds back (re-examined on every read, delivered in log order once released).
    ``crash(envelope)``: the party dies (SystemExit) right after posting that message."""

    def __init__(self, log: _Log, hold: Callable | None = None, crash: Callable | None = None):
        self.log, self.hold, self.crash = log, hold, crash
        self.pos, self.held, self.delivered = 0, [], []

    def post(self, msg: dict) -> None:
        with self.log.cond:
            self.log.items.append(msg)
            self.log.cond.notify_all()
        if self.crash is not None and self.crash(_env(msg)):
            raise SystemExit

    def read(self, timeout_ms: int = 20) -> list[dict]:
        with self.log.cond:
            if self.pos == len(self.log.items) and timeout_ms:
                self.log.cond.wait(timeout_ms / 1000)
            pending, self.held = self.held + self.log.items[self.pos:], []
            self.pos = len(self.log.items)
            out = []
            for msg in pending:
                if self.hold is not None and self.hold(_env(msg), self):
                    self.held.append(msg)
                else:
                    out.append(msg)
                    self.delivered.append(_env(msg))
        return out

    def caught_up(self) -> bool:
        return self.pos == len(self.log.items)


def late_target(target: str, attestations: int | None = None) -> Callable:
    """The lie: this party sees ``target``'s vector of round R only after a cut, and the other
    parties' round-R attestations and reveals only after the cut too (or the lie shows).
    ``attestations``: every party's round-R attestations are held until that many are on the
    log (the broker's delivery schedule; it makes the outcome deterministic)."""
    def hold(env: dict, feed: _Feed) -> bool:
        if env["round"] != R:
            return False
        if attestations is not None and env["type"] == "consistent" \
                and feed.log.count("consistent", R) < attestations:
            return True
        if any(e["type"] == "cut" and e["round"] == R for e in feed.delivered):
            return False
        return (env["type"] == "masked" and env["sender"] == target) \
            or env["type"] in ("consistent", "unmask")
    return hold


def honest(attestations: int | None = None, hide_from: tuple[str, ...] = ()) -> Callable:
    """The target's vector in its place; ``hide_from``: those parties' round-R attestations,
    cuts and abandons never arrive (a broker that keeps each group from seeing the other)."""
    def hold(env: dict, feed: _Feed) -> bool:
        if env["round"] != R:
            return False
        if env["sender"] in hide_from and env["type"] in ("consistent", "cut", "abandon"):
            return True
        return attestations is not None and env["type"] == "consistent" \
            and feed.log.count("consistent", R) < attestations
    return hold


class _Job:
    """``names`` parties with ``threshold``, each a runner with a checkpoint directory."""

    def __init__(self, tmp: Path, names: tuple[str, ...], threshold: int):
        self.tmp, self.names, self.log = tmp, names, _Log()
        self.roster, self.keys = Roster.generate(names, threshold)
        X, y, _ = load_adult("train")
        self.shards = {n: (X[400 * i:400 * (i + 1)], y[400 * i:400 * (i + 1)])
                       for i, n in enumerate(names)}
        self.plain: dict[tuple[str, int], np.ndarray] = {}
        self.out: dict[str, dict] = {n: {"rounds": {}} for n in names}
        self.dists: dict[str, DistributedParty] = {}
        self.runners: dict[str, Runner] = {}

    def party(self, name: str, feed: _Feed, round_timeout: float,
              learn: bool = True) -> DistributedParty:
        runner = Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(self.tmp / name),
                               epsilon=1.0, seed=self.names.index(name), params=PARAMS,
                               party="values")
        if learn:
            runner.model.learn_many(*self.shards[name])
        dist = None

        def before_post() -> None:   # the test's ground truth, then the write-ahead checkpoint
            post, plain = dist.proto["post"], getattr(dist, "last_plaintext", None)
            if post is not None and plain is not None:   # (not after a restart)
                self.plain.setdefault((name, post["round"]), encode(plain))
            runner.checkpoint()

        dist = DistributedParty(runner.model, feed, name=name, session=SESSION,
                                roster=self.roster, key=self.keys[name], params={"k": 1},
                                expected=len(self.names), join_timeout=2.0,
                                round_timeout=round_timeout, before_post=before_post,
                                lock=runner.lock)
        self.dists[name], self.runners[name] = dist, runner
        return dist

    def thread(self, name: str, last: int = R + 1) -> threading.Thread:
        dist, runner, out = self.dists[name], self.runners[name], self.out[name]

        def go() -> None:
            try:
                dist.start(catch_up_s=0)
                while dist.proto["applied"] < last:
                    summary = dist.run_round()
                    runner.checkpoint()
                    out["rounds"][summary["round"]] = {**summary, "words": dist.last_words}
            except SystemExit:
                out["died"] = True
            except Exception as exc:   # surfaced by the test
                out["error"] = exc
            finally:
                runner.store.close()
        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        return thread

    def run(self, feeds: dict[str, _Feed], timeouts: dict[str, float]) -> None:
        for name in self.names:
            self.party(name, feeds[name], timeouts[name])
        threads = [self.thread(n) for n in self.names]
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "the parties did not finish"

    # ------------------------------------------------------------- what the broker holds
    def messages(self, round_number: int) -> list[dict]:
        """The true log's accepted messages of one round (an honest reader's view)."""
        reader = SignedBoard(_Feed(self.log), self.roster, SESSION)
        return [m for m in reader.read(0) if m["round"] == round_number]

    def revealed_kinds(self) -> dict[str, dict[str, set[str]]]:
        """Round R: ``{revealer: {member: kinds of its shares revealed}}``, all lives."""
        kinds: dict[str, dict[str, set[str]]] = {}
        for m in self.messages(R):
            if m["type"] == "unmask":
                for kind in ("b", "s"):
                    for u in m[kind]:
                        kinds.setdefault(m["party"], {}).setdefault(u, set()).add(kind)
        return kinds

    def recover(self, target: str) -> np.ndarray | None:
        """The broker's attack: reconstruct ``target``'s self-mask seed and mask key from the
        reveals on the log and unmask its round-R vector (``None``: too few shares of a kind)."""
        msgs, t = self.messages(R), self.roster.threshold
        publics = {m["party"]: base64.b64decode(m["mask_public"]) for m in msgs
                   if m["type"] == "join"}
        shares: dict[str, dict[int, int]] = {"b": {}, "s": {}}
        for m in msgs:
            if m["type"] == "unmask":
                for kind in ("b", "s"):
                    if target in m[kind]:
                        shares[kind][self.roster.index(m["party"])] = share_from_bytes(
                            base64.b64decode(m[kind][target]))
        if len(shares["b"]) < t or len(shares["s"]) < t:
            return None
        y = next(np.frombuffer(base64.b64decode(m["data"]), dtype="<u8").astype(np.uint64)
                 for m in msgs if m["type"] == "masked" and m["party"] == target)
        seed = int_to_secret(reconstruct(shares["b"], t))
        mask_key = KeyPair.from_private(int_to_secret(reconstruct(shares["s"], t)))
        context = round_context(SESSION, R, list(publics))
        words = y - self_mask(seed, context, y.size)
        for v, public in publics.items():
            if v != target:
                m = pair_mask(mask_key.shared_key(public), context, y.size)
                words = words - m if target < v else words + m
        return words

    def assert_target_safe(self, target: str) -> None:
        recovered = self.recover(target)
        exact = recovered is not None and np.array_equal(recovered, self.plain[(target, R)])
        assert recovered is None, (f"the broker unmasked {target}'s vector of round {R}"
                                   f"{' bit-exact' if exact else ''}")
        for revealer, members in self.revealed_kinds().items():
            both = sorted(u for u, kinds in members.items() if len(kinds) > 1)
            assert not both, f"{revealer} revealed both kinds of shares of {both}"


def _assert_aborted_consistently(job: _Job) -> None:
    """Round R abandoned by every party for the disagreement, nothing revealed; round R + 1
    complete with one exact sum, and one model everywhere."""
    for name in job.names:
        out = job.out[name]
        assert "error" not in out and "died" not in out, (name, out)
        assert out["rounds"][R]["status"] == "abandoned", (name, out["rounds"][R])
        assert out["rounds"][R]["reason"].startswith("inconsistent logs"), out["rounds"][R]
        assert out["rounds"][R + 1]["status"] == "complete"
    assert not job.revealed_kinds()
    words = [job.out[n]["rounds"][R + 1]["words"] for n in job.names]
    assert all(np.array_equal(words[0], w) for w in words[1:])
    forests = [job.dists[n].party.engine.forest.value for n in job.names]
    assert all(np.array_equal(forests[0], f) for f in forests[1:])


# ------------------------------------------------------------------------- the threshold
@pytest.mark.parametrize("k,t,low", [(4, 2, 3), (2, 1, 2), (5, 2, 3), (6, 3, 4)])
def test_the_roster_refuses_a_threshold_of_half_the_parties_or_less(k, t, low):
    roster, _ = Roster.generate([f"p{i}" for i in range(k)], t)
    with pytest.raises(ValueError, match=rf"k = {k} parties: its threshold must be in "
                                         rf"\[{low}, {k}\], got t = {t}; the smallest allowed "
                                         rf"is {low}"):
        _ = roster.threshold
    assert Roster(roster.parties).threshold == low == k // 2 + 1   # the default
    assert Roster(roster.parties, low).threshold == low


# ------------------------------------------------------------------------- finding 4
@pytest.mark.parametrize("late,attestations", [(("bob", "carol"), None), (("carol",), 4)],
                         ids=["two-and-two", "three-and-one"])
def test_k4_t3_a_target_served_late_to_some_parties_aborts_the_round_everywhere(
        tmp_path, late, attestations):
    """dave's vector precedes the cut for some parties, follows it for the others (``late``).
    With t = 2 the finding's split (two and two) unmasked dave's vector bit-exact and left
    two parties with the sum of four vectors, two with the sum of three. With t = 3 each
    party attests its survivors; no set gathers three matching attestations, every party sees
    the disagreement and abandons round 1 without revealing, and round 2 is one model again.
    (``attestations``: the broker delivers round 1's attestations once all four are in.)"""
    job = _Job(tmp_path, ("alice", "bob", "carol", "dave"), threshold=3)
    feeds = {n: _Feed(job.log, late_target("dave", attestations) if n in late
                      else honest(attestations)) for n in job.names}
    job.run(feeds, {n: 1.0 if n in late else 8.0 for n in job.names})
    job.assert_target_safe("dave")
    _assert_aborted_consistently(job)
    assert sorted(job.dists[late[0]].state.rounds[R].survivors) == \
        sorted(set(job.names) - {"dave"})
    assert sorted(job.dists["alice"].state.rounds[R].survivors) == list(job.names)


def test_k3_t2_a_target_served_late_to_one_party_aborts_the_round_everywhere(tmp_path):
    """carol's vector precedes the cut for alice and carol, follows it for bob: before the
    fix alice and carol revealed her self-mask seed and applied the sum of three, bob waited
    and applied nothing. Now all three abandon round 1, and round 2 is one model again."""
    job = _Job(tmp_path, ("alice", "bob", "carol"), threshold=2)
    feeds = {n: _Feed(job.log, honest(attestations=3)) for n in ("alice", "carol")}
    feeds["bob"] = _Feed(job.log, late_target("carol", attestations=3))
    job.run(feeds, {"alice": 8.0, "carol": 8.0, "bob": 1.0})
    job.assert_target_safe("carol")
    _assert_aborted_consistently(job)


def test_k3_t2_a_restart_between_reveal_and_round_end_cannot_reveal_the_other_kind(tmp_path):
    """The finding's attack with k = 3, t = 2. alice and carol see carol's vector before the
    cut and never see bob's attestation; they agree and reveal carol's self-mask seed, and
    alice dies right after posting her reveal. Restarted from her checkpoint, alice is shown
    bob's log (the cut before carol's vector). Before the fix her checkpoint did not know what
    she had revealed: she revealed carol's mask key too, bob did as well, and the broker
    unmasked carol's vector bit-exact. Now her checkpoint holds her attestation and the kinds
    she reveals, so she re-attests what she saw and reveals nothing more; carol's vector stays
    masked. carol applied round 1 and bob did not: each stops with a DivergenceError."""
    job = _Job(tmp_path, ("alice", "bob", "carol"), threshold=2)

    def alice_reveals(env: dict) -> bool:
        return env["type"] == "unmask" and env["round"] == R

    feeds = {"alice": _Feed(job.log, honest(hide_from=("bob",)), crash=alice_reveals),
             "carol": _Feed(job.log, honest(hide_from=("bob",))),
             "bob": _Feed(job.log, late_target("carol"))}
    for name in job.names:
        job.party(name, feeds[name], 8.0 if name != "bob" else 1.0)
    threads = {n: job.thread(n) for n in job.names}
    threads["alice"].join(60)
    assert job.out["alice"].get("died"), job.out["alice"]
    saved = CheckpointStore.read(tmp_path / "alice")["model"].protocol
    assert saved["applied"] == R - 1
    assert saved["revealed"].get(R) == {"alice": "b", "bob": "b", "carol": "b"}, \
        "what alice reveals was not in her checkpoint before her reveal was posted"
    assert sorted(saved["attest"][R]["survivors"]) == ["alice", "bob", "carol"]

    restarted = job.party("alice", _Feed(job.log, late_target("carol")), 1.0, learn=False)
    assert restarted.proto["revealed"][R] == {"alice": "b", "bob": "b", "carol": "b"}
    threads["alice"] = job.thread("alice")
    for t in threads.values():
        t.join(120)
    assert not any(t.is_alive() for t in threads.values())
    job.assert_target_safe("carol")
    assert set(job.revealed_kinds()) <= {"alice", "carol"}       # bob never revealed
    assert job.out["carol"]["rounds"][R]["status"] == "complete"
    for name in job.names:   # carol applied the round, alice and bob did not: nobody goes on
        error = job.out[name].get("error")
        assert isinstance(error, party_module.DivergenceError), (name, job.out[name])
        assert f"round {R} of session {SESSION!r} differently" in str(error)
    assert job.dists["bob"].state.rounds[R].reason.startswith("inconsistent logs")
    trees = {n: len(job.dists[n].party.engine.forest) for n in ("bob", "carol")}
    assert trees == {"bob": 0, "carol": 1}     # what they would have trained on with


@pytest.mark.parametrize("checkpoint", ["newest", "write-ahead"])
def test_a_party_restarted_after_its_attestation_keeps_to_it(tmp_path, checkpoint):
    """t = k = 3 (every reveal is needed): carol dies right after posting her attestation of
    round 1. Restarted from her newest checkpoint she holds it already; from her write-ahead
    copy (written before her vector, so before her attestation) she reads it back from the
    board and keeps to it. Either way she reveals, and round 1 completes with the exact sum."""
    job = _Job(tmp_path, ("alice", "bob", "carol"), threshold=3)

    def carol_attests(env: dict) -> bool:
        return env["type"] == "consistent" and env["round"] == R

    feeds = {n: _Feed(job.log) for n in ("alice", "bob")}
    feeds["carol"] = _Feed(job.log, crash=carol_attests)
    for name in job.names:
        job.party(name, feeds[name], 8.0)
    threads = {n: job.thread(n) for n in job.names}
    threads["carol"].join(60)
    assert job.out["carol"].get("died"), job.out["carol"]
    carol = job.party("carol", _Feed(job.log), 8.0, learn=False)
    assert sorted(carol.proto["attest"][R]["survivors"]) == sorted(job.names)
    if checkpoint == "write-ahead":
        del carol.proto["attest"][R], carol.proto["revealed"][R]
    threads["carol"] = job.thread("carol")
    for t in threads.values():
        t.join(120)
    exact = sum(job.plain[(n, R)] for n in job.names)
    for name in job.names:
        assert "error" not in job.out[name], job.out[name]
        assert job.out[name]["rounds"][R]["status"] == "complete"
        assert np.array_equal(job.out[name]["rounds"][R]["words"], exact)
    assert {u: sorted(k) for u, k in job.revealed_kinds()["carol"].items()} == \
        {n: ["b"] for n in job.names}


def test_a_party_that_applied_another_sum_is_detected(tmp_path):
    """Three honest parties finish round 0; then bob's signed digest of round 0 (or the
    ``prev`` of his join of round 1) names another result, as when the board had shown him
    another log. alice stops with a DivergenceError instead of training on beside him."""
    job = _Job(tmp_path, ("alice", "bob", "carol"), threshold=2)
    for name in job.names:
        job.party(name, _Feed(job.log), 8.0)
    threads = [job.thread(n, last=0) for n in job.names]
    for t in threads:
        t.join(60)
    assert all("error" not in job.out[n] for n in job.names), job.out
    alice, carol = job.dists["alice"], job.dists["carol"]
    bob = SignedBoard(_Feed(job.log), job.roster, SESSION, key=job.keys["bob"], name="bob")
    bob.post("applied", {"digest": "0" * 64}, round=0)
    with pytest.raises(ValueError, match="'bob' resolved round 0") as stopped:
        alice.poll(join=False)
    assert isinstance(stopped.value, party_module.DivergenceError)
    bob.post("join", {"nonce": "00", "mask_public": "", "shares": {}, "prev": "1" * 64},
             round=1)
    with pytest.raises(ValueError, match="'bob' resolved round 0"):
        carol.poll(join=False)
    digest = alice.proto["digests"][0]   # the honest parties' digests agreed
    assert {m["digest"] for m in job.messages(0) if m["type"] == "applied"} \
        == {digest, "0" * 64}


# ------------------------------------------------------------------------- finding 5
def _seeded_party(seed: int) -> SGBDTParty:
    party = SGBDTParty(SGBDTClassifier(schema=ADULT_SCHEMA, epsilon=1.0, seed=seed,
                                       **PARAMS))
    X, y, _ = load_adult("train")
    party.learn_many(X[:400], y[:400])   # the same records: only the noise can differ
    return party


def test_the_same_seed_gives_every_party_its_own_noise():
    """``--seed 7`` for three parties (the runner builds each model with seed 7): their
    noisy label sums and counts of round 0 used to be equal, so each party could subtract its
    own noise from the others' releases. Now the seed is mixed with the party's name."""
    roster, keys = Roster.generate(["alice", "bob", "carol"])
    released = {}
    for name in roster.names:
        party = _seeded_party(7)
        DistributedParty(party, _Feed(_Log()), name=name, session=SESSION, roster=roster,
                         key=keys[name])
        released[name] = party.init_contribution()
    values = [tuple(v) for v in released.values()]
    assert len(set(values)) == 3, values
    again = _seeded_party(7)   # reproducible for one name
    DistributedParty(again, _Feed(_Log()), name="bob", session=SESSION, roster=roster,
                     key=keys["bob"])
    assert np.array_equal(again.init_contribution(), released["bob"])


def test_parties_with_equal_seeds_refuse_to_start(tmp_path):
    """Each hello commits to the party's seed; a party that sees another's equal commitment
    refuses to start (before it posts its own hello), naming it."""
    roster, keys = Roster.generate(["alice", "bob", "carol"])
    log = _Log()

    def dist(name: str, seed: int | None) -> DistributedParty:
        return DistributedParty(_seeded_party(seed) if seed is not None else SGBDTParty(
            SGBDTClassifier(schema=ADULT_SCHEMA, epsilon=1.0, **PARAMS)), _Feed(log),
            name=name, session=SESSION, roster=roster, key=keys[name])

    dist("alice", 7).start(catch_up_s=0)
    dist("carol", None).start(catch_up_s=0)    # no seed: OS entropy, no commitment
    posted = len(log.items)
    with pytest.raises(ValueError, match="'bob' refuses to train with 'alice'.*same seed") \
            as refused:
        dist("bob", 7).start(catch_up_s=0)
    assert isinstance(refused.value, party_module.SeedCollisionError)
    assert len(log.items) == posted          # bob posted nothing
    dist("bob", 8).start(catch_up_s=0)       # its own seed: welcome
