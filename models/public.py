"""The public model file (``dpstream-model/1``): a trained model's DP release, and nothing else.

This module holds what every family shares: the format tag, the digest, the JSON checks, and
the registry through which :func:`public_model` and :func:`load_model` reach each family's
exporter and predict-only reader (:mod:`dpstream.models.boosting.public_model`,
:mod:`dpstream.models.windows.public_windows`). The format is specified in
docs/model_format.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .params import public_report

__all__ = ["PUBLIC_FORMAT", "PublicModelError", "describe", "digest", "export_model",
           "finite_or_none", "load_model", "public_model", "quiet_report", "read_public",
           "register_public"]

#: the format tag of a public model file (docs/model_format.md)
PUBLIC_FORMAT = "dpstream-model/1"

# model name -> (exporter(model) -> dict without format/digest, reader(obj) -> estimator)
_FAMILIES: dict[str, tuple[Callable[[Any], dict], Callable[[dict], Any]]] = {}


class PublicModelError(ValueError):
    """A public model file that is malformed, of another format, or altered (its digest)."""


def register_public(name: str, exporter: Callable[[Any], dict],
                    reader: Callable[[dict], Any]) -> None:
    """Let :func:`public_model` export models named ``name`` and :func:`load_model` read
    them (each family registers its estimators when it is imported)."""
    _FAMILIES[name] = (exporter, reader)


def finite_or_none(values: Any) -> list:
    """Floats for JSON: ``+inf`` (a leaf's threshold) as ``null``; NaN is refused."""
    out = np.asarray(values, dtype=np.float64)
    if np.isnan(out).any():
        raise ValueError("a released value is NaN: the model cannot be exported")
    return [None if math.isinf(v) else float(v) for v in out.tolist()]


def digest(obj: Mapping) -> str:
    """SHA-256 of the canonical JSON of every field but ``digest`` (sorted keys, no spaces)."""
    body = {k: v for k, v in obj.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def quiet_report(model: Any) -> dict:
    """``model``'s privacy report, public keys only, as JSON values (a small stream's
    warning is silenced: the report is the point)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = json.loads(json.dumps(model.privacy_report(), default=_jsonable))
    return public_report(report)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _registry() -> dict:
    # filled when the families are imported: importing this module imports dpstream.models,
    # whose __init__ imports both
    return _FAMILIES


def public_model(model: Any) -> dict:
    """The release of ``model`` as the public model file's JSON object, with its digest.

    Raises
    ------
    TypeError
        For an object that is not an exportable dpstream model.
    """
    name = type(model).__name__
    family = _registry().get(name)
    if family is None:
        raise TypeError(f"{name} cannot be exported to a public model file: the format covers "
                        f"{', '.join(sorted(_registry()))}")
    out = {"format": PUBLIC_FORMAT, **family[0](model)}
    out["digest"] = digest(out)
    return out


def describe(obj: Mapping) -> str:
    """One line on a public model file's object: the model and what it holds.

    >>> describe({"model": "RDTClassifier", "trees": None, "windows": {"windows": [1, 2]},
    ...           "privacy": {"epsilon": 1.0}})
    'RDTClassifier, 2 windows, epsilon 1.0'
    """
    trees = obj.get("trees")
    size = (f"{len(obj['windows'].get('windows', []))} windows" if obj.get("windows")
            else f"{trees['n_trees']} trees" if trees else "no trees")
    return f"{obj.get('model')}, {size}, epsilon {obj.get('privacy', {}).get('epsilon')}"


def export_model(model: Any, path: str | Path) -> dict:
    """Write the public model file of ``model`` to ``path`` (JSON); returns its object.
    (``model.export(path)`` writes an ONNX graph for a ``.onnx`` path:
    :func:`dpstream.models.onnx_export.export_file`.)"""
    obj = public_model(model)
    Path(path).write_text(json.dumps(obj, allow_nan=False) + "\n", encoding="utf-8")
    return obj


def read_public(source: str | Path | Mapping) -> dict:
    """A public model file's object from its path (or the parsed object), its format and
    digest checked (:class:`PublicModelError` otherwise); nothing is built from it."""
    if isinstance(source, Mapping):
        obj = dict(source)
    else:
        try:
            obj = json.loads(Path(source).read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise PublicModelError(f"{source}: not JSON ({exc})") from None
    if not isinstance(obj, dict) or obj.get("format") != PUBLIC_FORMAT:
        raise PublicModelError(f"not a {PUBLIC_FORMAT} file (format "
                               f"{obj.get('format') if isinstance(obj, dict) else None!r})")
    if obj.get("digest") != digest(obj):
        raise PublicModelError("the digest does not match the content: the file was altered "
                               "or truncated")
    return obj


def load_model(source: str | Path | Mapping) -> Any:
    """A predict-only estimator from a public model file (a path, or its parsed object).

    Raises
    ------
    PublicModelError
        When the file is not a ``dpstream-model/1`` file, a field is malformed, or the digest
        does not match its content.
    """
    obj = read_public(source)
    family = _registry().get(obj.get("model")) if isinstance(obj.get("model"), str) else None
    if family is None:
        raise PublicModelError(f"unknown model {obj.get('model')!r}")
    return family[1](obj)
