"""dpstream.models — DP tree ensembles on a shared array-based tree structure.

The estimators (S-GBDT, median forest, random forests, DPBoost) land here issue by issue; this
package imports from :mod:`dpstream.accounting` only, never from connectors.
"""

from __future__ import annotations

__all__: list[str] = []
