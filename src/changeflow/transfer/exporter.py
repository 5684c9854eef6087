"""``changeflow export``: every version of the audit as JSON Lines, and the digest that proves the file.

One line per version, entity by entity (ids in order), oldest version first::

    {"entityId": "doc#1", "version": 1, "chainHash": "...", "prevHash": "...", "actor": ..., "principal": ...,
     "executionArn": "...", "item": {<the history item exactly as stored, DynamoDB JSON>}}

``item`` is the whole stored item, every attribute whatever its name (an attribute a later version of the
workflow adds, such as ``principal``, is exported without this module knowing it), numbers as DynamoDB
stores them: the chain hashes are recomputed from it. The fields beside it are conveniences read from it
(``null`` when the item has no such attribute).

``--digest`` writes the heads of what was exported (each entity's last exported version and its chain
hash) and their Merkle root in the format of ``changeflow digest`` (``audit.digests``): ``verify_file``
proves the file against it offline, and ``changeflow verify --since-digest`` proves the live stack still
holds what was exported. Beside them the digest commits, in ``exportRoot`` (a hash over the root and them),
to what the file is checked against that the heads do not say (issue 32.11): the stack's retention window,
``historyExpires``, when it was taken, and each entity's exported versions (the first and how many), so that
a file cut down, or a digest edited to excuse it, is refused. Memory: one entity's history at a time, plus
the list of entity ids.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

from changeflow_core import chain, codec, model, store

from ..audit import digests, verify
from ..audit.retention import retention_window, unexplained_absences
from ..client import Changeflow
from ..common.errors import NotFound, UsageError

EXPORT_FORMAT = "changeflow-export/1"
EXPORT_ROOT_TAG = b"changeflow/export/v1/root\x00"
COMMITTED = ("root", "takenAt", "historyExpires", "window", "exported")  # what exportRoot covers
CONVENIENCE = ("chainHash", "prevHash", "actor", "principal", "executionArn")


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):  # B and BS as the DynamoDB JSON wire format writes them
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON")


def _plain(wire_value: dict | None) -> Any:
    if wire_value is None:
        return None
    if "S" in wire_value:
        return wire_value["S"]
    return codec.to_plain(codec.deserialize_value(wire_value))


def line_of(entity_id: str, item: dict[str, dict]) -> dict[str, Any]:
    """The export line of one stored history item."""
    line: dict[str, Any] = {"entityId": entity_id, "version": int(item[model.VERSION]["N"])}
    for name in CONVENIENCE:
        line[name] = _plain(item.get(name))
    # the chain's hashes as hex in either format (format 2 stores them as 32 bytes of Binary)
    line["chainHash"], line["prevHash"] = chain.stored_hash(item), chain.stored_prev(item)
    line["item"] = item
    return line


def export(client: Changeflow, entity_ids: list[str] | None, output: Path | None,
           digest_path: Path | None = None) -> dict[str, Any]:
    """Write every version of ``entity_ids`` (every entity when None) to ``output`` (standard output when
    None); with ``digest_path``, the digest of the heads written. Returns the counts (and the digest's root)."""
    ids = verify.entities(client) if entity_ids is None else entity_ids
    for entity_id in entity_ids or ():  # an entity named with no version: said before any file is opened
        if not store.query_history(client.dynamodb, client.history_table, entity_id, limit=1, consistent=True)[0]:
            raise NotFound(f"no such entity: {entity_id!r} has no version in history "
                           "(`changeflow verify --all` lists every entity)")
    if digest_path is not None and not writable(digest_path):  # not a whole export without the digest asked for
        raise UsageError(f"{digest_path}: cannot write the digest there (no such directory, or not writable)")
    heads, versions, ranges = [], 0, []
    try:
        with (output.open("w", encoding="utf-8") if output is not None else contextlib.nullcontext(sys.stdout)) as out:
            for entity_id in ids:
                history = digests.raw_history(client, entity_id)
                if not history and entity_ids is not None:
                    raise NotFound(f"no such entity: {entity_id!r} has no version in history "
                                   "(`changeflow verify --all` lists every entity)")
                for item in sorted(history, key=lambda i: int(i[model.VERSION]["N"])):
                    out.write(json.dumps(line_of(entity_id, item), ensure_ascii=False, separators=(",", ":"),
                                         default=_json_default) + "\n")
                    versions += 1
                if history:
                    heads.append(chain.head(entity_id, max(history, key=lambda i: int(i[model.VERSION]["N"]))))
                    ranges.append({"entityId": entity_id, "first": min(int(i[model.VERSION]["N"]) for i in history),
                                   "versions": len(history)})
    except BrokenPipeError:  # standard output's reader went away (| head): the command line stops quietly
        raise
    except OSError as exc:
        raise UsageError(f"{output}: cannot write it ({exc.strerror or exc})") from exc
    written: dict[str, Any] = {"format": EXPORT_FORMAT, "output": str(output or "-"), "entities": len(heads),
                               "versions": versions}
    if digest_path is not None:
        taken = digests.digest_of(client, heads)
        # whether a retention window may have removed the oldest versions: only then may a chain in the file
        # start above version 1 (otherwise a file missing its first versions would pass)
        taken["historyExpires"] = bool(client.history_expires)
        taken["window"] = dict(zip(("versions", "days"), retention_window(client)))
        taken["exported"] = sorted(ranges, key=lambda r: r["entityId"])
        taken["exportRoot"] = export_root(taken)
        try:
            digest_path.write_text(json.dumps(taken, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{digest_path}: cannot write the digest ({exc.strerror or exc})") from exc
        written.update(digest=str(digest_path), root=taken["root"])
    return written


def writable(path: Path) -> bool:
    """Whether a file can be written at ``path`` (checked before an export starts, so that it fails first)."""
    if path.is_dir():
        return False
    if path.exists():
        return os.access(path, os.W_OK)
    parent = path.parent if str(path.parent) else Path(".")
    return parent.is_dir() and os.access(parent, os.W_OK)


def export_root(taken: dict[str, Any]) -> str:
    """SHA-256 over the digest's root and the rest of what ``verify_file`` relies on (``COMMITTED``)."""
    committed = {name: taken.get(name) for name in COMMITTED}
    return hashlib.sha256(EXPORT_ROOT_TAG + json.dumps(committed, sort_keys=True, separators=(",", ":"),
                                                       ensure_ascii=False).encode("utf-8")).hexdigest()


def _from_json(value: Any) -> Any:
    """A value of an item read back from the file, binary (base64 in the file) as bytes again."""
    if isinstance(value, dict):
        return {k: (base64.b64decode(v) if k == "B" and isinstance(v, str) else
                    [base64.b64decode(b) for b in v] if k == "BS" and isinstance(v, list) else _from_json(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def forged_fields(number: int, line: dict[str, Any]) -> list[str]:
    """A line is exactly what ``line_of`` writes for its item: a field beside the item that says something
    else (a forged principal, actor or version), or one export never writes, is named."""
    try:
        expected = json.loads(json.dumps(line_of(line["entityId"], _from_json(line["item"])), ensure_ascii=False,
                                         default=_json_default))
    except (KeyError, TypeError, ValueError, AttributeError):
        return [f"line {number}: its 'item' is not a stored version"]
    return [f"line {number}: its {name!r} is not what its item says (forged, or not written by export)"
            for name in sorted(set(line) | set(expected)) if line.get(name, ...) != expected.get(name, ...)]


def read_export(path: Path) -> Iterator[tuple[str, list[dict[str, dict]], list[str]]]:
    """``(entityId, [items], problems)`` per entity, in file order (an export writes each entity's lines
    together); problems are lines that are not an export line."""
    current, items, problems = None, [], []
    try:
        lines = path.open(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    with lines:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
                entity_id, item = line["entityId"], line["item"]
                if not isinstance(entity_id, str) or not isinstance(item, dict):
                    raise TypeError
            except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested past the parser
                problems.append(f"line {number}: not a line of `changeflow export`")
                continue
            problems.extend(forged_fields(number, line))
            if entity_id != current:
                if current is not None:
                    yield current, items, []
                current, items = entity_id, []
            items.append(item)
    if current is not None:
        yield current, items, []
    if problems:
        yield "(file)", [], problems


def verify_file(path: Path, digest_path: Path) -> tuple[list[str], dict[str, int]]:
    """Prove an exported file against its digest, offline: the digest's root and ``exportRoot`` recomputed,
    every entity's chain recomputed from the file's items, its head compared with the digest's and its lines
    with the versions the digest says were exported (which the retention window must explain from version 1),
    each line's fields with its item, and every entity the digest names found in the file. Returns
    ``(problems, {"entities", "versions"})``."""
    taken = _read_digest(digest_path)
    problems = _digest_problems(taken)
    expected = {h["entityId"]: h for h in taken["entities"]}
    ranges = {r["entityId"]: r for r in taken.get("exported") or []} if taken.get("exportRoot") else None
    seen: set[str] = set()
    versions = 0
    for entity_id, items, bad in read_export(path):
        problems.extend(bad)
        if not items:
            continue
        if entity_id in seen:
            problems.append(f"{entity_id}: its versions are not together in the file (lines moved or added)")
        seen.add(entity_id)
        versions += len(items)
        problems.extend(f"{entity_id}: {p}" for p in _entity_problems(entity_id, items, taken, expected, ranges))
    problems.extend(f"{entity_id}: in the digest but not in the file (removed after the export)"
                    for entity_id in sorted(set(expected) - seen))
    return problems, {"entities": len(seen), "versions": versions}


def _read_digest(digest_path: Path) -> dict[str, Any]:
    try:
        taken = json.loads(digest_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{digest_path}: cannot read it ({exc.strerror or exc})") from exc
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested past the parser's depth
        raise UsageError(f"{digest_path}: not a JSON digest ({exc})") from exc
    if not isinstance(taken, dict) or taken.get("format") != chain.DIGEST_FORMAT:
        raise UsageError(f"{digest_path}: not a changeflow digest (`changeflow export --digest FILE` writes one)")
    return taken


def _digest_problems(taken: dict[str, Any]) -> list[str]:
    problems = []
    if chain.merkle_root(taken["entities"]) != taken["root"]:
        problems.append("(digest): its root does not match its entities: the digest was altered")
    if taken.get("exportRoot") is not None and export_root(taken) != taken["exportRoot"]:
        problems.append("(digest): its exportRoot does not match what it commits to (the retention window, "
                        "historyExpires, when it was taken, the versions exported): the digest was altered")
    return problems


def _entity_problems(entity_id: str, items: list[dict], taken: dict[str, Any], expected: dict[str, dict],
                     ranges: dict[str, dict] | None) -> list[str]:
    """One entity's lines against the digest. A digest without ``exportRoot`` (written before it) commits to
    no retention window: its chains must start at version 1 (``historyExpires`` beside it is not trusted)."""
    window = _window(taken) if ranges is not None else (0, 0)
    found, _ = chain.verify_chain(entity_id, items, None, anchored=any(window))
    numbers = sorted(int(i[model.VERSION]["N"]) for i in items)
    head = chain.head(entity_id, max(items, key=lambda i: int(i[model.VERSION]["N"])))
    want = expected.get(entity_id)
    if want is None:
        found.append("in the file but not in the digest (added after the export)")
    elif (int(want["version"]), want["chainHash"]) != (head["version"], head["chainHash"]):
        found.append(f"the file ends at version {head['version']} with another hash than the digest's version "
                     f"{want['version']} (versions removed, added or altered)")
    committed = (ranges or {}).get(entity_id)
    if committed is not None:
        first, count = int(committed["first"]), int(committed["versions"])
        if numbers != list(range(first, first + count)):
            found.append(f"the digest says exported versions {first}..{first + count - 1}, the file holds "
                         f"{_span(numbers)} (versions removed or added)")
    elif ranges is not None and want is not None:
        found.append("the digest does not say which of its versions were exported")
    found.extend(_unexplained(numbers, items, window, taken))
    return found


def _window(taken: dict[str, Any]) -> tuple[int, int]:
    window = taken.get("window") if isinstance(taken.get("window"), dict) else {}
    return int(window.get("versions") or 0), int(window.get("days") or 0)


def _unexplained(numbers: list[int], items: list[dict], window: tuple[int, int], taken: dict[str, Any]) -> list[str]:
    """Versions before the file's first that the retention window (as committed) had not let go when the
    export was taken (``audit.retention``, the rule ``verify`` uses)."""
    if not numbers or numbers[0] == 1:
        return []
    recorded = {int(i[model.VERSION]["N"]): int(i[model.RECORDED_AT]["N"]) for i in items if model.RECORDED_AT in i}
    absent = unexplained_absences(window, set(numbers), recorded, numbers[-1], _taken_s(taken), upto=numbers[0] - 1)
    return [f"{_span(absent)} absent from the file, which the retention window had not let go when the export "
            "was taken"] if absent else []


def _taken_s(taken: dict[str, Any]) -> float:
    try:
        return datetime.datetime.fromisoformat(str(taken.get("takenAt"))).timestamp()
    except ValueError:
        return 0.0  # no time committed: nothing was let go


def _span(numbers: list[int]) -> str:
    if not numbers:
        return "no version"
    return f"version {numbers[0]}" if len(numbers) == 1 else f"versions {numbers[0]}..{numbers[-1]}" + (
        "" if numbers == list(range(numbers[0], numbers[-1] + 1)) else " (with gaps)")
