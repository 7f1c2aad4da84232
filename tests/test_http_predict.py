"""HTTP predictions (issue 67): ``POST /predict`` and ``GET /model`` over real sockets, from
the public model (``load_model(public_model(model))``) as of the last checkpoint; their
refusals (400, 401, 405, 411, 413, 501, 503); eight clients while the runner trains; ``dpstream
serve-model`` and ``dpstream serve --http-predict`` as subprocesses."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings

import pytest

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.models import (
    MedianForestClassifier,
    RDTClassifier,
    SGBDTClassifier,
    SGBDTRegressor,
)
from dpstream.models.public import export_model, load_model, public_model
from dpstream.models.windows.window_exchange import WindowEnsemble
from dpstream.stream import load_abalone, load_adult
from dpstream.stream.http.api import PredictAPI, SnapshotPublisher
from dpstream.stream.metrics import MetricsServer
from dpstream.stream.runner import Runner

warnings.simplefilter("ignore")   # (small streams on purpose)

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]
ADULT = load_adult("train")
TOKEN = "correct horse battery staple"


@pytest.fixture(scope="module")
def classifier():
    model = SGBDTClassifier(schema=ADULT.schema, epsilon=1.0, seed=0)
    model.learn_many(ADULT.X[:2500], ADULT.y[:2500])
    return model


@contextlib.contextmanager
def _server(model=None, *, publisher=None, **options):
    """A predictions server on a free loopback port for ``model``'s public model."""
    publisher = publisher or SnapshotPublisher(refresh=0)
    if model is not None:
        publisher.publish(model, force=True)
    server = MetricsServer(None, api=PredictAPI(publisher, **options), stale_after=None)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.close()


def _call(url: str, body=None, *, method: str = "POST", token: str | None = None,
          raw: bool = False, timeout: float = 30):
    """(status, parsed JSON body or bytes) of one request; an HTTP error is a status too."""
    data = body if raw or body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text, ctype = r.status, r.read(), r.headers["Content-Type"]
    except urllib.error.HTTPError as e:
        status, text, ctype = e.code, e.read(), e.headers["Content-Type"]
    return status, (json.loads(text) if ctype == "application/json" else text)


def _keyed(proba: dict) -> dict:
    """A probability dict as the endpoint keys it (classes as JSON spells them)."""
    return {c if isinstance(c, str) else json.dumps(c): float(p) for c, p in proba.items()}


def _frame_rows(frame) -> list[dict]:
    return [{(c if isinstance(c, str) else json.dumps(c)): float(frame[c].iloc[i])
             for c in frame.columns} for i in range(len(frame))]


def test_one_record_and_a_batch_answer_as_the_public_and_the_live_model(classifier):
    public = load_model(public_model(classifier))
    X = ADULT.X[3000:3200]
    with _server(classifier) as url:
        status, one = _call(url + "/predict", X[0])
        assert status == 200
        assert one["predictions"] == [public.predict_one(X[0])] == [classifier.predict_one(X[0])]
        assert one["probabilities"] == [_keyed(public.predict_proba_one(X[0]))] \
            == [_keyed(classifier.predict_proba_one(X[0]))]   # bit for bit, through JSON
        assert one["model"] == public_model(classifier)["digest"]
        status, many = _call(url + "/predict", X)
        assert status == 200
        assert many["predictions"] == list(public.predict_many(X)) \
            == list(classifier.predict_many(X))
        assert many["probabilities"] == _frame_rows(public.predict_proba_many(X)) \
            == _frame_rows(classifier.predict_proba_many(X))
        status, none = _call(url + "/predict", [])
        assert (status, none["predictions"], none["probabilities"]) == (200, [], [])
        status, model = _call(url + "/model", method="GET")
        assert status == 200 and model == public_model(classifier)


@pytest.mark.parametrize("cls", [RDTClassifier, MedianForestClassifier],
                         ids=lambda c: c.__name__)
def test_a_window_forest_and_a_members_union_answer_as_their_public_models(cls):
    members = [cls(schema=ADULT.schema, epsilon=1.0, seed=s, window_size=400, max_windows=None)
               for s in (1, 2)]
    for i in range(2000):
        members[i % 2].learn_one(ADULT.X[i], ADULT.y[i])
    union, other = WindowEnsemble(members[0], "a"), WindowEnsemble(members[1], "b")
    union.local_updates()
    for key, state in other.local_updates().items():
        union.adopt(key, state)
    X = ADULT.X[3000:3100]
    for live in (members[0], union):
        public = load_model(public_model(live))
        with _server(live) as url:
            status, one = _call(url + "/predict", X[0])
            assert status == 200 and one["predictions"] == [live.predict_one(X[0])]
            assert one["probabilities"] == [_keyed(live.predict_proba_one(X[0]))]
            status, many = _call(url + "/predict", X)
            assert many["predictions"] == list(public.predict_many(X)) \
                == list(live.predict_many(X))
            assert many["probabilities"] == _frame_rows(public.predict_proba_many(X))
            status, model = _call(url + "/model", method="GET")
            assert model["combine"] == ("union" if live is union else "model")


def test_a_regressor_answers_predictions_without_probabilities():
    data = load_abalone()
    model = SGBDTRegressor(schema=data.schema, epsilon=1.0, seed=2)
    model.learn_many(data.X[:1500], data.y[:1500])
    X = data.X[2000:2050]
    with _server(model) as url:
        status, out = _call(url + "/predict", X)
    assert status == 200 and "probabilities" not in out
    assert out["predictions"] == [float(v) for v in model.predict_many(X)]


def test_a_bad_record_is_refused_with_its_index_and_field(classifier):
    X = ADULT.X[:5]
    with _server(classifier) as url:
        bad = [*X[:3], {**X[3], "workclass": "Robot"}, X[4]]
        status, out = _call(url + "/predict", bad)
        assert status == 400 and (out["record"], out["field"]) == (3, "workclass")
        assert out["error"].startswith("record 3: workclass: 'Robot' is not one of the declared")
        status, out = _call(url + "/predict", {"age": "old"})
        assert status == 400 and (out["record"], out["field"]) == (0, "age")
        assert "expected a number" in out["error"]
        status, out = _call(url + "/predict", [X[0], [1, 2]])
        assert status == 400 and out["record"] == 1 and "JSON object" in out["error"]
        status, out = _call(url + "/predict", "a string")
        assert status == 400 and "list of them" in out["error"]
        status, out = _call(url + "/predict", b"{not json", raw=True)
        assert status == 400 and out["error"].startswith("the body is not JSON")
        status, out = _call(url + "/predict", b"\xff\xfe\x00", raw=True)
        assert status == 400
        assert _call(url + "/predict", X[0])[0] == 200   # the server is unharmed


def test_oversized_bodies_and_batches_get_413_without_the_body_being_read(classifier):
    with _server(classifier, max_bytes=4000, max_records=5) as url:
        port = int(url.rsplit(":", 1)[1])
        # a declared gigabyte: the answer comes before (and without) any body byte
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.putrequest("POST", "/predict")
        conn.putheader("Content-Length", str(10**9))
        conn.endheaders()
        reply = conn.getresponse()
        assert reply.status == 413 and json.loads(reply.read())["limit"] == 4000
        assert reply.getheader("Connection") == "close"
        conn.close()
        # a body a little over the limit, sent whole: the client reads the 413
        status, out = _call(url + "/predict", [ADULT.X[0]] * 40)
        assert status == 413 and "more than this endpoint takes" in out["error"]
        status, out = _call(url + "/predict", ADULT.X[:6])   # under 4000 bytes, 6 records
        assert status == 413 and out["limit"] == 5
        assert _call(url + "/predict", ADULT.X[:5])[0] == 200


def test_methods_paths_and_lengths(classifier):
    with _server(classifier) as url:
        status, out = _call(url + "/predict", method="GET")
        assert status == 405 and out["error"] == "/predict answers POST only"
        assert _call(url + "/model", {"a": 1})[0] == 405
        assert _call(url + "/nowhere", method="GET")[0] == 404
        assert _call(url + "/metrics", method="GET")[0] == 404   # serve-model: no /metrics
        status, out = _call(url + "/healthz", method="GET")
        assert (status, out) == (200, {"ok": True})
        conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=10)
        conn.putrequest("POST", "/predict")   # no Content-Length
        conn.endheaders()
        assert conn.getresponse().status == 411
        conn.close()


def test_a_token_guards_predict_and_model_but_not_health(classifier):
    with _server(classifier, token=TOKEN) as url:
        for path, body, method in (("/predict", ADULT.X[0], "POST"), ("/model", None, "GET")):
            status, out = _call(url + path, body, method=method)
            assert status == 401 and "Bearer" in out["error"]
            assert _call(url + path, body, method=method, token=TOKEN[:-1] + "X")[0] == 401
            assert _call(url + path, body, method=method, token=TOKEN)[0] == 200
        req = urllib.request.Request(url + "/predict", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert info.value.headers["WWW-Authenticate"] == 'Bearer realm="dpstream"'
        assert _call(url + "/healthz", method="GET")[0] == 200   # scrapers need no token
    with pytest.raises(ValueError, match="empty"):
        PredictAPI(SnapshotPublisher(), token="")


def test_a_slot_rests_after_its_work_and_a_saturated_endpoint_answers_503(classifier):
    publisher = SnapshotPublisher()
    publisher.publish(classifier, force=True)
    api = PredictAPI(publisher, concurrency=1, share=1e-4)   # rests 9,999 times its work
    server = MetricsServer(None, api=api, stale_after=None)
    url = f"http://127.0.0.1:{server.port}"
    try:
        assert _call(url + "/predict", ADULT.X[:100])[0] == 200
        assert not api.slots.acquire(blocking=False)   # answered, and resting
        t0 = time.monotonic()
        status, out = _call(url + "/predict", ADULT.X[0])
        assert status == 503 and out["error"].startswith("too many predictions at once")
        assert time.monotonic() - t0 >= 0.45           # after a short wait for the slot
    finally:
        server.close()
    with pytest.raises(ValueError, match="share"):
        PredictAPI(publisher, share=0)


class _NoExport:
    """A model the public format does not cover (yet): its export raises ``TypeError``."""

    def privacy_report(self) -> dict:
        return {"epsilon": 1.0}


def test_a_model_without_a_public_format_gets_501_and_none_yet_503():
    publisher = SnapshotPublisher()
    with _server(publisher=publisher) as url:
        status, out = _call(url + "/model", method="GET")
        assert status == 503 and out["error"].startswith("no model yet")
        assert publisher.publish(_NoExport(), force=True) is False
        status, out = _call(url + "/predict", ADULT.X[0])
        assert status == 501 and "_NoExport cannot be exported" in out["error"]
        assert _call(url + "/model", method="GET")[0] == 501


def test_a_snapshot_is_rebuilt_only_when_due_and_asked(classifier):
    publisher = SnapshotPublisher(refresh=3600)
    assert publisher.publish(classifier, force=True) and publisher.rebuilds == 1
    publisher.current()                       # asked, but not due
    assert publisher.publish(classifier) is False and publisher.rebuilds == 1
    publisher.refresh = 0
    publisher.wanted = False                  # due, not asked: nothing exported
    assert publisher.publish(object()) is False and publisher.unavailable is None
    publisher.current()                       # due and asked, the same release: kept
    assert publisher.publish(classifier) is False and publisher.rebuilds == 1


def _messages(lo: int, hi: int) -> list[bytes]:
    return [json.dumps({"id": i, "x": ADULT.X[i], "y": ADULT.y[i]}).encode()
            for i in range(lo, hi)]


def test_eight_clients_while_the_runner_trains_get_valid_answers(tmp_path):
    """The main thread trains and checkpoints; every answer is exactly the prediction of the
    snapshot it names, each snapshot being a checkpointed state of the live model."""
    store = CheckpointStore(tmp_path / "ck")
    runner = Runner.create("sgbdt", ADULT.schema, store=store, epsilon=1.0, seed=0,
                           params={"round_size": 200})
    publisher = SnapshotPublisher(refresh=0)
    publisher.follow(runner)
    snapshots = {publisher.snapshot.digest: publisher.snapshot}
    answers, failures, stop = [], [], threading.Event()

    def client(k: int) -> None:
        rng = random.Random(k)
        while not stop.is_set():
            n = rng.choice([1, 10])
            idx = [rng.randrange(20000, 30000) for _ in range(n)]
            body = ADULT.X[idx[0]] if n == 1 and k % 2 else [ADULT.X[i] for i in idx]
            try:
                status, out = _call(url + "/predict", body)
            except Exception as exc:   # a reset connection would land here
                failures.append(repr(exc))
                continue
            if status != 200:
                failures.append((status, out))
            else:
                answers.append((idx, isinstance(body, dict), out))

    with _server(publisher=publisher, concurrency=4) as url:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        try:
            offset = 0
            for lo in range(0, 6000, 500):
                runner.process_many([SourceRecord(raw, "t:0", offset + j)
                                     for j, raw in enumerate(_messages(lo, lo + 500))])
                offset += 500
                runner.checkpoint()
                snapshots[publisher.snapshot.digest] = publisher.snapshot
        finally:
            stop.set()
            for t in threads:
                t.join(30)
    store.close()
    assert not failures, failures[:5]
    assert len(answers) > 50 and len({out["model"] for _, _, out in answers}) > 3
    for idx, single, out in answers:
        model = snapshots[out["model"]].model
        X = [ADULT.X[i] for i in idx]
        if single:
            assert out["predictions"] == [model.predict_one(X[0])]
            assert out["probabilities"] == [_keyed(model.predict_proba_one(X[0]))]
        else:
            assert out["predictions"] == list(model.predict_many(X))
            assert out["probabilities"] == _frame_rows(model.predict_proba_many(X))
    # the last snapshot is the live model's release as checkpointed: its predictions
    live = load_model(public_model(runner.model))
    assert publisher.snapshot.digest == public_model(runner.model)["digest"]
    X = ADULT.X[40000:40100]
    assert list(live.predict_many(X)) == list(runner.model.predict_many(X))


def test_serve_model_serves_an_exported_file_until_sigterm(classifier, tmp_path):
    path = tmp_path / "model.json"
    export_model(classifier, path)
    proc = subprocess.Popen([*DPSTREAM, "serve-model", str(path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DPSTREAM_HTTP_TOKEN": TOKEN})
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {path} (SGBDTClassifier, "), (line, proc.stderr.read())
        assert "(bearer token required)" in line
        url = re.search(r" on (http://127\.0\.0\.1:\d+): POST /predict", line).group(1)
        public = load_model(str(path))
        X = ADULT.X[5000:5020]
        status, out = _call(url + "/predict", X, token=TOKEN)
        assert status == 200 and out["predictions"] == list(public.predict_many(X))
        assert _call(url + "/predict", X)[0] == 401
        status, model = _call(url + "/model", method="GET", token=TOKEN)
        assert model == json.loads(path.read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stdout.read().strip() == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    bad = subprocess.run([*DPSTREAM, "serve-model", str(tmp_path / "absent.json")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "absent.json" in bad.stderr


@pytest.mark.kafka
def test_serve_answers_predict_while_it_trains(tmp_path):
    from dpstream.connectors.local_broker import LocalBroker, free_port

    n = 20000
    schema = tmp_path / "schema.json"
    ADULT.schema.dump(schema)
    port = free_port()
    with LocalBroker() as broker:
        broker.create_topic("records")
        broker.produce("records", _messages(0, n))
        log = open(tmp_path / "serve.log", "wb")
        proc = subprocess.Popen(
            [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records",
             "--group", "dp", "--schema", str(schema), "--epsilon", "1.0", "--checkpoint-dir",
             str(tmp_path / "ck"), "--metrics-port", str(port), "--checkpoint-interval", "0.5",
             "--seed", "0", "--set", "round_size=200", "--http-predict", "--http-refresh",
             "0.2"], stdout=log, stderr=log, env={**os.environ, "DPSTREAM_HTTP_TOKEN": TOKEN})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline, seen = time.monotonic() + 120, []
            X = ADULT.X[30000:30050]
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    status, model = _call(url + "/model", method="GET", token=TOKEN)
                    _, out = _call(url + "/predict", X, token=TOKEN)
                except (urllib.error.URLError, ConnectionError):
                    time.sleep(0.2)   # not listening yet
                    continue
                if status == 200 and out["model"] == model["digest"]:
                    public = load_model(model)
                    assert out["predictions"] == list(public.predict_many(X))
                    seen.append(model["trees"]["n_trees"])
                metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read()
                done = [float(line.split()[-1]) for line in metrics.decode().splitlines()
                        if line.startswith('dpstream_records_total{outcome="seen"}')]
                if done and done[0] >= n:
                    break
                time.sleep(0.1)
            log_text = (tmp_path / "serve.log").read_text(errors="replace")
            assert len(set(seen)) >= 3 and max(seen) > 0, (seen, log_text[-3000:])
            assert _call(url + "/predict", X)[0] == 401                # the token is required
            assert _call(url + "/healthz", method="GET")[0] == 200     # health is open
            status, page = _call(url + "/", method="GET")             # the status page too
            assert status == 200 and b"Privacy budget" in page and b"<svg" in page
            assert "HTTP predictions on /predict and /model (bearer token required)" in log_text
            assert TOKEN not in log_text
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
            log.close()
