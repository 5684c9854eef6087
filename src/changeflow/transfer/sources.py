"""Where imported records come from, each read as plain values with exact numbers (``Decimal``):

- a JSON Lines file (``.jsonl``/``.json``, gzip or not): one JSON object per line;
- a DynamoDB "export to S3" data file (DynamoDB JSON, one ``{"Item": {...}}`` per line, ``.json.gz`` as
  DynamoDB writes it, or uncompressed): https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/S3DataExport.Output.html
- ``dynamodb://TABLE``: a live table, read with a parallel Scan of ``segments`` segments (each segment a
  thread, as the Scan page describes): https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Scan.html#Scan.ParallelScan

A line that is not JSON, or not an object, is yielded as a ``Bad`` record with its reason, for the rejects
file: the import goes on."""

from __future__ import annotations

import gzip
import json
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from changeflow_core import codec, wire

from ..common.errors import UsageError

TABLE_SCHEME = "dynamodb://"


@dataclass
class Record:
    position: str  # where it was: "line 12", "segment 3 item 40"
    values: dict[str, Any]


@dataclass
class Bad:
    position: str
    text: str
    reason: str


def describe(spec: str) -> str:
    """What kind of source ``spec`` is: ``table``, ``dynamodb-export`` or ``jsonl``."""
    if spec.startswith(TABLE_SCHEME):
        return "table"
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"{spec}: no such file (a JSON Lines file, a DynamoDB export data file, or dynamodb://TABLE)")
    first = next(_lines(path), "")
    try:
        parsed = json.loads(first) if first.strip() else None
    except ValueError:
        return "jsonl"  # the line's own error goes to the rejects file
    return "dynamodb-export" if isinstance(parsed, dict) and set(parsed) == {"Item"} else "jsonl"


def _lines(path: Path) -> Iterator[str]:
    """The file's lines (gunzipped when it is gzip), one at a time: memory does not grow with the file. A
    line that is not UTF-8 comes out with U+FFFD in it, which the JSON parser or validation refuses by name."""
    with path.open("rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    with opener(path, "rb") as lines:
        for raw in lines:
            yield raw.decode("utf-8", "replace")


def _binary(typed: Any) -> bool:
    """Whether a DynamoDB JSON value (``{"B": ...}``, ``{"M": {...}}``...) holds binary (B, BS), which a JSON
    change request cannot carry."""
    if not isinstance(typed, dict) or len(typed) != 1:
        return False  # not DynamoDB JSON: deserializing it says so
    (kind, inner), = typed.items()
    if kind in ("B", "BS"):
        return True
    if kind == "M" and isinstance(inner, dict):
        return any(_binary(v) for v in inner.values())
    if kind == "L" and isinstance(inner, list):
        return any(_binary(v) for v in inner)
    return False


def count(spec: str) -> int | None:
    """How many records a file holds (its non-blank lines), for the progress bar's ETA: one quick pass."""
    try:
        return sum(1 for line in _lines(Path(spec)) if line.strip())
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def read(spec: str, dynamodb=None, segments: int = 1) -> Iterator[Record | Bad]:
    kind = describe(spec)
    if kind == "table":
        yield from _scan(dynamodb, spec[len(TABLE_SCHEME):], segments)
        return
    for number, line in enumerate(_lines(Path(spec)), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            parsed = wire.loads(line)  # numbers exact
        except ValueError as exc:
            yield Bad(where, line.rstrip("\n"), f"not JSON: {_json_error(exc)}")
            continue
        if kind == "dynamodb-export":
            if not (isinstance(parsed, dict) and isinstance(parsed.get("Item"), dict)):
                yield Bad(where, line.rstrip("\n"), 'not a DynamoDB export line ({"Item": {...}})')
                continue
            if any(_binary(v) for v in parsed["Item"].values()):
                yield Bad(where, line.rstrip("\n"), "holds a binary value (B or BS): a JSON change request cannot "
                                                       "carry one")
                continue
            try:
                parsed = codec.deserialize_item(json.loads(line)["Item"])
            except (TypeError, ValueError, KeyError) as exc:
                yield Bad(where, line.rstrip("\n"), f"not DynamoDB JSON: {exc}")
                continue
        if not isinstance(parsed, dict):
            yield Bad(where, line.rstrip("\n"), f"a record must be a JSON object, not {type(parsed).__name__}")
            continue
        yield Record(where, parsed)


def _json_error(exc: ValueError) -> str:
    """What is wrong with one line's JSON, placed in that line: json's own message counts lines and columns
    of the text it was given, and a record's line ends with its newline (so an object left open was "line 2
    column 1" of record 37)."""
    if isinstance(exc, json.JSONDecodeError):
        text = exc.doc.splitlines()[0] if exc.doc.strip() else ""
        if exc.lineno > 1 or exc.colno > len(text.rstrip()):
            return f"{exc.msg} at the end of the line"
        return f"{exc.msg} at column {exc.colno}"
    return str(exc)


def _scan(dynamodb, table: str, segments: int) -> Iterator[Record]:
    """A parallel Scan: each segment pages in its own thread into one bounded queue (memory stays bounded
    whatever the table's size)."""
    if dynamodb is None:
        raise UsageError("dynamodb://TABLE needs a stack to read it from (--endpoint-url or --stack-name)")
    found: queue.Queue = queue.Queue(maxsize=1000)
    done = object()

    def segment(number: int) -> None:
        try:
            start, index = None, 0
            while True:
                page = dynamodb.scan(TableName=table, Segment=number, TotalSegments=segments,
                                     **({"ExclusiveStartKey": start} if start else {}))
                for item in page.get("Items", []):
                    index += 1
                    found.put(Record(f"segment {number} item {index}", codec.deserialize_item(item)))
                start = page.get("LastEvaluatedKey")
                if not start:
                    break
        except Exception as exc:  # noqa: BLE001 - handed to the reader, who raises it
            found.put(exc)
        finally:
            found.put(done)

    for number in range(segments):
        threading.Thread(target=segment, args=(number,), daemon=True, name=f"scan-{number}").start()
    running = segments
    while running:
        got = found.get()
        if got is done:
            running -= 1
        elif isinstance(got, Exception):
            raise got
        else:
            yield got
