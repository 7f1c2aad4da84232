"""Each estimator declares its parameters once, in its ``PARAMETERS`` table: its signature,
its docstring's Parameters section and its checks follow the table (a signature default or a
bound that disagrees with the table fails here)."""

from __future__ import annotations

import inspect

import pytest

import dpstream.models as models
from dpstream.models.param_table import Param, ParamTable

ESTIMATORS = sorted((cls for cls in vars(models).values()
                     if inspect.isclass(cls) and hasattr(cls, "_unit_test_params")
                     and hasattr(cls, "learn_one") and not inspect.isabstract(cls)),
                    key=lambda c: c.__name__)
TABLED = [cls for cls in ESTIMATORS if "PARAMETERS" in {k for c in cls.__mro__
                                                          for k in vars(c)}]


def test_the_estimators_are_found():
    assert len(ESTIMATORS) == 8, [c.__name__ for c in ESTIMATORS]


@pytest.mark.parametrize("cls", TABLED, ids=lambda c: c.__name__)
def test_signature_and_docstring_follow_the_table(cls):
    assert cls.PARAMETERS.mismatches(cls) == []
    assert "{parameters}" not in cls.__doc__


def _outside(p: Param) -> list:
    """Values just outside each bound of ``p`` (and of the wrong type)."""
    if p.kind == "choice":
        return ["no such option", ["a list"]]
    if p.kind == "bool":
        return [1, "yes"]
    out = ["text", True]
    if p.lo is not None:
        out.append(p.lo if p.lo_open else p.lo - (1 if p.kind == "integer" else 1e-9))
    if p.hi is not None:
        out.append(p.hi if p.hi_open else p.hi + (1 if p.kind == "integer" else 1e-9))
    if p.kind == "integer":
        out.append(1.5)
    if not p.none_ok:
        out.append(None)
    return out


@pytest.mark.parametrize("cls", TABLED, ids=lambda c: c.__name__)
def test_every_checked_parameter_refuses_a_value_outside_its_table_row(cls):
    base = next(iter(cls._unit_test_params()))
    cls(**base)                                     # the base is valid
    checked = 0
    for p in cls.PARAMETERS:
        if p.kind == "any":
            continue
        for bad in _outside(p):
            with pytest.raises(ValueError, match=p.name):
                cls(**{**base, p.name: bad})
        checked += 1
    assert checked >= len(cls.PARAMETERS) // 2


@pytest.mark.parametrize("cls", TABLED, ids=lambda c: c.__name__)
def test_an_old_checkpoint_without_a_parameter_restores_with_the_table_value(cls):
    from dpstream.models import private_state_access
    model = cls(**next(iter(cls._unit_test_params())))
    state = dict(model.__dict__)
    gone = cls.PARAMETERS.names[-1]
    del state[gone]
    copy = cls.__new__(cls)
    with private_state_access():
        copy.__setstate__(state)
    assert getattr(copy, gone) == cls.PARAMETERS[gone].restored


def test_a_table_refuses_a_name_twice_and_a_bad_row():
    with pytest.raises(ValueError, match="twice"):
        ParamTable([Param("a", 1, "A."), Param("a", 2, "A again.")])
    with pytest.raises(ValueError, match="options"):
        Param("a", 1, "A.", "choice")
    with pytest.raises(ValueError, match="kind"):
        Param("a", 1, "A.", "float")
