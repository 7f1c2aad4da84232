"""What the service publishes: ``/metrics`` (Prometheus text format), ``/healthz`` and the
``dpstream status`` read-out, each either public or for the data curator only; and the
curator's own read-out of a replay (:func:`format_replay`, :func:`replay_verdict`).

Everything shown to other readers is a DP release or a function of public quantities:
:data:`PUBLIC_SERIES` is the ``/metrics`` allow-list, :data:`CURATOR_SERIES` and the curator
keys what only ``curator=True`` exports; :func:`public_report` and :func:`public_summary` cut
reports and summaries to their public keys. Design: docs/stream_internals.md#what-is-public.

Examples
--------
>>> public_report({"epsilon": 1.0, "trees": 3, "spend_fraction": {"max": 0.37},
...                "drift": {"releases": 2, "records_pending": 17}})
{'epsilon': 1.0, 'trees': 3, 'drift': {'releases': 2}}
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..models.params import CURATOR_REPORT_KEYS, SMALL_STREAM_SCALE, public_report, records_needed

__all__ = ["MetricsServer", "ServiceCollector", "PUBLIC_SERIES", "CURATOR_SERIES",
           "CURATOR_REPORT_KEYS", "CURATOR_SUMMARY_KEYS", "CURATOR_WARNING", "is_public_series",
           "public_report", "public_summary", "format_status", "input_counts", "stop_lines",
           "summary_warnings", "MAX_DEAD_LETTER_SHARE", "replay_verdict", "format_replay"]

#: ``/metrics`` series anyone may read, as exported (a sample name covers all its labels;
#: ``name{label="value"}`` one series). Arrival counts and offsets (``seen``; the consumer's
#: lag: every message counts, whatever its content, issue 63), the guarantee,
#: the released model's size, closed windows, and the union of released windows (whose record
#: counts are published on the model topic with each window and weigh its vote), protocol
#: messages of distributed S-GBDT (not records), checkpoint bookkeeping, and two ages that are
#: functions of time and public releases only.
PUBLIC_SERIES: frozenset[str] = frozenset({
    'dpstream_records_total{outcome="seen"}',
    "dpstream_checkpoints_total",
    "dpstream_epsilon",
    "dpstream_epsilon_budget",
    "dpstream_trees",
    "dpstream_windows_closed_total",
    "dpstream_consumer_lag",
    "dpstream_union_epsilon",
    "dpstream_union_windows",
    "dpstream_union_members",
    "dpstream_union_records",
    "dpstream_member_share",
    "dpstream_group_shared",
    "dpstream_board_messages_ignored_total",
    "dpstream_last_checkpoint_age_seconds",
    "dpstream_broker_last_contact_age_seconds",   # broker answer times (as arrivals: public)
    "dpstream_union_newest_window_age_seconds",   # a released window's `published` stamp
})

#: ``/metrics`` series for the data curator only: exact functions of private data, not
#: differentially private. Dead letters and duplicates depend on the records' content, and
#: ``learned`` = seen - dead letters - duplicates - unlabeled reveals them; whether a record
#: carries a label, or the public flag, is its content too (issue 63); one out-of-domain
#: value moves the clipped count, one record's absent features or 0/1 label the missing
#: features and coerced labels; S-GBDT's per-record Rényi spend and the records still holding
#: budget move with one record's gradient (a top-range label); the open window's record count
#: counts valid records before any release.
CURATOR_SERIES: frozenset[str] = frozenset({
    'dpstream_records_total{outcome="learned"}',
    'dpstream_records_total{outcome="dead_letters"}',
    'dpstream_records_total{outcome="duplicates"}',
    'dpstream_records_total{outcome="unlabeled"}',
    "dpstream_clipped_values_total",
    "dpstream_missing_features_total",
    "dpstream_coerced_labels_total",
    "dpstream_record_budget_spent_fraction",
    "dpstream_active_records",
    "dpstream_window_pending_records",
    'dpstream_labels_total{outcome="joined"}',
    'dpstream_labels_total{outcome="unknown"}',
    'dpstream_labels_total{outcome="expired"}',
    'dpstream_labels_total{outcome="repeated"}',
    "dpstream_held_records_total",
    "dpstream_held_expired_total",
    "dpstream_records_held",
})

#: Keys of a runner summary (:func:`dpstream.stream.runner.describe`) for the curator only:
#: the outcome counters that depend on the records' content, a replay's blank lines, and the
#: curator's warnings (:func:`summary_warnings`).
CURATOR_SUMMARY_KEYS: frozenset[str] = frozenset({
    "records_learned", "dead_letters", "duplicates", "clipped", "predictions",
    "missing_features", "coerced_labels", "blank_lines_this_run", "warnings", "unlabeled",
    "held", "labels_joined", "held_expired", "labels_unknown", "labels_expired",
    "labels_repeated", "records_held",
})

#: The warning logged or printed wherever a curator-only read-out is turned on.
CURATOR_WARNING = ("the curator-only read-outs (records learned, dead letters, duplicates, "
                   "clipped values, missing features, coerced labels, per-record budget "
                   "statistics) are exact functions of "
                   "private data, not differentially private: do not expose them beyond the "
                   "data curator")


def is_public_series(name: str, labels: dict[str, str] | None = None) -> bool:
    """Whether the exported sample ``name`` with ``labels`` is public (in
    :data:`PUBLIC_SERIES` by name or by one of its labels, and in no curator entry).

    Examples
    --------
    >>> is_public_series("dpstream_epsilon"), is_public_series("dpstream_clipped_values_total")
    (True, False)
    >>> is_public_series("dpstream_records_total", {"outcome": "seen"})
    True
    >>> is_public_series("dpstream_records_total", {"outcome": "dead_letters"})
    False
    """
    keys = {name, *(f'{name}{{{k}="{v}"}}' for k, v in (labels or {}).items())}
    return bool(keys & PUBLIC_SERIES) and not keys & CURATOR_SERIES


def public_summary(summary: dict) -> dict:
    """A runner summary (``dpstream status``) without :data:`CURATOR_SUMMARY_KEYS`, its
    privacy report (and a member's union) cut by :func:`public_report`."""
    out = {k: v for k, v in summary.items() if k not in CURATOR_SUMMARY_KEYS}
    for key in ("privacy", "union"):
        if isinstance(out.get(key), dict):
            out[key] = public_report(out[key])
    return out


class ServiceCollector:
    """Prometheus collector over a runner (and, optionally, a lag function).

    Parameters
    ----------
    runner
        The :class:`~dpstream.stream.runner.Runner` whose counters and model it reads.
    lag, board, group_shared, ensemble
        Optional read-outs: the consumer's lag, distributed S-GBDT's ignored board messages,
        whether the group is shared, a member's union report.
    contact, union_published
        Optional wall times (``None``: not yet): the broker's last answer to the consumer
        (:attr:`~dpstream.connectors.kafka.GroupSource.last_contact`), and when the newest
        window of another member in a member's union was published
        (:meth:`~dpstream.models.windows.window_exchange.WindowEnsemble.newest_published`);
        exported as ages in seconds.
    curator
        Export :data:`CURATOR_SERIES` too (exact functions of private data, for the data
        curator only); by default only :data:`PUBLIC_SERIES` are exported, and a series in
        neither list is dropped.
    """

    def __init__(self, runner: Any, lag: Callable[[], int | None] | None = None,
                 board: Callable[[], dict[str, int]] | None = None,
                 group_shared: Callable[[], bool] | None = None,
                 ensemble: Callable[[], dict] | None = None, *, curator: bool = False,
                 contact: Callable[[], float | None] | None = None,
                 union_published: Callable[[], float | None] | None = None):
        self.runner = runner
        self.lag = lag
        self.board = board
        self.group_shared = group_shared
        self.ensemble = ensemble
        self.curator = curator
        self.contact = contact
        self.union_published = union_published

    def collect(self) -> Iterator[Metric]:
        """The families to export: every one with ``curator``, else their public series."""
        for family in self._families():
            if not self.curator:
                family.samples = [s for s in family.samples
                                  if is_public_series(s.name, s.labels)]
                if not family.samples:
                    continue
            yield family

    def _families(self) -> Iterator[Metric]:
        r = self.runner
        # the model and the member's union change under the runner's lock in the main loop;
        # read them under it too (a scrape waits for the batch in hand), or a report can read
        # an S-GBDT pool mid-round or the union mid-merge and fail the scrape
        with getattr(r, "lock", None) or contextlib.nullcontext():
            counters = dict(r.counters)
            # public read-outs show the model as of the last checkpoint (a release not yet
            # covered by one may be redrawn after a restart); the curator sees it live
            saved = getattr(r, "saved_report", None)
            report = r.model.privacy_report() if self.curator or saved is None else saved
            union = None if self.ensemble is None else self.ensemble()
            published = None if self.union_published is None else self.union_published()
        records = CounterMetricFamily("dpstream_records", "Records by outcome",
                                      labels=["outcome"])
        for outcome in ("seen", "learned", "dead_letters", "duplicates", "unlabeled"):
            records.add_metric([outcome], counters.get(outcome, 0))
        yield records
        labels = CounterMetricFamily("dpstream_labels", "Label messages by outcome (delayed "
                                     "labels)", labels=["outcome"])
        for outcome in ("joined", "unknown", "expired", "repeated"):
            labels.add_metric([outcome], counters.get(f"labels_{outcome}", 0))
        yield labels
        yield CounterMetricFamily("dpstream_held_records", "Records put on hold for a label",
                                  value=counters.get("held", 0))
        yield CounterMetricFamily("dpstream_held_expired",
                                  "Held records that expired before their label",
                                  value=counters.get("held_expired", 0))
        held_now = getattr(r, "held", None)
        if held_now is not None:
            yield GaugeMetricFamily("dpstream_records_held", "Records waiting for their label",
                                    value=float(len(held_now)))
        yield CounterMetricFamily("dpstream_clipped_values",
                                  "Numeric values clipped to the public domain",
                                  value=counters.get("clipped", 0))
        yield CounterMetricFamily("dpstream_missing_features",
                                  "Declared features absent or null in valid records",
                                  value=counters.get("missing_features", 0))
        yield CounterMetricFamily("dpstream_coerced_labels",
                                  "Labels read as a boolean class from a number (0/1)",
                                  value=counters.get("coerced_labels", 0))
        yield CounterMetricFamily("dpstream_checkpoints", "Checkpoints written",
                                  value=counters.get("checkpoints", 0))
        yield GaugeMetricFamily("dpstream_epsilon",
                                "Epsilon guaranteed per record for the whole stream (<= budget)",
                                value=float(report["epsilon"]))
        yield GaugeMetricFamily("dpstream_epsilon_budget", "The promised epsilon",
                                value=float(report["epsilon_budget"]))
        yield GaugeMetricFamily("dpstream_trees", "Trees in the model",
                                value=float(report["trees"]))
        if "spend_fraction" in report:     # S-GBDT: individual Renyi budgets
            spent = GaugeMetricFamily(
                "dpstream_record_budget_spent_fraction",
                "Renyi budget used by the active records (fraction of the filter's bound)",
                labels=["stat"])
            for stat, value in report["spend_fraction"].items():
                spent.add_metric([stat], float(value))
            yield spent
            yield GaugeMetricFamily("dpstream_active_records",
                                    "Records holding budget in memory",
                                    value=float(report["records_active"]))
        if "windows_closed" in report:     # window forests
            yield CounterMetricFamily("dpstream_windows_closed", "Tumbling windows trained",
                                      value=report["windows_closed"])
            yield GaugeMetricFamily("dpstream_window_pending_records",
                                    "Records in the open window (checkpointed, not yet trained)",
                                    value=float(report["records_pending"]))
        lag = self.lag() if self.lag is not None else None
        if lag is not None:
            yield GaugeMetricFamily("dpstream_consumer_lag", "Messages behind the high watermark",
                                    value=float(lag))
        contact = None if self.contact is None else self.contact()
        if contact is not None:
            yield GaugeMetricFamily("dpstream_broker_last_contact_age_seconds",
                                    "Seconds since the broker last answered the consumer "
                                    "(records fetched, a heartbeat)",
                                    value=max(0.0, time.time() - contact))
        if union is not None:   # a window-forest member: the union it predicts with
            yield GaugeMetricFamily("dpstream_union_epsilon",
                                    "Epsilon per record of the union of every member's windows",
                                    value=float(union["epsilon"]))
            yield GaugeMetricFamily("dpstream_union_windows",
                                    "Windows of all members that vote (the union's newest)",
                                    value=float(union["windows_kept"]))
            yield GaugeMetricFamily("dpstream_union_members",
                                    "Group members with a window in the union",
                                    value=float(len(union["members"])))
            yield GaugeMetricFamily("dpstream_union_records",
                                    "Records in the windows of all members known to this one",
                                    value=float(union["records_in_windows"]))
            yield GaugeMetricFamily("dpstream_member_share",
                                    "This member's share of the partitions (its windows and "
                                    "trees take that share of the model's sizes)",
                                    value=float(union["local"].get("member_share", 1.0)))
        if published is not None:   # a member whose union holds another member's window
            yield GaugeMetricFamily("dpstream_union_newest_window_age_seconds",
                                    "Seconds since the newest window of another member in the "
                                    "union was published (its publisher's clock)",
                                    value=max(0.0, time.time() - published))
        if self.group_shared is not None:   # a service that must be its group's only member
            yield GaugeMetricFamily(
                "dpstream_group_shared",
                "1 while another member of the consumer group holds partitions: the service "
                "is paused and trains nothing (docs/service.md, several members)",
                value=float(bool(self.group_shared())))
        if self.board is not None:   # distributed S-GBDT: board messages dropped, by reason
            dropped = CounterMetricFamily(
                "dpstream_board_messages_ignored",
                "Board messages ignored: failed authentication or replay checks (unsigned, "
                "bad_signature, replayed, ...) or broke the protocol (late, invalid)",
                labels=["reason"])
            for reason, n in self.board().items():
                dropped.add_metric([reason], n)
            yield dropped
        if r.last_checkpoint_wall is not None:
            yield GaugeMetricFamily("dpstream_last_checkpoint_age_seconds",
                                    "Seconds since the last checkpoint",
                                    value=time.time() - r.last_checkpoint_wall)


#: bytes of a refused request's unread body read and dropped before the answer (a client
#: that sent a body a little over a limit then reads the answer, not a reset connection)
DRAIN_BYTES = 64 << 10


class MetricsServer:
    """Serve ``/metrics`` and ``/healthz`` on ``host:port`` from a daemon thread
    (``port=0`` picks a free port; see :attr:`port`).

    Parameters
    ----------
    collector
        What ``/metrics`` exports (``None``: no ``/metrics``, as for ``dpstream serve-model``).
    api
        Answers its ``paths`` besides (``POST /predict`` and ``GET /model``:
        :class:`~dpstream.stream.http.api.PredictAPI`; ``/``: the status page,
        :class:`~dpstream.stream.http.page.StatusPage`), or a list of such; ``None``: those
        paths answer 404.
    stale_after
        ``/healthz`` answers 503 when :meth:`beat` was not called for this many seconds;
        ``None``: no loop to watch, always 200.
    """

    def __init__(self, collector: ServiceCollector | None, *, host: str = "127.0.0.1",
                 port: int = 0, stale_after: float | None = 60.0, api: Any = None):
        self.registry = None
        if collector is not None:
            self.registry = CollectorRegistry()
            self.registry.register(collector)
        self.apis = [a for a in (api if isinstance(api, (list, tuple)) else [api])
                     if a is not None]
        self.heartbeat = time.monotonic()
        self.stale_after = stale_after
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"   # keep-alive: a client may send many requests
            timeout = 30                    # an idle or stalled connection closes
            # headers and body leave in two writes: without TCP_NODELAY the second waits for
            # the client's delayed ACK of the first (40 ms a kept-alive request)
            disable_nagle_algorithm = True

            def handle(self):
                try:
                    super().handle()
                except (ConnectionError, TimeoutError):   # a kept-alive client hung up
                    self.close_connection = True

            def do_GET(self):  # noqa: N802 - http.server's names
                self._route("GET")

            def do_POST(self):  # noqa: N802
                self._route("POST")

            def do_PUT(self):  # noqa: N802
                self._route("PUT")

            def do_DELETE(self):  # noqa: N802
                self._route("DELETE")

            def handle_expect_100(self):
                # refuse a body we would not read (too long, no token) before it is sent
                refused = self._api_refusal()
                if refused is not None:
                    self._send(refused.code, refused.body, refused.headers, refused.close)
                    return False
                return super().handle_expect_100()

            def _api_refusal(self):
                path = urlsplit(self.path).path
                api = server.api_for(path)
                return None if api is None else api.precheck(self.command, path, self.headers)

            def _route(self, method):
                path = urlsplit(self.path).path
                api = server.api_for(path)
                if api is not None:
                    reply = api.respond(method, path, self.headers, self.rfile)
                    try:
                        self._send(reply.code, reply.body, reply.headers, reply.close)
                    finally:
                        if reply.after is not None:
                            reply.after()
                elif path not in ("/metrics", "/healthz") or (
                        path == "/metrics" and server.registry is None):
                    off = "" if path not in ("/predict", "/model") else (
                        ": HTTP predictions are off (dpstream serve --http-predict)")
                    self._send(404, f"not found{off}\n".encode(), {"Content-Type":
                                                                   "text/plain"}, True)
                elif method != "GET":
                    self._send(405, b"GET only\n", {"Content-Type": "text/plain",
                                                    "Allow": "GET"}, True)
                elif path == "/metrics":
                    body = generate_latest(server.registry)
                    self._send(200, body, {"Content-Type":
                                           "text/plain; version=0.0.4; charset=utf-8"})
                else:
                    age = time.monotonic() - server.heartbeat
                    ok = server.stale_after is None or age < server.stale_after
                    body = json.dumps({"ok": ok, "loop_age_s": round(age, 3)} if
                                      server.stale_after is not None else {"ok": ok}).encode()
                    self._send(200 if ok else 503, body, {"Content-Type": "application/json"})

            def _send(self, code, body, headers, close=False):
                try:
                    self.send_response(code)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    if close:   # the body was not read: the connection cannot carry another
                        self.send_header("Connection", "close")
                        self._drain()
                    self.end_headers()
                    self.wfile.write(body)
                except (ConnectionError, TimeoutError):   # the client gave up: not our error
                    self.close_connection = True

            def _drain(self):
                """Read and drop up to :data:`DRAIN_BYTES` of an unread body."""
                if self.headers.get("Expect", "").lower() == "100-continue":
                    return   # refused before the client sent it
                try:
                    left = min(int(self.headers.get("Content-Length") or 0), DRAIN_BYTES)
                    self.connection.settimeout(0.2)
                    while left > 0:
                        chunk = self.rfile.read1(min(left, 65536))
                        if not chunk:
                            break
                        left -= len(chunk)
                except (ValueError, OSError):
                    pass

            def log_message(self, *args):   # keep the service log for the service
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="dpstream-metrics",
                                       daemon=True)
        self.thread.start()

    def api_for(self, path: str) -> Any:
        """The api that answers ``path`` (``None``: the server's own paths, or 404)."""
        return next((a for a in self.apis if path in a.paths), None)

    def beat(self) -> None:
        self.heartbeat = time.monotonic()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def format_status(out: dict) -> str:
    """The text ``dpstream status`` prints for ``out`` (a checkpoint's summary, public or
    whole: a curator-only count is shown only where ``out`` holds it)."""
    p = out["privacy"]
    lines = [f"{out['model']} checkpoint in {out['checkpoint_dir']} "
             f"({out['checkpoint_age_s']:.0f} s old; checked: {out['checkpoint_integrity']})"]
    counts = [f"seen {out['records_seen']}"]
    for key, name in (("records_learned", "learned"), ("dead_letters", "dead letters"),
                      ("duplicates", "duplicates"), ("unlabeled", "unlabeled")):
        if key in out:
            counts.append(f"{name} {out[key]}")
    lines += [f"  {', '.join(counts)}", f"  offsets {out['offsets']}"]
    inputs = input_counts(out)
    lines += [f"  {inputs}"] if inputs else []
    if "windows_closed" in p:
        pending = (f", {p['records_pending']} records in the open window"
                   if "records_pending" in p else "")
        detail = (f"{p['windows_closed']} windows closed{pending}; protects "
                  f"{p.get('protects', 'features and labels')}")
    else:   # S-GBDT
        detail = ", ".join([f"{p[k]} {name}" for k, name in (
            ("rounds", "rounds"), ("records_active", "records hold budget")) if k in p])
    lines.append(f"  guarantee: ({p['epsilon']:.4g}, {p['delta']:g})-DP per record; "
                 f"{p['trees']} trees" + (f"; {detail}" if detail else ""))
    u = out.get("union")
    if u is not None:
        lines.append(f"  member {u['member']} predicts with the union of members "
                     f"{u['members']}: {u['windows_kept']} of {u['windows_known']} windows "
                     f"vote, {u['records_in_windows']} records in windows, epsilon "
                     f"{u['epsilon']:.4g} per record")
    if "member_share" in p:
        lines.append(f"  member share {p['member_share']:.4g} of the partitions: windows and "
                     f"trees at that share of the model's sizes")
    if p.get("records_held") or (u or {}).get("holds"):
        h = (u or {}).get("holds") or {}
        lines.append(f"  held window: {p.get('records_held', 0)} records, relevance released, "
                     f"trees waiting for the other members' releases (grown so far: "
                     f"{h.get('ready', 0)} when they arrived, {h.get('waited', 0)} after the "
                     f"wait)")
    a = (u or {}).get("awaits") or {}
    if a.get("waits"):
        lines.append(f"  draining a backlog, waited {a['waits']} times ({a['waited_s']:.4g} s "
                     f"in all, {a.get('timeouts', 0)} at the limit) for the other members' "
                     f"windows")
    if (u or {}).get("members_retired"):
        lines.append(f"  members that left the group, their windows retired: "
                     f"{', '.join(u['members_retired'])}")
    return "\n".join(lines + [f"  {w}" for w in out.get("warnings", ())])


#: the curator-only counts of how the records fitted the schema, by summary key
INPUT_COUNTS = (("clipped", "clipped values"), ("missing_features", "missing features"),
                ("coerced_labels", "labels coerced (0/1 -> false/true)"),
                ("blank_lines_this_run", "blank lines skipped"))


def input_counts(out: dict) -> str:
    """The line of a curator's summary on how the records fitted the schema: the
    :data:`INPUT_COUNTS` that ``out`` holds (``""`` if none: a public summary).

    >>> input_counts({"clipped": 2, "missing_features": 5, "coerced_labels": 1})
    'inputs: clipped values 2, missing features 5, labels coerced (0/1 -> false/true) 1'
    """
    counts = [f"{name} {out[key]}" for key, name in INPUT_COUNTS if key in out]
    return f"inputs: {', '.join(counts)}" if counts else ""


def stop_lines(out: dict, *, curator: bool = False) -> list[str]:
    """What ``dpstream serve`` logs on stop after its public line (``out``: the runner's
    summary): the :func:`summary_warnings` (from public counts) and, with ``curator``
    (``--curator-metrics``: the operator asked for the curator's read-outs), the curator's
    counts, marked as such; the service log otherwise carries public counts only.

    >>> out = {"records_seen": 9000, "records_learned": 8990, "dead_letters": 10,
    ...        "duplicates": 0, "clipped": 3, "privacy": {"epsilon": 1.0}}
    >>> stop_lines(out), stop_lines(out, curator=True)[0][:46]
    ([], 'curator-only summary (not DP, do not publish):')
    """
    lines = summary_warnings(out)
    if curator:
        lines.append(f"curator-only summary (not DP, do not publish): learned "
                     f"{out['records_learned']}, dead letters {out['dead_letters']}, duplicates "
                     f"{out['duplicates']}; {input_counts(out)}")
    return lines


def summary_warnings(out: dict, score: dict | None = None) -> list[str]:
    """The curator summary's warnings for ``out`` (a runner summary) and ``score`` (a
    prequential score): a classifier that did not beat the most frequent label, and a stream
    shorter than :func:`~dpstream.models.params.records_needed` of the epsilon asked for (the
    :class:`~dpstream.models.params.SmallStreamWarning` rule, from public counts).

    >>> out = {"records_seen": 203, "privacy": {"epsilon": 0.9, "epsilon_budget": 1.0}}
    >>> for line in summary_warnings(out, {"accuracy": 0.58, "majority_share": 0.76}):
    ...     print(line)
    warning: the model did not beat predicting the most frequent label (accuracy 0.5800,
      most frequent label 0.7600)
    warning: 203 records at epsilon 1 is a short stream for this budget: about 5,000 are
      wanted (n·ε ≥ 5,000); expect low, seed-dependent accuracy (docs/privacy.md, "Small
      streams")
    """
    lines = []
    if score and "accuracy" in score and score["accuracy"] <= score["majority_share"]:
        lines.append(f"warning: the model did not beat predicting the most frequent label "
                     f"(accuracy {score['accuracy']:.4f}, most frequent label "
                     f"{score['majority_share']:.4f})")
    p, seen = out["privacy"], out["records_seen"]
    epsilon = p.get("epsilon_budget", p["epsilon"])
    if 0 < seen < records_needed(epsilon):
        lines.append(f"warning: {seen:,} records at epsilon {epsilon:g} is a short stream for "
                     f"this budget: about {records_needed(epsilon):,} are wanted (n·ε ≥ "
                     f"{SMALL_STREAM_SCALE:,}); expect low, seed-dependent accuracy "
                     f"(docs/privacy.md, \"Small streams\")")
    return lines


#: ``dpstream replay``'s default ``--max-dead-letter-share``
MAX_DEAD_LETTER_SHARE = 0.1
CURATOR_NOTE = ("this summary is the curator's: exact counts and scores of the data, not DP; "
                "do not publish it")


def replay_verdict(res: dict, max_dead_letter_share: float = MAX_DEAD_LETTER_SHARE) -> list[str]:
    """Why a replay summary is a failure (empty: it is not): a source error, nothing learned
    (this run, or at all), or a share of dead letters above ``max_dead_letter_share``. A run
    stopped (SIGTERM, Ctrl-C) before it read a record is not a failure: it was asked to stop."""
    out = [f"source error: {res['error']}"] if res.get("error") else []
    n, dead = res["records_this_run"], res["dead_letters_this_run"]
    stopped_unread = res.get("stopped") and n == 0
    if (res["learned_this_run"] == 0 and (n > 0 or res["records_learned"] == 0)
            and not stopped_unread):
        why = ("every record was a dead letter" if n and dead == n
               else "no record in the source" if not n else "no record was learned")
        out.append(f"nothing was learned ({why})")
    if n and dead / n > max_dead_letter_share:
        out.append(f"{dead} of {n} records ({dead / n:.1%}) were dead letters, more than "
                   f"--max-dead-letter-share {max_dead_letter_share:g}")
    return out


def format_replay(res: dict) -> str:
    """The text summary of ``dpstream replay`` (:func:`replay`'s result)."""
    p = res["privacy"]
    lines = [f"replayed {res['source']}: {res['records_this_run']} records in "
             f"{res['seconds']:.1f} s ({res['rows_per_s']} rows/s)",
             f"  learned {res['records_learned']}, dead letters {res['dead_letters']} "
             f"(-> {res['dead_letter_file'] or 'the temporary folder, removed'}), "
             f"duplicates {res['duplicates']}, unlabeled {res['unlabeled']}",
             f"  {input_counts(res)}"]
    if res.get("stopped"):
        lines.append("  stopped before the end of the source (a signal); a replay with a "
                     "--checkpoint-dir resumes from here")
    if res["dead_letter_reasons"]:
        lines.append("  top dead-letter reasons (this run):")
        lines += [f"    {r['count']:>8}  {r['reason']}" for r in res["dead_letter_reasons"]]
    score = res.get("prequential")
    if score and "accuracy" in score:
        lines.append(f"  prequential accuracy {score['accuracy']:.4f} on {score['records']} "
                     f"labeled records, each predicted before it was learned (most frequent "
                     f"label: {score['majority_share']:.4f})")
    elif score:
        lines.append(f"  prequential R2 {score['r2']:.4f}, MAE {score['mae']:.4g} on "
                     f"{score['records']} labeled records, each predicted before it was learned")
    lines += [f"  {w}" for w in res.get("warnings", ())]
    lines.append(f"  guarantee: ({p['epsilon']:.4g}, {p['delta']:g})-DP per record; "
                 f"{p['trees']} trees")
    if res["checkpoint_dir"]:
        lines.append(f"  checkpoint: {res['checkpoint_dir']} (the trained model and the "
                     f"records it still holds - the curator's, keep it private; resume with "
                     f"--checkpoint-dir, load it as in docs/service.md, 'Using the model')")
    else:
        lines.append("  checkpoint: none kept (it holds records: it was in a temporary folder, "
                     "removed at exit; --checkpoint-dir DIR or --keep-checkpoint keeps it)")
    if res["error"]:
        lines.append(f"  source error: {res['error']}")
    lines.append(f"  ({CURATOR_NOTE})")
    return "\n".join(lines)
