"""What the service publishes (issue 47, items 3 and 4): ``/metrics``, ``dpstream status``
and ``dpstream run``'s report carry only DP releases and functions of public quantities by
default; the exact functions of private data (records learned, dead letters, duplicates,
clipped values, S-GBDT's per-record Rényi spend, records holding budget, the open window's
records) are for the data curator, behind ``--curator-metrics`` / ``--curator``.

The neighbour tests are the attacks of the issue: the same stream with and without one added
record (an out-of-domain value, a top-range label, a malformed message), the same seed. On
the old code the default read-outs differed deterministically (``dpstream_clipped_values``
0 -> 1, the maximum spend fraction, the dead-letter count); now they have the same series
and keys and the same values, except the arrival count and the offsets (public).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from paths import leaf_paths
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from schedule import sgbdt_rounds

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.stream import ABALONE_SCHEMA, ADULT_SCHEMA, load_abalone, load_adult
from dpstream.stream.cli import main as cli_main
from dpstream.stream.metrics import (
    CURATOR_REPORT_KEYS,
    CURATOR_SERIES,
    CURATOR_SUMMARY_KEYS,
    PUBLIC_SERIES,
    MetricsServer,
    ServiceCollector,
    public_report,
)
from dpstream.stream.runner import Runner
from dpstream.stream.service import ServeSettings, serve, status_command

N = 300
#: (S-GBDT without its young phase, whose rounds come with each of the first arrivals: at
#: N and N + 1 messages they differ by design, a function of the public arrival count;
#: test_the_young_phase_publishes_a_function_of_the_arrival_count checks that one)
PARAMS = {"sgbdt": {"round_size": 50, "warmup_rounds": 0},
          "median-forest": {"window_size": 100, "n_trees": 4, "min_tree_records": None}}
#: the curator-only series the attacks of the issue read
ATTACKED = ('dpstream_records_total{outcome="learned"}',
            'dpstream_records_total{outcome="dead_letters"}',
            'dpstream_records_total{outcome="duplicates"}',
            "dpstream_clipped_values_total", "dpstream_record_budget_spent_fraction",
            "dpstream_active_records", "dpstream_window_pending_records")
#: public series whose value may differ between neighbours: arrivals and wall time
ARRIVALS = ('dpstream_records_total{outcome="seen"}', "dpstream_last_checkpoint_age_seconds",
            "dpstream_broker_last_contact_age_seconds",
            "dpstream_union_newest_window_age_seconds")


def _adult(extra: dict | None = None) -> list[dict]:
    X, y, _ = load_adult("train")
    values = [{"id": i, "x": X[i], "y": y[i]} for i in range(N)]
    if extra is not None:
        values.insert(N // 2, extra)
    return values


def _abalone(extra: dict | None = None) -> list[dict]:
    X, y, _ = load_abalone()
    values = [{"id": i, "x": X[i], "y": y[i]} for i in range(N)]
    if extra is not None:
        values.insert(N // 2, extra)
    return values


def _runner(directory: Path, values: list[dict], *, model: str = "sgbdt",
            schema=ADULT_SCHEMA) -> Runner:
    runner = Runner.create(model, schema, store=CheckpointStore(directory), epsilon=1.0, seed=0,
                           params=PARAMS[model])
    runner.process_many([SourceRecord(v, "t:0", i) for i, v in enumerate(values)])
    runner.checkpoint()
    return runner


def _key(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}" if inner else name


def _scrape_text(text: str) -> dict[str, float]:
    """Every exported series (sample name and labels) and its value."""
    return {_key(s.name, s.labels): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _scrape(collector: ServiceCollector) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    return _scrape_text(generate_latest(registry).decode())


def _listed(series: str, allow: frozenset[str]) -> bool:
    """``series`` (as :func:`_key` spells it) is in ``allow`` by name or by one label."""
    name, _, labels = series.partition("{")
    return name in allow or any(f"{name}{{{pair}}}" in allow
                                for pair in labels.rstrip("}").split(",") if pair)


def _everything(runner: Runner, *, curator: bool) -> ServiceCollector:
    """A collector with every optional read-out wired (lag, board, group, a member's union,
    the broker's last answer, the newest window of another member)."""
    union = {"epsilon": 1.0, "windows_kept": 2, "members": ["a", "b"],
             "records_in_windows": 200, "local": {"member_share": 0.5}}
    return ServiceCollector(runner, lag=lambda: 3, board=lambda: {"unsigned": 1},
                            group_shared=lambda: False, ensemble=lambda: union,
                            curator=curator, contact=lambda: time.time() - 2.0,
                            union_published=lambda: time.time() - 60.0)


def _status(directory: Path, capsys, *args: str) -> tuple[dict, str]:
    capsys.readouterr()
    assert cli_main(["status", "--checkpoint-dir", str(directory), "--json", *args]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


_paths = leaf_paths


# --------------------------------------------------------------------------- the allow-list
@pytest.mark.parametrize("model", ["sgbdt", "median-forest"])
def test_every_exported_series_is_on_the_allow_list(model, tmp_path):
    values = _adult({"id": "old", "x": {**_adult()[0]["x"], "age": 120}, "y": True})
    values.append({"id": "bad", "x": {"age": "old"}, "y": True})    # a dead letter
    values.append(dict(values[0]))                                  # a duplicate
    runner = _runner(tmp_path, values, model=model)
    public = _scrape(_everything(runner, curator=False))
    whole = _scrape(_everything(runner, curator=True))
    assert public and all(_listed(s, PUBLIC_SERIES) for s in public), sorted(public)
    assert not [s for s in public if _listed(s, CURATOR_SERIES)]
    # the two lists classify everything the collector has, and the curator sees it all
    assert all(_listed(s, PUBLIC_SERIES | CURATOR_SERIES) for s in whole), sorted(whole)
    assert set(public) <= set(whole)
    curator = {s for s in whole if _listed(s, CURATOR_SERIES)}
    expected = {'dpstream_records_total{outcome="learned"}',
                'dpstream_records_total{outcome="dead_letters"}',
                'dpstream_records_total{outcome="duplicates"}', "dpstream_clipped_values_total"}
    if model == "sgbdt":
        expected |= {'dpstream_record_budget_spent_fraction{stat="max"}',
                     "dpstream_active_records"}
    else:
        expected |= {"dpstream_window_pending_records"}
    assert expected <= curator, curator
    assert whole["dpstream_clipped_values_total"] == 1.0
    assert whole['dpstream_records_total{outcome="dead_letters"}'] == 1.0
    assert whole['dpstream_records_total{outcome="duplicates"}'] == 1.0
    runner.store.close()


def test_the_metrics_server_serves_the_public_series_only(tmp_path):
    runner = _runner(tmp_path, _adult())
    servers = {c: MetricsServer(ServiceCollector(runner, curator=c)) for c in (False, True)}
    try:
        scraped = {c: _scrape_text(urllib.request.urlopen(
            f"http://127.0.0.1:{s.port}/metrics", timeout=10).read().decode())
            for c, s in servers.items()}
    finally:
        for s in servers.values():
            s.close()
    assert all(_listed(s, PUBLIC_SERIES) for s in scraped[False]), sorted(scraped[False])
    assert scraped[False]['dpstream_records_total{outcome="seen"}'] == N
    assert scraped[True]['dpstream_records_total{outcome="learned"}'] == N
    assert not [s for s in scraped[False] if _listed(s, CURATOR_SERIES)]
    assert {s for s in scraped[True] if _listed(s, CURATOR_SERIES)}
    runner.store.close()


def test_public_report_drops_every_per_record_statistic(tmp_path):
    runner = _runner(tmp_path, _adult())
    report = runner.model.privacy_report()
    assert {"spend_fraction", "spend_by_age", "records_active", "records_exhausted",
            "init_score_records"} <= set(report)     # S-GBDT's curator statistics ...
    public = public_report(report)
    assert not set(_paths_keys(public)) & CURATOR_REPORT_KEYS   # ... gone, at any depth
    for key in ("epsilon", "epsilon_budget", "delta", "trees", "rounds", "alpha", "sigma"):
        assert public[key] == report[key]
    runner.store.close()


def _paths_keys(value) -> list[str]:
    return [part for path in _paths(value) for part in path.split("/") if part]


# --------------------------------------------------------------------------- the attacks
NEIGHBOURS = {
    # one out-of-domain value (age 120 > 90): clipped 0 -> 1
    "adult-age-120": (_adult, ADULT_SCHEMA,
                      lambda: {"id": "old", "x": {**_adult()[0]["x"], "age": 120}, "y": True}),
    # one record with a top-range label (rings 29) and a clipped height: its gradient moves
    # S-GBDT's maximum spend fraction and the clipped count
    "abalone-top-label": (_abalone, ABALONE_SCHEMA,
                          lambda: {"id": "top", "x": {**_abalone()[0]["x"], "height": 5.0},
                                   "y": 29.0}),
    # one malformed message: a dead letter (content-based), learned unchanged
    "adult-dead-letter": (_adult, ADULT_SCHEMA,
                          lambda: {"id": "bad", "x": {"age": "old"}, "y": True}),
}


@pytest.mark.parametrize("case", sorted(NEIGHBOURS))
def test_neighbouring_streams_publish_the_same_series_and_values(case, tmp_path, capsys):
    make, schema, extra = NEIGHBOURS[case]
    runners = {"without": _runner(tmp_path / "without", make(), schema=schema),
               "with": _runner(tmp_path / "with", make(extra()), schema=schema)}
    public = {k: _scrape(ServiceCollector(r)) for k, r in runners.items()}
    whole = {k: _scrape(ServiceCollector(r, curator=True)) for k, r in runners.items()}
    for r in runners.values():
        r.store.close()
    # the default /metrics: the same series, none of the attacked ones, the same values
    # except the arrival count (public: offsets) and the checkpoint's age
    assert set(public["without"]) == set(public["with"])
    assert not [s for s in public["with"] if s.partition("{")[0] in ATTACKED or s in ATTACKED]
    assert public["with"]['dpstream_records_total{outcome="seen"}'] == N + 1
    differ = {s for s in public["with"] if s not in ARRIVALS
              and public["with"][s] != public["without"][s]}
    assert not differ, differ
    # control: the curator's view does tell the neighbours apart (the attack of the issue)
    told = {s for s in whole["with"] if s not in ARRIVALS
            and whole["with"][s] != whole["without"].get(s)}
    assert told and all(_listed(s, CURATOR_SERIES) for s in told), told
    # the default `dpstream status --json`: the same keys, no curator key, the same values
    # except the arrival count, the offsets and the checkpoint's place and age
    status = {k: _status(tmp_path / k, capsys)[0] for k in runners}
    for out in status.values():
        assert not set(out) & CURATOR_SUMMARY_KEYS
        assert not set(_paths_keys(out["privacy"])) & CURATOR_REPORT_KEYS
        assert {"records_seen", "offsets", "privacy"} <= set(out) and "unlabeled" not in out
    flat = {k: _paths(v) for k, v in status.items()}
    assert set(flat["without"]) == set(flat["with"])
    moving = {"/records_seen", "/offsets/t:0", "/checkpoint_dir", "/checkpoint_age_s"}
    differ = {p for p in flat["with"] if p not in moving and flat["with"][p] != flat["without"][p]}
    assert not differ, differ
    assert status["with"]["records_seen"] == N + 1


def test_the_young_phase_publishes_a_function_of_the_arrival_count(tmp_path):
    """S-GBDT's young phase (a round every ceil(a / warmup_rounds) arrivals, issue 64), at its
    defaults: two streams of as many messages, one record replaced by an out-of-domain one or
    by a malformed message, publish the same series and values, trees and rounds included."""
    base = _adult()
    X, _, _ = load_adult("train")
    swaps = {"clipped": {"id": "old", "x": {**X[0], "age": 120}, "y": True},
             "dead-letter": {"id": "bad", "x": {"age": "old"}, "y": True}}
    runners = {"base": Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(tmp_path / "b"),
                                     epsilon=1.0, seed=0)}
    for name, swap in swaps.items():
        runners[name] = Runner.create("sgbdt", ADULT_SCHEMA,
                                      store=CheckpointStore(tmp_path / name), epsilon=1.0, seed=0)
        runners[name].process_many([SourceRecord(v, "t:0", i) for i, v in
                                    enumerate(base[:N // 2] + [swap] + base[N // 2 + 1:])])
    runners["base"].process_many([SourceRecord(v, "t:0", i) for i, v in enumerate(base)])
    for r in runners.values():
        r.checkpoint()
    public = {k: _scrape(ServiceCollector(r)) for k, r in runners.items()}
    for r in runners.values():
        r.store.close()
    assert public["base"]["dpstream_trees"] > N // 2   # young: rounds come with the arrivals
    for name in swaps:
        assert set(public[name]) == set(public["base"])
        differ = {s for s in public[name] if s not in ARRIVALS
                  and public[name][s] != public["base"][s]}
        assert not differ, (name, differ)


# --------------------------------------------------------------------------- the opt-ins
@pytest.mark.parametrize("curator", [False, True])
def test_run_report_is_public_unless_asked(curator, tmp_path, monkeypatch, capsys):
    """``dpstream run`` (on 600 Adult records here): report.json's privacy section has no
    per-record budget statistic unless ``--curator``, which warns."""
    import dpstream.stream.run as run_module

    X, y, schema = load_adult("train")
    monkeypatch.setattr(run_module, "load_adult", lambda split: (X[:600], y[:600], schema))
    args = ["run", "--out", str(tmp_path), "--seed", "0", "--json"]
    assert cli_main(args + (["--curator"] if curator else [])) == 0
    err = capsys.readouterr().err
    privacy = json.loads((tmp_path / "report.json").read_text())["privacy"]
    assert privacy["rounds"] == sgbdt_rounds(600) and privacy["epsilon"] <= 0.5
    assert (tmp_path / "report.png").exists()
    if curator:
        assert "spend_by_age" in privacy and privacy["records_seen"] == 600
        assert "not differentially private" in err
    else:
        assert not set(_paths_keys(privacy)) & CURATOR_REPORT_KEYS
        assert "warning" not in err


def test_status_curator_shows_everything_and_warns(tmp_path, capsys):
    values = _adult({"id": "bad", "x": {"age": "old"}, "y": True})
    _runner(tmp_path, values).store.close()
    public, err = _status(tmp_path, capsys)
    assert err == "" and "records_learned" not in public and "dead_letters" not in public
    assert "spend_fraction" not in public["privacy"] and public["records_seen"] == N + 1
    whole, err = _status(tmp_path, capsys, "--curator")
    assert "warning" in err and "not differentially private" in err
    assert whole["records_learned"] == N and whole["dead_letters"] == 1
    # (the dead letter takes its place in the rounds' message schedule: one record waits)
    assert whole["privacy"]["records_active"] + whole["privacy"]["records_pending"] == N
    assert "spend_by_age" in whole["privacy"]
    # the text read-out: the public counts only, unless asked
    assert status_command(str(tmp_path)) == 0
    text = capsys.readouterr()
    assert "seen 301\n" in text.out and "learned" not in text.out and "unlabeled" not in text.out
    assert "records hold budget" not in text.out and text.err == ""
    assert status_command(str(tmp_path), curator=True) == 0
    text = capsys.readouterr()
    assert "learned 300, dead letters 1, duplicates 0, unlabeled 0" in text.out
    assert f"{N - 1} records hold budget" in text.out and "not differentially private" in text.err


def test_curator_metrics_setting_and_environment(monkeypatch):
    base = {"bootstrap": "127.0.0.1:9", "topic": "t", "schema_path": "s.json", "epsilon": 1.0,
            "checkpoint_dir": "ck"}
    assert ServeSettings(**base).curator_metrics is False
    monkeypatch.setenv("DPSTREAM_CURATOR_METRICS", "true")
    assert ServeSettings(**base).curator_metrics is True


@pytest.mark.parametrize("curator", [False, True])
def test_serve_warns_once_and_exports_the_curator_series_only_when_asked(curator, tmp_path,
                                                                         caplog):
    """``serve`` itself (no broker: it waits for one, with /metrics up): the curator's
    series are on /metrics only with ``curator_metrics``, which logs one warning."""
    from dpstream.connectors.local_broker import free_port

    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    settings = ServeSettings(bootstrap=f"127.0.0.1:{free_port()}", topic="t",
                             schema_path=str(schema), epsilon=1.0,
                             checkpoint_dir=str(tmp_path / "ck"), metrics_port=0,
                             warm_up=False, curator_metrics=curator)
    _runner(tmp_path / "ck", _adult()).store.close()   # a checkpoint to resume: 300 records
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="dpstream.service")
    worker = threading.Thread(target=serve, args=(settings,), kwargs={"stop": stop})
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while "metrics on http" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/", caplog.text)[1])
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    finally:
        stop.set()
        worker.join(60)
    assert not worker.is_alive()
    scraped = _scrape_text(text.decode())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                and "curator" in r.getMessage()]
    assert scraped['dpstream_records_total{outcome="seen"}'] == N
    if curator:
        assert len(warnings) == 1
        message = warnings[0].getMessage()
        assert "exact functions of private data" in message
        assert "not differentially private" in message and "data curator" in message
        assert scraped['dpstream_records_total{outcome="learned"}'] == N
        assert "dpstream_active_records" in scraped
    else:
        assert warnings == []
        assert all(_listed(s, PUBLIC_SERIES) for s in scraped), sorted(scraped)


def _trees_series(collector: ServiceCollector) -> float:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return float(re.search(r"^dpstream_trees (\S+)$", text, re.M).group(1))


def test_public_metrics_show_the_model_as_of_the_last_checkpoint(tmp_path):
    """Rounds trained since the last checkpoint (a restart could redraw them) stay out of
    the public read-outs until a checkpoint covers them; the curator sees them live."""
    X, y, _ = load_adult("train")
    runner = Runner.create("sgbdt", ADULT_SCHEMA, store=CheckpointStore(tmp_path), epsilon=1.0,
                           seed=0, params={"round_size": 50})
    runner.process_many([SourceRecord({"id": i, "x": X[i], "y": y[i]}, "t:0", i)
                         for i in range(400)])           # no predictions sink: no checkpoint
    live = runner.model.privacy_report()["trees"]
    assert live > 0 and runner.counters["checkpoints"] == 0
    assert _trees_series(ServiceCollector(runner)) == 0
    assert _trees_series(ServiceCollector(runner, curator=True)) == live
    runner.checkpoint()
    assert _trees_series(ServiceCollector(runner)) == live


def test_a_scraper_that_gives_up_leaves_no_traceback(capfd):
    """A scrape slower than the scraper's timeout (a long training batch holds the runner):
    the scraper hangs up, and the server's write to the closed socket is not an error in the
    service's log."""
    import socket
    import struct
    import time

    class Slow:
        def collect(self):
            time.sleep(0.5)
            return []

    server = MetricsServer(Slow())
    try:
        for _ in range(2):
            client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            # hang up at once, with a reset (linger 0): the server's writes then fail
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
        time.sleep(1.5)
        page = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10)
        assert page.status == 200    # still serving
    finally:
        server.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Broken pipe" not in err, err
