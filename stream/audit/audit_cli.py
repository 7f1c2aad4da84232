"""``dpstream audit``: its flags, its printed table, its JSON line, its guesses file and its
plot. The work is :func:`~dpstream.stream.audit.audit_run.run_audit`'s.

Exit status: 0 when the lower bound is at most the promised epsilon, 1 when it is above (the
guarantee is refuted), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["add_audit_parser", "audit_command", "format_audit", "write_plot", "AUDIT_HELP",
           "MODEL_NAMES"]

#: the models the command takes (``audit_run.AUDIT_MODELS``, spelled out here so that
#: building the parser imports no model)
MODEL_NAMES = ("sgbdt", "median-forest", "random-forest", "rdt", "greedy-forest", "dpboost")

AUDIT_HELP = """\
Audit a model's privacy in one training run (Steinke, Nasr and Jagielski, NeurIPS 2023):
build a stream from the schema (synthetic records, or --source for your own data), insert
--canaries records at extreme points of the public domain with labels against the rest of
the data, each included with probability 1/2, train the model exactly as `dpstream replay`
does, attack the released model (the public model file `dpstream export` writes) and print
an empirical lower bound on epsilon at --confidence beside the promised epsilon.

The bound is a LOWER bound: above the promise it proves a bug (exit status 1); at or below
it proves nothing - a one-run audit of a sound model usually finds far less than its epsilon.
docs/privacy.md, "Auditing": the attacks, the estimator, measured figures.

examples:
  dpstream audit --schema synthetic --model sgbdt --epsilon 1
  dpstream audit --schema adult --source adult --model rdt --epsilon 8 --plot audit.png
  dpstream audit --schema schema.json --source records.jsonl --model median-forest \\
      --epsilon 1 --records 20000 --canaries 2000 --json
"""


def add_audit_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``dpstream audit`` on the CLI's sub-parsers (one call in ``build_parser``).

    >>> sub = argparse.ArgumentParser(prog="dpstream").add_subparsers()
    >>> args = add_audit_parser(sub).parse_args(["--schema", "synthetic", "--epsilon", "1"])
    >>> args.model, args.records, args.canaries, args.confidence
    ('sgbdt', 20000, 1000, 0.95)
    """
    p = sub.add_parser("audit", help="an empirical lower bound on epsilon from one run, "
                       "beside the promised epsilon", description=AUDIT_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schema", required=True, metavar="SCHEMA", help="synthetic (the "
                   "audit's own), adult, abalone, or a schema file")
    p.add_argument("--model", default="sgbdt", choices=MODEL_NAMES, help="default sgbdt")
    p.add_argument("--epsilon", type=float, required=True, metavar="E",
                   help="the promised (and trained) total privacy budget")
    p.add_argument("--records", type=int, default=20_000, metavar="N",
                   help="background records (default 20,000)")
    p.add_argument("--canaries", type=int, default=1000, metavar="M",
                   help="canaries, each included with probability 1/2 (default 1,000)")
    p.add_argument("--confidence", type=float, default=0.95, metavar="C",
                   help="confidence of the lower bound (default 0.95)")
    p.add_argument("--source", metavar="FILE", help="background records from adult, abalone "
                   "or a .jsonl / .csv file (optionally .gz) instead of synthetic ones")
    p.add_argument("--label", default="y", help="a CSV source's label column (default y)")
    p.add_argument("--seed", type=int, help="seed of the stream, coins and model, for tests "
                   "and benchmarks (default: OS entropy)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="model parameter as for replay, e.g. --set n_trees=50 (repeatable)")
    p.add_argument("--plot", metavar="PATH", help="write a PNG: the canaries' scores and "
                   "the bound of each guess rule beside the promise")
    p.add_argument("--guesses", metavar="PATH", help="write a CSV: per canary its slot, "
                   "coin, score and the guess of the rule that gave the bound")
    p.add_argument("--train-epsilon", type=float, metavar="E2", help="a negative control: "
                   "train at E2 (e.g. 1000) but hold the bound against --epsilon; a bound "
                   "above it then shows the attack's power, not a bug (exit status 1 all "
                   "the same)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=audit_command)
    return p


def _sets(items: list[str]) -> dict:
    from ..run import parse_sets  # (the models load when an audit runs, not at CLI start)

    return parse_sets(items)


def audit_command(args: argparse.Namespace) -> int:
    """Run the audit the flags describe; print it; 1 if the bound refutes the promise."""
    from .audit_run import run_audit, stderr_progress

    train = args.epsilon if args.train_epsilon is None else args.train_epsilon
    res = run_audit(schema=args.schema, model=args.model, epsilon=train,
                    promised_epsilon=args.epsilon, records=args.records,
                    canaries=args.canaries, confidence=args.confidence, source=args.source,
                    label=args.label, seed=args.seed, params=_sets(args.set),
                    progress=stderr_progress)
    if args.guesses:
        _write_guesses(res, args.guesses)
    if args.plot:
        write_plot(res, args.plot)
    print(json.dumps(res.summary()) if args.json else format_audit(res))
    return 0 if res.passed else 1


def format_audit(res: Any) -> str:
    """The human table of an :class:`~dpstream.stream.audit.audit_run.AuditResult`."""
    control = res.trained_epsilon != res.promised_epsilon
    verdict = ("no violation found (a lower bound: this proves nothing about privacy)"
               if res.passed else "FAILED: the lower bound exceeds the promise"
               + (" (a negative control: trained at a larger epsilon)" if control
                  else " - a privacy bug"))
    rule = res.rule
    rows = [
        ("model", f"{res.model} on {res.source} records ({res.schema} schema)"),
        ("promised epsilon", f"{res.promised_epsilon:g} (delta {res.delta:g})"
                             + (f", trained at {res.trained_epsilon:g}" if control else "")),
        (f"lower bound at {res.confidence:g}", f"{res.epsilon_lower:.3f} (at most "
                                               f"{res.ceiling:.2f} with {res.m} canaries"
                                               + (": this audit cannot refute the promise; "
                                                  "use more --canaries)"
                                                  if res.ceiling <= res.promised_epsilon
                                                  else ")")),
        ("canaries m / included", f"{res.m} / {res.included} (records: {res.records})"),
        ("guesses r / right v", f"{res.r} / {res.v} (in: top {rule['share_in']:.0%}, out: "
                                f"bottom {rule['share_out']:.0%}; best of {len(res.rules)} "
                                f"rules, Bonferroni)"),
        ("attack", f"{res.attack}: {res.attack_description}"),
        ("run time", f"{res.seconds['total']:.1f} s (training {res.seconds['train']:.1f} s)"),
        ("verdict", verdict),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _write_guesses(res: Any, path: str) -> None:
    lines = ["canary,slot,included,score,guess"]
    lines += [f"{i},{slot},{int(sec)},{score!r},{g}" for i, (slot, sec, score, g) in enumerate(
        zip(res.slots, res.secrets, res.scores, res.guesses, strict=True))]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_plot(res: Any, path: str) -> Path:
    """A PNG of the audit: the scores of included and excluded canaries, and the lower
    bound of each guess rule beside the promised epsilon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scores, secrets = np.asarray(res.scores), np.asarray(res.secrets, dtype=bool)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    bins = np.histogram_bin_edges(scores, bins=30)
    a.hist(scores[secrets], bins=bins, alpha=0.6, label=f"included ({secrets.sum()})")
    a.hist(scores[~secrets], bins=bins, alpha=0.6, label=f"excluded ({(~secrets).sum()})")
    a.set_xlabel(f"attack score ({res.attack})")
    a.set_ylabel("canaries")
    a.legend()
    labels = [f"{r['share_in']:.0%}/{r['share_out']:.0%}" for r in res.rules]
    b.bar(range(len(labels)), [r["epsilon_lower"] for r in res.rules], color="tab:blue")
    b.axhline(res.promised_epsilon, color="tab:red", label=f"promised {res.promised_epsilon:g}")
    b.set_xticks(range(len(labels)), labels, rotation=60, fontsize=7)
    b.set_xlabel("guess rule (in / out)")
    b.set_ylabel(f"epsilon lower bound ({res.confidence:g})")
    b.legend()
    fig.suptitle(f"dpstream audit: {res.model}, epsilon {res.promised_epsilon:g}, "
                 f"lower bound {res.epsilon_lower:.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
