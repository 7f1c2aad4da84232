"""The status page (issue 68): it renders in a real headless Chromium without console errors
(the screenshot in the docs comes from here), it shows public values and DP releases only
(neighbouring streams give the same page but for DP values and arrivals), and ``dpstream status
--html`` writes a checkpoint's page."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from paths import leaf_paths

from dpstream.connectors import CheckpointStore
from dpstream.connectors.records import SourceRecord
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.http.page import StatusPage
from dpstream.stream.metrics import MetricsServer, ServiceCollector
from dpstream.stream.runner import Runner

CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(b)), None)
NO_CHROMIUM = ("no headless Chromium (Debian: apt-get install chromium; `make test` with CI=true "
               "installs it)")
DOCS_SHOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "status_page.png"
N = 3000
X, Y, _ = load_adult("train")


def _runner(directory: Path, extra: dict | None = None, *, model: str = "sgbdt") -> Runner:
    return Runner.create(model, ADULT_SCHEMA, store=CheckpointStore(directory), epsilon=1.0,
                         seed=0, params={"n_trees": 20} if model == "sgbdt" else {})


def _stream(extra: dict | None = None) -> list[dict]:
    values = [{"id": i, "x": X[i], "y": Y[i]} for i in range(N)]
    if extra is not None:
        values.insert(N // 2, extra)
    return values


def _feed(runner: Runner, page: StatusPage, values: list[dict], steps: int = 6) -> None:
    """Learn ``values`` in ``steps`` parts of ``N // steps`` (the last takes the rest), a
    checkpoint and a page sample (a minute apart on a fixed clock) after each."""
    size = N // steps
    for k in range(steps):
        part = values[k * size:(k + 1) * size if k < steps - 1 else len(values)]
        runner.process_many([SourceRecord(v, "t:0", k * size + i) for i, v in enumerate(part)])
        runner.checkpoint()
        page.sample(1_700_000_000.0 + 60.0 * k)


def _chromium(url: str, shot: Path) -> tuple[str, list[str]]:
    """(the rendered DOM, the console messages) of ``url`` in headless Chromium, and its
    screenshot at ``shot``."""
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--enable-logging=stderr", "--v=0", "--window-size=1240,1500",
             f"--user-data-dir={tempfile.mkdtemp()}"]
    subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, timeout=120)
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120)
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    return dom.stdout, console


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_page_renders_in_headless_chromium_without_console_errors(tmp_path):
    runner = _runner(tmp_path / "ck")
    collector = ServiceCollector(runner, lag=lambda: 0)
    page = StatusPage(runner, collector, interval=None, source="dpstream serve, topic adult")
    _feed(runner, page, _stream(), steps=8)
    server = MetricsServer(collector, api=[page])
    try:
        shot = tmp_path / "page.png"
        dom, console = _chromium(f"http://127.0.0.1:{server.port}/", shot)
    finally:
        server.close()
        page.close()
        runner.store.close()
    assert console == [], console
    assert "Privacy budget" in dom and dom.count("<svg") == 6 and "<script" not in dom
    assert "Released windowed accuracy" in dom and "What this page shows" in dom
    assert shot.stat().st_size > 20_000   # a picture, not a blank page
    if os.environ.get("DPSTREAM_UPDATE_SCREENSHOT"):   # the docs' picture (docs/service.md)
        shutil.copy(shot, DOCS_SHOT)


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_console_check_catches_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script>x</body></html>")
    _, console = _chromium(bad.as_uri(), tmp_path / "bad.png")
    assert console and "undefinedFunction" in console[0]


def test_the_page_answers_get_only_and_never_the_private_state(tmp_path):
    import urllib.error
    import urllib.request

    runner = _runner(tmp_path / "ck")
    collector = ServiceCollector(runner, curator=True)   # even a curator's /metrics ...
    page = StatusPage(runner, collector, interval=None)
    _feed(runner, page, _stream()[:1200], steps=2)
    series = {k for _, values in page.history.samples() for k in values}
    assert 'dpstream_records_total{outcome="seen"}' in series
    assert not [s for s in series if "learned" in s or "dead_letters" in s
                or "clipped" in s or "budget_spent" in s]   # ... gives the page public ones
    server = MetricsServer(collector, api=[page])
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=30) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
            assert 'http-equiv="refresh"' in r.read().decode()
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}/", data=b"x",
                                     method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 405
    finally:
        server.close()
        runner.store.close()


#: where neighbouring streams' pages may differ: the arrival count and its rate, the
#: checkpoint's age, and the drift signal's DP releases (their values and the drift
#: generations they detected)
MOVING = ('/samples/dpstream_records_total{outcome="seen"}',
          "/samples/dpstream_last_checkpoint_age_seconds", "/info/checkpoint_age_s",
          "/drift/rates", "/drift/changes")


#: public series that follow the arrivals' schedules (a round, a window per so many arrivals)
SCHEDULED = ("dpstream_trees", "dpstream_windows_closed_total")


@pytest.mark.parametrize("model", ["sgbdt", "median-forest"])
def test_neighbouring_streams_show_the_same_page_but_dp_values(model, tmp_path):
    extra = {"id": "old", "x": {**X[0], "age": 120}, "y": True}
    views = {}
    for name, values in (("without", _stream()), ("with", _stream(extra))):
        runner = _runner(tmp_path / name, model=model)
        page = StatusPage(runner, ServiceCollector(runner), interval=None)
        _feed(runner, page, values)
        views[name] = page.view(now=1_700_001_000.0)
        views[name]["samples"] = [{"t": t, **v} for t, v in views[name]["samples"]]
        runner.store.close()
    flat = {k: leaf_paths(v) for k, v in views.items()}
    assert set(flat["with"]) == set(flat["without"]) or model == "sgbdt"
    differ = {p for p in set(flat["with"]) | set(flat["without"])
              if flat["with"].get(p) != flat["without"].get(p)}
    seen = 'dpstream_records_total{outcome="seen"}'
    arrivals = {i for i, (a, b) in enumerate(zip(views["with"]["samples"],
                                                 views["without"]["samples"], strict=True))
                if a[seen] != b[seen]}   # (one more arrival: its schedules may move, public)
    assert arrivals and not [p for p in differ if not re.sub(r"/\d+(?=/|$)", "", p).startswith(
        MOVING) and not (p.startswith("/samples/") and int(p.split("/")[2]) in arrivals
                         and p.split("/")[3] in SCHEDULED)], sorted(differ)
    if model == "sgbdt":   # its drift signal released the windowed loss: DP values that move
        assert views["with"]["drift"]["rates"] and any(p.startswith("/drift/rates")
                                                         for p in differ)


def test_status_html_writes_a_checkpoints_page(tmp_path):
    ck = tmp_path / "ck"
    run = [sys.executable, "-m", "dpstream.stream.cli"]
    subprocess.run([*run, "replay", "--source", "adult", "--epsilon", "1.0", "--seed", "0",
                    "--checkpoint-dir", str(ck), "--json"], check=True, capture_output=True)
    out = subprocess.run([*run, "status", "--checkpoint-dir", str(ck), "--html",
                          str(tmp_path / "status.html")], check=True, capture_output=True,
                         text=True)
    assert "status page" in out.stdout
    html = (tmp_path / "status.html").read_text()
    assert "Released windowed accuracy" in html and "refresh" not in html
    assert "records_learned" not in html and "spend_fraction" not in html
