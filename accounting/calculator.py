"""The privacy calculator behind ``dpstream privacy``: subsampled Gaussian releases.

:func:`privacy_calculation` gives either the epsilon of ``steps`` Poisson-subsampled Gaussian
releases with a given noise multiplier, or the noise multiplier that keeps them within a target
epsilon; :func:`format_calculation` prints it. See docs/accounting.md#the-privacy-calculator.
"""

from __future__ import annotations

from .accountant import RDPAccountant, calibrate_noise_multiplier

__all__ = ["PRIVACY_HELP", "format_calculation", "privacy_calculation"]

#: ``dpstream privacy --help``'s description
PRIVACY_HELP = """\
Epsilon of T Poisson-subsampled Gaussian releases (DP-SGD, S-GBDT rounds, ...), or the inverse:
the noise multiplier that achieves a target epsilon.

examples:
  dpstream privacy --noise-multiplier 5 --sample-rate 0.1 --steps 150 --delta 1e-6
  dpstream privacy --epsilon 1.0 --sample-rate 0.1 --steps 150 --delta 1e-6 --json
"""


def privacy_calculation(*, steps: int, delta: float, sample_rate: float = 1.0,
                        noise_multiplier: float | None = None, epsilon: float | None = None,
                        accountant: str = "tight") -> dict:
    """Epsilon of the releases (``noise_multiplier`` given) or the noise for ``epsilon``.

    Exactly one of ``noise_multiplier`` and ``epsilon`` must be given. The result holds the
    inputs, ``epsilon``, ``noise_multiplier``, the best RDP ``order`` and, for the inverse,
    ``target_epsilon``.

    Examples
    --------
    >>> res = privacy_calculation(noise_multiplier=5.0, sample_rate=0.1, steps=150, delta=1e-6)
    >>> round(res["epsilon"], 3) > 0, res["steps"]
    (True, 150)
    >>> inv = privacy_calculation(epsilon=res["epsilon"], sample_rate=0.1, steps=150,
    ...                           delta=1e-6)
    >>> abs(inv["noise_multiplier"] - 5.0) < 0.05
    True
    >>> print(format_calculation(res).splitlines()[0].split(" at ")[0].startswith("epsilon = "))
    True
    """
    if (noise_multiplier is None) == (epsilon is None):
        raise ValueError("give exactly one of noise_multiplier and epsilon")
    common = {"accountant": accountant, "sample_rate": sample_rate, "steps": steps,
              "delta": delta}
    if noise_multiplier is not None:
        acc = RDPAccountant(accountant=accountant)
        acc.compose_subsampled_gaussian(noise_multiplier=noise_multiplier,
                                        sample_rate=sample_rate, steps=steps)
        eps, order = acc.get_epsilon(delta=delta)
        return {**common, "noise_multiplier": noise_multiplier, "epsilon": eps, "order": order}
    cal = calibrate_noise_multiplier(epsilon=epsilon, delta=delta, sample_rate=sample_rate,
                                     steps=steps, accountant=accountant)
    return {**common, "noise_multiplier": cal.noise_multiplier, "epsilon": cal.epsilon,
            "target_epsilon": epsilon, "order": cal.order}


def format_calculation(res: dict) -> str:
    """:func:`privacy_calculation`'s result as the lines ``dpstream privacy`` prints."""
    what = (f"{res['steps']} Poisson-subsampled Gaussian release(s), sample rate "
            f"{res['sample_rate']:g}, {res['accountant']} RDP accountant")
    if "target_epsilon" in res:
        lines = [f"noise multiplier (sigma / sensitivity) = {res['noise_multiplier']:.6g}",
                 f"  achieves epsilon = {res['epsilon']:.8g} <= {res['target_epsilon']:g} at "
                 f"delta = {res['delta']:g} (best order alpha = {res['order']:g})"]
    else:
        lines = [f"epsilon = {res['epsilon']:.6g} at delta = {res['delta']:g} "
                 f"(best order alpha = {res['order']:g})",
                 f"  noise multiplier {res['noise_multiplier']:g}"]
    return "\n".join([*lines, f"  for {what}"])
