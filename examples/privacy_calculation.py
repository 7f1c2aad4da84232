"""A privacy calculation: budget a DP-SGD-style training and an S-GBDT run before touching data.

Run: ``python examples/privacy_calculation.py``
"""

from __future__ import annotations

import argparse

from dpstream.accounting import (
    BudgetLedger,
    RDPAccountant,
    RoundCostTable,
    calibrate_noise_multiplier,
    calibrate_sgbdt,
)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    # 1. What does 150 rounds of Poisson-subsampled Gaussian noise cost?
    acc = RDPAccountant()
    acc.compose_subsampled_gaussian(noise_multiplier=5.0, sample_rate=0.1, steps=150)
    eps, order = acc.get_epsilon(delta=1e-6)
    print(f"150 rounds, q=0.1, z=5: epsilon = {eps:.4f} at delta=1e-6 (order {order:g})")

    # 2. The inverse: how much noise for epsilon = 1?
    cal = calibrate_noise_multiplier(epsilon=1.0, delta=1e-6, sample_rate=0.1, steps=150)
    print(f"for epsilon = 1: noise multiplier {cal.noise_multiplier:.4f}")

    # 3. S-GBDT's Initialization (Kirschte et al. 2023, Alg. 7) and the individual filter's view of
    # it.
    sg = calibrate_sgbdt(epsilon=0.45, delta=5e-8, sample_rate=0.1, rounds=150, grad_clip=0.1,
                         leaf_noise_split=0.2)
    costs = RoundCostTable(order=sg.order, sigma_leaf=sg.sigma_leaf, leaf_noise_split=0.2,
                           sample_rate=0.1, grad_clip=0.1)
    print(f"S-GBDT: sigma_leaf = {sg.sigma_leaf:.3f}, alpha-hat = {sg.order:g}, "
          f"rho_max = {sg.rho_max:.4f}")
    print(f"  a record with |g| = g* may join {int(sg.rho_max // costs.max_cost)} rounds; "
          f"with g = 0, {int(sg.rho_max // costs.min_cost)}")

    # 4. A pure-DP budget for window forests: windows are disjoint, so they compose in parallel.
    ledger = BudgetLedger(total_epsilon=1.0)
    for w in range(12):
        ledger.charge(1.0, partition=f"window-{w}", label="trees of one window")
    print(f"12 disjoint windows at epsilon 1 each: the stream spent epsilon = {ledger.spent:g}")


if __name__ == "__main__":
    main()
