"""One party of distributed S-GBDT: the board protocol around a local :class:`SGBDTParty`.

:class:`DistributedParty` joins rounds, posts its masked vector (write-ahead: the service
checkpoints before the post) and applies or abandons each round as the board's log decides
(:class:`~dpstream.stream.distributed.board.BoardState`, whose docstring describes the protocol).
See docs/distributed.md for the trust model and the accounting under drop-outs.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...models.sgbdt_party import SGBDTParty
from .board import BoardRound, BoardState
from .secure_aggregation import MODP_PRIME, KeyPair, mask_vector, round_context

__all__ = ["DistributedParty", "RoundTimeout"]

log = logging.getLogger("dpstream.distributed")


class RoundTimeout(RuntimeError):
    """The board did not resolve a round in time (the broker is unreachable)."""


class DistributedParty:
    """Runs the board protocol for one :class:`~dpstream.models.sgbdt_party.SGBDTParty`.

    Parameters
    ----------
    party
        The local model (its records never leave this process).
    board
        A connected :class:`~dpstream.connectors.bulletin.KafkaBoard` (or any object with
        ``post(dict)`` and ``read(timeout_ms) -> list[dict]``).
    name
        This party's name (unique among the parties).
    session
        The training job's name: parties of one job use the same, a board topic may carry
        several jobs.
    params
        The shared hyper-parameters posted as the job's ``config`` (compared, not trusted:
        a party whose own differ refuses to join).
    expected
        How many parties :meth:`start` waits for (their hellos) before the first round.
    join_timeout, round_timeout
        Seconds a member waits for the others to join, and for their vectors after the seal,
        before it seals the round without them or abandons it.
    lock
        Held while the local model changes (the service's runner lock: a checkpoint from the
        consumer's rebalance thread never sees half a round).
    before_post
        Called after this party's vector is computed and before it is posted (the service
        writes its checkpoint there: write-ahead).
    """

    def __init__(self, party: SGBDTParty, board: Any, *, name: str, session: str,
                 params: dict | None = None, join_timeout: float = 5.0,
                 round_timeout: float = 20.0, expected: int | None = None,
                 before_post: Callable[[], None] | None = None, lock: Any = None,
                 stop: threading.Event | None = None):
        if not name or "," in name or "|" in name:
            raise ValueError(f"party name must be non-empty without ',' or '|', got {name!r}")
        self.party, self.board, self.name, self.session = party, board, name, session
        self.params = params or {}
        self.join_timeout, self.round_timeout = float(join_timeout), float(round_timeout)
        self.expected = expected
        self.before_post = before_post
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.stop = stop or threading.Event()
        self.state = BoardState(session)
        proto = getattr(party, "protocol", None)
        if proto is None:   # persistent protocol state travels inside the party's checkpoint
            proto = {"applied": -1, "private": KeyPair.generate().private, "post": None}
            party.protocol = proto
        self.proto = proto
        self.key = KeyPair(proto["private"], pow(2, proto["private"], MODP_PRIME))
        self.posted: set[tuple[str, int]] = set()
        self.timings: list[dict] = []

    # ------------------------------------------------------------ plumbing
    def _post(self, kind: str, **fields: Any) -> None:
        self.board.post({"type": kind, "session": self.session, "party": self.name, **fields})

    def _read(self, timeout_ms: int = 20) -> None:
        for msg in self.board.read(timeout_ms):
            self.state.apply(msg)

    @property
    def next_round(self) -> int:
        return self.proto["applied"] + 1

    def start(self, catch_up_s: float = 1.0) -> None:
        """Read the log so far, agree on the config, say hello, re-post a pending vector."""
        deadline = time.monotonic() + catch_up_s
        while time.monotonic() < deadline:
            self._read(100)
        if self.state.config is None:
            self._post("config", params=self.params)
            self._wait(lambda: self.state.config is not None, "the config message")
        if self.state.config != self.params:
            raise ValueError(f"the board's config for session {self.session!r} differs from "
                             f"this party's: {self.state.config} vs {self.params}")
        self._post("hello", public=format(self.key.public, "x"))
        self._wait(lambda: self.name in self.state.keys, "this party's hello")
        if self.expected is not None:   # the first round waits until every party is there
            self._wait(lambda: len(self.state.keys) >= self.expected,
                       f"{self.expected} parties' hellos", timeout=self.round_timeout * 3)
        if self.proto["post"] is not None:   # crashed after the write-ahead checkpoint
            self.board.post(self.proto["post"])
            self.posted.add(("masked", self.proto["post"]["round"]))
        self.follow()

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
        r = self.state.round(t)
        if self.name not in (p for p, _ in r.joins) and r.status == "open" \
                and ("join", t) not in self.posted:
            self._post("join", round=t, nonce=secrets.token_hex(16))
            self.posted.add(("join", t))
        while not self.stop.is_set():
            self._read(20)
            r = self.state.round(t)
            now = time.monotonic()
            if r.resolved:
                break
            if r.status == "open":
                joined = {p for p, _ in r.joins}
                if self.name in joined and ("seal", t) not in self.posted and (
                        self.state.live <= joined
                        or (r.first_join_at is not None
                            and now - r.first_join_at > self.join_timeout)):
                    self._post("seal", round=t)
                    self.posted.add(("seal", t))
                elif self.name not in joined and ("join", t) not in self.posted:
                    self._post("join", round=t, nonce=secrets.token_hex(16))
                    self.posted.add(("join", t))
            elif r.status == "sealed":
                if self.name in r.members and ("masked", t) not in self.posted:
                    c0 = time.perf_counter()
                    with self.lock:
                        self._contribute(r)
                    compute += time.perf_counter() - c0
                if now - r.sealed_at > self.round_timeout and ("abandon", t) not in self.posted:
                    self._post("abandon", round=t)
                    self.posted.add(("abandon", t))
        if self.stop.is_set():
            return {"round": t, "status": "stopped"}
        c0 = time.perf_counter()
        with self.lock:
            out = self._resolve(r)
        compute += time.perf_counter() - c0
        total = time.perf_counter() - t0
        timing = {"round": t, "status": r.status, "members": list(r.members),
                  "seconds": total, "compute_s": compute, "coordination_s": total - compute}
        self.timings.append(timing)
        return {**timing, **out}

    def _contribute(self, r: BoardRound) -> None:
        """Compute W_u, checkpoint (write-ahead), post it masked."""
        if r.number == 0:
            vector = self.party.init_contribution()
        else:
            tree = self.party.draw_tree(np.random.default_rng(r.seed(self.session)))
            vector = self.party.contribute(tree)
        keys = {p: self.key.shared_key(pub) for p, pub in r.keys.items() if p != self.name}
        words = mask_vector(vector, me=self.name, keys=keys, members=r.members,
                            context=round_context(self.session, r.number, r.members))
        message = {"type": "masked", "session": self.session, "party": self.name,
                   "round": r.number,
                   "data": base64.b64encode(words.astype("<u8").tobytes()).decode("ascii")}
        self.proto["post"] = message
        self.last_plaintext = vector   # for tests: the aggregate must equal the plain sum
        if self.before_post is not None:
            self.before_post()
        self.board.post(message)
        self.posted.add(("masked", r.number))

    def _resolve(self, r: BoardRound) -> dict:
        """Apply a resolved round to the local model (once)."""
        p = self.party
        total = r.total() if r.status == "complete" else None
        if r.number == 0:
            if p.engine.init_score is None:
                p.apply_init(total)
            out = {"round": 0}
        elif total is not None:   # applies (and ends) this party's pending round, if any
            tree = p.draw_tree(np.random.default_rng(r.seed(self.session)))
            out = p.apply(tree, total, members=len(r.members))
        else:                     # no tree; a contribution's charge stands
            out = p.abandon()
        self.proto["applied"] = r.number
        self.proto["post"] = None
        self.last_total = total
        log.info("round %d %s (members %s)", r.number, r.status, ",".join(r.members))
        return out
