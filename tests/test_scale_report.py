"""The scale-out section of docs/benchmarks.md: paced runs apart, the spread, the CPU table."""

from __future__ import annotations

import pytest

from dpstream.stream.bench.scale_report import cpu_lines, scale_out_section


def _row(k, rate, acc, pace=None, spread=None, cpu=None):
    row = {"stream": "agrawal", "records": 1000, "members": k, "msgs_per_s": rate,
           "accuracy": acc, "same_model": True, "trained": 1000, "cores": 2,
           "member_windows": "share", "relevance": "by partition", "pace": pace}
    if spread is not None:
        row["spread_records"] = {"median": spread, "p90": 2 * spread}
    if cpu is not None:
        row.update(cpu_s={"members": [cpu / k] * k, "broker": 0.01, "driver": 0.04},
                   cores_busy=1.5)
    return row


def test_paced_runs_have_their_own_table_without_a_rate_ratio():
    rows = [_row(1, 1000, 0.90, cpu=0.1), _row(2, 1500, 0.89, cpu=0.1),
            _row(1, 600, 0.91, pace=600, spread=0), _row(2, 590, 0.88, pace=600, spread=900)]
    text = "\n".join(scale_out_section(rows))
    drain, paced = text.split("paced at 600 msgs/s")
    assert "| 2 | 1 | 1,500 (1,500–1,500) | 1.50 |" in drain
    assert "| 2 | 1 | 590 (590–590) | — | 0.8800 (0.880–0.880) | −3.0 pp |" in paced
    assert "members apart" in paced and "| 900 |" in paced
    assert "Where the CPU goes" in text


def test_the_cpu_table_leaves_out_paced_runs_and_says_what_the_cores_allow():
    lines = cpu_lines([_row(2, 1500, 0.89, cpu=0.1)])
    # members 100 us + broker and driver 50 us a record on 2 cores: 13,333 msgs/s
    assert lines[-1] == "| 2 | agrawal | 2 | 1 | 100 | — | 50 | 1.50 | 1,500 | 13,333 |"
    paced_only = scale_out_section([_row(1, 600, 0.9, pace=600, cpu=0.1)])
    assert paced_only and "Where the CPU goes" not in "\n".join(paced_only)


def test_runs_whose_members_awaited_windows_have_their_own_table():
    held = [{**_row(k, r, a), "relevance": "before trees"}
            for k, r, a in ((1, 1000, 0.90), (2, 1400, 0.88))]
    awaited = [{**row, "await_windows": True, "accuracy": row["accuracy"] + 0.02 * (k - 1)}
               for k, row in ((1, held[0]), (2, held[1]))]
    text = "\n".join(scale_out_section(held + awaited))
    default, waiting = text.split("`--await-windows`")
    assert "| 2 | 1 | 1,400 (1,400–1,400) | 1.40 | 0.8800 (0.880–0.880) | −2.0 pp |" in default
    assert "| 2 | 1 | 1,400 (1,400–1,400) | 1.40 | 0.9000 (0.900–0.900) | +0.0 pp |" in waiting


def test_runs_on_another_machine_or_topic_layout_have_their_own_table():
    two = [_row(1, 1000, 0.90), _row(2, 1500, 0.89)]
    big = [{**_row(k, r, a), "cores": 16, "partitions": 12, "producers": 6}
           for k, r, a in ((1, 6000, 0.92), (4, 21000, 0.90))]
    text = "\n".join(scale_out_section(two + big))
    small, large = text.split("16 cores, 12 partitions, 6 producer processes")
    assert "2 cores:" in small and "| 2 | 1 | 1,500 (1,500–1,500) | 1.50 |" in small
    assert "| 4 | 1 | 21,000 (21,000–21,000) | 3.50 |" in large   # 16 cores' k = 1 the base
    assert "21,000" not in small


def test_the_cpu_table_leaves_out_a_driver_that_counted_its_producers_start_up():
    early = {**_row(4, 21000, 0.9, cpu=0.4), "cores": 16, "producers": 6}
    later = {**early, "cpu_s": {**early["cpu_s"], "producers": 0.02}}
    assert cpu_lines([early])[-1] == "| 16 | agrawal | 4 | 1 | 400 | — | — | — | 21,000 | — |"
    assert (cpu_lines([later])[-1]
            == "| 16 | agrawal | 4 | 1 | 400 | — | 50 | 1.50 | 21,000 | 35,556 |")


def test_the_cpu_table_averages_the_main_threads_over_the_runs_that_measured_them():
    rows = [{**_row(4, 21000, 0.9, cpu=0.4), "member_main_thread_us_per_msg": m}
            for m in (300, 340)] + [_row(4, 20000, 0.9, cpu=0.4)]
    assert "| 400 | 320 (2) | 50 |" in cpu_lines(rows)[-1]


def test_the_second_half_of_the_stream_is_compared_where_it_was_measured():
    rows = [_row(1, 1000, 0.88, spread=0), _row(2, 1500, 0.86, spread=900),
            {**_row(1, 1000, 0.90, spread=0), "accuracy_second_half": 0.94},
            {**_row(2, 1500, 0.87, spread=800), "accuracy_second_half": 0.955}]
    text = "\n".join(scale_out_section(rows))
    assert "| 0.9400 (1) | — |" in text                   # one member: its own runs
    assert "| 0.9550 (1) | +1.5 pp |" in text              # only the runs that measured it
    assert "second half vs one member |" in text
    header = next(line for line in text.splitlines() if line.startswith("| members k"))
    row = next(line for line in text.splitlines() if line.startswith("| 2 |"))
    assert header.count("|") == row.count("|")


@pytest.mark.parametrize("field, value, marker", [
    ("stamp_rate", 2000.0, "timestamps of a topic that filled at 2,000 records/s"),
    # runs without the field read the model topic with kafka-python's 500 ms fetch wait
    ("model_fetch_wait_ms", 10, "the model topic read with 10 ms fetch waits"),
    # runs without the field are from before the members' warm-up
    ("warm_up", True, "members warmed up before joining"),
    # runs without the field ran every k on one broker
    ("fresh_broker", True, "a fresh broker for each k"),
    # runs without the field had partition p own attribute p mod F
    ("attribute_owners", "floor(j*P/F)", "owned by partition floor(j*P/F)"),
    # another machine's runs: its one member runs at its own speed (runs without the field
    # are pooled, as before it)
    ("batch", "vm/1234abcd", "the runs of one machine (batch `vm/1234abcd`)")])
def test_runs_of_another_setup_have_their_own_table(field, value, marker):
    rows = [_row(1, 1000, 0.90), _row(2, 1500, 0.88),
            {**_row(1, 1000, 0.91), field: value}, {**_row(2, 1600, 0.93), field: value}]
    text = "\n".join(scale_out_section(rows))
    before, after = text.split(marker)
    assert "| 2 | 1 | 1,500 (1,500–1,500) | 1.50 | 0.8800 (0.880–0.880) | −2.0 pp |" in before
    assert "| 2 | 1 | 1,600 (1,600–1,600) | 1.60 | 0.9300 (0.930–0.930) | +2.0 pp |" in after
    assert "500 ms" not in text


def test_the_figure_plots_the_default_policy_without_paced_runs(tmp_path, monkeypatch):
    """With an image folder the section draws its figure from the unpaced runs of the default
    policy only (the ratio to one member and the accuracy difference of each k) and links
    it under the intro; paced runs alone give no figure."""
    from dpstream.stream.bench import scale_report

    drawn = []
    real = scale_report._plot_scale
    monkeypatch.setattr(scale_report, "_plot_scale",
                        lambda points, path: (drawn.append(points), real(points, path)))
    default = {"relevance": "before trees"}   # the default policy's runs
    rows = [{**_row(1, 1000, 0.90), **default}, {**_row(2, 1700, 0.885), **default},
            {**_row(1, 600, 0.9, pace=600), **default},
            {**_row(2, 590, 0.88, pace=600), **default},
            _row(1, 900, 0.80), _row(2, 1900, 0.80)]   # another policy
    lines = scale_out_section(rows, tmp_path, "img/")
    assert (tmp_path / "scale_out.png").stat().st_size > 10_000
    assert lines.index("![members of one group: rate and accuracy against one member, per "
                       "machine and stream](img/scale_out.png)") < lines.index(
        next(line for line in lines if line.startswith("### ")))
    [points] = drawn
    assert [(p[3], round(p[4], 2), round(p[5], 1)) for p in points] == [(1, 1.0, 0.0),
                                                                       (2, 1.7, -1.5)]
    (tmp_path / "scale_out.png").unlink()
    assert "scale_out.png" not in "\n".join(
        scale_out_section([{**_row(1, 600, 0.9, pace=600), **default}], tmp_path))
    assert not (tmp_path / "scale_out.png").exists()


def test_differences_to_one_member_carry_their_standard_error():
    """With two runs or more on both sides the gap reads mean ± standard error (of two
    independent means); with one run on either side, the mean alone."""
    rows = [{"stream": "agrawal", "records": 100, "members": k, "msgs_per_s": 1000 * k,
             "accuracy": a, "accuracy_second_half": a + 0.05, "same_model": True,
             "trained": 100, "cores": 2, "member_windows": "share",
             "relevance": "before trees"}
            for k, a in ((1, 0.80), (1, 0.84), (2, 0.82), (2, 0.84), (3, 0.83))]
    lines = scale_out_section(rows)
    two = next(line for line in lines if line.startswith("| 2 | 2 |"))
    three = next(line for line in lines if line.startswith("| 3 | 1 |"))
    # means 0.83 and 0.82; variances 0.0002 and 0.0008 over two runs each: se = 2.2 pp
    assert two.count("+1.0 ± 2.2 pp") == 2, two      # whole stream and second half
    assert "+1.0 pp" in three and "±" not in three, three


def test_runs_that_waited_only_in_the_warm_up_have_their_own_table():
    rows = [{"stream": "agrawal", "records": 100, "members": k, "msgs_per_s": 1000 * k,
             "accuracy": 0.8, "same_model": True, "trained": 100, "cores": 2,
             "member_windows": "share", "relevance": "before trees", "await_warm_up": w}
            for k in (1, 2) for w in (False, True)]
    titles = [line for line in scale_out_section(rows) if line.startswith("### ")]
    assert len(titles) == 2 and any("`--await-warm-up`" in t for t in titles), titles
