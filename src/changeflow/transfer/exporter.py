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
holds what was exported. Memory: one entity's history at a time, plus the list of entity ids.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Iterator

from changeflow_core import chain, codec, model

from ..audit import digests, verify
from ..client import Changeflow
from ..common.errors import NotFound, UsageError

EXPORT_FORMAT = "changeflow-export/1"
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
    heads, versions = [], 0
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
        digest_path.write_text(json.dumps(taken, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written.update(digest=str(digest_path), root=taken["root"])
    return written


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
            except (ValueError, KeyError, TypeError):
                problems.append(f"line {number}: not a line of `changeflow export`")
                continue
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
    """Prove an exported file against its digest, offline: every entity's chain recomputed from the file's
    items, its head compared with the digest's, the digest's root recomputed, and every entity the digest
    names found in the file. Returns ``(problems, {"entities", "versions"})``."""
    try:
        taken = json.loads(digest_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{digest_path}: cannot read it ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise UsageError(f"{digest_path}: not a JSON digest ({exc})") from exc
    if not isinstance(taken, dict) or taken.get("format") != chain.DIGEST_FORMAT:
        raise UsageError(f"{digest_path}: not a changeflow digest (`changeflow export --digest FILE` writes one)")
    problems: list[str] = []
    if chain.merkle_root(taken["entities"]) != taken["root"]:
        problems.append("(digest): its root does not match its entities: the digest was altered")
    expected = {h["entityId"]: h for h in taken["entities"]}
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
        found, _ = chain.verify_chain(entity_id, items, None, anchored=bool(taken.get("historyExpires")))
        problems.extend(f"{entity_id}: {p}" for p in found)
        head = chain.head(entity_id, max(items, key=lambda i: int(i[model.VERSION]["N"])))
        want = expected.get(entity_id)
        if want is None:
            problems.append(f"{entity_id}: in the file but not in the digest (added after the export)")
        elif (int(want["version"]), want["chainHash"]) != (head["version"], head["chainHash"]):
            problems.append(f"{entity_id}: the file ends at version {head['version']} with another hash than the "
                            f"digest's version {want['version']} (versions removed, added or altered)")
    problems.extend(f"{entity_id}: in the digest but not in the file (removed after the export)"
                    for entity_id in sorted(set(expected) - seen))
    return problems, {"entities": len(seen), "versions": versions}
