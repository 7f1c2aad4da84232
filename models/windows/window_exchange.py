"""Window forests across processes: export a finished window, merge the windows of many members.

Members of a consumer group each train windows on disjoint records, so the union of their
windows is still ``epsilon``-DP per record by parallel composition. :func:`export_window` turns
a kept window into plain state holding released values and data-independent structure only
(never raw records, the model's generator or unreleased sums); :class:`WindowEnsemble` votes
with the newest windows of every member under one process's window policy, bit for bit the
same on every member that holds the same windows.

The design: ``docs/window_exchange.md#windows-across-processes``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from .window_forest import BLANK, WindowForestBase, _Window

__all__ = ["WindowEnsemble", "export_window", "window_config", "window_key", "window_share",
           "relevance_key", "claim_key", "WINDOW_FORMAT", "RELEVANCE_FORMAT", "CLAIM_FORMAT",
           "close_open_window", "discard_open_window"]

#: the format tag of an exported window
WINDOW_FORMAT = "dpstream-window/1"
#: the format tag of a held window's relevance release, published before its trees grow
#: (:mod:`~dpstream.models.windows.window_forest`, held windows)
RELEVANCE_FORMAT = "dpstream-relevance/1"
#: the format tag of a member's claim of a partition: from offset ``from`` on, its records are
#: this member's to train; the model topic's order decides between claims (ownership fencing,
#: :class:`WindowEnsemble`)
CLAIM_FORMAT = "dpstream-claim/1"
#: model attributes the trees of a window route with (data-independent: secrets of random
#: trees drawn before any record was read, and the public domain)
_ROUTING = ("_trees", "_secret", "_grid")
#: window metadata that is not a DP release and stays in the process
_PRIVATE_EXTRA = ("diagnostics",)


def window_key(member: str, index: int) -> str:
    """The key of ``member``'s window number ``index`` (zero-padded: keys sort by index).

    >>> window_key("m-1", 7)
    'm-1/window-000000000007'
    """
    return f"{_member_id(member)}/window-{int(index):012d}"


def _member_id(member: str) -> str:
    """``member``, checked: a non-empty string without '/' (the first part of its keys)."""
    if not isinstance(member, str) or not member or "/" in member:
        raise ValueError(f"a member id is a non-empty string without '/', got {member!r}")
    return member


def relevance_key(member: str, seq: int) -> str:
    """The key of ``member``'s ``seq``-th held window's relevance release (``seq`` counts
    holds, never reused: a window dropped after a crash keeps its release on the topic).

    >>> relevance_key("m-1", 3)
    'm-1/relevance-000000000003'
    """
    return f"{_member_id(member)}/relevance-{int(seq):012d}"


def claim_key(member: str, seq: int) -> str:
    """The key of ``member``'s ``seq``-th claim of a partition (never reused, so a compacted
    topic keeps every claim and readers see them in the topic's order).

    >>> claim_key("m-1", 2)
    'm-1/claim-000000000002'
    """
    return f"{_member_id(member)}/claim-{int(seq):012d}"


def record_ranges(records: list[tuple[str, int]]) -> dict[str, list[int]]:
    """Per partition, ``[first, end)`` of ``records`` (``(partition, offset)`` pairs): the
    stretch of the stream a published window or release holds.

    >>> record_ranges([("t:0", 5), ("t:1", 2), ("t:0", 9)])
    {'t:0': [5, 10], 't:1': [2, 3]}
    """
    out: dict[str, list[int]] = {}
    for p, off in records:
        r = out.setdefault(p, [int(off), int(off) + 1])
        r[0], r[1] = min(r[0], int(off)), max(r[1], int(off) + 1)
    return out


#: parameters each member may set for itself (not in :func:`window_config`'s digest)
_MEMBER_OWN = ("seed", "schema", "on_out_of_domain", "on_unknown", "grid_share",
               "grid_refresh")
#: parameters added after members published windows, left out of the digest at the value
#: that keeps the old meaning: a member from before them still matches a member using it
_ADDED_LATER = {"window_decay": 1.0}


def window_config(model: WindowForestBase) -> str:
    """A digest of what every member of one ensemble must share: the model class, its
    parameters (except ``seed`` and the input policy, which decides only which records a
    member accepts, not what its windows mean) and the schema. Windows of another
    configuration are refused."""
    params = {k: v for k, v in model._get_params().items() if k not in _MEMBER_OWN
              and not (k in _ADDED_LATER and v == _ADDED_LATER[k])}
    text = json.dumps({"model": type(model).__qualname__, "params": params,
                       "schema": model._encoder.schema.model_dump(mode="json")},
                      sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _window_epsilon(model: WindowForestBase, index: int) -> float:
    """Per-record epsilon the records of window ``index`` spent (its ledger partitions;
    the ledger's whole spend when they were forgotten: an upper bound)."""
    ledger = model._ledger
    prefix = f"window-{index}/"
    spent = [float(v) for p, v in ledger._partitions.items() if p.startswith(prefix)]
    if spent:
        return max(spent)
    win = model._windows[index - (model.windows_closed - len(model._windows))]
    return ledger.spent if win.trees else 0.0


def export_window(model: WindowForestBase, index: int, *, member: str,
                  published: float | None = None) -> dict:
    """Window number ``index`` of ``model`` (it must still be kept) as plain state.

    Parameters
    ----------
    model
        A window forest.
    index
        The window's number in the model's stream (0 for its first window).
    member
        The id of the process that trained it.
    published
        When it was published (Unix time; default now): the union's order.

    Returns
    -------
    dict
        ``format``, ``member``, ``index``, ``key``, ``config``, ``model``, ``published``,
        ``records``, ``labeled``, ``kind``, ``generation``, ``epsilon``, ``trees``, ``extra``
        and ``routing``: released values and data-independent structure only.
    """
    first = model.windows_closed - len(model._windows)
    if not first <= index < model.windows_closed:
        raise IndexError(f"window {index} is not kept (kept: {first}..{model.windows_closed - 1})")
    win = model._windows[index - first]
    return {"format": WINDOW_FORMAT, "member": member, "index": int(index),
            "key": window_key(member, index), "config": window_config(model),
            "model": type(model).__qualname__,
            "published": float(time.time() if published is None else published),
            "records": int(win.records), "labeled": int(win.labeled), "kind": win.kind,
            "generation": int(win.generation), "epsilon": _window_epsilon(model, index),
            "trees": list(win.trees),
            "extra": {k: v for k, v in win.extra.items() if k not in _PRIVATE_EXTRA},
            "routing": {name: getattr(model, name) for name in _ROUTING if hasattr(model, name)},
            "relevance": getattr(win, "relevance", None)}


def close_open_window(model: WindowForestBase) -> bool:
    """Close the open window now (its records are trained once, as always); ``False`` if it
    held no record. A member does this before its partitions are revoked: every record it
    read is then inside a finished, publishable window. Closing early is allowed by the
    window policy (as a drift detection does): a rebalance is a public event."""
    if not model._buffer_y:
        return model.grow_held()
    model._close_window()
    model.grow_held()      # a member hands off grown windows only (held windows: window_forest)
    return True


def discard_open_window(model: WindowForestBase) -> int:
    """Forget the open window's records untrained (returns how many records; its blank
    messages go too: :meth:`~dpstream.models.windows.window_forest.WindowForestBase.advance`):
    a member restarting
    from a checkpoint after a crash, whose partitions may already have been re-read from its
    last published position by another member. Nothing trained on them was released.

    Their prequential losses may have fed this member's drift signal (its pending sum, and
    releases whose only trace is the detector's state: a release that detects a change
    closes the window, so it would have been published). The signal forgets both
    (:meth:`~dpstream.models.drift.DPDriftSignal.forget`), so the next owner's signal reading
    them again is their only drift read; ``records_discarded_fed`` counts such records."""
    n = sum(1 for v in model._buffer_y if v != BLANK)   # records (not blank messages)
    model._unsee(model._buffer_y, model._buffer_public, model._buffer_fed)
    model._buffer_X, model._buffer_y, model._buffer_public = [], [], []
    model._buffer_fed, model._window_start, model._last = False, None, None
    return n


def window_share(state: dict) -> Any:
    """The share of the stream the member that trained a window read when it trained it
    (:meth:`~dpstream.models.windows.window_forest.WindowForestBase.set_share`; 1.0 for a single
    process and for windows published before shares)."""
    extra = state.get("extra")
    share = extra.get("share", 1.0) if isinstance(extra, dict) else 1.0
    return float(share) if isinstance(share, int) and not isinstance(share, bool) else share


def _newest(order: list[dict], cap: int | None) -> list[dict]:
    """The newest windows of ``order`` (oldest first) whose shares add up to at most ``cap``
    whole windows (at least one window; all of them when ``cap`` is None). Shares of 1 give
    the newest ``cap`` windows, as in one process; ``k`` members that each read ``1 / k``
    of the stream keep ``k * cap``. Every member sums the same shares in the same order,
    so all of them keep the same windows."""
    if cap is None:
        return order
    kept: list[dict] = []
    total = 0.0
    for state in reversed(order):
        share = window_share(state)
        if kept and total + share > cap + 1e-9:
            break
        kept.append(state)
        total += share
    return kept[::-1]


class WindowEnsemble:
    """The windows of every member, merged under one model's window policy
    (``docs/window_exchange.md#the-union-that-votes``).

    Parameters
    ----------
    model
        This member's window forest (it trains; the ensemble only reads it).
    member
        This member's id (unique in the group).

    Examples
    --------
    >>> from dpstream.models import MedianForestClassifier
    >>> schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
    ...           "target": {"type": "binary", "values": [False, True]}}
    >>> halves = [MedianForestClassifier(schema=schema, epsilon=1.0, n_trees=2, window_size=50,
    ...                                  warmup=None, drift=False, seed=s) for s in (1, 2)]
    >>> for i in range(200):
    ...     halves[i % 2].learn_one({"a": (i % 10) / 10}, i % 10 >= 5)
    >>> a, b = WindowEnsemble(halves[0], "a"), WindowEnsemble(halves[1], "b")
    >>> for mine, other in ((a, b), (b, a)):
    ...     for key, state in other.local_updates().items():
    ...         _ = mine.adopt(key, state)
    >>> len(a.kept()), [a.predict_one({"a": v}) for v in (0.1, 0.9)]
    (4, [False, True])
    >>> ([b.predict_one({"a": v}) for v in (0.1, 0.9)]
    ...  == [a.predict_one({"a": v}) for v in (0.1, 0.9)])
    True
    """

    def __init__(self, model: WindowForestBase, member: str):
        if not isinstance(model, WindowForestBase):
            raise TypeError(f"a window ensemble merges window forests, not "
                            f"{type(model).__name__}")
        window_key(member, 0)   # validates the id
        self.model, self.member = model, member
        self.config = window_config(model)
        self.windows: dict[str, dict] = {}      # key -> exported state (every member's)
        self._own: dict[int, str] = {}          # own index -> key, as published
        self._kept: list[tuple[dict, Any, float]] | None = None   # (state, view, weight)
        # a held window's release (held windows: window_forest): own announced key -> window index
        self._announced: dict[str, int] = {}
        self.now: float | None = None           # stream time of the newest record learned
        self._start: float | None = None        # ... and of the first
        self._until: dict[int, float] = {}      # own window index -> stream time it closed
        self._closes = 0                         # ... how many were stamped
        self.reach: dict[int, float] = {}       # partition -> newest time others released to
        self.trees_reach: dict[int, float] = {}  # ... and newest time their windows reach
        # partition key -> (member, from): the newest claim read, in the topic's order
        self.owners: dict[str, tuple[str, int]] = {}
        self.fenced = 0                          # windows and releases refused by a claim

    # ------------------------------------------------------------ the union
    def local_updates(self) -> dict[str, dict | None]:
        """This member's changes since the last call: ``key -> state`` for each window it
        finished, ``key -> None`` (a tombstone) for each it retired. Applied here too; a
        connector publishes them."""
        m = self.model
        first = m.windows_closed - len(m._windows)
        out: dict[str, dict | None] = {}
        for index in [i for i in self._own if i < first]:
            out[self._own.pop(index)] = None
        for index in range(first, m.windows_closed):
            if index not in self._own:
                win = m._windows[index - first]
                state = export_window(m, index, member=self.member, published=win.published)
                win.published = state["published"]   # (checkpointed before it is published)
                self._own[index] = state["key"]
                out[state["key"]] = state
        extra = self._relevance_updates(out)
        for key, state in out.items():
            self._apply(key, state)
        out.update(extra)
        return out

    def departed_updates(self) -> dict[str, None]:
        """Tombstones for the windows of every other member that left: newer windows of
        others list every partition its newest window did, and none of its windows votes
        (as one process retires a window that falls out of its ``max_windows``). Kept, they
        would vote again once the union shrinks (after a drift, outvoting the new concept).
        A stalled member keeps its partitions and its windows. Applied here too; every
        member applies them in the topic's order (its own it ignores: it retires them)."""
        newest: dict[str, dict] = {}
        for state in sorted(self.windows.values(), key=lambda s: s["published"]):
            newest[state["member"]] = state
        voting = {s["member"] for s in self.kept()}
        gone = {m for m, last in newest.items()
                if m != self.member and m not in voting and last.get("partitions")
                and {int(p) for p in last["partitions"]} <= {
                    int(p) for s in self.windows.values()
                    if s["member"] != m and s["published"] > last["published"]
                    for p in (s.get("partitions") or ())}}
        out: dict[str, None] = {key: None for key, s in self.windows.items()
                                if s["member"] in gone}
        for key in out:
            self._apply(key, None)
        return out

    def observe(self, t: float, first: float | None = None) -> None:
        """The stream time (Kafka's record timestamps; a simulation's record number) of the
        newest record this member learned (``first``: of the oldest in that batch): its
        windows' ``until``, the clock of :meth:`hold_ready`."""
        self.now = float(t)
        if self._start is None:
            self._start = self.now if first is None else float(first)

    def _relevance_updates(self, out: dict[str, dict | None]) -> dict[str, dict | None]:
        """The held window's release (announced once) and, for a held window that has grown
        since, its release's tombstone; stamps ``until`` and ``partitions`` on new windows."""
        m = self.model
        parts = m.partitions[0]
        extra: dict[str, dict | None] = {}
        for key, index in list(self._announced.items()):
            if index < m.windows_closed:       # grown: its window carries the release
                del self._announced[key]
                extra[key] = None
                if self._own.get(index) in out and out[self._own[index]] is not None:
                    out[self._own[index]]["relevance_key"] = key
        for state in out.values():
            if state is not None:
                state["until"] = self._stamp(state["index"])
                state["partitions"] = parts
        held = m.held
        seq = m.__dict__.get("windows_held", 0)
        key = relevance_key(self.member, seq)
        if held is not None and key not in self._announced:
            self._announced[key] = held["index"]
            self._stamp(held["index"])
            extra[key] = {"format": RELEVANCE_FORMAT, "member": self.member, "seq": seq,
                          "key": key, "index": held["index"], "config": self.config,
                          "generation": held["generation"], "relevance": held["relevance"],
                          "until": self.now, "partitions": parts,
                          "published": float(time.time())}
        return extra

    def hold_ready(self) -> bool:
        """Whether the held window may grow: for every partition of the topic this member
        does not hold, some other member has released evidence (a held window's release, or
        a window) past the middle of the held window's stretch of stream time (from this
        member's previous close, or its first record, to the held window's close). Members
        close their windows at about the same points of the stream, so a peer that has not
        reached the middle has not released its window for this stretch yet. ``True`` with
        nothing held, for one process, or without a clock; the member bounds the wait."""
        held = self.model.held
        if held is None:
            return True
        self._stamp(held["index"])   # (not announced yet)
        return self._past_middle(held["index"], self.reach)

    def _past_middle(self, index: int, reach: dict[int, float]) -> bool:
        """Whether ``reach`` (per partition, the newest stream time other members' messages
        reach) is past the middle of own window ``index``'s stretch (from the previous close,
        or the first record, to its close) for every partition this member does not hold;
        ``True`` for one process or without a clock."""
        parts, total = self.model.partitions
        until = self._until.get(index)
        if parts is None or total is None or until is None:
            return True
        prev = self._until.get(index - 1, self._start)
        mid = until if prev is None else (prev + until) / 2.0
        return all(reach.get(p, float("-inf")) >= mid for p in set(range(total)) - set(parts))

    def _stamp(self, index: int) -> float | None:
        """The stream time own window ``index`` closed at: stamped the first time it is
        asked for (the newest record learned by then). Stamps of windows older than the
        oldest kept one's predecessor are dropped (a member runs for months)."""
        if index in self._until:
            return self._until[index]
        until = self._until[index] = self.now
        self._closes += 1
        m = self.model
        oldest = min(m.windows_closed - len(m._windows), index) - 1
        for old in [i for i in self._until if i < oldest]:
            del self._until[old]
        return until

    @property
    def closes(self) -> int:
        """How many of its windows' closes this member has stamped with a stream time
        (published or held)."""
        return self._closes

    def windows_ready(self) -> bool:
        """Whether, for every partition of the topic this member does not hold, another
        member's window (its trees, not only its release) reaches past the middle of the
        stretch of stream time of this member's newest closed window: the union then holds
        what one process would have learned by that point of the stream. ``True`` for one
        process, or before this member's first close."""
        return not self._until or self._past_middle(max(self._until), self.trees_reach)

    def adopt(self, key: str, state: dict | None) -> bool:
        """Take another member's window (``None``: its tombstone); returns whether the union
        changed. A window of another configuration, or whose key does not match, raises
        ``ValueError``. This member's own windows, read back after a restart, keep the time
        they were first published (a retired one gets its tombstone from
        :meth:`local_updates`); one the model does not have (published by an incarnation whose
        checkpoint was lost) is ignored."""
        own = key.partition("/")[0] == self.member
        if "/claim-" in key:
            return self._adopt_claim(key, state)
        if state is not None and self.fences(str(state.get("member")), state.get("ranges")):
            self.fenced += 1   # trained after another member claimed its records: refused
            return False
        if "/relevance-" in key:
            return self._adopt_relevance(key, state, own)
        if state is not None:
            if not isinstance(state, dict) or state.get("format") != WINDOW_FORMAT:
                raise ValueError(f"{key}: not a {WINDOW_FORMAT} window")
            if state.get("config") != self.config:
                raise ValueError(f"{key}: trained by a model of another configuration "
                                 f"({state.get('model')}, config {state.get('config')}; "
                                 f"this member: {self.config})")
            if state.get("key") != key or window_key(state["member"], state["index"]) != key:
                raise ValueError(f"{key}: the window's own key is {state.get('key')!r}")
            share = window_share(state)
            if not (isinstance(share, float) and 0.0 < share <= 1.0):
                raise ValueError(f"{key}: a window's share of the stream is in (0, 1], "
                                 f"got {share!r}")
        if own:
            m = self.model
            index = state["index"] if state is not None else None
            if state is None or index >= m.windows_closed or index in self._own:
                return False
            self._own[index] = key      # kept: published already; retired: tombstoned next
        elif state is None and key not in self.windows:
            return False
        self._apply(key, state)
        return True

    def fences(self, member: str, ranges: dict | None) -> list[str]:
        """The partitions of ``ranges`` (``partition -> [first, end)``, the records of a
        window or release of ``member``) that another member has claimed from an offset
        below ``end``: records that member trains (ownership fencing). Whatever its writer
        believes, a window or release with such a partition is refused by every reader, the
        model topic's order deciding (a claim read before it). ``ranges`` absent: a message
        from before claims, accepted as before."""
        out = []
        for p, (_first, end) in (ranges or {}).items():
            owner = self.owners.get(p)
            if owner is not None and owner[0] != member and int(end) > owner[1]:
                out.append(p)
        return out

    def _adopt_claim(self, key: str, state: dict | None) -> bool:
        """A claim (:data:`CLAIM_FORMAT`): its member owns the partition's records from
        ``from`` on; claims are never tombstoned. The union does not change."""
        if state is None:
            return False
        if not isinstance(state, dict) or state.get("format") != CLAIM_FORMAT:
            raise ValueError(f"{key}: not a {CLAIM_FORMAT} claim")
        if state.get("config") != self.config:
            raise ValueError(f"{key}: a claim of another configuration")
        if claim_key(str(state.get("member")), int(state.get("seq", -1))) != key:
            raise ValueError(f"{key}: the claim's own key is {state.get('key')!r}")
        self.owners[str(state["partition"])] = (str(state["member"]), int(state["from"]))
        return False

    def claim(self, partition: str, start: int, seq: int) -> tuple[str, dict]:
        """This member's claim of ``partition`` from offset ``start`` (key and state, for
        the topic; applied here when read back, in the topic's order)."""
        key = claim_key(self.member, seq)
        return key, {"format": CLAIM_FORMAT, "member": self.member, "seq": int(seq),
                     "key": key, "partition": str(partition), "from": int(start),
                     "config": self.config, "published": float(time.time())}

    def void(self, index: int) -> str | None:
        """Take this member's window ``index`` out of the union and its model's vote (its
        records belong to another member's claim): its trees go, its number stays; returns
        its key if it had been published (it then needs a tombstone), else ``None``."""
        m = self.model
        first = m.windows_closed - len(m._windows)
        if first <= index < m.windows_closed:
            win = m._windows[index - first]
            win.trees, win.kind, win.relevance = [], "fenced (another member's records)", None
            m._serving = None
        key = self._own.get(index)
        self._own[index] = key or window_key(self.member, index)   # never exported now
        if key is not None:
            self._apply(key, None)
        return key

    def _adopt_relevance(self, key: str, state: dict | None, own: bool) -> bool:
        """Another member's held-window release joins this member's evidence (its tombstone:
        leaves it, the window carrying it instead); this member's own, read back, changes
        nothing (its model holds its evidence)."""
        if state is not None:
            if not isinstance(state, dict) or state.get("format") != RELEVANCE_FORMAT:
                raise ValueError(f"{key}: not a {RELEVANCE_FORMAT} release")
            if state.get("config") != self.config:
                raise ValueError(f"{key}: released by a model of another configuration "
                                 f"(config {state.get('config')}; this member: {self.config})")
            if relevance_key(str(state.get("member")), int(state.get("seq", -1))) != key:
                raise ValueError(f"{key}: the release's own key is {state.get('key')!r}")
        if own:
            return False
        self._note_reach(state)
        return self._share_relevance(key, state)

    def _note_reach(self, state: dict | None, reach: dict[int, float] | None = None) -> None:
        """How far in stream time another member's releases reach, per partition it holds
        (into :attr:`reach`, or ``reach``)."""
        if state is None or state.get("until") is None or not state.get("partitions"):
            return
        reach = self.reach if reach is None else reach
        for p in state["partitions"]:
            p = int(p)
            reach[p] = max(reach.get(p, float("-inf")), float(state["until"]))

    def _apply(self, key: str, state: dict | None, relevance: bool = True) -> None:
        """The window joins (``None``: leaves) the union; another member's relevance
        histograms join this member's evidence too, unless ``relevance`` is false (a
        simulation bringing them later: :func:`~dpstream.stream.bench.member_sim.prequential`).
        """
        if state is None:
            self.windows.pop(key, None)
        else:
            self.windows[key] = state
        self._kept = None
        if key.partition("/")[0] != self.member:
            self._note_reach(state, self.trees_reach)
            if relevance:
                self._note_reach(state)
                self._share_relevance(key, state)

    def _share_relevance(self, key: str, state: dict | None) -> bool:
        """Another member's window brings its released attribute-relevance histograms into
        this member's evidence (so every member draws split attributes from the whole
        group's evidence, not from its 1/k of the records); its tombstone takes them back.
        Post-processing of released values. The merged histograms live in the model
        (``_foreign_relevance``, checkpointed with it), so a restart that reads the topic
        again adds none twice; the model's own drift reset drops them with its evidence.
        Unlike the member's own releases, which it keeps summing until a drift reset, another
        member's count only while that window is live (the union caps them at
        ``max_windows`` per member), so on a long stream a member's own evidence weighs more
        than the others'."""
        rel = getattr(self.model, "_relevance", None)
        if rel is None:
            return False
        merged = self.model.__dict__.setdefault("_foreign_relevance", {})
        changed = False
        # a window whose release came first (held): the window carries it from now on
        for k in (key, None if state is None else state.get("relevance_key")):
            if k in merged:
                rel.merge(merged.pop(k), sign=-1.0)
                changed = True
        hists = None if state is None else state.get("relevance")
        if hists is not None:
            hists = [np.asarray(h, dtype=np.float64) for h in hists]
            try:
                rel.merge(hists)
            except ValueError:   # not this schema's histograms: the window votes, no more
                return changed
            merged[key] = hists
            changed = True
        return changed

    def kept(self) -> list[dict]:
        """The windows that vote: the newest of the union, as many as make ``max_windows``
        whole windows (a member's window counts as its :func:`window_share`)."""
        return [s for s, _, _ in self._serving()]

    def members(self) -> list[str]:
        """Members with a window in the union (sorted)."""
        return sorted({s["member"] for s in self.windows.values()})

    def newest_published(self) -> float | None:
        """When the newest window of another member in the union was published (Unix time,
        its ``published`` stamp: the publishing member's clock); ``None`` while the union holds
        no other member's window (``dpstream serve``:
        ``dpstream_union_newest_window_age_seconds``)."""
        return max((float(s["published"]) for s in self.windows.values()
                    if s["member"] != self.member), default=None)

    def _serving(self) -> list[tuple[dict, Any, float]]:
        if self._kept is None:
            order = sorted(self.windows.values(),
                           key=lambda s: (s["published"], s["member"], s["index"]))
            kept = _newest(order, self.model.max_windows)
            sizes = [max(1, s["labeled"]) for s in kept]
            top = max(sizes, default=1)
            # window_decay by age in whole windows: the shares of the newer windows (one
            # process: 0, 1, 2, ... as WindowForestBase.window_weights)
            decay = float(self.model.window_decay)
            ages, newer = [], 0.0
            for s in reversed(kept):
                ages.append(newer)
                newer += window_share(s)
            ages.reverse()
            self._kept = [(s, self._view(s), n / top * decay ** age)
                          for s, n, age in zip(kept, sizes, ages, strict=True)]
        return self._kept

    def _view(self, state: dict) -> WindowForestBase:
        """The model with ``state``'s window alone and its routing state: scores that window."""
        view = object.__new__(type(self.model))
        view.__dict__.update(self.model.__dict__)
        view.__dict__.update(state["routing"])
        # each member's windows score through its own feature grid (None: raw rows, as
        # every window published before the grid)
        view._grid = state["routing"].get("_grid")
        view._windows = [_Window(trees=list(state["trees"]), records=state["records"],
                                 labeled=state["labeled"], kind=state["kind"],
                                 extra=dict(state["extra"]), generation=state["generation"])]
        view._serving, view._last = None, None
        view.__dict__.pop("_plan", None)
        return view

    # ------------------------------------------------------------ predicting
    def scores_row(self, row: np.ndarray) -> np.ndarray:
        """Weighted summed scores of an encoded row over the kept windows."""
        out = np.zeros(len(self.model._encoder.classes))
        for _, view, weight in self._serving():
            out += weight * view._score_row(row)
        return out

    def predict_proba_one(self, x: Mapping) -> dict:
        """Class probabilities of one record (the uniform prior while no window has trees)."""
        enc = self.model._encoder
        s = np.maximum(self.scores_row(np.array(enc._row(x))), 0.0)
        total = s.sum()
        if total <= 0:
            return {c: 1.0 / len(enc.classes) for c in enc.classes}
        return {c: float(v / total) for c, v in zip(enc.classes, s, strict=True)}

    def predict_one(self, x: Mapping) -> Any:
        """The class of one record by the merged ensemble."""
        enc = self.model._encoder
        return enc.classes[int(np.argmax(self.scores_row(np.array(enc._row(x)))))]

    def predict_many(self, X: Any) -> np.ndarray:
        """Classes of a batch (a list of dicts or a DataFrame)."""
        enc = self.model._encoder
        Xe = enc.encode_many(X)
        scores = np.zeros((Xe.shape[0], len(enc.classes)))
        for _, view, weight in self._serving():
            scores += weight * view._scores(Xe)
        return np.array(enc.classes, dtype=object).take(np.argmax(scores, axis=1))

    def export(self, path: Any) -> dict:
        """Write the union's public model file to ``path``: the voting windows of every
        member as released, with their weights (docs/model_format.md, "Window forests")."""
        from ..public import export_model

        return export_model(self, path)

    # ------------------------------------------------------------ report
    def privacy_report(self) -> dict:
        """The merged ensemble's guarantee, its windows and their members; ``local`` is this
        member's own :meth:`privacy_report`."""
        kept = self.kept()
        return {
            "mechanism": f"window ensemble across members ({type(self.model).__name__})",
            "epsilon": max([float(s["epsilon"]) for s in self.windows.values()]
                           + [self.model.privacy_report()["epsilon"]]),
            "epsilon_budget": float(self.model.epsilon), "delta": 0.0,
            "guarantee": ("pure epsilon-DP per record: each record is read by one member (its "
                          "partition's owner), in one window and one tree's disjoint part; "
                          "members' windows hold disjoint records and compose in parallel; "
                          "merging released windows and retiring them is post-processing"),
            "members": self.members(), "member": self.member,
            "windows_known": len(self.windows), "windows_kept": len(kept),
            "windows": [{"member": s["member"], "index": s["index"], "records": s["records"],
                         "labeled": s["labeled"], "generation": s["generation"],
                         "epsilon": s["epsilon"], "trees": len(s["trees"]),
                         "share": window_share(s)} for s in kept],
            "records_in_windows": sum(s["records"] for s in self.windows.values()),
            # after a crash: records this member discarded untrained whose prequential losses
            # its drift signal had read; the signal forgot them (discard_open_window), so
            # their new owner's drift read is their only one
            "drift_forgotten_records": int(getattr(self.model, "records_discarded_fed", 0)),
            "local": self.model.privacy_report(),
        }
