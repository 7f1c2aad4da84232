"""The Grafana dashboard and the Prometheus alerts of ``deploy/`` (docs/service.md, "Dashboard
and alerts"): every PromQL expression in them reads series that a running ``dpstream serve``
exports on ``/metrics`` and that are public; the dashboard has what a Grafana import needs; the
rules load, pass ``promtool check rules`` and their unit tests (``promtool test rules``); the
two gauges the alerts added (the broker's last answer, the newest window of another member)
move as they say, against a real broker (tansu)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dpstream.connectors import CheckpointStore, SourceRecord
from dpstream.connectors.local_broker import LocalBroker, free_port
from dpstream.stream import ADULT_SCHEMA, load_adult
from dpstream.stream.metrics import PUBLIC_SERIES, ServiceCollector, is_public_series
from dpstream.stream.runner import Runner

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "deploy" / "grafana" / "dpstream.json"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = REPO / "deploy" / "prometheus" / "alerts_test.yml"
SERVICE_DOC = REPO / "docs" / "service.md"
DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]
WINDOWS = {"window_size": 300, "warmup": None, "max_windows": 1000, "n_trees": 3}
#: exported only where their read-out exists: a service without --model-topic (the group
#: check), a party of distributed S-GBDT (the board); the serve test runs a member
CONDITIONAL = {"dpstream_group_shared", "dpstream_board_messages_ignored_total"}
#: labels Prometheus adds to every scraped series
TARGET_LABELS = {"job", "instance"}
PROMTOOL = shutil.which("promtool")
NO_PROMTOOL = ("promtool not installed (Debian: apt-get install prometheus; `make test` with "
               "CI=true installs it)")


# ------------------------------------------------------------------ a PromQL tokenizer
_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+)
  | (?P<number>(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)[a-zA-Z0-9]*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<match>=~|!~|!=|==|<=|>=)
  | (?P<punct>[-+*/%^<>=(){}\[\],@:])
""", re.VERBOSE)
#: keywords that take a label list in parentheses
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
#: binary operators and modifiers spelled as words
_WORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
#: aggregation operators (``sum by (job) (x)``: not followed by a parenthesis)
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                 "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}


def _tokens(expr: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(expr):
        m = _TOKEN.match(expr, at)
        if m is None:
            raise ValueError(f"cannot read {expr[at:at + 20]!r} in {expr!r}")
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
        at = m.end()
    return out


def _unquote(text: str) -> str:
    """A PromQL string's value (a backslash escapes the character after it)."""
    return text[1:-1] if text[0] == "`" else re.sub(r"\\(.)", r"\1", text[1:-1])


def _closing(toks: list[tuple[str, str]], i: int, char: str, expr: str) -> int:
    """The index of the first ``char`` token from ``i`` on."""
    for j in range(i, len(toks)):
        if toks[j][1] == char:
            return j
    raise ValueError(f"no {char!r} closes {expr!r}")


def metric_selectors(expr: str) -> list[tuple[str, dict[str, str]]]:
    """The metric names an expression reads, each with its equality label matchers: the
    identifiers that are not functions or aggregations (followed by ``(``), keywords, label
    names in ``{...}`` or in a ``by``/``without``/``on``/``ignoring``/``group_*`` list; a
    bare ``{__name__="x"}`` names ``x``. Raises ``ValueError`` on what it cannot read.

    >>> metric_selectors('sum by (instance) (rate(a_total{outcome="seen", job=~"$j"}[5m]))')
    [('a_total', {'outcome': 'seen'})]
    """
    toks = _tokens(expr)
    out: list[tuple[str, dict[str, str]]] = []
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else None
        if text == "[":   # a range, a subquery's step or a variable: no names inside
            i = _closing(toks, i, "]", expr) + 1
            continue
        if text == "{":   # label matchers, of the selector just read or of a bare one
            end = _closing(toks, i, "}", expr)
            labels: dict[str, str] = {}
            for j in range(i + 1, end, 4):
                name, op, value = toks[j][1], toks[j + 1][1], toks[j + 2]
                if toks[j][0] != "ident" or op not in ("=", "!=", "=~", "!~") or \
                        value[0] != "string" or toks[j + 3][1] not in (",", "}"):
                    raise ValueError(f"cannot read the matchers of {expr!r}")
                if op == "=":
                    labels[name] = _unquote(value[1])
            previous = toks[i - 1] if i else None
            if previous is not None and out and previous == ("ident", out[-1][0]) \
                    and out[-1][1] == {}:
                out[-1] = (out[-1][0], labels)
            elif "__name__" in labels:
                out.append((labels.pop("__name__"), labels))
            else:
                raise ValueError(f"a selector without a metric name in {expr!r}")
            i = end + 1
            continue
        if kind == "ident":
            word = text.lower()
            if word in _LABEL_LISTS:
                if nxt == "(":
                    i = _closing(toks, i, ")", expr) + 1
                    continue
            elif word in _WORDS or nxt == "(" or (word in _AGGREGATIONS
                                                   and nxt in ("by", "without")):
                pass
            else:
                out.append((text, {}))
        i += 1
    return out


def problems(expr: str, exported: dict[str, list[dict[str, str]]]) -> list[str]:
    """What is wrong with the series ``expr`` reads: a name (``up`` aside) that is not in
    ``exported`` (sample name -> the label sets exported with it), equality matchers that no
    exported sample of it carries, or a series that is not public (``PUBLIC_SERIES``)."""
    out = []
    for name, labels in metric_selectors(expr):
        if name == "up":
            continue
        own = {k: v for k, v in labels.items() if k not in TARGET_LABELS}
        if name not in exported:
            out.append(f"{name} is not exported by dpstream serve")
        elif not any(own.items() <= sample.items() for sample in exported[name]):
            out.append(f"{name}{own} matches no exported sample")
        if not is_public_series(name, own):
            out.append(f"{name}{own} is not a public series")
    return out


# ------------------------------------------------------------------ the files
def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))   # a collapsed row holds its panels
    return out


def _dashboard_exprs() -> list[str]:
    dash = _dashboard()
    exprs = [t["expr"] for p in _panels(dash) for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:   # label_values(SELECTOR, LABEL)
        if var["type"] == "query":
            exprs.append(re.fullmatch(r"label_values\((.*),\s*\w+\)", var["definition"])[1])
    return exprs


def _rules() -> list[dict]:
    yaml = pytest.importorskip("yaml")
    return [r for g in yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
            for r in g["rules"]]


def _alert_exprs() -> list[str]:
    return [r["expr"] for r in _rules()]


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    out, fenced = set(), False
    for line in markdown.splitlines():
        fenced ^= line.startswith("```")
        m = None if fenced else re.match(r"#{1,6} (.+)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m[1].strip().lower().replace("`", ""))
            out.add(slug.replace(" ", "-"))
    return out


# ------------------------------------------------------------------ the tokenizer
@pytest.mark.parametrize("expr, names", [
    ('rate(dpstream_records_total{outcome="seen"}[5m])',
     [("dpstream_records_total", {"outcome": "seen"})]),
    ("sum by (instance, reason) (increase(x_total{job=~\"$job\"}[15m]))", [("x_total", {})]),
    ("sum(increase(x_total[$__rate_interval])) without (reason)", [("x_total", {})]),
    ("a > on (job, instance) group_left (le) b", [("a", {}), ("b", {})]),
    ("a and on(job) b offset 5m or c unless d", [("a", {}), ("b", {}), ("c", {}), ("d", {})]),
    ("a > bool 0.9 * b", [("a", {}), ("b", {})]),
    ('histogram_quantile(0.9, sum by (le) (rate(z_bucket{a="x,y"}[5m:1m])))',
     [("z_bucket", {"a": "x,y"})]),
    ('{__name__="from_name", k!="v"} > Inf', [("from_name", {})]),
    ("deriv(lag[15m]) > 0 and lag > 1e4", [("lag", {}), ("lag", {})]),
    ('label_replace(up, "dst", "$1", "instance", "(.*):.*")', [("up", {})]),
    ("count_values(\"v\", m) # a comment naming not_a_metric", [("m", {})]),
    ("topk(3, m @ end())", [("m", {})]),
])
def test_the_tokenizer_finds_the_metric_names(expr, names):
    assert metric_selectors(expr) == names


@pytest.mark.parametrize("expr", ['m{a="1" b="2"}', "m{a=1}", "m ~ n", 'rate(m{a="1"[5m])',
                                  '{a="1"}'])
def test_the_tokenizer_refuses_what_it_cannot_read(expr):
    with pytest.raises(ValueError):
        metric_selectors(expr)


def test_a_misspelled_or_private_series_is_caught():
    """Negative controls: a typo in a metric name, a label value no sample carries, a curator
    series and a selector that leaves the outcome open all fail the check the files pass."""
    exported = {"dpstream_records_total": [{"outcome": o} for o in ("seen", "learned")],
                "dpstream_epsilon_budget": [{}]}
    assert problems('rate(dpstream_records_total{outcome="seen"}[5m])', exported) == []
    assert problems("dpstream_epsilon_budgett > 1", exported) == [
        "dpstream_epsilon_budgett is not exported by dpstream serve",
        "dpstream_epsilon_budgett{} is not a public series"]
    assert problems('dpstream_records_total{outcome="seeen"}', exported) == [
        "dpstream_records_total{'outcome': 'seeen'} matches no exported sample",
        "dpstream_records_total{'outcome': 'seeen'} is not a public series"]
    assert problems('dpstream_records_total{outcome="learned"}', exported) == [
        "dpstream_records_total{'outcome': 'learned'} is not a public series"]
    assert problems('rate(dpstream_records_total{outcome=~"seen|learned"}[5m])', exported) == [
        "dpstream_records_total{} is not a public series"]
    assert problems("up == 0", exported) == []


# ------------------------------------------------------------------ the dashboard
def test_the_dashboard_is_importable_grafana_json():
    dash = _dashboard()
    assert dash["schemaVersion"] >= 36 and dash["uid"] and dash["title"] and dash["id"] is None
    # an import asks for the Prometheus data source, which the datasource variable starts at
    assert [(i["name"], i["type"], i["pluginId"]) for i in dash["__inputs"]] == [
        ("DS_PROMETHEUS", "datasource", "prometheus")]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["datasource"]["current"]["value"] == "${DS_PROMETHEUS}"
    for name in ("job", "instance"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"]
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    panels = _panels(dash)
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(g) and all(isinstance(g[k], int) for k in "hwxy")
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and p["description"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs), p["title"]
        for t in p["targets"]:
            # every query follows the job and instance the viewer picked
            assert 'job=~"$job"' in t["expr"] and 'instance=~"$instance"' in t["expr"], t
            assert t["datasource"]["uid"] == "${datasource}"
    # the panels of issue 68, one series each at least; no curator-only series at all
    read = {name for e in _dashboard_exprs() for name, _ in metric_selectors(e)}
    assert read == {name.partition("{")[0] for name in PUBLIC_SERIES} - {
        "dpstream_checkpoints_total", "dpstream_union_records"} | {"up"}, read


def test_every_dashboard_and_alert_expression_reads_public_series_only():
    """Before any process runs: each name is declared public (the serve test below checks
    that a running service exports it)."""
    for expr in _dashboard_exprs() + _alert_exprs():
        for name, labels in metric_selectors(expr):
            assert name == "up" or is_public_series(name, labels), (name, expr)


# ------------------------------------------------------------------ the alerts
ALERT_NAMES = {"DpstreamTargetDown", "DpstreamBrokerUnreachable", "DpstreamConsumerLagGrowing",
               "DpstreamCheckpointStale", "DpstreamGroupShared", "DpstreamUnionStale",
               "DpstreamEpsilonOverBudget"}


def test_the_rules_file_has_every_alert_with_its_runbook():
    rules = _rules()
    assert {r["alert"] for r in rules} == ALERT_NAMES and len(rules) == len(ALERT_NAMES)
    anchors = _anchors(SERVICE_DOC.read_text(encoding="utf-8"))
    for r in rules:
        assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]
        assert re.fullmatch(r"\d+[smh]", r["for"]), r["alert"]
        a = r["annotations"]
        assert a["summary"] and a["description"], r["alert"]
        page, _, anchor = a["runbook_url"].partition("#")
        assert page == "docs/service.md" and anchor == r["alert"].lower(), r["alert"]
        assert anchor in anchors, f"docs/service.md has no heading for #{anchor}"


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_promtool_checks_the_rules_and_runs_their_unit_tests():
    check = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0 and f"SUCCESS: {len(ALERT_NAMES)} rules" in check.stdout, \
        check.stdout + check.stderr
    # alerts_test.yml: each alert fires on its condition, and not on a healthy neighbour
    test = subprocess.run([PROMTOOL, "test", "rules", str(ALERTS_TEST)], capture_output=True,
                          text=True, timeout=60, cwd=ALERTS_TEST.parent)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_promtool_parses_every_dashboard_query(tmp_path):
    """The dashboard's queries, Grafana's variables replaced by values, as recording rules:
    promtool parses each (a syntax error in a panel fails here)."""
    subst = {"$job": "dpstream", "$instance": "a:9100"}
    rules = []
    for i, expr in enumerate(_dashboard_exprs()):
        for var, value in subst.items():
            expr = expr.replace(var, value)
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0 and f"SUCCESS: {len(rules)} rules" in check.stdout, \
        check.stdout + check.stderr
    # control: promtool does refuse a broken query
    path.write_text(json.dumps({"groups": [{"name": "d", "rules": [
        {"record": "dashboard:bad", "expr": "rate(dpstream_consumer_lag[5m]"}]}]}))
    assert subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True,
                          timeout=60).returncode != 0


# ------------------------------------------------------------------ against a real service
def _exported(text: str) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(dict(s.labels))
    return out


def _conditional(tmp_path: Path) -> dict[str, list[dict[str, str]]]:
    """What the collector exports with the read-outs a member does not have (a service's
    group check, a party's board), over a real runner."""
    runner = Runner.create("median-forest", ADULT_SCHEMA, store=CheckpointStore(tmp_path / "c"),
                           epsilon=1.0, seed=0, params=WINDOWS)
    registry = CollectorRegistry()
    registry.register(ServiceCollector(runner, group_shared=lambda: False,
                                       board=lambda: {"unsigned": 0}))
    text = generate_latest(registry).decode()
    runner.store.close()
    return {k: v for k, v in _exported(text).items() if k in CONDITIONAL}


def _adult(n: int) -> list[bytes]:
    X, y, _ = load_adult("train")
    return [json.dumps({"id": i, "x": X[i], "y": y[i]}).encode() for i in range(n)]


def _other_member(bootstrap: str, tmp_path: Path, stop: threading.Event):
    """Member ``b`` in this process: it trains one window of its own partition and publishes
    it on the model topic (as tests/test_members.py's members do)."""
    from dpstream.connectors.model_topic import ModelTopic
    from dpstream.stream.members import WindowMember

    runner = Runner.create("median-forest", ADULT_SCHEMA, store=CheckpointStore(tmp_path / "b"),
                           epsilon=1.0, params=WINDOWS)
    topic = ModelTopic(bootstrap, "models", stop=stop)
    assert topic.connect()
    member = WindowMember(runner, topic, "b")
    member.start()
    assert member.position_of("elsewhere:0") is None   # assigned: owned from its start
    values = _adult(2000)[1000:1300]
    member.process_many([SourceRecord(value=v, partition="elsewhere:0", offset=i)
                         for i, v in enumerate(values)])
    assert runner.model.windows_closed == 1
    return member


@pytest.mark.kafka
def test_a_running_member_exports_every_series_the_files_read(tmp_path):
    """``dpstream serve`` as a window-forest member (``--model-topic``) with another member's
    window in its union: its ``/metrics`` carries every series the dashboard and the alerts
    read, but the two a member has no read-out for (:data:`CONDITIONAL`), which the collector
    exports with those read-outs; each expression passes :func:`problems`."""
    broker = LocalBroker().start()
    stop = threading.Event()
    proc = other = None
    schema = tmp_path / "schema.json"
    ADULT_SCHEMA.dump(schema)
    port = free_port()
    log = open(tmp_path / "serve.log", "ab")
    try:
        broker.create_topic("records")
        broker.produce("records", _adult(700))
        proc = subprocess.Popen(
            [*DPSTREAM, "serve", "--bootstrap", broker.bootstrap, "--topic", "records",
             "--group", "dp", "--schema", str(schema), "--epsilon", "1.0",
             "--model", "median-forest", "--checkpoint-dir", str(tmp_path / "a"),
             "--metrics-port", str(port), "--checkpoint-interval", "0.3",
             "--model-topic", "models",
             *[a for k, v in WINDOWS.items() for a in ("--set", f"{k}={json.dumps(v)}")]],
            stdout=log, stderr=log, env={**os.environ, "DPSTREAM_MEMBER_ID": "a"})
        other = _other_member(broker.bootstrap, tmp_path, stop)
        wanted = {"dpstream_union_newest_window_age_seconds",
                  "dpstream_broker_last_contact_age_seconds",
                  "dpstream_last_checkpoint_age_seconds", "dpstream_consumer_lag"}
        deadline, exported = time.monotonic() + 180, {}
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                              timeout=10).read().decode()
            except OSError:   # not listening yet
                text = ""
            exported = _exported(text)
            if wanted <= set(exported) and _value(text, "dpstream_union_members") == 2:
                break
            other.poll(timeout_ms=500)   # b's held window grows and is published
        assert wanted <= set(exported), (sorted(exported),
                                         (tmp_path / "serve.log").read_text()[-3000:])
        assert _value(text, "dpstream_union_members") == 2   # a and b
        assert 0 <= _value(text, "dpstream_broker_last_contact_age_seconds") < 30
        assert 0 <= _value(text, "dpstream_union_newest_window_age_seconds") < 120
        conditional = _conditional(tmp_path)
        assert set(conditional) == CONDITIONAL and not CONDITIONAL & set(exported)
        every = {**exported, **conditional}
        exprs = _dashboard_exprs() + _alert_exprs()
        found = {p for e in exprs for p in problems(e, every)}
        assert not found, found
        # the files read every public series a member exports but two: the checkpoint count
        # and the union's records (on `dpstream status`)
        read = {name for e in exprs for name, _ in metric_selectors(e)}
        assert {n for n in exported if is_public_series(n)} - read == {
            "dpstream_checkpoints_total", "dpstream_union_records"}
    finally:
        stop.set()
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        if other is not None:
            other.runner.store.close()
            other.topic.close()
        log.close()
        broker.stop()


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.kafka
def test_the_broker_contact_age_grows_while_the_broker_is_frozen():
    """``last_contact`` of both clients' sources: fresh while idle (kafka-python: the group's
    heartbeats; confluent-kafka: librdkafka's statistics, here every second), stopped while
    the broker is frozen (SIGSTOP), fresh again once it is thawed."""
    from dpstream.connectors.kafka_clients import kafka_source
    from dpstream.connectors.kafka_confluent import STATS_MS

    assert STATS_MS <= 10_000   # the default: an idle source's age stays well under the alert's
    broker = LocalBroker().start()
    sources = {}
    try:
        broker.create_topic("records")
        broker.produce("records", [b"{}"] * 5)
        for client, config in (("kafka-python", {}),
                               ("confluent", {"statistics.interval.ms": 1000})):
            sources[client] = kafka_source(client, broker.bootstrap, "records", f"g-{client}",
                                           position_of=lambda key: None,
                                           on_revoke=lambda: None, consumer_config=config)
            assert sources[client].connect(threading.Event())

        def ages(seconds: float) -> dict[str, tuple[float, float]]:
            """Per client, the largest age seen while polling for ``seconds``, and the last."""
            worst = dict.fromkeys(sources, 0.0)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for client, s in sources.items():
                    s.poll(100)
                    if s.last_contact is not None:
                        worst[client] = max(worst[client], time.time() - s.last_contact)
            return {c: (worst[c], time.time() - s.last_contact) for c, s in sources.items()}

        ages(4)                                   # joined, the five records fetched
        assert all(s.last_contact is not None for s in sources.values())
        idle = ages(5)
        assert all(worst < 3.5 for worst, _ in idle.values()), idle
        broker.freeze()
        try:
            frozen = ages(7)
        finally:
            broker.thaw()
        assert all(last > 5 for _, last in frozen.values()), frozen
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            back = ages(1)
            if all(last < 3 for _, last in back.values()):
                break
        assert all(last < 3 for _, last in back.values()), back
    finally:
        for s in sources.values():
            s.close()
        broker.stop()
