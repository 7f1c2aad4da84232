"""dpstream — differentially private decision-tree ensembles on streams.

Subpackages: :mod:`dpstream.accounting` (mechanisms and privacy arithmetic),
:mod:`dpstream.models` (estimators), :mod:`dpstream.stream` (schema, datasets, runner, CLI),
:mod:`dpstream.connectors` (sources and sinks).
"""

from __future__ import annotations

__version__ = "0.1.0"
