"""The bulletin board of distributed S-GBDT, read as a deterministic log.

Distributed S-GBDT (Kirschte et al., Algorithm 9) runs over a Kafka topic used as a bulletin
board. Every message is signed and checked before it gets here (:mod:`.signed_board`);
everything the parties agree on (members, survivors, reveals, each round's outcome) is a
deterministic function of the accepted log, :class:`BoardState` with one :class:`BoardRound`
per round, so every party, and a party replaying the log after a restart, reaches the same
conclusions without a coordinator.

The message types, what completes or abandons a round, and why drop-outs never understate a
record's spend: docs/distributed.md#the-board-as-a-deterministic-log.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from . import shamir
from .roster import Roster
from .secure_aggregation import decode, int_to_secret, recover_sum, round_context

__all__ = ["BoardState", "BoardRound"]

log = logging.getLogger("dpstream.distributed")


def _bytes(value: object, size: int | None = None) -> bytes:
    """Base64 text -> bytes (raises ValueError on anything else)."""
    if not isinstance(value, str):
        raise ValueError("expected base64 text")
    try:
        out = base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError(str(exc)) from None
    if size is not None and len(out) != size:
        raise ValueError(f"expected {size} bytes, got {len(out)}")
    return out


@dataclass
class BoardRound:
    """What the log says about one round."""

    number: int
    session: str
    threshold: int
    indices: dict[str, int]                                       # roster places
    joins: list[tuple[str, str]] = field(default_factory=list)   # (party, nonce), log order
    offers: dict[str, dict] = field(default_factory=dict)        # party -> mask key, shares
    members: list[str] = field(default_factory=list)
    masked: dict[str, np.ndarray] = field(default_factory=dict)
    survivors: list[str] = field(default_factory=list)
    reveals: dict[str, dict] = field(default_factory=dict)       # survivor -> b/s shares
    status: str = "open"      # open -> sealed -> unmasking -> complete | abandoned
    reason: str = ""
    first_join_at: float | None = None
    sealed_at: float | None = None
    unmask_at: float | None = None
    words: np.ndarray | None = None                              # encode(sum), once complete
    attested: list[str] = field(default_factory=list)            # matching attestations
    disputed: bool = False                                       # attestations disagreed

    @property
    def resolved(self) -> bool:
        return self.status in ("complete", "abandoned")

    @property
    def dropped(self) -> list[str]:
        """Members left out of the sum (known once the survivors are fixed)."""
        if self.status in ("open", "sealed"):
            return []
        return [p for p in self.members if p not in self.survivors]

    @property
    def context(self) -> bytes:
        return round_context(self.session, self.number, self.members)

    def seed(self, session: str | None = None) -> int:
        nonces = "|".join(f"{p}:{n}" for p, n in self.joins if p in self.members)
        digest = hashlib.sha256(f"{session or self.session}|{self.number}|{nonces}"
                                .encode()).digest()
        return int.from_bytes(digest[:16], "big")

    def digest(self) -> str:
        """SHA-256 of what applying this resolved round does to a model: abandoned (no tree),
        or complete with its members (the tree's seed), survivors and the exact sum."""
        if not self.resolved:
            raise ValueError(f"round {self.number} is {self.status}: not resolved")
        text = f"dpstream-applied-v1|{self.session}|{self.number}|{self.status}"
        body = b""
        if self.status == "complete":
            text += f"|{','.join(self.members)}|{','.join(self.survivors)}|{self.seed()}"
            body = np.asarray(self.words, dtype="<u8").tobytes()
        return hashlib.sha256(text.encode() + b"|" + body).hexdigest()

    def total(self) -> np.ndarray:
        """The exact sum of the survivors' vectors (a complete round only)."""
        if self.words is None:
            raise ValueError(f"round {self.number} is {self.status}: no sum")
        return decode(self.words)

    def _finish(self) -> None:
        """Reconstruct the survivors' self masks and the dropped members' mask keys from the
        first ``threshold`` reveals and take them out of the sum."""
        revealers = list(self.reveals)[:self.threshold]

        def secret(kind: str, owner: str) -> bytes:
            shares = {self.indices[v]: self.reveals[v][kind][owner] for v in revealers}
            return int_to_secret(shamir.reconstruct(shares, self.threshold))

        publics = {p: self.offers[p]["mask_public"] for p in self.members}
        self.words = recover_sum({p: self.masked[p] for p in self.survivors},
                                 self_seeds={p: secret("b", p) for p in self.survivors},
                                 dropped={p: secret("s", p) for p in self.dropped},
                                 mask_publics=publics, context=self.context)
        self.status = "complete"


class BoardState:
    """The deterministic reading of the accepted board log
    (docs/distributed.md#the-board-as-a-deterministic-log).

    :attr:`ignored` counts signed messages that break the protocol (``late``: for a round
    already past that phase; ``invalid``: a payload of the wrong shape, a reveal of the wrong
    kind, or one before ``threshold`` matching attestations), next to the signature layer's
    :attr:`~.signed_board.SignedBoard.rejected`.

    Examples
    --------
    The protocol's membership decision from a log (no broker needed; see
    ``tests/test_distributed.py`` for complete rounds):

    >>> from dpstream.stream.distributed.roster import Roster
    >>> roster, _ = Roster.generate(["a", "b", "c"])
    >>> state = BoardState("job-1", roster)
    >>> key = base64.b64encode(bytes(32)).decode()
    >>> offer = {"mask_public": key, "shares": {p: key for p in "abc"}}
    >>> for msg in [*({"type": "hello", "party": p, "enc_public": key} for p in "abc"),
    ...             {"type": "join", "round": 1, "party": "a", "nonce": "01", **offer},
    ...             {"type": "join", "round": 1, "party": "b", "nonce": "02", **offer},
    ...             {"type": "seal", "round": 1, "party": "a"},
    ...             {"type": "join", "round": 1, "party": "c", "nonce": "03", **offer}]:
    ...     state.apply({"session": "job-1", **msg})
    >>> r = state.rounds[1]
    >>> r.members, r.status
    (['a', 'b'], 'sealed')

    A party forgets the rounds it applied (:meth:`prune`); their late messages are
    skipped, as a resolved round ignores them:

    >>> state.prune(2), sorted(state.rounds), state.floor
    (1, [], 2)
    >>> state.apply({"session": "job-1", "type": "join", "round": 1, "party": "c",
    ...              "nonce": "04", **offer})
    >>> sorted(state.rounds), state.skipped
    ([], 1)
    """

    def __init__(self, session: str, roster: Roster, floor: int = 0):
        self.session, self.roster = session, roster
        #: rounds below it are forgotten (:meth:`prune`): their messages are skipped
        self.floor = max(0, int(floor))
        self.skipped = 0
        self.threshold = roster.threshold
        self.indices = {p: roster.index(p) for p in roster.names}
        self.config: dict | None = None
        self.keys: dict[str, bytes] = {}      # long-term X25519 (share encryption) public keys
        self.seed_commits: dict[str, str] = {}   # party -> commitment to its --seed (hello)
        self.live: set[str] = set()
        self.rounds: dict[int, BoardRound] = {}
        self.ignored: Counter[str] = Counter({"late": 0, "invalid": 0})

    def prune(self, below: int) -> int:
        """Forget every round numbered below ``below`` and skip their messages from now on
        (a party calls it with rounds it applied: they are resolved, and their messages
        could only be late); returns how many were forgotten. A job runs for many
        thousands of rounds: each keeps its members' masked vectors and shares."""
        self.floor = max(self.floor, int(below))
        old = [t for t in self.rounds if t < self.floor]
        for t in old:
            del self.rounds[t]
        return len(old)

    def round(self, t: int) -> BoardRound:
        if t not in self.rounds:
            self.rounds[t] = BoardRound(t, self.session, self.threshold, self.indices)
        return self.rounds[t]

    def apply(self, msg: dict) -> None:
        if msg.get("session") != self.session:
            return
        kind, party = msg.get("type"), msg.get("party")
        if party not in self.indices:
            return
        try:
            self._apply(kind, party, msg)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self.ignored["invalid"] += 1
            log.warning("board: invalid %s from %r ignored: %s", kind, party, exc)

    def _apply(self, kind: str, party: str, msg: dict) -> None:
        if kind == "config":
            if self.config is None:
                self.config = {"params": msg["params"], "roster": msg["roster"]}
            return
        if kind == "hello":
            self.keys[party] = _bytes(msg["enc_public"], 32)
            commit = msg.get("seed_commit")
            if isinstance(commit, str):
                self.seed_commits[party] = commit
            else:
                self.seed_commits.pop(party, None)
            self.live.add(party)
            return
        t = msg.get("round")
        if not isinstance(t, int) or t < 0:
            return
        if t < self.floor:   # a round this party applied long ago (prune)
            self.live.add(party)
            self.skipped += 1
            return
        r = self.round(t)
        self.live.add(party)
        handler = {"join": self._join, "seal": self._seal, "masked": self._masked,
                   "cut": self._cut, "consistent": self._consistent, "unmask": self._unmask,
                   "abandon": self._abandon}.get(kind)
        if handler is not None and not handler(r, party, msg):
            self.ignored["late"] += 1

    # ------------------------------------------------------------------ phases
    def _join(self, r: BoardRound, party: str, msg: dict) -> bool:
        if r.status != "open" or party not in self.keys:
            return False
        if party in r.offers:
            return True
        shares = {v: _bytes(tok) for v, tok in msg["shares"].items() if v in self.indices}
        r.offers[party] = {"mask_public": _bytes(msg["mask_public"], 32), "shares": shares,
                           "enc_public": self.keys[party]}
        r.joins.append((party, str(msg["nonce"])))
        if r.first_join_at is None:
            r.first_join_at = time.monotonic()
        return True

    def eligible(self, r: BoardRound) -> list[str]:
        """The joiners that would be members if the round were sealed now: in log order, each
        whose shares reach every joiner kept before it, and who received theirs."""
        kept: list[str] = []
        for p, _ in r.joins:
            if all(q in r.offers[p]["shares"] and p in r.offers[q]["shares"] for q in kept):
                kept.append(p)
        return kept

    def _seal(self, r: BoardRound, party: str, msg: dict) -> bool:
        members = self.eligible(r)
        if r.status != "open" or party not in members or len(members) < self.threshold:
            return False
        r.members, r.status, r.sealed_at = members, "sealed", time.monotonic()
        self.live = set(members)   # the others are waited for again once they post
        return True

    def _masked(self, r: BoardRound, party: str, msg: dict) -> bool:
        if r.status != "sealed" or party not in r.members or party in r.masked:
            return False
        words = np.frombuffer(_bytes(msg["data"]), dtype="<u8").astype(np.uint64)
        if r.masked and words.size != next(iter(r.masked.values())).size:
            raise ValueError("vector length differs from the other members'")
        r.masked[party] = words
        if len(r.masked) == len(r.members):
            self._survivors(r)
        return True

    def _cut(self, r: BoardRound, party: str, msg: dict) -> bool:
        if r.status != "sealed":
            return False
        self._survivors(r)
        return True

    def _survivors(self, r: BoardRound) -> None:
        r.survivors = [p for p in r.members if p in r.masked]
        r.status, r.unmask_at = "unmasking", time.monotonic()
        self.live -= set(r.dropped)
        if len(r.survivors) < self.threshold:
            r.status = "abandoned"
            r.reason = (f"{len(r.survivors)} of {len(r.members)} members sent their vector "
                        f"before the cut; the threshold is {self.threshold}, so the dropped "
                        f"members' masks cannot be recovered")
            log.warning("round %d abandoned: %s", r.number, r.reason)

    def _consistent(self, r: BoardRound, party: str, msg: dict) -> bool:
        """A survivor's attestation of the members and survivors its log showed it."""
        if r.resolved:
            return False
        members, survivors = msg["members"], msg["survivors"]
        if not all(isinstance(v, list) and all(isinstance(p, str) for p in v)
                   for v in (members, survivors)):
            raise ValueError("an attestation lists members and survivors by name")
        if r.status in ("open", "sealed") or members != r.members \
                or survivors != r.survivors:
            seen = "nothing fixed yet" if r.status in ("open", "sealed") else \
                f"members {r.members}, survivors {r.survivors}"
            r.status, r.disputed = "abandoned", True
            r.reason = (f"inconsistent logs: {party} attested members {members}, survivors "
                        f"{survivors}; this party's log shows {seen}; the board showed parties "
                        f"different logs, so nobody reveals and the round is abandoned")
            log.error("round %d abandoned: %s", r.number, r.reason)
            return True
        if party in r.survivors and party not in r.attested:
            r.attested.append(party)
        return True

    def _unmask(self, r: BoardRound, party: str, msg: dict) -> bool:
        if r.status != "unmasking" or party not in r.survivors or party in r.reveals:
            return False
        if party not in r.attested or len(r.attested) < self.threshold:
            raise ValueError(f"a reveal before {self.threshold} matching attestations "
                             f"(this log holds {len(r.attested)})")
        b = {u: shamir.share_from_bytes(_bytes(v)) for u, v in msg["b"].items()}
        s = {u: shamir.share_from_bytes(_bytes(v)) for u, v in msg["s"].items()}
        if set(b) != set(r.survivors) or set(s) != set(r.dropped):
            raise ValueError("a reveal must hold self-mask shares of exactly the survivors and "
                             "mask-key shares of exactly the dropped members")
        r.reveals[party] = {"b": b, "s": s}
        if len(r.reveals) >= self.threshold:
            try:
                r._finish()
            except ValueError as exc:   # shares of different polynomials: not honest
                r.status, r.reason = "abandoned", f"reconstruction failed: {exc}"
        return True

    def _abandon(self, r: BoardRound, party: str, msg: dict) -> bool:
        if r.resolved:
            return False
        if r.status == "open":
            r.reason = (f"{len(self.eligible(r))} parties joined; the threshold is "
                        f"{self.threshold}")
        elif r.status == "sealed":
            r.reason = "abandoned before the cut"
        else:
            owed = [p for p in r.survivors if p not in r.reveals]
            r.reason = (f"{len(r.reveals)} of the {self.threshold} reveals needed came in "
                        f"(silent survivors: {', '.join(owed)})")
            self.live -= set(owed)
        r.status = "abandoned"
        log.warning("round %d abandoned: %s", r.number, r.reason)
        return True
