"""dpstream.connectors — sources and sinks (file replay, Kafka, dead letters, checkpoints).

Connectors feed :mod:`dpstream.stream`; they import nothing of ours beyond this package, and
nothing in models or accounting imports them. Kafka classes live in
:mod:`dpstream.connectors.kafka` (imported on use). Checkpoints never hold pickles
(:mod:`dpstream.connectors.safe_state`); the one-off conversion of old pickled ones is
:mod:`dpstream.connectors.legacy_checkpoint`.
"""

from __future__ import annotations

from .checkpoint import CheckpointError, CheckpointLocked, CheckpointStore, read_checkpoint
from .files import FileSource, JsonlDeadLetterSink, file_format
from .records import SinkError, SourceError, SourceRecord, sink_key

__all__ = ["CheckpointError", "CheckpointLocked", "CheckpointStore", "FileSource",
           "JsonlDeadLetterSink", "SinkError", "SourceError", "SourceRecord", "file_format",
           "read_checkpoint", "sink_key"]
