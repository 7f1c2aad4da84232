"""The bulletin board of distributed S-GBDT, read as a deterministic log.

Distributed S-GBDT (Kirschte et al., Algorithm 9) runs over a Kafka topic used as a bulletin board.

``k`` parties each hold their own private records (an
:class:`~dpstream.models.sgbdt_party.SGBDTParty`) and share one one-partition board topic
(:class:`~dpstream.connectors.bulletin.KafkaBoard`).
Everything the parties agree on is a deterministic function of the board's log
(:class:`BoardState`), so every party — and a party replaying the log after a restart — reaches
the same conclusions without a coordinator:

* ``config`` — the shared hyper-parameters; the first one in the log wins and a party with
  different settings refuses to start;
* ``hello`` — a party's name and Diffie-Hellman public key (pairwise mask keys);
* ``join`` (round ``t``, a random nonce) — the members of round ``t`` are the parties whose join
  precedes the round's first ``seal`` in the log. A seal is posted by a member once every live
  party has joined or ``join_timeout`` passed;
* the round's tree comes from public uniform sampling seeded by SHA-256 of the session, ``t``
  and the members' nonces (round 0 is the DP initial score and has no tree);
* ``masked`` — a member's vector ``W_u`` under pairwise masks (:mod:`.secure_aggregation`);
  when every member's is in the log, the round is *complete*: the sum unmasks and every party
  applies the same tree;
* ``abandon`` — posted by anyone once ``round_timeout`` passed after the seal; if it precedes
  the last member's vector the round is *abandoned*: no party adds its tree. A member that
  failed to post is not waited for at the next seal until it posts again.

Privacy accounting under drop-outs: a member's filter is charged when it computes ``W_u``, and
that charge stands whatever happens to the round (its masked vector is in the log and the sum
could still be completed later), so an abandoned round can never make a record's spend
understated. A party checkpoints *before* it posts its vector (write-ahead), and re-posts the
identical bytes after a crash, so no record is charged twice or released uncharged.

Examples
--------
The protocol's decisions from a log (no broker needed):

>>> state = BoardState("job-1")
>>> for msg in [{"type": "hello", "party": "a", "public": "5"},
...             {"type": "hello", "party": "b", "public": "7"},
...             {"type": "join", "round": 1, "party": "a", "nonce": "01"},
...             {"type": "join", "round": 1, "party": "b", "nonce": "02"},
...             {"type": "seal", "round": 1, "party": "a"},
...             {"type": "join", "round": 1, "party": "c", "nonce": "03"}]:
...     state.apply({"session": "job-1", **msg})
>>> r = state.rounds[1]
>>> r.members, r.status
(['a', 'b'], 'sealed')
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from .secure_aggregation import unmask_sum

__all__ = ["BoardState", "BoardRound"]

log = logging.getLogger("dpstream.distributed")


@dataclass
class BoardRound:
    """What the log says about one round."""

    number: int
    joins: list[tuple[str, str]] = field(default_factory=list)   # (party, nonce), log order
    members: list[str] = field(default_factory=list)
    keys: dict[str, int] = field(default_factory=dict)            # members' public keys at seal
    masked: dict[str, np.ndarray] = field(default_factory=dict)
    status: str = "open"      # open -> sealed -> complete | abandoned
    first_join_at: float | None = None
    sealed_at: float | None = None
    missing: list[str] = field(default_factory=list)

    @property
    def resolved(self) -> bool:
        return self.status in ("complete", "abandoned")

    def seed(self, session: str) -> int:
        nonces = "|".join(f"{p}:{n}" for p, n in self.joins if p in self.members)
        digest = hashlib.sha256(f"{session}|{self.number}|{nonces}".encode()).digest()
        return int.from_bytes(digest[:16], "big")

    def total(self) -> np.ndarray:
        return unmask_sum([self.masked[p] for p in self.members])


class BoardState:
    """The deterministic reading of the board log (see the module docstring)."""

    def __init__(self, session: str):
        self.session = session
        self.config: dict | None = None
        self.keys: dict[str, int] = {}
        self.live: set[str] = set()
        self.rounds: dict[int, BoardRound] = {}

    def round(self, t: int) -> BoardRound:
        if t not in self.rounds:
            self.rounds[t] = BoardRound(t)
        return self.rounds[t]

    def apply(self, msg: dict) -> None:
        if msg.get("session") != self.session:
            return   # another job on the same topic
        kind, party = msg.get("type"), msg.get("party")
        if kind == "config":
            if self.config is None:
                self.config = msg.get("params")
            return
        if kind == "hello" and isinstance(party, str):
            try:
                self.keys[party] = int(msg["public"], 16)
            except (KeyError, TypeError, ValueError):
                log.warning("board: malformed hello from %r ignored", party)
                return
            self.live.add(party)
            return
        t = msg.get("round")
        if not isinstance(t, int) or t < 0:
            return
        r = self.round(t)
        now = time.monotonic()
        if kind == "join" and r.status == "open" and party in self.keys:
            if party not in (p for p, _ in r.joins):
                r.joins.append((party, str(msg.get("nonce", ""))))
                self.live.add(party)
                if r.first_join_at is None:
                    r.first_join_at = now
        elif kind == "seal" and r.status == "open" and r.joins:
            r.members = [p for p, _ in r.joins]
            r.keys = {p: self.keys[p] for p in r.members}
            r.status, r.sealed_at = "sealed", now
        elif kind == "masked" and r.status == "sealed" and party in r.members \
                and party not in r.masked:
            try:
                words = np.frombuffer(base64.b64decode(msg["data"]), dtype="<u8")
            except (KeyError, TypeError, ValueError):
                log.warning("board: malformed vector from %r in round %d ignored", party, t)
                return
            r.masked[party] = words.astype(np.uint64)
            self.live.add(party)
            if len(r.masked) == len(r.members):
                r.status = "complete"
        elif kind == "abandon" and r.status in ("open", "sealed"):
            r.missing = [p for p in r.members if p not in r.masked]
            r.status = "abandoned"
            self.live -= set(r.missing)
