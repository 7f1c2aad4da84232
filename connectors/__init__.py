"""dpstream.connectors — sources and sinks (file replay, Kafka, dead letters, checkpoints).

Connectors feed :mod:`dpstream.stream`; nothing in models or accounting imports them.
"""

from __future__ import annotations

__all__: list[str] = []
