"""Each estimator's parameters declared once: a :class:`ParamTable` of :class:`Param` rows
(name, default, kind, bounds or options, one-line doc) that the constructor's checks, the
defaults of checkpoints written before a parameter existed and the class docstring's
Parameters section all read; tests/test_param_tables.py compares every estimator's signature
and docstring with its table (docs/architecture.md#parameters).
"""

from __future__ import annotations

import inspect
import math
import textwrap
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .encoding import ON_OUT_OF_DOMAIN, ON_UNKNOWN
from .params import check_integer, check_real

__all__ = ["INPUT_POLICY", "SCHEMA_DOC", "Param", "ParamTable", "documented", "own_args",
           "seed_param"]

#: ``Param.legacy`` left unset: an old checkpoint restores with the default
_DEFAULT = object()
_KINDS = ("real", "integer", "bool", "choice", "any")
_TYPES = {"real": "float", "integer": "int", "bool": "bool"}


@dataclass(frozen=True)
class Param:
    """One parameter: its ``name``, ``default``, a one-line ``doc`` and how it is checked.

    ``kind`` is ``"real"`` (a finite number within ``lo`` / ``hi``, closed unless
    ``lo_open`` / ``hi_open``), ``"integer"`` (an int within ``lo`` / ``hi``, bools refused),
    ``"bool"``, ``"choice"`` (one of ``options``) or ``"any"`` (the estimator checks it
    itself). ``none_ok``: ``None`` is accepted too. ``legacy``: the value a checkpoint
    written before the parameter existed restores with (default: ``default``).
    """

    name: str
    default: Any
    doc: str
    kind: str = "any"
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    options: tuple = ()
    none_ok: bool = False
    legacy: Any = _DEFAULT

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind of {self.name!r} must be one of {_KINDS}, got {self.kind!r}")
        if (self.kind == "choice") != bool(self.options):
            raise ValueError(f"{self.name!r}: options go with kind 'choice' and only with it")

    def check(self, value: Any) -> Any:
        """``value`` if it is valid for this parameter, else a ``ValueError`` naming it."""
        if value is None and self.none_ok:
            return None
        if self.kind == "real":
            return check_real(self.name, value, self.lo, self.hi,
                              lo_open=self.lo_open, hi_open=self.hi_open)
        if self.kind == "integer":   # (open bounds as the closed integer bounds inside them)
            return check_integer(
                self.name, value, None if self.lo is None else math.ceil(self.lo + self.lo_open),
                hi=None if self.hi is None else math.floor(self.hi - self.hi_open),
                none_ok=self.none_ok)
        if self.kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{self.name} must be True or False, got {value!r}")
            return bool(value)
        if self.kind == "choice" and (not isinstance(value, Hashable)
                                      or value not in self.options):
            raise ValueError(f"{self.name} must be one of {self.options}, got {value!r}")
        return value

    @property
    def restored(self) -> Any:
        """The value an old checkpoint without this parameter restores with."""
        return self.default if self.legacy is _DEFAULT else self.legacy

    def type_text(self) -> str:
        """The numpydoc type: ``int``, ``float``, ``{'a', 'b'}``, ..., ``default`` appended."""
        kind = ("{" + ", ".join(map(repr, self.options)) + "}" if self.kind == "choice"
                else _TYPES.get(self.kind, ""))
        if self.none_ok and kind:
            kind += " or None"
        default = f"default {self.default!r}"
        return f"{kind}, {default}" if kind else default


class ParamTable:
    """An estimator's parameters in signature order (``schema`` aside).

    ``check(obj)`` validates the attributes of ``obj`` named by the table; ``fill(state)``
    adds the missing ones to an old checkpoint's state; ``doc_section()`` writes the
    numpydoc Parameters section; ``with_defaults(**kw)`` gives a sibling's table (a
    classifier's and a regressor's defaults differ); ``+`` appends another table's rows.

    Examples
    --------
    >>> table = ParamTable([Param("n_trees", 100, "Trees per window.", "integer", lo=1),
    ...                     Param("rate", 0.5, "Shrinkage.", "real", lo=0, hi=1, lo_open=True)])
    >>> print(table.doc_section())
    Parameters
    ----------
    n_trees : int, default 100
        Trees per window.
    rate : float, default 0.5
        Shrinkage.
    >>> table["rate"].check(1.5)
    Traceback (most recent call last):
    ...
    ValueError: rate must be <= 1, got 1.5
    """

    def __init__(self, params: Iterable[Param], *, schema_doc: str | None = None):
        self.params = tuple(params)
        self.schema_doc = schema_doc
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"a parameter is declared twice: {names}")
        self._by_name = dict(zip(names, self.params, strict=True))

    def __iter__(self) -> Iterator[Param]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def __getitem__(self, name: str) -> Param:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __add__(self, other: ParamTable) -> ParamTable:
        return ParamTable([*self.params, *other.params],
                          schema_doc=self.schema_doc or other.schema_doc)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def with_defaults(self, **defaults: Any) -> ParamTable:
        unknown = set(defaults) - set(self._by_name)
        if unknown:
            raise KeyError(f"not in the table: {sorted(unknown)}")
        return ParamTable([replace(p, default=defaults[p.name]) if p.name in defaults else p
                           for p in self.params], schema_doc=self.schema_doc)

    def only(self, names: Iterable[str]) -> ParamTable:
        """The rows named, in the order given."""
        return ParamTable([self[n] for n in names], schema_doc=self.schema_doc)

    def check(self, obj: Any, skip: Iterable[str] = ()) -> None:
        """Validate ``obj``'s value of every parameter (but those in ``skip``)."""
        skip = set(skip)
        for p in self.params:
            if p.name not in skip:
                p.check(getattr(obj, p.name))

    def fill(self, state: dict) -> dict:
        """``state`` (a checkpoint's ``__dict__``) with every parameter it lacks set to the
        value an old checkpoint restores with."""
        for p in self.params:
            state.setdefault(p.name, p.restored)
        return state

    def doc_section(self, indent: int = 0) -> str:
        """The numpydoc Parameters section (``schema`` first when ``schema_doc`` is set)."""
        lines = ["Parameters", "----------"]
        if self.schema_doc:
            lines += ["schema : Schema, dict or path", *_wrap(self.schema_doc)]
        for p in self.params:
            lines += [f"{p.name} : {p.type_text()}", *_wrap(p.doc)]
        return textwrap.indent("\n".join(lines), " " * indent)

    def mismatches(self, cls: type) -> list[str]:
        """How ``cls.__init__``'s signature (``self`` and ``schema`` aside) and its docstring's
        Parameters section disagree with this table: empty when they agree."""
        out = []
        sig = [p for name, p in inspect.signature(cls.__init__).parameters.items()
               if name not in ("self", "schema")
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if tuple(p.name for p in sig) != self.names:
            out.append(f"signature {[p.name for p in sig]} != table {list(self.names)}")
        for p in sig:
            if p.name in self and not _same(p.default, self[p.name].default):
                out.append(f"{p.name}: signature default {p.default!r} != table "
                           f"{self[p.name].default!r}")
        if self.doc_section() not in textwrap.dedent(_body(cls.__doc__ or "")):
            out.append("the docstring's Parameters section is not the table's")
        return out


def _body(doc: str) -> str:
    first, _, rest = doc.partition("\n")
    return first.strip() + "\n" + textwrap.dedent(rest)


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(" ".join(text.split()), width=88, initial_indent="    ",
                         subsequent_indent="    ") or ["    "]


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    return a is b or (a == b) is True


def documented(cls: type) -> type:
    """Class decorator: the line ``{parameters}`` of ``cls.__doc__`` becomes
    ``cls.PARAMETERS.doc_section()`` at that line's indentation."""
    doc = cls.__doc__ or ""
    lines = doc.split("\n")
    at = [i for i, line in enumerate(lines) if line.strip() == "{parameters}"]
    if len(at) != 1:
        raise ValueError(f"{cls.__name__}'s docstring needs one line '{{parameters}}'")
    pad = len(lines[at[0]]) - len(lines[at[0]].lstrip())
    lines[at[0]] = cls.PARAMETERS.doc_section(indent=pad)
    cls.__doc__ = "\n".join(lines)
    return cls


#: the ``schema`` entry of every estimator's Parameters section
SCHEMA_DOC = ("The public schema (a ``Schema``, the equivalent dict, or a schema file path): "
              "feature domains and the label's range or classes. Nothing is read from the data.")

#: the input policy every estimator takes last (:mod:`~dpstream.models.encoding`)
INPUT_POLICY = ParamTable([
    Param("on_out_of_domain", "clip", "A numeric value outside the schema's domain is clipped "
          "to it (``'clip'``, counted and warned once) or raises (``'error'``).", "choice",
          options=ON_OUT_OF_DOMAIN),
    Param("on_unknown", "ignore", "A feature the schema does not declare is skipped "
          "(``'ignore'``) or raises (``'error'``).", "choice", options=ON_UNKNOWN)])


def seed_param() -> Param:
    """The ``seed`` row: ``None`` (OS entropy) or a non-negative int."""
    return Param("seed", None, "``None`` for OS entropy (use this in production); an int for "
                 "tests and benchmarks.", "integer", lo=0, none_ok=True)


def own_args(scope: dict) -> dict:
    """A constructor's ``locals()`` without ``self`` (the parameters to pass on to the base)."""
    return {k: v for k, v in scope.items() if k not in ("self", "__class__")}
