"""The status page: what an operator sees at ``/`` of the serve process's HTTP port, or in
``dpstream status --html``.

:class:`StatusHistory` keeps samples of the public ``/metrics`` series; :func:`render_page`
draws the page (inline SVG charts, no network, no script). Everything on it is a public
quantity or a DP release, as on ``/metrics``. What it shows and why it is safe to show:
docs/service.md#the-status-page.
"""

from __future__ import annotations

import html
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["StatusHistory", "StatusPage", "checkpoint_page", "drift_releases", "line_chart",
           "page_info", "public_values", "render_page"]

#: samples a history keeps (at one a minute: twelve hours)
MAX_SAMPLES = 720
#: the page refreshes itself every this many seconds
REFRESH_S = 15
_COLORS = ("#1f6fb2", "#d9730d", "#2e8540", "#9b3fb5")


class StatusHistory:
    """A bounded history of public ``/metrics`` values: ``(time, {series: value})`` samples.

    Parameters
    ----------
    max_samples
        The oldest sample goes when a new one would exceed this.
    """

    def __init__(self, max_samples: int = MAX_SAMPLES):
        self._samples: deque[tuple[float, dict[str, float]]] = deque(maxlen=int(max_samples))

    def add(self, t: float, values: Mapping[str, float]) -> None:
        """Record the public series' values at time ``t`` (seconds)."""
        self._samples.append((float(t), {k: float(v) for k, v in values.items()}))

    def samples(self) -> list[tuple[float, dict[str, float]]]:
        """The samples, oldest first."""
        return list(self._samples)

    def __len__(self) -> int:
        return len(self._samples)


def _fmt(v: float) -> str:
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.1f}M"
    if a >= 1e4:
        return f"{v / 1e3:.0f}k"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str,
               x_label: str = "", marks: Iterable[float] = (), y_min: float | None = None,
               y_max: float | None = None, width: int = 560, height: int = 220) -> str:
    """An SVG line chart of ``series`` (name -> ``(x, y)`` points), with vertical ``marks``.

    >>> svg = line_chart({"a": [(0, 1), (1, 3)]}, title="t", marks=[0.5])
    >>> svg.count("<polyline"), svg.count("stroke-dasharray")
    (1, 1)
    """
    left, right, top, bottom = 52, 12, 28, 34
    pts = [p for s in series.values() for p in s if math.isfinite(p[1])]
    xs = [p[0] for p in pts] or [0.0, 1.0]
    ys = [p[1] for p in pts] or [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    y0 = min(ys) if y_min is None else y_min
    y1 = max(ys) if y_max is None else y_max
    if x1 <= x0:
        x1 = x0 + 1.0
    if y1 <= y0:
        y1 = y0 + (abs(y0) or 1.0)
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (min(max(y, y0), y1) - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">',
           f'<text x="{left}" y="16" font-size="13" font-weight="600">'
           f'{html.escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" '
           f'stroke="#ccc"/>']
    for i in range(5):   # y grid and labels
        y = y0 + (y1 - y0) * i / 4
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
                   f'stroke="#e4e4e4"/><text x="{left - 4}" y="{sy(y) + 4:.1f}" '
                   f'font-size="10" text-anchor="end">{_fmt(y)}</text>')
    for x in (x0, (x0 + x1) / 2, x1):
        out.append(f'<text x="{sx(x):.1f}" y="{top + ph + 14}" font-size="10" '
                   f'text-anchor="middle">{_fmt(x)}</text>')
    if x_label:
        out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 4}" font-size="10" '
                   f'text-anchor="middle">{html.escape(x_label)}</text>')
    for m in marks:
        if x0 <= m <= x1:
            out.append(f'<line x1="{sx(m):.1f}" x2="{sx(m):.1f}" y1="{top}" y2="{top + ph}" '
                       f'stroke="#b00" stroke-dasharray="4 3"/>')
    for i, (name, s) in enumerate(series.items()):
        color = _COLORS[i % len(_COLORS)]
        p = [(sx(x), sy(y)) for x, y in s if math.isfinite(y)]
        if p:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="'
                       + " ".join(f"{a:.1f},{b:.1f}" for a, b in p) + '"/>')
        out.append(f'<text x="{left + pw - 4}" y="{top + 14 + 13 * i}" font-size="11" '
                   f'text-anchor="end" fill="{color}">{html.escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def _text(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() and abs(v) < 1e15 else str(v)


def _series(samples: list[tuple[float, dict[str, float]]], name: str,
            t0: float) -> list[tuple[float, float]]:
    return [((t - t0) / 60.0, v[name]) for t, v in samples if name in v]


def _rate(samples: list[tuple[float, dict[str, float]]], name: str,
          t0: float) -> list[tuple[float, float]]:
    """Per-second increase of a counter between consecutive samples."""
    out, last = [], None
    for t, v in samples:
        if name in v:
            if last is not None and t > last[0]:
                out.append(((t - t0) / 60.0, max(0.0, (v[name] - last[1]) / (t - last[0]))))
            last = (t, v[name])
    return out


_STYLE = ("body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1180px}"
          "h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:20px 0 6px}"
          ".grid{display:flex;flex-wrap:wrap;gap:16px}.card{border:1px solid #ddd;"
          "border-radius:6px;padding:8px;background:#fff}table{border-collapse:collapse;"
          "font-size:12px}td{padding:2px 8px;border-bottom:1px solid #eee;vertical-align:top}"
          ".note{font-size:12px;color:#555;max-width:1100px}.big{font-size:22px;"
          "font-weight:600}.bar{height:10px;background:#eee;border-radius:5px;width:320px}"
          ".fill{height:10px;border-radius:5px;background:#1f6fb2}")


def render_page(info: Mapping[str, Any], samples: list[tuple[float, dict[str, float]]],
                drift: Mapping[str, Any] | None = None, *, refresh: int | None = REFRESH_S,
                now: float | None = None) -> str:
    """The status page's HTML.

    Parameters
    ----------
    info
        Public facts: ``model``, ``params`` (its public configuration), ``epsilon``,
        ``epsilon_budget``, ``delta``, ``guarantee``, ``trees``, ``windows``, ``lag``,
        ``checkpoint_age_s``, ``source`` (where the page's numbers come from), ``loss`` (what
        the drift signal releases: ``"error rate"`` or a regression loss).
    samples
        :meth:`StatusHistory.samples` (may be empty: a checkpoint's page).
    drift
        The drift signal's DP releases as of the last checkpoint: ``rates`` (the released
        windowed loss, oldest first), ``changes`` (the release numbers where a drift
        generation started), ``window`` (records per release), ``first`` (the number of the
        first release shown).
    refresh
        Seconds between the page's own reloads (``None``: no reload, a saved page).

    Examples
    --------
    >>> history = StatusHistory()
    >>> for t, eps in ((0.0, 0.0), (60.0, 0.4), (120.0, 0.7)):
    ...     history.add(t, {"dpstream_epsilon": eps, "dpstream_epsilon_budget": 1.0})
    >>> page = render_page({"model": "SGBDTClassifier", "epsilon": 0.7, "epsilon_budget": 1.0},
    ...                    history.samples(), {"rates": [0.3, 0.25, 0.2], "changes": [2]})
    >>> page.startswith("<!DOCTYPE html>"), page.count("<svg"), "src=" in page, "<script" in page
    (True, 6, False, False)
    """
    now = time.time() if now is None else now
    eps = float(info.get("epsilon") or 0.0)
    budget = float(info.get("epsilon_budget") or 0.0)
    share = min(1.0, eps / budget) if budget > 0 else 0.0
    t0 = samples[0][0] if samples else now
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>dpstream: {html.escape(str(info.get('model', '')))}</title>",
             f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh else "",
             f"<style>{_STYLE}</style></head><body>",
             f"<h1>dpstream &middot; {html.escape(str(info.get('model', 'model')))}</h1>",
             f"<div class=\"note\">{html.escape(str(info.get('source', '')))} &middot; "
             f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(now))}</div>",
             "<h2>Privacy budget</h2>",
             f'<div class="big">&epsilon; {eps:.4g} of {budget:.4g}</div>',
             f'<div class="bar"><div class="fill" style="width:{share * 100:.1f}%"></div>'
             f"</div><div class=\"note\">{html.escape(str(info.get('guarantee', '')))}</div>",
             '<div class="grid">']
    charts = []
    if samples:
        charts.append(line_chart({"ε spent": _series(samples, "dpstream_epsilon", t0),
                                  "budget": _series(samples, "dpstream_epsilon_budget", t0)},
                                 title="ε spent against the budget", x_label="minutes",
                                 y_min=0.0))
        charts.append(line_chart({"trees": _series(samples, "dpstream_trees", t0),
                                  "windows closed": _series(
                                      samples, "dpstream_windows_closed_total", t0)},
                                 title="Trees and windows", x_label="minutes", y_min=0.0))
        charts.append(line_chart({"records/s": _rate(
            samples, 'dpstream_records_total{outcome="seen"}', t0)},
            title="Arrivals (every message)", x_label="minutes", y_min=0.0))
        charts.append(line_chart({"lag": _series(samples, "dpstream_consumer_lag", t0)},
                                 title="Consumer lag (messages)", x_label="minutes",
                                 y_min=0.0))
        charts.append(line_chart({"age (s)": _series(
            samples, "dpstream_last_checkpoint_age_seconds", t0)},
            title="Checkpoint age", x_label="minutes", y_min=0.0))
    rates = list((drift or {}).get("rates") or [])
    if rates:
        first = int((drift or {}).get("first", 1))
        accuracy = info.get("loss", "error rate") == "error rate"
        pts = [(first + i, (1.0 - r) if accuracy else r) for i, r in enumerate(rates)]
        charts.append(line_chart(
            {"accuracy (DP)" if accuracy else "loss (DP)": pts},
            title=("Released windowed accuracy (noisy by design)" if accuracy else
                   "Released windowed loss (noisy by design)"),
            x_label=f"drift-signal release ({(drift or {}).get('window', '?')} records each)"
                    " · dashed: a drift generation started",
            marks=[float(c) for c in (drift or {}).get("changes") or ()],
            y_min=0.0, y_max=1.0 if accuracy else None))
    parts += [f'<div class="card">{c}</div>' for c in charts]
    parts.append("</div>")
    if not charts:
        parts.append('<p class="note">No history yet: the charts appear after the first '
                     "samples.</p>")
    facts = [("model", info.get("model")), ("trees", info.get("trees")),
             ("windows closed", info.get("windows")), ("consumer lag", info.get("lag")),
             ("checkpoint age (s)", info.get("checkpoint_age_s")),
             ("δ", info.get("delta"))]
    facts += sorted((str(k), v) for k, v in (info.get("params") or {}).items())
    parts.append("<h2>Model and configuration</h2><table>" + "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_text(v))}</td></tr>"
        for k, v in facts if v is not None) + "</table>")
    parts.append(
        '<h2>What this page shows</h2><p class="note">Only public quantities and '
        "differentially private releases: arrival counts and offsets, the guarantee and the "
        "budget, the released model's size, checkpoint times, the public configuration, and "
        "the drift signal's DP releases of the windowed loss as of the last checkpoint. The "
        "accuracy the curator sees on the stream is exact, a function of every record, and is "
        "not shown; the released curve is noisy by design (Laplace noise on each window's "
        "loss). docs/privacy.md lists every surface.</p></body></html>")
    return "".join(parts)


def drift_releases(model: Any) -> dict | None:
    """The drift signal's DP releases kept by ``model`` (its last ``HISTORY`` released
    windowed losses and the releases where a drift generation started), or ``None`` for a
    model without a drift signal. Read it as of a checkpoint: a release a restart could draw
    again must not be shown before a checkpoint covers it."""
    signal = getattr(model, "_drift", None)
    history = getattr(signal, "history", None)
    if history is None:
        return None
    first = int(signal.releases) - len(history) + 1
    return {"rates": [float(r) for r in history], "window": int(signal.window),
            "first": first, "changes": [int(c) for c in signal.change_at if c >= first]}


def page_info(model: Any, report: Mapping[str, Any], summary: Mapping[str, Any],
              source: str) -> dict:
    """The page's public facts from a model, its public privacy report and a public
    summary (:func:`~dpstream.stream.metrics.public_summary`)."""
    params = {}
    get = getattr(model, "_get_params", None)
    if get is not None:
        params = {k: v for k, v in get().items() if k not in ("schema", "seed")
                  and (v is None or isinstance(v, (bool, int, float, str)))}
    encoder = getattr(model, "_encoder", None)
    classifier = getattr(encoder, "classes", None) is not None
    return {"model": summary.get("model") or type(model).__name__, "params": params,
            "epsilon": report.get("epsilon"),
            "epsilon_budget": report.get("epsilon_budget", getattr(model, "epsilon", None)),
            "delta": report.get("delta"), "guarantee": report.get("guarantee", ""),
            "trees": report.get("trees", summary.get("trees")),
            "windows": summary.get("windows_closed"), "lag": summary.get("consumer_lag"),
            "checkpoint_age_s": summary.get("checkpoint_age_s"), "source": source,
            "loss": "error rate" if classifier else "half absolute error (scaled)"}


def public_values(collector: Any) -> dict[str, float]:
    """The public series a ``/metrics`` collector exports now (``name{label="v"}`` ->
    value): the curator-only series are dropped even from a ``curator=True`` collector."""
    from ..metrics import is_public_series

    out = {}
    for family in collector.collect():
        for s in family.samples:
            if is_public_series(s.name, s.labels):
                inner = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{inner}}}" if inner else s.name] = float(s.value)
    return out


class StatusPage:
    """The status page at ``/`` of a serve process's HTTP port (docs/service.md, "The status
    page"): samples of the public ``/metrics`` series every ``interval`` seconds, the drift
    signal's releases as of the last checkpoint, the model's public configuration and report.

    Parameters
    ----------
    runner
        The service's runner (read under its lock by the collector; its model's drift
        releases are copied when a checkpoint is written, in the main loop).
    collector
        The service's :class:`~dpstream.stream.metrics.ServiceCollector`.
    interval
        Seconds between samples (``None``: no sampling thread; :meth:`sample` by hand).
    source
        A line on where the numbers come from (the topic, the member).
    """

    paths = ("/",)

    def __init__(self, runner: Any, collector: Any, *, interval: float | None = 10.0,
                 source: str = "dpstream serve"):
        self.runner, self.collector, self.source = runner, collector, source
        self.history = StatusHistory()
        self.drift = drift_releases(runner.model)   # restored from a checkpoint, or empty
        chained = runner.on_checkpoint

        def saved(positions: Any) -> None:   # the main loop, under the runner's lock
            if chained is not None:
                chained(positions)
            self.drift = drift_releases(runner.model)

        runner.on_checkpoint = saved
        self._stop = threading.Event()
        self._thread = None
        if interval is not None:
            self.sample()
            self._thread = threading.Thread(target=self._sampling, args=(float(interval),),
                                            name="dpstream-status", daemon=True)
            self._thread.start()

    def _sampling(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.sample()
            except Exception:   # pragma: no cover - a scrape error must not end the thread
                continue

    def sample(self, t: float | None = None) -> None:
        """Add the public series' values now (or at ``t``) to the history."""
        self.history.add(time.time() if t is None else t, public_values(self.collector))

    def view(self, now: float | None = None) -> dict:
        """Everything the page shows: ``info``, ``samples`` and ``drift`` (public values and
        DP releases only; tests/test_status_page.py compares neighbouring streams')."""
        from ..metrics import public_report

        samples = self.history.samples()
        last = samples[-1][1] if samples else {}
        r = self.runner
        saved = getattr(r, "last_checkpoint_wall", None)
        now = time.time() if now is None else now
        summary = {"model": getattr(r, "model_name", None),
                   "windows_closed": last.get("dpstream_windows_closed_total"),
                   "consumer_lag": last.get("dpstream_consumer_lag"),
                   "checkpoint_age_s": None if saved is None else round(now - saved, 1)}
        report = public_report(dict(r.saved_report))
        info = page_info(r.model, report, summary, self.source)
        info["trees"] = last.get("dpstream_trees", info.get("trees"))
        return {"info": info, "samples": samples, "drift": self.drift}

    def precheck(self, method: str, path: str, headers: Any) -> Any:
        if method != "GET":
            from .api import Reply
            return Reply(405, b"GET only\n", {"Content-Type": "text/plain", "Allow": "GET"},
                         True)
        return None

    def respond(self, method: str, path: str, headers: Any, rfile: Any) -> Any:
        from .api import Reply

        refused = self.precheck(method, path, headers)
        if refused is not None:
            return refused
        view = self.view()
        body = render_page(view["info"], view["samples"], view["drift"]).encode("utf-8")
        return Reply(200, body, {"Content-Type": "text/html; charset=utf-8",
                                 "Cache-Control": "no-store"})

    def close(self) -> None:
        """Stop sampling."""
        self._stop.set()


def checkpoint_page(state: Mapping[str, Any], *, source: str) -> str:
    """The status page of a checkpoint (``dpstream status --html``): no time series, the
    drift signal's releases as saved, and the public report; it does not refresh itself."""
    from ..metrics import public_report, public_summary
    from ..runner import describe

    summary = public_summary({**describe(state),
                              "checkpoint_age_s": round(time.time() - state["written"], 1)})
    model = state["model"]
    info = page_info(model, public_report(summary.get("privacy") or {}), summary, source)
    return render_page(info, [], drift_releases(model), refresh=None)
