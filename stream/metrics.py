"""``/metrics`` (Prometheus text format) and ``/healthz`` for the running service.

The collector reads the runner's counters at scrape time, so nothing has to be kept in sync:
``dpstream_records_total{outcome=...}``, ``dpstream_epsilon`` (the guarantee) and
``dpstream_record_budget_spent_fraction{stat=min|median|max}``, ``dpstream_trees``,
``dpstream_consumer_lag``, ``dpstream_group_shared`` (1 while a service that must be its
group's only member is paused), ``dpstream_union_*`` (a window-forest member: the union of
every member's windows it predicts with) and ``dpstream_member_share`` (its share of the
partitions), ``dpstream_last_checkpoint_age_seconds`` and, for
a party of distributed S-GBDT, ``dpstream_board_messages_ignored_total{reason=...}``. ``/healthz``
answers 200 while the main loop has turned within ``stale_after`` seconds, else 503 (a wedged
consumer).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["MetricsServer", "ServiceCollector"]


class ServiceCollector:
    """Prometheus collector over a runner (and, optionally, a lag function)."""

    def __init__(self, runner: Any, lag: Callable[[], int | None] | None = None,
                 board: Callable[[], dict[str, int]] | None = None,
                 group_shared: Callable[[], bool] | None = None,
                 ensemble: Callable[[], dict] | None = None):
        self.runner = runner
        self.lag = lag
        self.board = board
        self.group_shared = group_shared
        self.ensemble = ensemble

    def collect(self):
        r = self.runner
        # the model and the member's union change under the runner's lock in the main loop;
        # read them under it too (a scrape waits for the batch in hand), or a report can read
        # an S-GBDT pool mid-round or the union mid-merge and fail the scrape
        with getattr(r, "lock", None) or contextlib.nullcontext():
            counters = dict(r.counters)
            report = r.model.privacy_report()
            union = None if self.ensemble is None else self.ensemble()
        records = CounterMetricFamily("dpstream_records", "Records by outcome",
                                      labels=["outcome"])
        for outcome in ("seen", "learned", "dead_letters", "duplicates", "unlabeled"):
            records.add_metric([outcome], counters.get(outcome, 0))
        yield records
        yield CounterMetricFamily("dpstream_clipped_values",
                                  "Numeric values clipped to the public domain",
                                  value=counters.get("clipped", 0))
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


class MetricsServer:
    """Serve ``/metrics`` and ``/healthz`` on ``host:port`` from a daemon thread
    (``port=0`` picks a free port; see :attr:`port`)."""

    def __init__(self, collector: ServiceCollector, *, host: str = "127.0.0.1", port: int = 0,
                 stale_after: float = 60.0):
        self.registry = CollectorRegistry()
        self.registry.register(collector)
        self.heartbeat = time.monotonic()
        self.stale_after = stale_after
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path.split("?")[0] == "/metrics":
                    body = generate_latest(server.registry)
                    self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")
                elif self.path.split("?")[0] == "/healthz":
                    age = time.monotonic() - server.heartbeat
                    ok = age < server.stale_after
                    body = json.dumps({"ok": ok, "loop_age_s": round(age, 3)}).encode()
                    self._send(200 if ok else 503, body, "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code, body, ctype):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):   # keep the service log for the service
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="dpstream-metrics",
                                       daemon=True)
        self.thread.start()

    def beat(self) -> None:
        self.heartbeat = time.monotonic()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
