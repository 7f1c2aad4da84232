"""The ``dpstream`` command line: it parses the flags and dispatches, nothing more.

Commands: ``privacy`` (the privacy calculator, :mod:`dpstream.accounting.calculator`), ``run``
(the main job, :mod:`dpstream.stream.run`); ``serve``, ``replay``, ``status`` and ``export``
(the Kafka service, a source to its end, a checkpoint's counters, its public model file:
:mod:`dpstream.stream.service`); ``serve-model`` (:mod:`dpstream.stream.http.api`, also
``serve``'s ``--http-*`` flags); ``bench`` / ``suite`` (:mod:`dpstream.stream.bench.commands`);
``audit`` (:mod:`dpstream.stream.audit`); ``broker`` and ``migrate-checkpoint``
(:mod:`dpstream.connectors.local_broker`, :mod:`dpstream.connectors.legacy_checkpoint`).
Every command has ``--help``; ``--json`` prints one JSON object per result line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from .. import MissingExtraError, __version__
from ..accounting import ACCOUNTANTS
from ..accounting.calculator import PRIVACY_HELP
from ..connectors.legacy_checkpoint import add_migrate_parser
from ..connectors.local_broker import BROKER_HELP
from .audit import add_audit_parser
from .http.api import add_http_arguments

__all__ = ["main", "build_parser"]

CURATOR_HELP = "also the curator-only counts: exact functions of private data, not DP"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpstream", description="Differentially private decision-tree ensembles on streams.",
        epilog=TOP_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("privacy", help="privacy calculator for subsampled Gaussian releases",
                       description=PRIVACY_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--noise-multiplier", type=float, metavar="Z",
                       help="sigma / sensitivity of each Gaussian release")
    which.add_argument("--epsilon", type=float, metavar="E",
                       help="target epsilon: print the noise multiplier that achieves it")
    p.add_argument("--sample-rate", type=float, default=1.0, metavar="Q",
                   help="Poisson sampling rate in (0, 1] (default 1: no subsampling)")
    p.add_argument("--steps", type=int, required=True, metavar="T", help="number of releases")
    p.add_argument("--delta", type=float, required=True, metavar="D", help="delta in (0, 1)")
    p.add_argument("--accountant", choices=ACCOUNTANTS, default="tight",
                   help="tight (exact subsampled-Gaussian RDP, default) "
                        "or zhu-wang (Kirschte et al. 2023, Thm 9)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_privacy)

    r = sub.add_parser("run", help="the main job on the bundled Adult data, with a report",
                       description="Run the main job on the bundled Adult data and write a report "
                                   "(report.json + PNG) to a folder it names.")
    r.add_argument("--epsilon", type=float, default=0.5, help="total privacy budget (default 0.5)")
    r.add_argument("--delta", type=float, default=5e-8, help="delta (default 5e-8)")
    r.add_argument("--out", default=None, help="report folder (default reports/run-<time>)")
    r.add_argument("--seed", type=int, default=None,
                   help="seed for tests and benchmarks only (default: OS entropy)")
    r.add_argument("--json", action="store_true", help="print one JSON summary line")
    r.add_argument("--curator", action="store_true", help="report.json: " + CURATOR_HELP)
    r.set_defaults(func=_cmd_run)

    b = sub.add_parser("bench", help="accuracy at given epsilons under the model's protocol",
                       description=BENCH_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--model", required=True, help="model name: sgbdt | dpboost | median-forest | "
                   "random-forest | rdt | rdt-sharp | greedy-forest")
    b.add_argument("--dataset", required=True,
                   help="sgbdt, dpboost: abalone | adult | abalone-late | adult-late; "
                        "median-forest, rdt, rdt-sharp: adult | iris | wine | syn5d | syn10d | "
                        "syn15d; random-forest, greedy-forest: those and synth-a .. synth-g; any "
                        "classifier: agrawal-drift")
    b.add_argument("--epsilon", required=True, type=_floats, metavar="E[,E...]",
                   help="one or more total privacy budgets, comma-separated")
    b.add_argument("--repeats", type=int, help="repeats (default: 5 for S-GBDT CV, 10 for the "
                   "random/greedy forest CV, 50 for the 90/10 holdout, 3 for agrawal-drift)")
    b.add_argument("--folds", type=int, default=None,
                   help="K of K-fold CV (default: 5 for S-GBDT, 10 for the random/greedy forest)")
    b.add_argument("--seed", type=int, default=0, help="seed of splits and models (default 0)")
    b.add_argument("--labeled-fraction", type=float, default=1.0, metavar="F",
                   help="keep the labels of this share of the training rows (semi-supervised; "
                        "default 1); rdt-sharp hands the rest over as public records")
    b.add_argument("--privacy", choices=["features_and_labels", "labels_only"], default=None,
                   help="median forest: what is private (default features_and_labels)")
    b.add_argument("--transductive", action="store_true",
                   help="median forest with --privacy labels_only: PTE (Huang et al. 2023, Alg. 4)")
    b.add_argument("--no-individual-filter", action="store_true",
                   help="S-GBDT without the individual Renyi filter (ablation)")
    b.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a model parameter, e.g. --set n_trees=300 (repeatable)")
    b.add_argument("--json", action="store_true", help="one JSON object per epsilon")
    b.set_defaults(func=_cmd_bench)

    su = sub.add_parser("suite", description=SUITE_HELP, help="the benchmark matrix, resumable, "
                        "into reports/", formatter_class=argparse.RawDescriptionHelpFormatter)
    su.add_argument("--profile", choices=["quick", "full", "smoke"], default="quick",
                    help="quick (<= 5 min: 2 epsilons, few repeats, a 5,000-record stream), "
                         "full (<= 60 min: the whole matrix) or smoke (seconds, the CI check)")
    su.add_argument("--results", metavar="PATH", help="results file, appended and resumed "
                    "(default: PROFILE.jsonl beside the page)")
    su.add_argument("--docs", metavar="PATH", help="page to render, plots in its img/ (default "
                    "reports/suite-PROFILE/benchmarks.md)")
    su.add_argument("--render-docs", action="store_true", help="render the project's own "
                    "docs/benchmarks.md from benchmarks/results/PROFILE.jsonl (make bench)")
    su.add_argument("--only", default=None, metavar="TEXT",
                    help="run only the cells whose description contains TEXT, e.g. 'sgbdt'")
    su.add_argument("--render-only", action="store_true", help="redraw the page, run nothing")
    su.add_argument("--list", action="store_true", help="list the cells and exit")
    su.set_defaults(func=_cmd_suite)

    sv = sub.add_parser("serve", help="consume a Kafka topic and train continuously",
                        description=SERVE_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sv.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka broker")
    sv.add_argument("--topic", help="topic to consume")
    sv.add_argument("--group", help="consumer group (default dpstream)")
    sv.add_argument("--schema", dest="schema_path", metavar="SCHEMA.json", help="schema file")
    sv.add_argument("--model", help="model name: sgbdt (default) | median-forest | "
                    "random-forest | rdt | greedy-forest")
    sv.add_argument("--epsilon", type=float, help="total privacy budget")
    sv.add_argument("--checkpoint-dir", metavar="DIR", help="checkpoint directory (one writer)")
    sv.add_argument("--dead-letter-topic", metavar="T", help="dead letters to this topic")
    sv.add_argument("--dead-letter-file", metavar="PATH", help="dead letters to this JSONL "
                    "file (default DIR/dead-letters.jsonl)")
    sv.add_argument("--predictions-topic", metavar="T", help="publish predictions here")
    sv.add_argument("--hold-predictions", action="store_true", default=None, help="publish "
                    "predictions after the next checkpoint, not a checkpoint per round")
    sv.add_argument("--max-message-bytes", type=int, metavar="N", help="dead letter if longer")
    sv.add_argument("--max-id-bytes", type=int, metavar="N", help="dead letter if longer")
    sv.add_argument("--metrics-port", type=int, metavar="PORT", help="/metrics and /healthz "
                    "port (default 9108; 0 = any free port)")
    sv.add_argument("--metrics-host", metavar="HOST", help="bind address (default 127.0.0.1)")
    sv.add_argument("--curator-metrics", action="store_true", default=None, help=CURATOR_HELP)
    sv.add_argument("--checkpoint-interval", type=float, metavar="S",
                    help="seconds between checkpoints without a training round (default 5)")
    sv.add_argument("--connect-timeout", type=float, metavar="S", help="give up (exit status 1) "
                    "if the broker is unreachable S seconds after the first try (default 60)")
    sv.add_argument("--session-timeout-ms", type=int, metavar="MS", help="default 6000")
    sv.add_argument("--accept-behind", action="store_true", default=None, help=BEHIND_HELP)
    sv.add_argument("--kafka-client", **KAFKA)
    sv.add_argument("--seed", type=int, help="seed for tests only (default: OS entropy)")
    sv.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="model parameter, e.g. --set round_size=1024 (repeatable)")
    ds = sv.add_argument_group("distributed S-GBDT (docs/distributed.md)")
    ds.add_argument("--board-topic", metavar="T", help="train as one party of distributed "
                    "S-GBDT with this one-partition topic as the bulletin board")
    ds.add_argument("--party", metavar="NAME", help="this party's unique name")
    ds.add_argument("--session", metavar="NAME", help="the job's name (default dpstream)")
    ds.add_argument("--parties", type=int, metavar="K", help="wait for K parties' hellos")
    ds.add_argument("--join-timeout", type=float, metavar="S",
                    help="seconds to wait for every live party to join a round (default 5)")
    ds.add_argument("--round-timeout", type=float, metavar="S", help="seconds after the seal "
                    "before a round without every vector is abandoned (default 20)")
    ds.add_argument("--aggregation", choices=("values", "sums"), help="what is summed: leaf "
                    "values (Alg. 9; default) or noisy leaf counts and sums")
    ds.add_argument("--roster", metavar="PATH", help="roster: parties' public keys, threshold")
    ds.add_argument("--board-key", metavar="PATH", help="this party's signing key (PEM)")
    sv.add_argument("--model-topic", metavar="T", help="share windows with group members on T")
    sv.add_argument("--whole-windows", action="store_true", default=None, help="with --model-"
                    "topic: full-size windows, not sized by this member's partition share")
    _held_flags(sv, "topic")
    sv.set_defaults(func=_cmd_serve)
    add_http_arguments(sub, sv)   # --http-* and serve-model

    rp = sub.add_parser("replay", help="run the service's runner over a file or topic to its end",
                        description=REPLAY_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    rp.add_argument("--source", required=True, metavar="PATH_OR_KAFKA_URL",
                    help="file (.csv/.jsonl[.gz]), adult, abalone, or kafka://HOST:PORT/TOPIC")
    rp.add_argument("--schema", metavar="SCHEMA.json", help="schema file (bundled: implied)")
    rp.add_argument("--model", default="sgbdt", help="model name: sgbdt (default) | "
                    "median-forest | random-forest | rdt | greedy-forest")
    rp.add_argument("--epsilon", type=float, required=True, help="total privacy budget")
    rp.add_argument("--label", default="y", help="CSV column holding the label (default y)")
    rp.add_argument("--checkpoint-dir", metavar="DIR",
                    help="resume from / save to DIR (default: a temporary folder removed at "
                         "exit: the checkpoint holds records)")
    rp.add_argument("--keep-checkpoint", action="store_true", help="without --checkpoint-dir: "
                    "keep the checkpoint and dead letters in a new reports/replay-<time>")
    rp.add_argument("--dead-letter-file", metavar="PATH", help="default DIR/dead-letters.jsonl "
                    "(removed with a temporary DIR)")
    rp.add_argument("--max-dead-letter-share", type=float, default=0.1, metavar="F",
                    dest="max_share", help="exit status 1 if more than this share of the "
                    "records are dead letters (default 0.1)")
    rp.add_argument("--kafka-client", default="auto", **KAFKA)
    rp.add_argument("--accept-behind", action="store_true", help=BEHIND_HELP)
    rp.add_argument("--checkpoint-interval", type=float, default=5.0, metavar="S",
                    help="with --checkpoint-dir: also every S seconds (default 5)")
    rp.add_argument("--seed", type=int, help="seed for tests and benchmarks only")
    rp.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="repeatable")
    rp.add_argument("--json", action="store_true", help="print one JSON summary")
    _held_flags(rp, "file")
    rp.set_defaults(func=_cmd_replay)

    st = sub.add_parser("status", help="counters and privacy report of a checkpoint",
                        description="Print a checkpoint's public counters, offsets and privacy "
                                    "report (no lock: works while `dpstream serve` runs).")
    st.add_argument("--checkpoint-dir", required=True, metavar="DIR",
                    help="the folder a serve or replay checkpoints to (its --checkpoint-dir)")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.add_argument("--curator", action="store_true", help=CURATOR_HELP)
    st.add_argument("--html", metavar="PATH", help="write the status page (public) to PATH")
    st.set_defaults(func=_cmd_status)

    ex = sub.add_parser("export", help="write a checkpoint's model as a public model file",
                        description="Write the DP release of a checkpoint's model (no record, "
                                    "no private state): docs/model_format.md.")
    ex.add_argument("--checkpoint-dir", required=True, metavar="DIR", help="a serve or "
                    "replay checkpoint's folder")
    ex.add_argument("-o", "--output", required=True, metavar="PATH", help="model.json, or "
                    "model.onnx for an ONNX graph (dpstream[onnx]; docs/model_format.md, ONNX)")
    ex.add_argument("--format", choices=("json", "onnx"), help="default: from PATH's suffix")
    ex.set_defaults(func=_cmd_export)

    bk = sub.add_parser("broker", help="a local Kafka broker (tansu) for trying serve",
                        description=BROKER_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_argument("--port", type=int, default=9092, help="on 127.0.0.1 (default 9092; 0: any)")
    bk.add_argument("--topic", action="append", default=[], metavar="NAME[:PARTITIONS]",
                    help="create this topic once started (repeatable; default 1 partition)")
    bk.add_argument("--json", action="store_true", help='one line {"bootstrap", "pid"} (tansu\'s)')
    bk.set_defaults(func=_cmd_broker)

    add_migrate_parser(sub)   # migrate-checkpoint: dpstream.connectors.legacy_checkpoint
    add_audit_parser(sub)   # dpstream audit (stream/audit/audit_cli.py)
    return parser


TOP_HELP = """\
Every command has --help; start with `dpstream run` (the main job on the bundled Adult data).
Documentation: README.md and docs/ of the source tree - docs/service.md (serve, replay, status,
the local broker), docs/privacy.md (what is guaranteed and what each output reveals), one page
per model (docs/sgbdt.md, docs/median_forest.md, ...). In Python: help(dpstream.models).
"""
KAFKA = {"choices": ("auto", "kafka-python", "confluent"), "help": "auto: confluent if installed"}
BEHIND_HELP = ("a partition whose checkpoint position is below its group's committed offset "
               "starts at that offset, never training the records in between (default: exit "
               "status 2; docs/reliability.md)")
SERVE_HELP = """\
Consume a Kafka topic as a consumer-group member and train the model record by record, with
exactly-once checkpoints (docs/service.md). Every flag is also an environment variable
DPSTREAM_<FLAG> (e.g. DPSTREAM_BOOTSTRAP, DPSTREAM_SCHEMA); flags win. SIGTERM/SIGINT: finish
the record, checkpoint, exit 0. A broker unreachable for --connect-timeout seconds: exit 1.
A checkpoint behind the offsets its group committed (another model's, or a rolled-back copy):
exit 2, unless --accept-behind.

example:
  dpstream serve --bootstrap 127.0.0.1:9092 --topic records --group dp --schema schema.json \\
      --epsilon 1.0 --checkpoint-dir /var/lib/dpstream --dead-letter-topic records-dlq
"""

REPLAY_HELP = """\
Replay a file (CSV with a header, or JSONL messages; plain or gzip), a bundled dataset (adult,
abalone) or a Kafka topic (kafka://HOST:PORT/TOPIC?group=G) through the service's runner until
its end; print the curator's summary (exact counts, dead-letter reasons, prequential score:
not DP, not to publish). The model's checkpoint stays in --checkpoint-dir (a later replay
resumes, learning nothing twice); without it, in a temporary folder removed at exit (it holds
records), or with --keep-checkpoint in a new reports/replay-<time>. Exit status 1: nothing learned,
dead letters over --max-dead-letter-share, or a broken source (docs/service.md, "Replay").

examples:
  dpstream replay --source adult --epsilon 1.0 --json
  dpstream replay --source records.jsonl.gz --schema schema.json --epsilon 0.5 --checkpoint-dir ck
"""

BENCH_HELP = """\
Mean and standard deviation of a model's test metric under its paper's protocol: S-GBDT and
DPBoost by repeated K-fold CV (R^2 on abalone, error on adult; the -late datasets follow
Kirschte et al. (2023) section VIII-E); the median forest and RDT by repeated random 90/10
splits (Huang et al. 2023); agrawal-drift by prequential accuracy after a concept drift.

examples:
  dpstream bench --model sgbdt --dataset abalone --epsilon 0.15,0.54 --json
  dpstream bench --model sgbdt --dataset adult-late --epsilon 0.54 --no-individual-filter
  dpstream bench --model median-forest --dataset adult --epsilon 2
  dpstream bench --model median-forest --dataset adult --epsilon 2 --labeled-fraction 0.2 \\
      --privacy labels_only --transductive
  dpstream bench --model median-forest --dataset agrawal-drift --epsilon 2 --set max_windows=null
"""

SUITE_HELP = """\
Run the benchmark matrix: every dpstream model on its paper's datasets over an epsilon grid,
beside scikit-learn (non-private), diffprivlib's DP forest, InterpretML's DP-EBM, Kirschte et
al.'s DP Mean and river's HoeffdingTree and ARF on the same splits and streams, and render a
page with a table and a plot per dataset. Page, img/ and results (one JSON line per cell; a
rerun resumes) go to reports/suite-PROFILE/ or --docs PATH; only --render-docs writes docs/.
A baseline whose package is missing shows as skipped: pip install 'dpstream[bench]'.

examples:
  dpstream suite --profile quick                  # make bench-quick: reports/suite-quick/
  dpstream suite --profile full --render-docs     # make bench: docs/benchmarks.md
  dpstream suite --profile full --only sgbdt      # just the S-GBDT cells
  dpstream suite --profile full --list            # what is done and what is left
  dpstream suite --profile full --render-only     # redraw the page from the results
"""


def _floats(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 0.15,0.54, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one epsilon")
    return values


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench.commands import bench_command
    from .run import parse_sets

    params = parse_sets(args.set)
    if args.no_individual_filter:
        params["individual_filter"] = False
    if args.privacy is not None:
        params["privacy"] = args.privacy
    if args.transductive:
        params["transductive"] = True
    return bench_command(args.model, args.dataset, args.epsilon, repeats=args.repeats,
                         folds=args.folds, seed=args.seed,
                         labeled_fraction=args.labeled_fraction, params=params,
                         as_json=args.json)


def _cmd_suite(args: argparse.Namespace) -> int:
    from .bench.commands import suite_command

    return suite_command(args.profile, results=args.results, docs=args.docs, only=args.only,
                         render_only=args.render_only, list_only=args.list,
                         render_docs=args.render_docs)


def _cmd_privacy(args: argparse.Namespace) -> int:
    from ..accounting.calculator import format_calculation, privacy_calculation

    res = privacy_calculation(steps=args.steps, delta=args.delta, sample_rate=args.sample_rate,
                              noise_multiplier=args.noise_multiplier, epsilon=args.epsilon,
                              accountant=args.accountant)
    print(json.dumps(res) if args.json else format_calculation(res))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from .run import main_job  # matplotlib and the datasets load only when needed

    return main_job(epsilon=args.epsilon, delta=args.delta, out=args.out, seed=args.seed,
                    as_json=args.json, curator=args.curator)


def _held_flags(p: argparse.ArgumentParser, labels: str) -> None:
    """Delayed labels (docs/service.md, "Delayed labels"); unset flags keep the defaults."""
    g = p.add_argument_group("delayed labels (docs/service.md)")
    g.add_argument("--label-topic" if labels == "topic" else "--labels", metavar="SOURCE",
                   help="label messages {id, y} there too (docs/service.md)")
    if labels == "topic":
        g.add_argument("--held-topic", metavar="T", help="with --model-topic: held records "
                       "handed over at a rebalance, private (default MODEL_TOPIC-held)")
    g.add_argument("--hold-unlabeled", action=argparse.BooleanOptionalAction, help="hold "
                   "records without a label for a label message (default: but the median forest)")
    for flag, kind in (("--max-held", int), ("--held-messages", int), ("--held-seconds", float)):
        g.add_argument(flag, type=kind, metavar="N", help="held records' bounds")


def _cmd_serve(args: argparse.Namespace) -> int:
    from .service import serve_command

    given = {k: v for k, v in vars(args).items()
             if k not in ("command", "func", "set") and v is not None}
    if args.set:
        from .run import parse_sets

        given["params"] = parse_sets(args.set)
    return serve_command(given)


def _cmd_replay(args: argparse.Namespace) -> int:
    from .run import parse_sets
    from .service import replay_command

    return replay_command(args.source, as_json=args.json, schema=args.schema, model=args.model,
                          epsilon=args.epsilon, checkpoint_dir=args.checkpoint_dir,
                          dead_letter_file=args.dead_letter_file, label=args.label, seed=args.seed,
                          params=parse_sets(args.set), max_dead_letter_share=args.max_share,
                          kafka_client=args.kafka_client, keep_checkpoint=args.keep_checkpoint,
                          accept_behind=args.accept_behind,
                          checkpoint_interval=args.checkpoint_interval, labels=args.labels,
                          **{k: v for k in ("hold_unlabeled", "max_held", "held_messages",
                                            "held_seconds") if (v := getattr(args, k)) is not None})


def _cmd_export(args: argparse.Namespace) -> int:
    from .service import export_command

    return export_command(args.checkpoint_dir, args.output, args.format)


def _cmd_status(args: argparse.Namespace) -> int:
    from .service import status_command

    return status_command(args.checkpoint_dir, as_json=args.json, curator=args.curator,
                          html=args.html)


def _cmd_broker(args: argparse.Namespace) -> int:
    from ..connectors.local_broker import broker_command

    return broker_command(args.port, args.topic, as_json=args.json)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..connectors import CheckpointError, CheckpointLocked, SinkError, SourceError

    try:
        status = int(args.func(args))
        sys.stdout.flush()   # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:
        return _closed_pipe()
    except (ValueError, TypeError, OSError, CheckpointError, CheckpointLocked,
            SinkError, SourceError, MissingExtraError) as exc:
        parser.exit(2, f"dpstream {args.command}: error: {exc}\n")
    return 0  # pragma: no cover


def _closed_pipe() -> int:
    """The reader of our output went away (``dpstream status --json | head``): end quietly,
    as a Unix tool killed by SIGPIPE would (status 141), with stdout pointed at /dev/null so
    that the interpreter's final flush raises nothing either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
