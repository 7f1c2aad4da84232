"""The scale-out section of ``docs/benchmarks.md``: k members of one consumer group.

``python examples/scale_out.py --save benchmarks/results/scale_out.jsonl`` appends one JSON line
per run and k; :func:`scale_out_section` summarises them per stream (rate, accuracy and their
change from one member's), with one table per member policy (:data:`POLICIES`) and producer
pace. Result lines of older runs and removed options still render.

What the tables compare: docs/bench_internals.md#the-scale-out-section.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from .suite import load_results

__all__ = ["scale_out_section", "load_scale_runs", "cpu_lines"]


#: kafka-python's ``fetch_max_wait_ms``, the model topic reader's until 2026-11-27 (runs without
#: ``model_fetch_wait_ms``); since then it waits
#: :data:`~dpstream.connectors.model_topic.FETCH_WAIT_MS`
KAFKA_FETCH_WAIT_MS = 500

#: which partition owned which attribute's relevance before 2026-11-27's change (runs without
#: ``attribute_owners``); since then ``floor(j*P/F)``
#: (:func:`~dpstream.models.windows.relevance.owned_attributes`)
OLD_OWNERS = "p mod F"

#: the members' policies, in the order of the tables: windows sized by share with relevance
#: split by partition, released before the trees grow, with members that wait for the others'
#: windows in a backlog (after every close, or after the warm-up windows' only) or without
#: (the default), or with the trees at
#: the close (with small and, before, large fetches), the same with relevance rows held for
#: round(1 / share) windows (the first stop of member shares), and whole windows
POLICIES = ("before trees", "awaited", "awaited in the warm-up", "at the close",
            "by partition", "held", "whole")
TITLES = ("windows and trees sized by each member's share of the partitions, attribute "
          "relevance split by partition and released before the trees grow (held windows; "
          "64 KB partition fetches: the default since 2026-11-26)",
          "the same, and a member draining a backlog waits after each close for the others' "
          "windows of the stretch (`--await-windows`, `DPSTREAM_AWAIT_WINDOWS=true`)",
          "the same, and a member draining a backlog waits for the others' windows only after "
          "the closes of warm-up windows (`--await-warm-up`, `DPSTREAM_AWAIT_WARM_UP=true`; "
          "removed on 2026-11-28: worse on 2 and 16 cores)",
          "windows and trees sized by each member's share, relevance split by partition, "
          "trees grown at the close (`DPSTREAM_HOLD_WINDOWS=false`; 64 KB partition fetches)",
          "windows and trees sized by each member's share of the partitions, attribute "
          "relevance split by partition, trees grown at the close (8 MB partition fetches; "
          "the default until 2026-11-26)",
          "windows and trees sized by each member's share, relevance rows held for "
          "round(1 / share) windows (replaced by the split)",
          "every member's windows full-size (`--whole-windows`; the policy before member "
          "shares)")


def load_scale_runs(path: str | Path) -> list[dict]:
    """The JSON lines of ``scale_out.py --save`` (none if the file is absent)."""
    return load_results(path, keys=("members", "msgs_per_s", "accuracy"))


def _spread(runs: list[dict]) -> str:
    """The mean over runs of the median records between the members furthest apart."""
    got = [r["spread_records"]["median"] for r in runs if "spread_records" in r]
    return f"{statistics.mean(got):,.0f}" if got else "—"


def _second_half(runs: list[dict] | None) -> float | None:
    """The mean accuracy over the second half of the stream, of the runs that measured it."""
    got = [r["accuracy_second_half"] for r in runs or [] if "accuracy_second_half" in r]
    return statistics.mean(got) if got else None


def _gap(values: list[float], base: list[float] | None, k: int) -> str:
    """The difference of ``values``' mean to one member's (``base``) in points, with its
    standard error (of two independent means) when both sides have two runs or more: one
    member's runs alone scatter by several points."""
    if not base or k == 1:
        return "—"
    diff = 100 * (statistics.mean(values) - statistics.mean(base))
    text = f"{diff + 0.0:+.1f}" if round(diff, 1) else "+0.0"   # (no "−0.0")
    if len(values) > 1 and len(base) > 1:
        se = 100 * (statistics.variance(values) / len(values)
                    + statistics.variance(base) / len(base)) ** 0.5
        text += f" ± {se:.1f}"
    return (text + " pp").replace("-", "−")


def _half_cells(runs: list[dict], base: list[dict] | None, k: int) -> str:
    """The second-half accuracy cell (with its number of runs) and its difference to one
    member's (``base``: its runs), over the runs that measured it."""
    got = [r["accuracy_second_half"] for r in runs if "accuracy_second_half" in r]
    if not got:
        return "— | —"
    ref = [r["accuracy_second_half"] for r in base or [] if "accuracy_second_half" in r]
    return f"{statistics.mean(got):.4f} ({len(got)}) | {_gap(got, ref, k)}"


def cpu_lines(rows: list[dict]) -> list[str]:
    """Markdown lines of the table of where the CPU goes (runs with ``cpu_s``; none without).

    Per stream and k: the members' CPU per record, the part of it in their main threads (the
    service loop; the rest is the Kafka clients' IO threads; runs that measured it), the
    broker's and the driver's (producer and predictions reader), the cores they kept busy,
    and the rate the machine's cores allow at that CPU per record (``cores / (members +
    broker + driver)``): when k members reach it, the cores, not the members, bound the rate.

    >>> rows = [{"stream": "adult", "records": 1000, "members": 1, "msgs_per_s": 800,
    ...          "cores": 2, "cores_busy": 1.3, "member_main_thread_us_per_msg": 100,
    ...          "cpu_s": {"members": [0.12], "broker": 0.01, "driver": 0.05}}]
    >>> print("\\n".join(cpu_lines(rows)[-1:]))
    | 2 | adult | 1 | 1 | 120 | 100 (1) | 60 | 1.30 | 800 | 11,111 |
    """
    rows = [r for r in rows if r.get("cpu_s")]
    if not rows:
        return []
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["cores"], r.get("stream", "adult"), r["members"])].append(r)
    out = ["| cores | stream | members k | runs | members' CPU, µs per record | their main "
           "threads, µs per record (runs) | broker + driver, µs per record | cores busy | "
           "msgs/s | msgs/s the cores allow |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for (cores, stream, k), rs in sorted(groups.items()):
        member = statistics.mean(sum(r["cpu_s"]["members"]) / r["records"] for r in rs) * 1e6
        # (the first runs with producer processes counted their start-up, imports and all,
        # in the driver's CPU: left out)
        clean = [r for r in rs if r.get("producers", 1) <= 1 or "producers" in r["cpu_s"]]
        other = (statistics.mean((r["cpu_s"]["broker"] + r["cpu_s"]["driver"]) / r["records"]
                                 for r in clean) * 1e6 if clean else None)
        main = [r["member_main_thread_us_per_msg"] for r in rs
                if r.get("member_main_thread_us_per_msg")]
        out.append(f"| {cores} | {stream} | {k} | {len(rs)} | {member:,.0f} | "
                   + (f"{statistics.mean(main):,.0f} ({len(main)}) | " if main else "— | ")
                   + ("— | " if other is None else f"{other:,.0f} | ")
                   + ("— | " if not clean else
                      f"{statistics.mean(r['cores_busy'] for r in clean):.2f} | ")
                   + f"{statistics.mean(r['msgs_per_s'] for r in rs):,.0f} | "
                   + ("— |" if other is None else f"{cores * 1e6 / (member + other):,.0f} |"))
    return out


def _plot_scale(points: list[tuple], path: Path) -> None:
    """The figure of the section: per machine and stream, each default-policy setup's rate
    against one member's (``k`` and the issue's ``0.8 k`` as lines) and its accuracy against
    one member's (the 1 pp band), whole stream (filled) and second half (hollow).

    ``points``: ``(cores, stream, setup, k, ratio, diff_pp, half_diff_pp or None)``; a setup
    ends with its attribute owners (runs since the ownership change drawn thick).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    ks = sorted({p[3] for p in points})
    top = max(ks)
    left.plot([1, top], [1, top], color="grey", linestyle="--", linewidth=1,
              label="k × (linear)")
    left.plot([1, top], [0.8, 0.8 * top], color="crimson", linestyle=":", linewidth=1.5,
              label="0.8 k × (the target)")
    right.axhspan(-1, 1, color="green", alpha=0.12, label="within 1 pp (the target)")
    right.axhline(0, color="grey", linewidth=1)
    palette = {2: "tab:blue", 16: "tab:orange"}
    markers = {"adult": "o", "agrawal": "s"}
    series: dict[tuple, list[tuple]] = defaultdict(list)
    for cores, stream, setup, k, ratio, diff, half in points:
        series[(cores, stream, setup)].append((k, ratio, diff, half))
    labelled: set = set()
    for n, ((cores, stream, setup), pts) in enumerate(sorted(series.items())):
        pts.sort()
        width = 0.8 if setup[-1] == OLD_OWNERS else 2.2   # runs since the ownership change
        color = palette.get(cores, "tab:purple")
        marker = markers.get(stream, "^")
        label = f"{stream}, {cores} cores"
        first = label not in labelled
        labelled.add(label)
        dx = (n % 5 - 2) * 0.03   # setups of one machine side by side, not on top
        ks_ = [k + dx for k, *_ in pts]
        left.plot(ks_, [r for _, r, _, _ in pts], color=color, marker=marker, ms=4,
                  linewidth=width, alpha=0.8, label=label if first else None)
        right.plot(ks_, [d for _, _, d, _ in pts], color=color, marker=marker, ms=4,
                   linewidth=width, alpha=0.8, label=label if first else None)
        halves = [(k, h) for k, (_, _, _, h) in zip(ks_, pts, strict=True) if h is not None]
        if halves:
            right.plot([k for k, _ in halves], [h for _, h in halves], linestyle="none",
                       marker=marker, ms=6, markerfacecolor="none", color=color)
    for ax in (left, right):
        ax.set_xticks(ks)
        ax.set_xlabel("members k")
        ax.grid(True, alpha=0.3)
    left.set_ylabel("msgs/s ÷ one member's")
    left.set_title("Rate (unpaced: the members drain a backlog)")
    right.set_ylabel("accuracy − one member's, pp")
    right.set_title("Accuracy (filled: whole stream; hollow: second half)")
    left.legend(fontsize=7, loc="upper left")
    right.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def scale_out_section(rows: list[dict], img_dir: str | Path | None = None,
                      img_prefix: str = "img/") -> list[str]:
    """Markdown lines of the section (empty without rows); with ``img_dir`` its figure
    (``scale_out.png``: every setup of the default policy without a paced producer).

    Examples
    --------
    >>> rows = [{"stream": "adult", "records": 100, "members": k, "msgs_per_s": r, "accuracy": a,
    ...          "same_model": True, "trained": 100, "cores": 2, "member_windows": "share",
    ...          "relevance": "by partition"}
    ...         for k, r, a in ((1, 1000, 0.80), (2, 1800, 0.79))]
    >>> print("\\n".join(scale_out_section(rows)[8:10]))
    | 1 | 1 | 1,000 (1,000–1,000) | 1.00 | 0.8000 (0.800–0.800) | — | 1 of 1 | 100 |
    | 2 | 1 | 1,800 (1,800–1,800) | 1.80 | 0.7900 (0.790–0.790) | −1.0 pp | 1 of 1 | 100 |
    """
    rows = [r for r in rows if not r.get("split_windows")]   # an abandoned experiment
    if not rows:
        return []
    cores = sorted({r.get("cores") for r in rows if r.get("cores")})
    out = ["## Scale-out: members of one consumer group", "",
           "`python examples/scale_out.py --records N [--stream agrawal] --save "
           "benchmarks/results/scale_out.jsonl`: k `dpstream serve --model median-forest "
           "--model-topic` processes in one consumer group (6 partitions, ε = 1, "
           "`n_trees=5`, predictions published); the rate runs from the first to the last "
           "prediction; accuracy is prequential on the members' predictions, each made with "
           "the union of every member's windows. Measured on a machine with "
           f"{', '.join(map(str, cores)) or 'an unknown number of'} CPU cores, which the broker, "
           "the producer, the predictions reader and the k members share: past the cores "
           "more members add contention, not speed. Without `--pace` the producer runs "
           "ahead and the members drain a backlog, each at its own speed, so they drift "
           "apart in the stream; with `--pace` they keep up with the topic, as a service "
           "does. A difference to one member is given ± its standard error (of two "
           "independent means) where both have two runs or more: one member's runs alone "
           "scatter by several points. Runs saved with a `batch` (one machine's, since "
           "2026-11-28) are tabled apart from other machines' runs of the same setup: another "
           "machine's one member runs at another speed. Analysis: "
           "[benchmark notes](benchmark_notes.md), \"Scale-out\".", ""]
    head = len(out)   # the figure goes here, once the tables have given its points
    points: list[tuple] = []
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:   # runs from before member shares had whole windows
        policy = r.get("member_windows", "whole")
        # share runs from before the relevance split by partition held relevance rows
        policy = "whole" if policy != "share" else r.get("relevance", "held")
        if policy == "before trees" and r.get("await_windows"):
            policy = "awaited"   # (runs from before the wait have no await_windows)
        elif policy == "before trees" and r.get("await_warm_up"):
            policy = "awaited in the warm-up"
        groups[(r.get("cores") or 0, r.get("stream", "adult"), r["records"],
                POLICIES.index(policy), r.get("pace") or 0, r.get("partitions", 6),
                r.get("producers", 1), r.get("stamp_rate") or 0,
                # (negated: the tables of a setup before its faster fetch come first)
                -r.get("model_fetch_wait_ms", KAFKA_FETCH_WAIT_MS),
                # (runs from before the members' warm-up have no warm_up and had none)
                bool(r.get("warm_up", False)),
                # (runs from before a broker per k ran every k on one broker)
                bool(r.get("fresh_broker", False)),
                # (runs from before the ownership change lack the field, p mod F; first)
                (r.get("attribute_owners", OLD_OWNERS) != OLD_OWNERS,
                 r.get("attribute_owners", OLD_OWNERS)),
                # (one machine's runs: another machine's members run at another speed; runs
                # from before the field are pooled, as they always were)
                r.get("batch") or "")].append(r)
    for (ncores, stream, records, policy, pace, parts, producers, stamp, neg_wait, warm,
         fresh, (_, owners), batch), runs in sorted(groups.items()):
        fetch_wait = -neg_wait
        if out[-1] != "":
            out.append("")
        by_k: dict[int, list[dict]] = defaultdict(list)
        for r in runs:
            by_k[r["members"]].append(r)
        one = by_k.get(1)
        base_rate = statistics.mean(r["msgs_per_s"] for r in one) if one else None
        base_acc = statistics.mean(r["accuracy"] for r in one) if one else None
        dates = sorted({r["date"] for r in runs if r.get("date")})
        when = f" ({', '.join(dates)})" if dates else ""
        title = TITLES[policy] + (f"; the producer paced at {pace:,.0f} msgs/s (the members "
                                  "keep up with the topic)" if pace else "")
        spread = any("spread_records" in r for r in runs)
        half = any("accuracy_second_half" in r for r in runs)
        base_half = _second_half(one)
        setup = (f"{ncores} cores" if ncores else "cores unknown") + (
            f", {parts} partitions, {producers} producer processes"
            if (parts, producers) != (6, 1) else "") + (
            f", timestamps of a topic that filled at {stamp:,.0f} records/s" if stamp else "") + (
            f", the model topic read with {fetch_wait} ms fetch waits"
            if fetch_wait != KAFKA_FETCH_WAIT_MS else "") + (
            ", members warmed up before joining (`DPSTREAM_WARM_UP`)" if warm else "") + (
            ", a fresh broker for each k" if fresh else "") + (
            f", attribute j's relevance owned by partition {owners}"
            if owners != OLD_OWNERS else "") + (
            f", the runs of one machine (batch `{batch}`)" if batch else "")
        out += [f"### {stream}, {records:,} records, {setup}: {title}{when}", "",
                "| members k | runs | msgs/s, mean (min–max) | × one member | accuracy, mean "
                "(min–max) | vs one member | same_model | trained |"
                + (" members apart, records (median) |" if spread else "")
                + (" accuracy, second half of the stream (runs) | second half vs one member |"
                   if half else ""),
                "|---|---|---|---|---|---|---|---|" + ("---|" if spread else "")
                + ("---|---|" if half else "")]
        for k in sorted(by_k):
            rs = by_k[k]
            rate = [r["msgs_per_s"] for r in rs]
            acc = [r["accuracy"] for r in rs]
            # (paced: the producer sets the rate, so the ratio says nothing about the members)
            ratio = f"{statistics.mean(rate) / base_rate:.2f}" if base_rate and not pace else "—"
            diff = _gap(acc, [r["accuracy"] for r in one] if one else None, k)
            trained = sorted({r["trained"] for r in rs})
            if policy == 0 and not pace and base_rate and base_acc is not None:
                half_mean = _second_half(rs)
                points.append((ncores, stream, (records, parts, producers, stamp, fetch_wait,
                                                warm, fresh, batch, owners), k,
                               statistics.mean(rate) / base_rate,
                               100 * (statistics.mean(acc) - base_acc),
                               None if half_mean is None or base_half is None
                               else 100 * (half_mean - base_half)))
            out.append(f"| {k} | {len(rs)} | {statistics.mean(rate):,.0f} ({min(rate):,}–"
                       f"{max(rate):,}) | {ratio} | {statistics.mean(acc):.4f} "
                       f"({min(acc):.3f}–{max(acc):.3f}) | {diff} | "
                       f"{sum(bool(r['same_model']) for r in rs)} of {len(rs)} | "
                       f"{', '.join(f'{t:,}' for t in trained)} |"
                       + (f" {_spread(rs)} |" if spread else "")
                       + (f" {_half_cells(rs, one, k)} |" if half else ""))
    if img_dir is not None and points:
        _plot_scale(points, Path(img_dir) / "scale_out.png")
        out[head:head] = ["![members of one group: rate and accuracy against one member, per "
                          "machine and stream](" + img_prefix + "scale_out.png)", "",
                          "Each line is one setup of the default policy (the first table of "
                          "each stream and machine below, and its variants of timestamps, "
                          "fetch waits, warm-up, brokers and attribute owners), whatever its "
                          "date: runs from before a fix stay in the plot as in the tables. "
                          "Runs from before the change of which partition owns which "
                          "attribute (2026-11-27) are drawn thin; those since, thick. Paced "
                          "runs are left out, as their producer sets the rate.", ""]
    cpu = cpu_lines([r for r in rows if not r.get("pace")])
    if cpu:
        out += ["", "### Where the CPU goes", "",
                "CPU seconds (user + system, `/proc`) of each process from the start of "
                "producing to the last prediction read, per record of the stream (runs "
                "since the CPU was measured). On 2 cores the members' CPU per record does not "
                "grow with k: sharing windows and relevance costs the members nearly nothing. "
                "On the 16-core machine it grows by 10-20% from one member to three or four, "
                "about as much as independent processes that share nothing lose when as many "
                "run at once there (`benchmarks/members_machine_contention.py`, benchmark "
                "notes). The broker and the driver (the producer and the predictions reader, "
                "Python) need CPU at the same rate, on the same cores, so the rate the cores allow "
                "is `cores / (members + broker + driver)` per record; once k members reach "
                "it, more members cannot run faster on this machine.", ""] + cpu
    out.append("")
    return out
