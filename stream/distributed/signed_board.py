"""Authenticated bulletin-board messages: Ed25519 signatures, sessions, rounds, sequence numbers.

:class:`SignedBoard` posts every message as a compact JSON *envelope* (session, round, sender,
a per-sender strictly growing ``seq``, type, body) with the sender's Ed25519 signature over its
exact bytes, and on :meth:`~SignedBoard.read` passes on only well-formed messages of its
session, correctly signed by a roster party, with a ``seq`` above and a round not below that
sender's last; the rest is dropped and counted in :attr:`SignedBoard.rejected` by reason.
Every party reads the same log in the same order, so all accept exactly the same messages.

The envelope, what is signed and the rejection counters: docs/distributed.md#message-format.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections import Counter
from typing import Any

from .roster import Roster, SigningKey

__all__ = ["DOMAIN", "REJECT_REASONS", "SignedBoard"]

log = logging.getLogger("dpstream.distributed")

#: what a signature covers before the envelope's bytes (no signature from elsewhere verifies)
DOMAIN = b"dpstream-board/1\n"
REJECT_REASONS = ("unsigned", "malformed", "wrong_session", "unknown_sender", "bad_signature",
                  "replayed", "stale_round")
_FIELDS = {"v": int, "session": str, "round": int, "sender": str, "seq": int, "type": str,
           "body": dict}


class SignedBoard:
    """Signs what a party posts and verifies what it reads
    (docs/distributed.md#message-format).

    Parameters
    ----------
    transport
        The raw board: ``post(dict)`` and ``read(timeout_ms) -> list[dict]`` in log order
        (:class:`~dpstream.connectors.bulletin.KafkaBoard`).
    roster
        The job's :class:`~dpstream.stream.distributed.roster.Roster`.
    session
        The job's name; messages of other sessions are dropped (and counted).
    key, name
        This party's signing key and roster name; without them the board is read-only.

    Examples
    --------
    >>> from dpstream.stream.distributed.roster import Roster
    >>> roster, keys = Roster.generate(["alice", "bob"])
    >>> class Log:                              # any transport: post(dict), read() -> [dict]
    ...     def __init__(self): self.items, self.pos = [], 0
    ...     def post(self, m): self.items.append(m)
    ...     def read(self, timeout_ms=0):
    ...         out, self.pos = self.items[self.pos:], len(self.items)
    ...         return out
    >>> log = Log()
    >>> alice = SignedBoard(log, roster, "job-1", key=keys["alice"], name="alice")
    >>> reader = SignedBoard(log, roster, "job-1")   # read-only: no key
    >>> _ = alice.post("join", {"nonce": "ab"}, round=1)
    >>> log.post(dict(log.items[-1]))                # replayed bytes
    >>> log.post({"type": "join", "round": 1, "party": "alice"})   # unsigned
    >>> fake_roster, fake_keys = Roster.generate(["alice"])     # an intruder's own "alice"
    >>> forged = SignedBoard(log, fake_roster, "job-1", key=fake_keys["alice"], name="alice")
    >>> _ = forged.post("join", {"nonce": "cd"}, round=1)
    >>> [(m["type"], m["party"], m["nonce"]) for m in reader.read()]
    [('join', 'alice', 'ab')]
    >>> {k: v for k, v in reader.rejected.items() if v}
    {'unsigned': 1, 'bad_signature': 1, 'replayed': 1}
    """

    def __init__(self, transport: Any, roster: Roster, session: str, *,
                 key: SigningKey | None = None, name: str | None = None):
        if (key is None) != (name is None):
            raise ValueError("give both key and name (a party) or neither (a reader)")
        if name is not None:
            if name not in roster.parties:
                raise ValueError(f"party {name!r} is not in the roster ({roster.names})")
            if roster.parties[name] != key.public:
                raise ValueError(f"the signing key does not match {name!r}'s public key in "
                                 f"the roster")
        self.transport, self.roster, self.session = transport, roster, session
        self.key, self.name = key, name
        self.rejected: Counter[str] = Counter({r: 0 for r in REJECT_REASONS})
        self.accepted = 0
        self._last: dict[str, tuple[int, int]] = {}   # sender -> (seq, round) last accepted
        self._posted = (0, 0)                          # our last (seq, round)

    # ------------------------------------------------------------------ writing
    def post(self, kind: str, body: dict | None = None, *, round: int | None = None) -> dict:
        """Sign and append one message (``round=None``: a session message, it carries this
        party's latest round); returns the envelope."""
        if self.key is None:
            raise RuntimeError("this board is read-only (no signing key)")
        last_seq, last_round = self._last.get(self.name, (0, 0))
        latest = max(last_round, self._posted[1])
        if round is None:
            round = latest
        seq = max(last_seq + 1, self._posted[0] + 1, time.time_ns() // 1000)
        envelope = {"v": 1, "session": self.session, "round": int(round), "sender": self.name,
                    "seq": seq, "type": kind, "body": body or {}}
        text = json.dumps(envelope, separators=(",", ":"), sort_keys=True)
        sig = self.key.sign(DOMAIN + text.encode("utf-8"))
        self.transport.post({"msg": text, "sig": base64.b64encode(sig).decode("ascii")})
        self._posted = (seq, max(latest, int(round)))
        return envelope

    @property
    def latest_round(self) -> int:
        """The round of this party's newest message (posted, or read back from the log): a
        message for an older round would be dropped as ``stale_round``."""
        return max(self._last.get(self.name, (0, 0))[1], self._posted[1])

    # ------------------------------------------------------------------ reading
    def read(self, timeout_ms: int = 20) -> list[dict]:
        """The accepted messages appended since the last read, flattened for the protocol:
        the body's fields plus ``type``, ``session``, ``party`` (the sender), ``round``,
        ``seq``."""
        out = []
        for raw in self.transport.read(timeout_ms):
            msg = self.verify(raw)
            if msg is not None:
                out.append(msg)
        return out

    def verify(self, raw: Any) -> dict | None:
        """One raw board message: the flattened message, or ``None`` (counted) if rejected."""
        if not isinstance(raw, dict):   # not JSON, or not an object
            return self._reject("malformed", raw)
        if not (isinstance(raw.get("msg"), str) and isinstance(raw.get("sig"), str)):
            return self._reject("unsigned", raw)
        try:
            env = json.loads(raw["msg"])
        except ValueError:
            return self._reject("malformed", raw)
        if not (isinstance(env, dict) and all(isinstance(env.get(f), t) and
                                              not isinstance(env.get(f), bool)
                                              for f, t in _FIELDS.items())
                and env["v"] == 1 and env["round"] >= 0 and env["seq"] > 0):
            return self._reject("malformed", raw)
        if env["session"] != self.session:
            return self._reject("wrong_session", env)
        sender = env["sender"]
        if sender not in self.roster.parties:
            return self._reject("unknown_sender", env)
        try:
            sig = base64.b64decode(raw["sig"], validate=True)
        except (binascii.Error, ValueError):
            sig = b""
        if not self.roster.verify(sender, sig, DOMAIN + raw["msg"].encode("utf-8")):
            return self._reject("bad_signature", env)
        last_seq, last_round = self._last.get(sender, (0, 0))
        if env["seq"] <= last_seq:
            return self._reject("replayed", env)
        if env["round"] < last_round:
            return self._reject("stale_round", env)
        self._last[sender] = (env["seq"], env["round"])
        self.accepted += 1
        return {**env["body"], "type": env["type"], "session": env["session"], "party": sender,
                "round": env["round"], "seq": env["seq"]}

    def _reject(self, reason: str, what: Any) -> None:
        self.rejected[reason] += 1
        if reason != "wrong_session":   # other jobs on a shared topic are routine
            who = what.get("sender") if isinstance(what, dict) else None
            log.warning("board: %s message ignored (sender %r)", reason.replace("_", " "), who)
        return None

    # ------------------------------------------------------------------ plumbing
    def caught_up(self) -> bool:
        """Whether every message appended so far has been read (transports that cannot tell
        say yes)."""
        check = getattr(self.transport, "caught_up", None)
        return True if check is None else bool(check())

    def close(self) -> None:
        close = getattr(self.transport, "close", None)
        if close is not None:
            close()
