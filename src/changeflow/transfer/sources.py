"""Where imported records come from, each read as plain values with exact numbers (``Decimal``):

- a JSON Lines file (``.jsonl``/``.json``, gzip or not): one JSON object per line;
- a DynamoDB "export to S3" data file (DynamoDB JSON, one ``{"Item": {...}}`` per line, ``.json.gz`` as
  DynamoDB writes it, or uncompressed): https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/S3DataExport.Output.html
- ``dynamodb://TABLE``: a live table, read with a parallel Scan of ``segments`` segments (each segment a
  thread, as the Scan page describes): https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Scan.html#Scan.ParallelScan

A line that cannot be a record is yielded as a ``Bad`` record with its reason, for the rejects file, and the
import goes on: not UTF-8 (never read with replacement characters), a byte order mark past the file's start,
nested deeper than any record can be (counted before parsing, so no parser recursion gives up on it), longer
than ``MAX_LINE_BYTES`` (read past, never held), a key twice, not JSON, not an object; and where a gzip stream
breaks, the line it breaks in (the lines before it are read)."""

from __future__ import annotations

import gzip
import json
import queue
import re
import threading
import zlib
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from botocore.exceptions import ClientError, ParamValidationError

from changeflow_core import codec, wire
from changeflow_core.validation import MAX_REQUEST_BYTES

from ..common.errors import UsageError

TABLE_SCHEME = "dynamodb://"
BOM = b"\xef\xbb\xbf"  # U+FEFF in UTF-8, which some editors put at the start of a "UTF-8" file
MAX_LINE_BYTES = 16 * 1024 * 1024  # a line longer than this is refused without being held in memory
MAX_DEPTH = 100  # JSON nesting a record can need: 32 attribute levels, twice that in DynamoDB JSON, plus its wrapper
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


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
    with closing(_lines(path)) as lines:
        _, first = next(lines, (1, b""))
    try:
        parsed = json.loads(first.removeprefix(BOM)) if isinstance(first, bytes) and first.strip() else None
    except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep: the line's own error goes to the rejects
        return "jsonl"
    return "dynamodb-export" if isinstance(parsed, dict) and set(parsed) == {"Item"} else "jsonl"


def check_table(dynamodb, spec: str) -> None:
    """A ``dynamodb://TABLE`` source names a table of the stack's account and Region, else a UsageError naming
    it, before the import writes anything (as a missing file is refused). One Scan of one item: the permission
    the import needs anyway."""
    name = spec[len(TABLE_SCHEME):]
    missing = f"{spec}: no such table in the stack's account and Region (dynamodb://TABLE)"
    if not name:
        raise UsageError(missing)
    try:
        dynamodb.scan(TableName=name, Limit=1, Select="COUNT")
    except ParamValidationError:  # not a table name DynamoDB allows (3 to 255 of a-z, A-Z, 0-9, _ - .)
        raise UsageError(missing) from None
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("ResourceNotFoundException", "ValidationException"):
            raise UsageError(missing) from None
        raise


@dataclass
class Unreadable:
    """Where a file stops being readable (a truncated or corrupt gzip), or a line too long to hold: why."""
    text: str
    reason: str


def _lines(path: Path) -> Iterator[tuple[int, bytes | Unreadable]]:
    """``(line number, the line's bytes)``, one at a time, gunzipped when the file is gzip: memory does not grow
    with the file, nor with a line (one longer than ``MAX_LINE_BYTES`` is read past in pieces and comes out
    ``Unreadable``). A gzip stream that breaks ends the lines with an ``Unreadable`` where it broke."""
    with path.open("rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    number = 0
    with opener(path, "rb") as lines:
        while True:
            number += 1
            try:
                raw = lines.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    return
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    size = len(raw)
                    while (rest := lines.readline(1 << 20)) and not rest.endswith(b"\n"):
                        size += len(rest)
                    size += len(rest)
                    yield number, Unreadable(raw[:200].decode("utf-8", "backslashreplace") + f"... ({size:,} bytes)",
                                             f"is longer than {MAX_LINE_BYTES:,} bytes: no record can be (a change "
                                             f"request is at most {MAX_REQUEST_BYTES:,}); it was read past, not held")
                    continue
            except (EOFError, OSError, zlib.error) as exc:
                what = "the gzip stream" if gzipped else "the file"
                yield number, Unreadable("", f"{what} breaks here ({exc}): this line and the rest cannot be read "
                                             "(a truncated or corrupt file); the lines before it were read")
                return
            yield number, raw


def _text(raw: bytes, number: int) -> tuple[str | None, str | None]:
    """A line's text, or why it is refused: not UTF-8 (never read with replacement characters), a byte order
    mark anywhere but at the start of the file (RFC 8259 lets a parser skip that one)."""
    if number == 1:
        raw = raw.removeprefix(BOM)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, (f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} ({exc.reason}); JSON Lines "
                      "and DynamoDB's exports are UTF-8 (re-encode the file, e.g. iconv -f latin1 -t utf-8)")
    if text.startswith("\ufeff"):
        return None, "starts with a byte order mark (U+FEFF): only the file's first line may"
    return text, None


def _depth(text: str) -> int:
    """How deep the line's arrays and objects nest (0 when it cannot be deeper than ``MAX_DEPTH``): counted
    without parsing, because a parser recurses and a line can nest deeper than any stack."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


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
        return sum(1 for _, line in _lines(Path(spec)) if not isinstance(line, bytes) or line.strip())
    except OSError:
        return None


def read(spec: str, dynamodb=None, segments: int = 1) -> Iterator[Record | Bad]:
    kind = describe(spec)
    if kind == "table":
        yield from _scan(dynamodb, spec[len(TABLE_SCHEME):], segments)
        return
    for number, raw in _lines(Path(spec)):
        where = f"line {number}"
        if isinstance(raw, Unreadable):
            yield Bad(where, raw.text, raw.reason)
            continue
        line, refused = _text(raw, number)
        if refused is not None:
            yield Bad(where, raw.decode("utf-8", "backslashreplace").rstrip("\n"), refused)
            continue
        if not line.strip():
            continue
        line = line.rstrip("\n")
        depth = _depth(line)
        if depth > MAX_DEPTH:
            yield Bad(where, line[:200] + "...", f"nested {depth:,} levels deep: more than any record can be "
                                                  f"(DynamoDB keeps {codec.MAX_DEPTH} levels of nested attributes)")
            continue
        try:
            parsed = wire.loads(line, unique_keys=True)  # numbers exact, no key twice
        except (json.JSONDecodeError, RecursionError) as exc:
            yield Bad(where, line, f"not JSON: {_json_error(exc)}")
            continue
        except ValueError as exc:  # a key twice
            yield Bad(where, line, str(exc))
            continue
        if kind == "dynamodb-export":
            if not (isinstance(parsed, dict) and isinstance(parsed.get("Item"), dict)):
                yield Bad(where, line, 'not a DynamoDB export line ({"Item": {...}})')
                continue
            if any(_binary(v) for v in parsed["Item"].values()):
                yield Bad(where, line, "holds a binary value (B or BS): a JSON change request cannot carry one")
                continue
            try:
                parsed = codec.deserialize_item(json.loads(line)["Item"])
            except (TypeError, ValueError, KeyError) as exc:
                yield Bad(where, line, f"not DynamoDB JSON: {exc}")
                continue
        if not isinstance(parsed, dict):
            yield Bad(where, line, f"a record must be a JSON object, not {type(parsed).__name__}")
            continue
        yield Record(where, parsed)


def _json_error(exc: ValueError) -> str:
    """What is wrong with one line's JSON, placed in that line: json's own message counts lines and columns
    of the text it was given, which read as the file's ("line 37: ... line 1 column 10 (char 9)", and "line 2
    column 1" while the line kept its newline)."""
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
