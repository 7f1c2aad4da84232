"""One party of distributed S-GBDT: the board protocol around a local :class:`SGBDTParty`.

:class:`DistributedParty` signs everything it posts (:mod:`.signed_board`), joins rounds with
its secret-shared mask seeds, posts its masked vector (write-ahead: the service checkpoints
before the post), attests the survivors its log shows (checkpointed before the post, with the
kind of share it will reveal for each member), reveals only after ``t`` matching attestations,
applies or abandons each round as the board's log decides
(:class:`~dpstream.stream.distributed.board.BoardState`, whose docstring describes the protocol)
and compares its digest of each round with the other parties'. A ``seed`` given to the model is
mixed with the party's name, and a party refuses to train with another whose seed equals its
own. See docs/distributed.md for the trust model and the accounting under drop-outs.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ...models.boosting.sgbdt_party import SGBDTParty
from . import shamir
from .board import BoardRound, BoardState
from .roster import Roster, SigningKey, check_party_name
from .secure_aggregation import (
    KeyPair,
    RoundSecrets,
    mask_vector,
    open_share,
    round_context,
    seal_share,
)
from .signed_board import SignedBoard

__all__ = ["DistributedParty", "DivergenceError", "RollbackError", "RoundTimeout",
           "SeedCollisionError", "party_seed", "seed_commitment", "share_aad"]

log = logging.getLogger("dpstream.distributed")

#: rounds a party keeps in memory behind the last one it applied; older ones are forgotten
#: (:meth:`~.board.BoardState.prune`): a job runs for many thousands of rounds
KEEP_ROUNDS = 16

#: per-round timings kept (:attr:`DistributedParty.timings`: the last 1,000 to 2,000)
TIMINGS_KEPT = 1000


class RoundTimeout(RuntimeError):
    """The board did not resolve a round in time (the broker is unreachable)."""


class RollbackError(ValueError):
    """The board holds this party's signed vectors of rounds its checkpoint has not applied:
    the checkpoint is older than the party's releases (a restored backup), and starting from
    it would spend its records' budget again (``dpstream serve`` exits with status 2)."""


class DivergenceError(ValueError):
    """Another party resolved a round differently from this one (its signed digest differs):
    the board showed them different logs, and their models would differ from that round on
    (``dpstream serve`` exits with status 2)."""


class SeedCollisionError(ValueError):
    """Another party of the session was started with the same ``--seed`` (equal seed
    commitments on the board): knowing its own seed, each could recompute the other's noise."""


def party_seed(seed: int, name: str) -> np.random.SeedSequence:
    """The seed of party ``name``'s noise, from the operator's ``seed``: equal seeds give
    different streams per party (the name's SHA-256, not Python's per-process ``hash``).

    Examples
    --------
    >>> a, b = (np.random.default_rng(party_seed(7, n)).random() for n in ("alice", "bob"))
    >>> a != b, a == np.random.default_rng(party_seed(7, "alice")).random()
    (True, True)
    """
    name_hash = int.from_bytes(hashlib.sha256(name.encode()).digest()[:16], "big")
    return np.random.SeedSequence(entropy=[int(seed), name_hash])   # (a list: checkpointable)


def seed_commitment(session: str, seed: int | None) -> str | None:
    """What a party's ``hello`` says about its ``seed``: SHA-256 of the session and the seed
    (``None`` without one). Equal seeds give equal commitments, which the parties refuse. A
    seed is for tests and reproducible experiments: whoever guesses it can check the guess
    against the commitment and recompute the party's noise."""
    if seed is None:
        return None
    return hashlib.sha256(f"dpstream-seed-v1|{session}|{int(seed)}".encode()).hexdigest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def share_aad(session: str, round_number: int, sender: str, recipient: str) -> bytes:
    """What a sealed share is bound to: it opens only for this round, sender and recipient."""
    return f"dpstream-share-v1|{session}|{round_number}|{sender}|{recipient}".encode()


class DistributedParty:
    """Runs the board protocol for one :class:`~dpstream.models.boosting.sgbdt_party.SGBDTParty`.

    Parameters
    ----------
    party
        The local model (its records never leave this process).
    board
        The raw board transport: a connected
        :class:`~dpstream.connectors.bulletin.KafkaBoard` (or any object with ``post(dict)``
        and ``read(timeout_ms) -> list[dict]``); this party signs and verifies on top of it.
    name
        This party's name in the roster.
    session
        The training job's name: parties of one job use the same, a board topic may carry
        several jobs.
    roster, key
        The job's :class:`~dpstream.stream.distributed.roster.Roster` and this party's
        :class:`~dpstream.stream.distributed.roster.SigningKey`.
    params
        The shared hyper-parameters posted as the job's ``config`` (compared, not trusted:
        a party whose own differ refuses to join).
    expected
        How many parties :meth:`start` waits for (their hellos) before the first round.
    join_timeout, round_timeout
        Seconds a member waits for the others to join before it seals; and for the vectors
        after the seal (then ``cut``), for the reveals after the cut, or for enough joins
        (then ``abandon``).
    lock
        Held while the local model changes (the service's runner lock: a checkpoint from the
        consumer's rebalance thread never sees half a round).
    before_post
        Called after this party's vector is computed and before it is posted (the service
        writes its checkpoint there: write-ahead).
    persist
        Called before this party posts its attestation of a round's survivors, once the
        attestation and the kind of share it will reveal for each member are in
        :attr:`proto` (default: ``before_post``; the service writes its checkpoint): after a
        restart it can neither attest other survivors nor reveal the other kind.

    A model ``seed`` (``--seed``) is mixed with ``name`` (:func:`party_seed`) before the
    party's first release, and its commitment (:func:`seed_commitment`) goes into the
    ``hello``: a party that sees another party's equal commitment raises
    :class:`SeedCollisionError`.
    """

    def __init__(self, party: SGBDTParty, board: Any, *, name: str, session: str,
                 roster: Roster, key: SigningKey, params: dict | None = None,
                 join_timeout: float = 5.0, round_timeout: float = 20.0,
                 expected: int | None = None, before_post: Callable[[], None] | None = None,
                 persist: Callable[[], None] | None = None, lock: Any = None,
                 stop: threading.Event | None = None):
        check_party_name(name)
        self.party, self.name, self.session, self.roster = party, name, session, roster
        self.board = SignedBoard(board, roster, session, key=key, name=name)
        self.params = params or {}
        self.join_timeout, self.round_timeout = float(join_timeout), float(round_timeout)
        self.expected = expected
        self.before_post = before_post
        self.persist = persist if persist is not None else before_post
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.stop = stop or threading.Event()
        proto = getattr(party, "protocol", None)
        if proto is None or "enc_private" not in proto:   # travels in the party's checkpoint
            proto = {"applied": (proto or {}).get("applied", -1), "post": None}
            proto["enc_private"] = os.urandom(32)
            party.protocol = proto
            self._mix_seed(party, name)
        proto.setdefault("secrets", {})    # round -> (mask key, self-mask seed): this party's
        proto.setdefault("revealed", {})   # round -> {member: "b" | "s"} (never both)
        proto.setdefault("attest", {})     # round -> {"members", "survivors"} it attested
        proto.setdefault("digests", {})    # round -> its digest of the resolved round
        self.proto = proto
        self.seed_commit = seed_commitment(session, getattr(party.model, "seed", None))
        self.claims: dict[int, dict[str, str]] = {}   # round -> {party: digest} to compare
        self._started = False
        self.enc = KeyPair.from_private(proto["enc_private"])
        # rounds this party applied before (its checkpoint) are not rebuilt from the board
        self.state = BoardState(session, roster, floor=proto["applied"] + 1 - KEEP_ROUNDS)
        self.posted: set[tuple[str, int]] = set()
        self.timings: list[dict] = []
        self.last_total: np.ndarray | None = None
        self.last_words: np.ndarray | None = None

    @property
    def rejected(self) -> Counter[str]:
        """Board messages dropped by the signature layer, by reason."""
        return self.board.rejected

    @property
    def counters(self) -> dict[str, int]:
        """Rejected messages by reason plus the protocol's ``late`` and ``invalid``."""
        return {**self.board.rejected, **self.state.ignored}

    @staticmethod
    def _mix_seed(party: SGBDTParty, name: str) -> None:
        """A fresh party's noise: from ``(model seed, name)`` instead of the seed alone."""
        seed = getattr(party.model, "seed", None)
        if seed is None or party.init_contributed or party.rounds_contributed \
                or party.pending is not None:
            return   # OS entropy, or a party that released with its generator already
        party.engine.rng = np.random.default_rng(party_seed(seed, name))

    # ------------------------------------------------------------ plumbing
    def _post(self, kind: str, round_number: int | None = None, **body: Any) -> None:
        self.board.post(kind, body, round=round_number)
        if round_number is not None:
            self.posted.add((kind, round_number))

    def _read(self, timeout_ms: int = 20, own: dict[int, str] | None = None) -> None:
        for msg in self.board.read(timeout_ms):
            if own is not None and msg["party"] == self.name and msg["type"] == "masked" \
                    and msg["round"] > self.proto["applied"]:
                own[msg["round"]] = msg.get("data")   # this party's vectors, not applied yet
            self.state.apply(msg)
            kind = msg["type"]
            if kind == "applied":
                self._claim(msg["party"], msg["round"], msg.get("digest"))
            elif kind == "join" and msg["round"] > 0:
                self._claim(msg["party"], msg["round"] - 1, msg.get("prev"))
            elif kind == "hello" and self._started:
                self._check_seeds()

    def _claim(self, party: str, t: int, digest: Any) -> None:
        """Compare another party's digest of round ``t`` with this party's (now, or when
        this party resolves ``t``)."""
        if not isinstance(digest, str):
            return   # a party that does not know it (a checkpoint of an older version)
        own = self.proto["digests"].get(t)
        if own is None:
            if t > self.proto["applied"]:
                self.claims.setdefault(t, {})[party] = digest
            return
        if own != digest:
            raise self._diverged(party, t, digest, own)

    def _diverged(self, party: str, t: int, theirs: str, own: str) -> DivergenceError:
        return DivergenceError(
            f"party {self.name!r} stops: {party!r} resolved round {t} of session "
            f"{self.session!r} differently (its signed digest {theirs[:16]}..., this party's "
            f"{own[:16]}...): the board showed the parties different logs, and their models "
            f"would differ from round {t} on. A faulty or malicious broker (or a bug) did it; "
            f"this party stops here and applies nothing more. Check the broker, then start a "
            f"new session (docs/distributed.md, \"Threat model\")")

    def _check_seeds(self) -> None:
        """Refuse another party with this party's seed (equal commitments)."""
        twins = sorted(p for p, c in self.state.seed_commits.items()
                       if p != self.name and self.seed_commit is not None
                       and c == self.seed_commit)
        if twins:
            raise SeedCollisionError(
                f"party {self.name!r} refuses to train with {', '.join(map(repr, twins))}: "
                f"their hello on the board of session {self.session!r} commits to the same "
                f"seed as this party's. Parties started with equal --seed values could each "
                f"recompute the others' noise and strip it from the released sums. Give each "
                f"party its own seed, or none (OS entropy: the default, and the only choice "
                f"for real data)")

    @property
    def next_round(self) -> int:
        return self.proto["applied"] + 1

    def start(self, catch_up_s: float = 1.0) -> None:
        """Read the log to its end, agree on the config, say hello, re-post a pending
        vector. Raises :class:`RollbackError` (before posting anything) when the checkpoint
        is older than this party's vectors on the board."""
        t0 = time.monotonic()
        own: dict[int, str] = {}
        while time.monotonic() - t0 < catch_up_s or not self.board.caught_up():
            self._read(100, own)
            if time.monotonic() - t0 > 120:
                raise RoundTimeout("could not read the board to its end within 120 s")
        config = {"params": self.params, "roster": self.roster.fingerprint}
        if self.state.config is None:
            self._post("config", **config)
            self._wait(lambda: self.state.config is not None, "the config message")
        if self.state.config != config:
            raise ValueError(f"the board's config for session {self.session!r} differs from "
                             f"this party's: {self.state.config} vs {config}")
        self._refuse_rollback(own)
        self._check_seeds()
        self._post("hello", enc_public=_b64(self.enc.public), seed_commit=self.seed_commit)
        self._wait(lambda: self.state.keys.get(self.name) == self.enc.public,
                   "this party's hello")
        self._started = True
        self._check_seeds()
        if self.expected is not None:   # the first round waits until every party is there
            self._wait(lambda: len(self.state.keys) >= self.expected,
                       f"{self.expected} parties' hellos", timeout=self.round_timeout * 3)
        pending = self.proto["post"]
        if pending is not None:   # crashed after the write-ahead checkpoint
            self.posted.add(("masked", pending["round"]))
            r = self.state.rounds.get(pending["round"])
            if r is not None and r.status == "sealed" and self.name not in r.masked:
                self._post("masked", pending["round"], **pending["body"])
        self.follow()

    def _refuse_rollback(self, own: dict[int, str]) -> None:
        """Refuse a checkpoint older than this party's releases. ``own``: its signed vectors
        on the board for rounds after the checkpoint's last applied one. A vector is computed
        (its records charged) only in the round after the last applied one, with the
        checkpoint written before it is posted (write-ahead) and the round applied before the
        next one; so a checkpoint may know of one unapplied vector, its pending one, posted
        or not, and only with the same payload. Any other is a release the checkpoint's
        filter has not charged: following those rounds and training on would spend the same
        records again."""
        pending = self.proto["post"]
        later = sorted(t for t, data in own.items()
                       if pending is None or t != pending["round"]
                       or data != pending["body"]["data"])
        if not later:
            return
        applied, newest = self.proto["applied"], later[-1]
        held = "no pending vector" if pending is None else \
            f"pending: its vector of round {pending['round']}"
        raise RollbackError(
            f"party {self.name!r} refuses to start from a checkpoint older than its own "
            f"releases: the checkpoint's last applied round is {applied} ({held}), but the "
            f"board of session {self.session!r} holds this party's signed vectors for "
            f"{len(later)} round(s) after it, the newest for round {newest}. Its records were "
            f"charged for those vectors in a later state that this checkpoint lacks: starting "
            f"from it would spend their budget again. Start the party from its newest checkpoint "
            f"(last applied round {newest - 1} or later: the one written just before its "
            f"vector of round {newest} was posted, or a later one). If that is lost, the party "
            f"cannot rejoin this session: leave it stopped (the others train on without it); "
            f"its data can only join a new session, from fresh checkpoints, with records no "
            f"release of this one used (docs/distributed.md, \"Restoring a checkpoint\")")

    def _wait(self, condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.stop.is_set():
                return
            if time.monotonic() > deadline:
                raise RoundTimeout(f"{what} did not appear on the board within {timeout} s")
            self._read(50)

    # ------------------------------------------------------------ rounds
    def follow(self) -> int:
        """Apply every resolved round after the last applied one, in order (no waiting);
        returns how many were applied."""
        n = 0
        while True:
            r = self.state.rounds.get(self.next_round)
            if r is None or not r.resolved:
                return n
            with self.lock:
                self._resolve(r)
            n += 1

    def open_round(self) -> bool:
        """Whether the next round has been opened (joined) by someone."""
        r = self.state.rounds.get(self.next_round)
        return r is not None and r.status == "open" and bool(r.joins)

    def poll(self, *, want: bool = False, join: bool = True) -> dict | None:
        """Service step: read the board, apply resolved rounds, and (``join``) take part in
        the next round if this party wants one or another party opened it. Returns the
        round's summary when one was run."""
        self._read(0)
        self.follow()
        if join and (want or self.open_round()) and self.party.pool_size > 0:
            return self.run_round()
        return None

    def run_round(self) -> dict:
        """Join the next round and drive it to completion or abandonment (blocking)."""
        t = self.next_round
        t0 = time.perf_counter()
        compute = 0.0
        while not self.stop.is_set():
            self._read(20)
            r = self.state.round(t)
            if r.resolved:
                break
            c0 = time.perf_counter()
            self._step(r, time.monotonic())
            compute += time.perf_counter() - c0
        if self.stop.is_set():
            return {"round": t, "status": "stopped"}
        c0 = time.perf_counter()
        with self.lock:
            if r.disputed:   # show the others this party's view of the disputed round
                self._attest(r)
            out = self._resolve(r)
        self._announce(r, self.proto["digests"][t])
        compute += time.perf_counter() - c0
        total = time.perf_counter() - t0
        timing = {"round": t, "status": r.status, "members": list(r.members),
                  "survivors": list(r.survivors), "reason": r.reason,
                  "seconds": total, "compute_s": compute, "coordination_s": total - compute}
        self.timings.append(timing)
        if len(self.timings) > 2 * TIMINGS_KEPT:
            del self.timings[:-TIMINGS_KEPT]
        return {**timing, **out}

    def _step(self, r: BoardRound, now: float) -> None:
        """Post what this party owes round ``r`` in its current phase (at most once each)."""
        t, me = r.number, self.name
        if r.status == "open":
            joined = {p for p, _ in r.joins}
            if me not in joined:
                if ("join", t) not in self.posted:
                    self._join(r)
                return
            eligible = self.state.eligible(r)
            late = r.first_join_at is not None and now - r.first_join_at
            if ("seal", t) not in self.posted and me in eligible \
                    and len(eligible) >= self.state.threshold \
                    and (self.state.live <= set(eligible) or late > self.join_timeout):
                self._post("seal", t)
            elif late > self.round_timeout and ("abandon", t) not in self.posted:
                self._post("abandon", t)   # too few parties joined
        elif r.status == "sealed":
            if me in r.members and ("masked", t) not in self.posted and me not in r.masked:
                if t in self.proto["secrets"]:
                    with self.lock:
                        self._contribute(r)
                else:   # our join is on the board but its secrets died with a crash
                    self.posted.add(("masked", t))
                    log.warning("round %d: this party's secrets were lost in a restart; the "
                                "round goes on without its vector", t)
            if now - r.sealed_at > self.round_timeout and ("cut", t) not in self.posted:
                self._post("cut", t)
        elif r.status == "unmasking":
            if (me in r.survivors or t in self.proto["attest"]) and me not in r.attested \
                    and ("consistent", t) not in self.posted:
                with self.lock:
                    self._attest(r)
            elif me in r.attested and len(r.attested) >= self.state.threshold \
                    and ("unmask", t) not in self.posted and me not in r.reveals:
                if t not in self.proto["attest"]:   # restored from a checkpoint older than
                    with self.lock:                 # its attestation: keep to the board's
                        self._pledge(r)
                self._reveal(r)
            if now - r.unmask_at > self.round_timeout and ("abandon", t) not in self.posted:
                self._post("abandon", t)

    def _join(self, r: BoardRound) -> None:
        """Post a join: nonce, this round's mask public key, and the round secrets' shares
        sealed to every party with a hello on the board."""
        holders = {p: key for p, key in self.state.keys.items()}
        if len(holders) < self.state.threshold:
            return   # cannot share t-of-k yet: wait for more hellos
        if r.number not in self.proto["secrets"]:
            fresh = RoundSecrets.generate()
            self.proto["secrets"][r.number] = (fresh.mask_private, fresh.self_seed)
        secret = RoundSecrets(*self.proto["secrets"][r.number])
        shares = secret.shares([self.state.indices[p] for p in holders], self.state.threshold)
        sealed = {p: _b64(seal_share(self.enc.shared_key(key, b"share"),
                                     shares[self.state.indices[p]],
                                     share_aad(self.session, r.number, self.name, p)))
                  for p, key in holders.items()}
        self._post("join", r.number, nonce=secrets.token_hex(16),
                   mask_public=_b64(secret.mask_public), shares=sealed,
                   prev=self.proto["digests"].get(r.number - 1))

    def _contribute(self, r: BoardRound) -> None:
        """Compute W_u, checkpoint (write-ahead), post it under both masks."""
        if r.number == 0:
            vector = self.party.init_contribution()
        else:
            tree = self.party.draw_tree(np.random.default_rng(r.seed(self.session)))
            vector = self.party.contribute(tree)
        secret = RoundSecrets(*self.proto["secrets"][r.number])
        publics = {p: r.offers[p]["mask_public"] for p in r.members}
        words = mask_vector(vector, me=self.name, keys=secret.pair_keys(publics, self.name),
                            members=r.members, self_seed=secret.self_seed,
                            context=round_context(self.session, r.number, r.members))
        body = {"data": _b64(words.astype("<u8").tobytes())}
        self.proto["post"] = {"round": r.number, "body": body}
        self.last_plaintext = vector   # for tests: the aggregate must equal the plain sum
        if self.before_post is not None:
            self.before_post()
        self._post("masked", r.number, **body)

    def _attest(self, r: BoardRound) -> None:
        """Post this party's attestation of round ``r``'s members and survivors (Bonawitz's
        ConsistencyCheck), once. The first one is kept in :attr:`proto` with the kind of share
        this party will reveal for each member, and checkpointed (``persist``) before the
        post: a restarted party re-posts the same one, whatever log it is shown then (a round
        abandoned as disputed gets it too: it shows the others this party's view)."""
        t = r.number
        if self.name in r.attested or ("consistent", t) in self.posted \
                or (self.name not in r.survivors and t not in self.proto["attest"]):
            return
        self._post("consistent", t, **self._pledge(r))

    def _pledge(self, r: BoardRound) -> dict:
        """This party's attestation of round ``r`` (the first is kept, with the kinds of share
        it will reveal, and persisted before anything is posted on it)."""
        t = r.number
        if t not in self.proto["attest"]:
            self.proto["attest"][t] = {"members": list(r.members),
                                       "survivors": list(r.survivors)}
            kinds = self.proto["revealed"].setdefault(t, {})
            for u in r.members:
                kinds.setdefault(u, "b" if u in r.survivors else "s")
            if self.persist is not None:
                self.persist()
        return self.proto["attest"][t]

    def _reveal(self, r: BoardRound) -> None:
        """Post this survivor's shares: the self-mask seed's of every survivor, the mask key's
        of every dropped member — never both kinds for one member (Bonawitz's rule), and only
        the kinds its checkpointed attestation named."""
        t = r.number
        kinds = self.proto["revealed"].get(t, {})
        out: dict[str, dict[str, str]] = {"b": {}, "s": {}}
        for u in r.members:
            kind = "b" if u in r.survivors else "s"
            if kinds.get(u, kind) != kind:
                raise RuntimeError(f"round {t}: refusing to reveal both shares of {u!r}")
        pledged = self.proto["attest"].get(t)
        if pledged != {"members": r.members, "survivors": r.survivors} \
                or set(kinds) != set(r.members):
            raise RuntimeError(f"round {t}: refusing to reveal: this party attested {pledged}, "
                               f"the round shows members {r.members}, survivors {r.survivors}")
        for u in r.members:
            kind = kinds[u]
            offer = r.offers[u]
            try:
                b_share, s_share = open_share(self.enc.shared_key(offer["enc_public"], b"share"),
                                              offer["shares"][self.name],
                                              share_aad(self.session, t, u, self.name))
            except (KeyError, ValueError) as exc:
                self.posted.add(("unmask", t))
                log.warning("round %d: cannot open %s's share (%s); not revealing", t, u, exc)
                return
            value = b_share if kind == "b" else s_share
            out[kind][u] = _b64(shamir.share_to_bytes(value))
        self._post("unmask", t, **out)

    def _announce(self, r: BoardRound, digest: str) -> None:
        """A member posts its digest of a round it resolved (``applied``), unless it already
        posted in a later round (its message would be stale)."""
        if self.name in r.members and r.number >= self.board.latest_round:
            self._post("applied", r.number, digest=digest)

    def _resolve(self, r: BoardRound) -> dict:
        """Apply a resolved round to the local model (once), after comparing its digest with
        those the other parties posted (:class:`DivergenceError` before anything changes)."""
        p = self.party
        digest = r.digest()
        differ = sorted((q, d) for q, d in self.claims.pop(r.number, {}).items() if d != digest)
        if differ:   # the others learn it too, then this party stops
            self._announce(r, digest)
            raise self._diverged(differ[0][0], r.number, differ[0][1], digest)
        total = r.total() if r.status == "complete" else None
        if r.number == 0:
            if p.engine.init_score is None:
                p.apply_init(total)
            out = {"round": 0}
        elif total is not None:   # applies (and ends) this party's pending round, if any
            tree = p.draw_tree(np.random.default_rng(r.seed(self.session)))
            out = p.apply(tree, total, members=len(r.survivors),
                          included=self.name in r.survivors or p.pending is None)
        else:                     # no tree; a contribution's charge stands
            out = p.abandon()
        self.proto["applied"] = r.number
        self.proto["post"] = None
        self.proto["digests"][r.number] = digest
        for store in (self.proto["secrets"], self.proto["revealed"], self.proto["attest"]):
            for old in [k for k in store if k <= r.number]:
                del store[old]
        for old in [k for k in self.proto["digests"] if k <= r.number - KEEP_ROUNDS]:
            del self.proto["digests"][old]
        for old in [k for k in self.claims if k <= r.number]:
            del self.claims[old]
        self.last_total, self.last_words = total, r.words
        self.state.prune(r.number + 1 - KEEP_ROUNDS)
        floor = self.state.floor
        self.posted = {(kind, t) for kind, t in self.posted if t >= floor}
        log.info("round %d %s (members %s%s)", r.number, r.status, ",".join(r.members),
                 f"; {r.reason}" if r.reason else "")
        return out
