"""HTTP predictions from the public model: ``POST /predict`` and ``GET /model`` on the port of
``dpstream serve`` (beside ``/metrics``), and ``dpstream serve-model`` for a public model file.

Handler threads never touch the live model. The thread that trains publishes a *snapshot* —
``load_model(public_model(model))``, the DP release as saved by the last checkpoint — and
handlers read the newest one (:class:`SnapshotPublisher`); :class:`PredictAPI` answers the
requests. See docs/service.md, "HTTP predictions".
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["Reply", "Snapshot", "SnapshotPublisher", "PredictAPI", "serve_model",
           "serve_model_command", "add_http_arguments", "is_loopback", "exposure_warning",
           "MAX_BODY_BYTES", "MAX_RECORDS", "CONCURRENCY", "SERVE_CONCURRENCY", "SERVE_SHARE"]

log = logging.getLogger("dpstream.http")

#: a ``POST /predict`` body longer than this is refused (413) before it is read
MAX_BODY_BYTES = 1 << 20
#: records in one request at most (413 beyond)
MAX_RECORDS = 10_000
#: requests worked on at once by ``serve-model``; a request waits :data:`QUEUE_WAIT_S` for
#: a slot, then 503
CONCURRENCY = 4
#: ``serve --http-predict``'s defaults: one slot, busy at most a quarter of the time (the
#: interpreter lock is shared with training: docs/service.md, "HTTP predictions")
SERVE_CONCURRENCY = 1
SERVE_SHARE = 0.25
QUEUE_WAIT_S = 0.5
#: bytes of a refused body read and dropped before the answer, so that a client that sent a
#: body a little over the limit reads the 413 instead of a reset connection
DRAIN_BYTES = 64 << 10
API_PATHS = ("/predict", "/model")


class Reply(NamedTuple):
    """An HTTP answer: status, body, headers; ``close``: end the connection after it (the
    request's body was not read); ``after``: called once it is sent (or failed to be)."""
    code: int
    body: bytes
    headers: dict
    close: bool = False
    after: Callable[[], None] | None = None


def _json_reply(code: int, obj: Any, *, close: bool = False, **headers: str) -> Reply:
    body = json.dumps(obj, allow_nan=False).encode("utf-8")
    return Reply(code, body, {"Content-Type": "application/json", **headers}, close)


def _error(code: int, message: str, *, close: bool = False, headers: dict | None = None,
           **extra: Any) -> Reply:
    """A JSON error ``{"error": message, **extra}``."""
    return _json_reply(code, {"error": message, **extra}, close=close, **(headers or {}))


class Snapshot:
    """A public model ready to answer: the predict-only estimator (:attr:`model`), the public
    model file's object (:attr:`public`) and :attr:`digest`, whether it classifies, and when
    it was built (:attr:`built`, Unix time). Never changed once built."""

    __slots__ = ("model", "public", "digest", "classifier", "built", "_body")

    def __init__(self, public: Mapping):
        from ...models.public import load_model  # (the models load when a model is served)

        self.model = load_model(public)   # checks the format and the digest
        self.public = public
        self.digest = str(public["digest"])
        self.classifier = hasattr(self.model, "predict_proba_one")
        self.built = time.time()
        self._body: bytes | None = None

    def body(self) -> bytes:
        """The public model file (JSON), serialised at the first ``GET /model``."""
        if self._body is None:   # (two threads may both serialise it: the same bytes)
            self._body = json.dumps(self.public, allow_nan=False).encode("utf-8")
        return self._body


class SnapshotPublisher:
    """The newest :class:`Snapshot`: built by the thread that owns the model, read by any.

    The snapshot is swapped as one reference, so a reader sees the old one or the new one,
    never a mix. :meth:`publish` is called where the model is as saved by the last checkpoint
    (:meth:`follow`: right after each checkpoint), so nothing a restart could redraw is served.

    Parameters
    ----------
    refresh
        Seconds between rebuilds at least (``0``: at every checkpoint). A rebuild also waits
        for a request since the last one, and keeps the old snapshot when the digest is the same.
    """

    def __init__(self, refresh: float = 1.0):
        if not refresh >= 0:
            raise ValueError(f"refresh is a number of seconds >= 0, got {refresh!r}")
        self.refresh = float(refresh)
        self.snapshot: Snapshot | None = None
        #: why this model cannot be served (its export raised ``TypeError``): answered as 501
        self.unavailable: str | None = None
        self.wanted = False
        self.rebuilds = 0
        self._last = -math.inf

    @classmethod
    def from_file(cls, path: str | Path) -> SnapshotPublisher:
        """A publisher of the public model file at ``path`` (``dpstream serve-model``)."""
        try:
            obj = json.loads(Path(path).read_text(encoding="utf-8"))
        except ValueError as exc:   # (not JSON, not UTF-8)
            raise ValueError(f"{path}: not a public model file: {exc}") from None
        publisher = cls()
        publisher.snapshot = Snapshot(obj)
        return publisher

    def current(self) -> Snapshot | None:
        """The snapshot to answer with (a request: the next checkpoint may rebuild it)."""
        self.wanted = True
        return self.snapshot

    def publish(self, model: Any, *, force: bool = False) -> bool:
        """Rebuild the snapshot from ``model`` if due; whether it changed.

        Due: ``force``, or :attr:`refresh` seconds since the last rebuild and either a
        request since then or no snapshot yet. A model the public format does not cover
        (``public_model`` raises ``TypeError``) sets :attr:`unavailable`; any other failure is
        logged and the old snapshot stays: the training loop never fails here.
        """
        from ...models.public import public_model

        now = time.monotonic()
        if not force and (now - self._last < self.refresh
                          or (self.snapshot is not None and not self.wanted)):
            return False
        self.wanted = False
        self._last = now
        try:
            obj = public_model(model)
        except TypeError as exc:
            self.unavailable = str(exc)
            return False
        except Exception as exc:   # an export bug must not stop training
            log.warning("HTTP predictions: exporting the model failed (%s: %s); the previous "
                        "model stays", type(exc).__name__, exc)
            return False
        if self.snapshot is not None and obj["digest"] == self.snapshot.digest:
            return False
        try:
            snapshot = Snapshot(obj)
        except Exception as exc:
            log.warning("HTTP predictions: loading the exported model failed (%s: %s)",
                        type(exc).__name__, exc)
            return False
        self.snapshot, self.unavailable = snapshot, None
        self.rebuilds += 1
        return True

    def follow(self, runner: Any) -> None:
        """Publish ``runner``'s predictor (a member's union, else its model) now and after
        each of its checkpoints (chained to an ``on_checkpoint`` already set)."""
        before = runner.on_checkpoint

        def predictor() -> Any:
            return runner.model if runner.predictor is None else runner.predictor

        def on_checkpoint(positions: dict) -> None:
            if before is not None:
                before(positions)
            self.publish(predictor())

        with runner.lock:
            self.publish(predictor(), force=True)
            runner.on_checkpoint = on_checkpoint


def _key(value: Any) -> str:
    """A class as a JSON object key: a string as it is, anything else as JSON spells it."""
    value = value.item() if hasattr(value, "item") else value
    return value if isinstance(value, str) else json.dumps(value)


def _value(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _proba_rows(proba: Any, n: int) -> list[dict]:
    """``predict_proba_many``'s answer (a DataFrame, or a dict of columns) as n dicts."""
    columns = proba.items() if hasattr(proba, "items") else ()
    cols = [(_key(c), [float(v) for v in vals]) for c, vals in columns]
    return [{k: vals[i] for k, vals in cols} for i in range(n)]


class PredictAPI:
    """The answers of ``POST /predict`` and ``GET /model`` (docs/service.md).

    Parameters
    ----------
    publisher
        Where the snapshot to answer with comes from.
    token
        When set, both paths require ``Authorization: Bearer TOKEN`` (401 otherwise).
    max_bytes, max_records
        The largest body and the most records per request (413 beyond).
    concurrency
        Requests worked on at once (decoding, checking, predicting); a request waits up to
        :data:`QUEUE_WAIT_S` for a slot, then gets 503.
    share
        The share of its time a slot may work, in (0, 1]: after an answer whose work took
        ``t`` seconds of its thread's CPU, the slot stays taken ``t * (1/share - 1)`` seconds
        more. With one slot, predictions then take at most about ``share`` of the time, and
        the training thread keeps the interpreter the rest of it (1: no pause).
    """

    paths = API_PATHS

    def __init__(self, publisher: SnapshotPublisher, *, token: str | None = None,
                 max_bytes: int = MAX_BODY_BYTES, max_records: int = MAX_RECORDS,
                 concurrency: int = CONCURRENCY, share: float = 1.0):
        if token is not None and not token:
            raise ValueError("the HTTP token is empty: give a secret, or none")
        for name, value in (("max_bytes", max_bytes), ("max_records", max_records),
                            ("concurrency", concurrency)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0 < share <= 1:
            raise ValueError(f"share is in (0, 1], got {share!r}")
        self.share = float(share)
        self.publisher = publisher
        self._token = None if token is None else token.encode("utf-8")
        self.max_bytes, self.max_records = max_bytes, max_records
        self.slots = threading.BoundedSemaphore(concurrency)

    def respond(self, method: str, path: str, headers: Mapping, rfile: Any) -> Reply:
        """The reply to one request (never raises: a failure is logged and answered 500)."""
        try:
            refused = self.precheck(method, path, headers)
            if refused is not None:
                return refused
            if path == "/model":
                return self._model()
            return self._predict(headers, rfile)
        except Exception:
            log.exception("HTTP %s %s failed", method, path)
            return _error(500, "internal error (the service logged it)", close=True)

    def precheck(self, method: str, path: str, headers: Mapping) -> Reply | None:
        """The refusal a request gets from its line and headers alone (or ``None``): wrong
        method, missing token, a body too long or without a length. Also answers
        ``Expect: 100-continue`` before the client sends the body."""
        allowed = "GET" if path == "/model" else "POST"
        if method != allowed:
            return _error(405, f"{path} answers {allowed} only", close=True,
                          headers={"Allow": allowed})
        if not self._authorized(headers.get("Authorization")):
            return _error(401, "this endpoint needs 'Authorization: Bearer <token>' with the "
                               "service's token", close=True,
                          headers={"WWW-Authenticate": 'Bearer realm="dpstream"'})
        if path == "/model":
            return None
        if headers.get("Transfer-Encoding"):
            return _error(411, "send the body with a Content-Length (chunked bodies are not "
                               "read)", close=True)
        try:
            length = int(headers.get("Content-Length"))
        except (TypeError, ValueError):
            return _error(411, "a Content-Length header is required", close=True)
        if length < 0:
            return _error(400, "a negative Content-Length", close=True)
        if length > self.max_bytes:
            return _error(413, f"the body has {length} bytes, more than this endpoint takes "
                               f"({self.max_bytes}): send fewer records per request",
                          close=True, limit=self.max_bytes)
        return None

    def _authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        scheme, _, value = (header or "").strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            value.strip().encode("utf-8"), self._token)

    def _snapshot(self) -> Snapshot | Reply:
        snapshot = self.publisher.current()
        if snapshot is not None:
            return snapshot
        if self.publisher.unavailable is not None:
            return _error(501, f"this model cannot be served yet: "
                               f"{self.publisher.unavailable}")
        return _error(503, "no model yet: the first snapshot is built at start and after "
                           "checkpoints", headers={"Retry-After": "1"})

    def _model(self) -> Reply:
        snapshot = self._snapshot()
        if isinstance(snapshot, Reply):
            return snapshot
        return Reply(200, snapshot.body(), {"Content-Type": "application/json",
                                          "ETag": f'"{snapshot.digest}"'})

    def _predict(self, headers: Mapping, rfile: Any) -> Reply:
        length = int(headers.get("Content-Length"))
        try:
            data = rfile.read(length)
        except OSError:   # (a timeout: the client stopped sending)
            return _error(408, "the body did not arrive", close=True)
        if len(data) < length:
            return _error(400, "the body is shorter than its Content-Length", close=True)
        snapshot = self._snapshot()
        if isinstance(snapshot, Reply):
            return snapshot
        if not self.slots.acquire(timeout=QUEUE_WAIT_S):
            return _error(503, "too many predictions at once: retry shortly",
                          headers={"Retry-After": "1"})
        start = time.thread_time()   # this thread's CPU: not the waits for the interpreter
        try:
            reply = self._answer(snapshot, data)
        except BaseException:
            self.slots.release()
            raise
        # the slot stays taken after the answer for (1/share - 1) times the work it took
        busy = time.thread_time() - start
        return reply._replace(after=lambda: self._cool_down(busy))

    def _cool_down(self, busy: float) -> None:
        try:
            if self.share < 1.0:
                time.sleep(busy * (1.0 / self.share - 1.0))
        finally:
            self.slots.release()

    def _answer(self, snapshot: Snapshot, data: bytes) -> Reply:
        """Decode, check and predict the body's records (the work a slot bounds)."""
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"the body is not JSON: {exc}")
        single = isinstance(obj, dict)
        records = [obj] if single else obj
        if not isinstance(records, list):
            return _error(400, f"expected a JSON object (one record's features) or a list of "
                               f"them, got {type(obj).__name__}")
        if len(records) > self.max_records:
            return _error(413, f"{len(records)} records, more than this endpoint takes per "
                               f"request ({self.max_records})", limit=self.max_records)
        for i, record in enumerate(records):
            if not isinstance(record, dict):
                return _error(400, f"record {i}: expected a JSON object of feature values, "
                                   f"got {type(record).__name__}", record=i)
        try:
            out = _predictions(snapshot, records, single)
        except (ValueError, TypeError) as exc:
            culprit = _culprit(snapshot.model, records, exc)
            if culprit is None:
                raise
            i, why = culprit
            return _error(400, f"record {i}: {why}", record=i, field=getattr(why, "field", None))
        return _json_reply(200, {**out, "model": snapshot.digest})


def _predictions(snapshot: Snapshot, records: list, single: bool) -> dict:
    """The answer's lists: ``predict_one`` / ``predict_proba_one`` for one object, the
    ``*_many`` methods for a list (each bit for bit the live model's, docs/service.md)."""
    model = snapshot.model
    if single:
        x = records[0]
        out = {"predictions": [_value(model.predict_one(x))]}
        if snapshot.classifier:
            out["probabilities"] = [{_key(c): float(p)
                                     for c, p in model.predict_proba_one(x).items()}]
        return out
    if not records:
        return {"predictions": [], **({"probabilities": []} if snapshot.classifier else {})}
    out = {"predictions": [_value(v) for v in model.predict_many(records)]}
    if snapshot.classifier:
        out["probabilities"] = _proba_rows(model.predict_proba_many(records), len(records))
    return out


def _culprit(model: Any, records: list, exc: Exception) -> tuple[int, Exception] | None:
    """The first record the model refuses, and why (a batch's error names no index)."""
    if len(records) == 1:
        return 0, exc
    for i, record in enumerate(records):
        try:
            model.predict_one(record)
        except (ValueError, TypeError) as why:
            return i, why
    return None


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server to this machine.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, token: str | None) -> str | None:
    """The warning for predictions served beyond this machine without a token (or ``None``)."""
    if token is None and not is_loopback(host):
        return (f"HTTP predictions on {host}, a non-loopback address, without a token: anyone "
                f"who reaches it may query the model and read GET /model (set "
                f"DPSTREAM_HTTP_TOKEN, or bind 127.0.0.1)")
    return None


def serve_model(path: str | Path, *, host: str = "127.0.0.1", port: int = 0,
                token: str | None = None, stop: threading.Event | None = None,
                ready: Any = None, **limits: Any) -> int:
    """Serve the public model file at ``path`` (``POST /predict``, ``GET /model``, ``GET
    /healthz``) until ``stop`` is set; ``ready(server)`` is called once it listens."""
    from ..metrics import MetricsServer

    api = PredictAPI(SnapshotPublisher.from_file(path), token=token, **limits)
    server = MetricsServer(None, api=api, host=host, port=port, stale_after=None)
    try:
        if ready is not None:
            ready(server)
        (stop or threading.Event()).wait()
    finally:
        server.close()
    return 0


def serve_model_command(args: argparse.Namespace) -> int:
    """``dpstream serve-model``: prints the URL, serves until SIGTERM / Ctrl-C, exit 0."""
    token = args.http_token or os.environ.get("DPSTREAM_HTTP_TOKEN") or None
    stop = threading.Event()
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for s in before:
        signal.signal(s, lambda *_: stop.set())

    def ready(server: Any) -> None:
        from ...models.public import describe

        public = server.apis[0].publisher.snapshot.public
        print(f"serving {args.model_file} ({describe(public)}) on "
              f"http://{args.host}:{server.port}: POST /predict, GET /model, GET /healthz"
              f"{' (bearer token required)' if token else ''}", flush=True)
        warning = exposure_warning(args.host, token)
        if warning:
            print(f"dpstream serve-model: warning: {warning}", file=sys.stderr, flush=True)

    try:
        serve_model(args.model_file, host=args.host, port=args.port, token=token, stop=stop,
                    ready=ready, max_bytes=args.http_max_bytes,
                    max_records=args.http_max_records, concurrency=args.http_concurrency)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    print("stopped", flush=True)
    return 0


def _limit_flags(p: Any, *, defaults: bool) -> None:
    """The token and limit flags (``defaults``: argparse fills them in; else unset is
    ``None``, and ``dpstream serve``'s settings hold the defaults)."""
    def dflt(value: int) -> dict:
        return {"default": value if defaults else None}

    p.add_argument("--http-token", metavar="TOKEN", help="require 'Authorization: Bearer "
                   "TOKEN' on /predict and /model (DPSTREAM_HTTP_TOKEN keeps it out of ps)")
    p.add_argument("--http-max-bytes", type=int, metavar="N", help=f"largest request body "
                   f"(default {MAX_BODY_BYTES}; 413 beyond)", **dflt(MAX_BODY_BYTES))
    p.add_argument("--http-max-records", type=int, metavar="N", help=f"most records per "
                   f"request (default {MAX_RECORDS}; 413 beyond)", **dflt(MAX_RECORDS))
    concurrency = CONCURRENCY if defaults else SERVE_CONCURRENCY
    p.add_argument("--http-concurrency", type=int, metavar="N", help=f"requests worked on at "
                   f"once (default {concurrency}; then a short wait, then 503)",
                   **dflt(concurrency))


SERVE_MODEL_HELP = """\
Serve a public model file (dpstream export, docs/model_format.md) over HTTP without training:
POST /predict (a JSON record or a list of records), GET /model (the file), GET /healthz.
Binds 127.0.0.1 unless --host says otherwise. SIGTERM / Ctrl-C: stop, exit 0
(docs/service.md, "HTTP predictions").

example:
  dpstream serve-model model.json --port 8080
  curl -X POST http://127.0.0.1:8080/predict -d '{"age": 39, "education": "Bachelors"}'
"""


def add_http_arguments(sub: Any, serve: argparse.ArgumentParser) -> None:
    """The ``--http-*`` flags of ``dpstream serve`` and the ``serve-model`` command."""
    g = serve.add_argument_group("HTTP predictions (docs/service.md)")
    g.add_argument("--http-predict", action="store_true", default=None, help="also answer "
                   "POST /predict and GET /model on the metrics port, from the model as of "
                   "the last checkpoint")
    g.add_argument("--http-refresh", type=float, metavar="S", help="rebuild the served model "
                   "at a checkpoint at most every S seconds, when asked (default 1)")
    _limit_flags(g, defaults=False)
    g.add_argument("--http-share", type=float, metavar="F", help=f"share of its time a "
                   f"prediction slot may work, in (0, 1] (default {SERVE_SHARE}: training "
                   f"keeps the rest of the interpreter)")
    sm = sub.add_parser("serve-model", help="serve a public model file over HTTP (predict "
                        "only)", description=SERVE_MODEL_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sm.add_argument("model_file", metavar="MODEL.json", help="a public model file")
    sm.add_argument("--port", type=int, default=9109, help="port (default 9109; 0: any)")
    sm.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    _limit_flags(sm, defaults=True)
    sm.set_defaults(func=serve_model_command)
