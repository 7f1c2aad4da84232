"""dpstream.accounting — mechanisms and privacy arithmetic.

This package imports nothing else of dpstream (the data flow is connectors -> stream -> models
-> accounting). See ``docs/privacy.md`` for the guarantees and the formulas with references.
"""

from __future__ import annotations

from . import noise, rdp
from ._validate import (
    ParameterError,
    as_generator,
    check_delta,
    check_epsilon,
    check_integer,
    child_seed,
    run_seed,
)
from .accountant import (
    ACCOUNTANTS,
    Calibration,
    RDPAccountant,
    RoundCostTable,
    SGBDTCalibration,
    calibrate_noise_multiplier,
    calibrate_sgbdt,
    default_orders,
    subsampled_rdp,
)
from .errors import BudgetExceededError
from .exponential import ExponentialMechanism, ReportNoisyMax
from .filter import IndividualRenyiFilter
from .gaussian import (
    GaussianMechanism,
    NonSphericalGaussianMechanism,
    gaussian_delta,
    gaussian_epsilon,
)
from .gridless import GridlessChoice, GridlessExponentialMechanism
from .laplace import LaplaceMechanism
from .ledger import BudgetLedger
from .median import PrivateMedian
from .noise import secure_generator

__all__ = [
    "ACCOUNTANTS",
    "ParameterError",
    "as_generator",
    "check_integer",
    "child_seed",
    "run_seed",
    "BudgetExceededError",
    "BudgetLedger",
    "Calibration",
    "ExponentialMechanism",
    "GaussianMechanism",
    "GridlessChoice",
    "GridlessExponentialMechanism",
    "IndividualRenyiFilter",
    "LaplaceMechanism",
    "NonSphericalGaussianMechanism",
    "PrivateMedian",
    "RDPAccountant",
    "ReportNoisyMax",
    "RoundCostTable",
    "SGBDTCalibration",
    "calibrate_noise_multiplier",
    "check_delta",
    "check_epsilon",
    "calibrate_sgbdt",
    "default_orders",
    "gaussian_delta",
    "gaussian_epsilon",
    "noise",
    "rdp",
    "secure_generator",
    "subsampled_rdp",
]
