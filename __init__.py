"""dpstream — differentially private decision-tree ensembles on streams.

Subpackages: :mod:`dpstream.accounting` (mechanisms and privacy arithmetic),
:mod:`dpstream.models` (estimators), :mod:`dpstream.stream` (schema, datasets, runner, CLI),
:mod:`dpstream.connectors` (sources and sinks). The core install runs every command; a few
features need an optional extra (README, "Install"), and say which with
:class:`MissingExtraError`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.1.0"
__all__ = ["MissingExtraError", "import_extra", "load_model"]


class MissingExtraError(ImportError):
    """A feature needs a package of an optional extra that is not installed.

    The message names the feature, the package and the ``pip install 'dpstream[EXTRA]'`` line;
    the CLI prints it and exits with status 2.
    """


def import_extra(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature``, or raise :class:`MissingExtraError` naming ``extra``.

    Examples
    --------
    >>> import_extra("json", "test", "reading JSON").__name__
    'json'
    >>> try:
    ...     import_extra("no_such_module_here", "bench", "the iris dataset")
    ... except MissingExtraError as exc:
    ...     print(exc)
    the iris dataset needs the no_such_module_here package, which is not installed: pip ...
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(f"{feature} needs the {module} package, which is not "
                                f"installed: pip install 'dpstream[{extra}]'",
                                name=module) from None


def load_model(path: str) -> object:
    """A predict-only estimator from a public model file (``model.export(path)``, ``dpstream
    export``): :func:`dpstream.models.public.load_model`."""
    from .models.public import load_model as load

    return load(path)

