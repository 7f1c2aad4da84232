"""File replay: CSV (with a header) and JSONL, plain or gzip, read as a stream of records.

:class:`FileSource` yields each data line as one record at offset = its 0-based data-line
number; a line that does not parse is still yielded, for the validator to reject and the runner
to dead-letter. Formats, blank lines and cut gzip files: docs/connectors.md#file-replay.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .records import SourceError, SourceRecord

__all__ = ["FileSource", "JsonlDeadLetterSink", "file_format"]


def file_format(path: str | os.PathLike) -> str:
    """``"csv"`` or ``"jsonl"`` from the file name (a ``.gz`` suffix is ignored)."""
    name = str(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    raise ValueError(f"cannot tell the format of {path}: name it .csv, .jsonl or .ndjson "
                     f"(optionally .gz)")


class FileSource:
    """Records of one file, in order, from data line ``start`` on.

    Parameters
    ----------
    path
        A ``.csv`` or ``.jsonl`` file, plain or gzip-compressed.
    start
        First data line to yield (0-based); earlier lines are read and skipped.
    fmt
        ``"csv"`` or ``"jsonl"``; by default from the name.

    Attributes
    ----------
    lines_read
        Lines read so far (the header and skipped lines included).
    blank_lines
        Blank data lines skipped so far, from line ``start`` on (a replay's summary shows
        them: a curator-only count).

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "records.csv")
    >>> _ = open(path, "w", encoding="utf-8").write("\\ufeffage,sex,y\\r\\n40,M,1\\r\\n41,F\\r\\n")
    >>> for r in FileSource(path):
    ...     print(r.offset, r.value, r.meta.get("error"))
    0 {'age': '40', 'sex': 'M', 'y': '1'} None
    1 None line has 2 fields, the header 3
    >>> _ = open(path, "a", encoding="utf-8").write("\\r\\n42,F,0\\r\\n  \\n")
    >>> source = FileSource(path)
    >>> [r.offset for r in source], source.blank_lines
    ([0, 1, 3], 2)
    """

    def __init__(self, path: str | os.PathLike, *, start: int = 0, fmt: str | None = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise SourceError(f"{self.path}: no such file")
        self.fmt = fmt or file_format(self.path)
        if self.fmt not in ("csv", "jsonl"):
            raise ValueError(f"fmt must be 'csv' or 'jsonl', got {fmt!r}")
        self.start = int(start)
        self.partition = f"file:{self.path.resolve()}"
        self.lines_read = 0
        self.blank_lines = 0

    def _open(self) -> IO[bytes]:
        fh = open(self.path, "rb")
        if fh.read(2) == b"\x1f\x8b":
            fh.seek(0)
            return gzip.GzipFile(fileobj=fh)
        fh.seek(0)
        return fh

    def _lines(self) -> Iterator[bytes]:
        """Raw lines without their line end; the first loses a UTF-8 BOM."""
        with self._open() as fh:
            first = True
            try:
                for line in fh:
                    if first:
                        line = line.removeprefix(b"\xef\xbb\xbf")
                        first = False
                    yield line.rstrip(b"\r\n")
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise SourceError(
                    f"{self.path}: compressed data ends early or is corrupt after line "
                    f"{self.lines_read} ({exc}); every complete line before it was read") from None

    def __iter__(self) -> Iterator[SourceRecord]:
        lines = self._lines()
        header: list[str] | None = None
        if self.fmt == "csv":
            for line in lines:
                self.lines_read += 1
                if line.strip():
                    header = next(csv.reader([line.decode("utf-8", "replace")]))
                    break
            if header is None:
                return
        offset = -1
        for line in lines:
            self.lines_read += 1
            offset += 1
            if offset < self.start:
                continue
            if not line.strip():
                self.blank_lines += 1
                continue
            yield self._record(line, offset, header)

    def _record(self, line: bytes, offset: int, header: list[str] | None) -> SourceRecord:
        meta = {"line": self.lines_read}
        if header is None:
            return SourceRecord(value=line, partition=self.partition, offset=offset, raw=line,
                                meta=meta)
        try:
            fields = next(csv.reader([line.decode("utf-8")]))
        except UnicodeDecodeError as exc:
            meta["error"] = f"not UTF-8 text at byte {exc.start}"
            fields = None
        except csv.Error as exc:
            meta["error"] = f"unparsable CSV: {exc}"
            fields = None
        if fields is not None and len(fields) != len(header):
            meta["error"] = f"line has {len(fields)} fields, the header {len(header)}"
            fields = None
        value = None if fields is None else dict(zip(header, fields, strict=True))
        return SourceRecord(value=value, partition=self.partition, offset=offset, raw=line,
                            meta=meta)


class JsonlDeadLetterSink:
    """Dead letters appended to a JSONL file: ``{"reason", "position", "key", "value"}`` per
    line.

    ``value`` is the original text when it is UTF-8, else ``value_base64`` holds the bytes;
    ``key`` is the text of :func:`~dpstream.connectors.records.sink_key` (the same as the Kafka
    dead-letter key). :meth:`flush` fsyncs (the runner flushes before each checkpoint, so a dead
    letter is on disk before the checkpoint that moves past its position). After a crash,
    records between the last checkpoint and the crash are processed again and their dead
    letters written again: the file is at-least-once (deduplicate by ``key``), the
    ``dead_letters`` counter exact.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: io.BufferedWriter | None = open(self.path, "ab")

    def send(self, raw: bytes, reason: str, position: dict, key: bytes | None = None) -> None:
        entry: dict = {"reason": reason, "position": position}
        if key is not None:
            entry["key"] = key.decode("utf-8")
        try:
            entry["value"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            import base64
            entry["value_base64"] = base64.b64encode(raw).decode("ascii")
        assert self._fh is not None, "sink is closed"
        self._fh.write(json.dumps(entry).encode("utf-8") + b"\n")

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self.flush()
            self._fh.close()
            self._fh = None
