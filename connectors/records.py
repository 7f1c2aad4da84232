"""What sources yield and what sinks take: raw records with their source position.

A source position is a *partition* key (``"topic:3"`` for a Kafka partition, ``"file:/abs/path"``
for a file) and an *offset* in it (the Kafka offset, or the 0-based data-line number of a file).
The runner keeps, per partition, the next offset to process; that map is checkpointed and is
where a restarted service resumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["SourceRecord", "SourceError"]


@dataclass(frozen=True)
class SourceRecord:
    """One raw record as read from a source.

    ``value`` is what the validator decodes: the message bytes (Kafka, JSONL), or a dict of
    column -> text (CSV). ``raw`` is the original bytes for the dead-letter sink.
    """

    value: Any
    partition: str
    offset: int
    raw: bytes = b""
    meta: dict = field(default_factory=dict)

    @property
    def position(self) -> dict:
        return {"partition": self.partition, "offset": self.offset, **self.meta}


class SourceError(RuntimeError):
    """A source that cannot go on (a truncated gzip file, an unreadable path, ...)."""
