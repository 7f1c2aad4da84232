"""River's estimator checks on every estimator that :mod:`dpstream.models` exports.

The estimators are found, not listed: every class in ``dpstream.models.__all__`` that is a river
``base.Estimator``, as river's own ``river/test_estimators.py`` finds its estimators. Each runs
``river.checks.yield_checks`` on every parameter set of its ``_unit_test_params()``, less the
checks its ``_unit_test_skips()`` names. Model-specific tests stay in each model's test file.
"""

from __future__ import annotations

import inspect

import pytest
from river import base, checks

import dpstream.models

#: the estimators the package exports today: a new one is discovered on its own, and fails
#: ``test_every_estimator_declares_its_unit_test_params`` until it declares its parameters
KNOWN = {"SGBDTClassifier", "SGBDTRegressor", "DPBoostClassifier", "DPBoostRegressor",
         "MedianForestClassifier", "RandomDecisionForestClassifier", "RDTClassifier",
         "GreedyForestClassifier"}


def iter_estimators():
    """The river estimators among ``dpstream.models.__all__``, in its order."""
    for name in dpstream.models.__all__:
        obj = getattr(dpstream.models, name)
        if inspect.isclass(obj) and issubclass(obj, base.Estimator):
            yield obj


ESTIMATORS = list(iter_estimators())


def _cases():
    for cls in ESTIMATORS:
        for i, params in enumerate(cls._unit_test_params()):
            model = cls(**params)
            skips = model._unit_test_skips()
            for check in checks.yield_checks(model):
                if check.__name__ not in skips:
                    yield pytest.param(model, check, id=f"{cls.__name__}[{i}]-{check.__name__}")


def test_every_exported_estimator_is_discovered():
    assert {cls.__name__ for cls in ESTIMATORS} >= KNOWN
    assert not any(inspect.isabstract(cls) for cls in ESTIMATORS)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_every_estimator_declares_its_unit_test_params(cls):
    """river's default, one empty parameter set, builds no model here: every estimator needs a
    schema, so each must declare its own small, fast parameters."""
    own = cls._unit_test_params.__func__
    assert own is not base.Estimator._unit_test_params.__func__, cls.__name__
    params = list(cls._unit_test_params())
    assert params and all(p.get("schema") is not None for p in params), params


@pytest.mark.parametrize(("model", "check"), list(_cases()))
def test_river_check(model, check):
    check(model.clone())
