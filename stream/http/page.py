"""The status page: what an operator sees at ``/`` of the serve process's HTTP port, or in
``dpstream status --html``.

Everything on it is a public quantity or a DP release, as on ``/metrics``: the page's time
series are samples of the public ``/metrics`` series (:class:`StatusHistory`), its accuracy
curve is the drift signal's DP releases as of the last checkpoint, and its text is the model's
public configuration and privacy report. Charts are drawn here, as inline SVG; the page loads
nothing from the network and runs no script (it refreshes itself with a ``<meta>`` tag).
docs/service.md, "The status page".

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

from __future__ import annotations

import html
import math
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["StatusHistory", "drift_releases", "line_chart", "page_info", "render_page"]

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
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>"
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
