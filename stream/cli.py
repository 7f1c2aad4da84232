"""The ``dpstream`` command line.

Commands that exist today: ``privacy`` (the privacy calculator), ``run`` (the main job) and
``bench`` (accuracy by cross-validation).
Every command has ``--help``; ``--json`` prints one JSON object per result line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ..accounting import ACCOUNTANTS, RDPAccountant, calibrate_noise_multiplier

__all__ = ["main", "build_parser"]

PRIVACY_HELP = """\
Epsilon of T Poisson-subsampled Gaussian releases (DP-SGD, S-GBDT rounds, ...), or the inverse:
the noise multiplier that achieves a target epsilon.

examples:
  dpstream privacy --noise-multiplier 5 --sample-rate 0.1 --steps 150 --delta 1e-6
  dpstream privacy --epsilon 1.0 --sample-rate 0.1 --steps 150 --delta 1e-6 --json
"""


def _privacy(args: argparse.Namespace) -> dict:
    if args.noise_multiplier is not None:
        acc = RDPAccountant(accountant=args.accountant)
        acc.compose_subsampled_gaussian(noise_multiplier=args.noise_multiplier,
                                        sample_rate=args.sample_rate, steps=args.steps)
        eps, order = acc.get_epsilon(delta=args.delta)
        return {"accountant": args.accountant, "noise_multiplier": args.noise_multiplier,
                "sample_rate": args.sample_rate, "steps": args.steps, "delta": args.delta,
                "epsilon": eps, "order": order}
    cal = calibrate_noise_multiplier(epsilon=args.epsilon, delta=args.delta,
                                     sample_rate=args.sample_rate, steps=args.steps,
                                     accountant=args.accountant)
    return {"accountant": args.accountant, "noise_multiplier": cal.noise_multiplier,
            "sample_rate": args.sample_rate, "steps": args.steps, "delta": args.delta,
            "epsilon": cal.epsilon, "target_epsilon": args.epsilon, "order": cal.order}


def _print_privacy(res: dict) -> None:
    what = (f"{res['steps']} Poisson-subsampled Gaussian release(s), sample rate "
            f"{res['sample_rate']:g}, {res['accountant']} RDP accountant")
    if "target_epsilon" in res:
        print(f"noise multiplier (sigma / sensitivity) = {res['noise_multiplier']:.6g}")
        print(f"  achieves epsilon = {res['epsilon']:.8g} <= {res['target_epsilon']:g} at "
              f"delta = {res['delta']:g} (best order alpha = {res['order']:g})")
    else:
        print(f"epsilon = {res['epsilon']:.6g} at delta = {res['delta']:g} "
              f"(best order alpha = {res['order']:g})")
        print(f"  noise multiplier {res['noise_multiplier']:g}")
    print(f"  for {what}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpstream",
        description="Differentially private decision-tree ensembles on streams.",
    )
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
                        "or zhu-wang (seed 003 Thm 9)")
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
    r.set_defaults(func=_cmd_run)

    b = sub.add_parser("bench", help="accuracy at given epsilons by repeated K-fold CV",
                       description=BENCH_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--model", required=True, help="model name (sgbdt)")
    b.add_argument("--dataset", required=True,
                   help="abalone | adult | abalone-late | adult-late")
    b.add_argument("--epsilon", required=True, type=_floats, metavar="E[,E...]",
                   help="one or more total privacy budgets, comma-separated")
    b.add_argument("--repeats", type=int, default=5, help="repeats of K-fold CV (default 5)")
    b.add_argument("--folds", type=int, default=5, help="K (default 5)")
    b.add_argument("--seed", type=int, default=0, help="seed of folds and models (default 0)")
    b.add_argument("--no-individual-filter", action="store_true",
                   help="S-GBDT without the individual Renyi filter (ablation)")
    b.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a model parameter, e.g. --set n_trees=300 (repeatable)")
    b.add_argument("--json", action="store_true", help="one JSON object per epsilon")
    b.set_defaults(func=_cmd_bench)
    return parser


BENCH_HELP = """\
Mean and standard deviation of a model's test metric over repeated K-fold cross-validation
(R^2 on abalone, error on adult). The -late datasets follow seed 003 section VIII-E.

examples:
  dpstream bench --model sgbdt --dataset abalone --epsilon 0.15,0.54 --json
  dpstream bench --model sgbdt --dataset adult-late --epsilon 0.54 --no-individual-filter
"""


def _floats(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers like 0.15,0.54, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one epsilon")
    return values


def _parse_sets(items: list[str]) -> dict:
    params = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--set expects NAME=VALUE, got {item!r}")
        try:
            params[name] = json.loads(raw)
        except json.JSONDecodeError:
            params[name] = raw
    return params


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    params = _parse_sets(args.set)
    if args.no_individual_filter:
        params["individual_filter"] = False
    for eps in args.epsilon:
        def progress(done: int, total: int, eps: float = eps) -> None:
            if not args.json:
                print(f"  epsilon {eps:g}: fit {done}/{total}", end="\r", file=sys.stderr,
                      flush=True)
        res = run_bench(args.model, args.dataset, eps, repeats=args.repeats, folds=args.folds,
                        seed=args.seed, params=params, progress=progress)
        if args.json:
            print(json.dumps(res), flush=True)
        else:
            print(f"{res['model']} on {res['dataset']} at epsilon {eps:g} (delta "
                  f"{res['delta']:g}): {res['metric']} {res['mean']:.4f} +- {res['std']:.4f} "
                  f"over {res['repeats']}x{res['folds']}-fold CV, {res['seconds']:.1f} s")
    return 0


def _cmd_privacy(args: argparse.Namespace) -> int:
    res = _privacy(args)
    if args.json:
        print(json.dumps(res))
    else:
        _print_privacy(res)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from .run import main_job  # matplotlib and the datasets load only when needed

    return main_job(epsilon=args.epsilon, delta=args.delta, out=args.out, seed=args.seed,
                    as_json=args.json)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, TypeError) as exc:
        parser.exit(2, f"dpstream {args.command}: error: {exc}\n")
    return 0  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
