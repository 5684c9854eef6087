"""The insider: someone with ``dynamodb:*`` on the table and write access to the files the commands wrote
(the digest the operator left in the account, an export, a proof), playing one tactic per operation.

On the table (a version of the entity, chosen by the operation's seed): ``rewrite`` its content,
``relabel-principal``/``-actor``/``-change`` its audit fields, ``delete`` it, ``swap`` it with the next,
``strip`` its chain attributes, ``forge-recomputed`` (rewrite it and recompute every hash from it to the
head, as an insider who knows the chain does), ``append-forged`` (a version after the head, hashed right).
On adopted entities: ``launder`` (rewrite version 1, strip every chain attribute, delete the record that
adoption was closed, adopt again through the CLI), ``rewrite-legacy`` (rewrite an adopted version written
before the chain), ``strip-one``, ``strip-all``. On the files: ``digest-head``, ``digest-drop``,
``export-item``, ``export-delete-line``, ``export-cut-to-head``, ``export-forge-field`` (a top-level
``principal``, ``actor`` or ``version``), ``export-flip-expiry`` (the export digest's ``historyExpires``
flipped, the entity's lines cut to its head), ``proof-edit``.

Each tactic returns what it did (``Edit``), which ``check_audit`` holds the verifiers to."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from changeflow_core import chain, model

from ...audit import digests
from .world import World

FORGED_PRINCIPAL = {"M": {"via": {"S": "api"}, "arn": {"S": "arn:aws:iam::123456789012:user/cfo"}}}


@dataclass
class Edit:
    tactic: str
    entity: str
    versions: list[int]  # the versions it touched (empty: a file or the table's own record)
    target: str  # "table", "digest", "export", "proof"
    recomputed: bool = False  # every hash recomputed: only a digest can tell
    appended: bool = False  # a version after the head: only its execution can tell
    file: Path | None = None


def _key(entity: str, version: int | None) -> dict[str, dict]:
    sk = model.LATEST_SK if version is None else model.history_sk(version)
    return {model.PK: {"S": entity}, model.SK: {"S": sk}}


def _history(world: World, entity: str) -> list[dict[str, dict]]:
    return sorted(digests.raw_history(world.cf, entity), key=lambda i: int(i[model.VERSION]["N"]))


def _put(world: World, item: dict[str, dict], latest: bool = False) -> None:
    world.cf.dynamodb.put_item(TableName=world.cf.table if latest else world.cf.history_table, Item=item)


CHAIN_ATTRIBUTES = (model.PREV_HASH, model.CHAIN_HASH)
EVERY_CHAIN_ATTRIBUTE = (*CHAIN_ATTRIBUTES, model.ADOPTION, model.REDACTION, model.REDACTED)


def _strip(world: World, entity: str, version: int | None, names: tuple[str, ...] = CHAIN_ATTRIBUTES) -> None:
    table = world.cf.table if version is None else world.cf.history_table
    world.cf.dynamodb.update_item(TableName=table, Key=_key(entity, version),
                                  UpdateExpression="REMOVE " + ", ".join(names))


def _rewrite(item: dict[str, dict]) -> dict[str, dict]:
    names = [n for n in item if chain.is_content(n)]
    if names:
        return {**item, names[0]: {"S": "rewritten by an insider"}}
    return {**item, "note": {"S": "added by an insider"}}


def _reseal(world: World, entity: str, items: list[dict[str, dict]], start: int) -> None:
    """Recompute the chain from ``items[start]`` to the head and write it (and ``v0``'s hashes) back."""
    prev = chain.stored_prev(items[start]) if model.PREV_HASH in items[start] else (
        chain.stored_hash(items[start - 1]) if start else chain.genesis(entity))
    for item in items[start:]:
        keep = model.PREV_HASH in item
        bare = {k: v for k, v in item.items() if k not in (model.PREV_HASH, model.CHAIN_HASH)}
        sealed = chain.seal(bare, prev, keep_prev=keep)
        _put(world, sealed)
        prev = chain.stored_hash(sealed)
    latest = world.cf.dynamodb.get_item(TableName=world.cf.table, Key=_key(entity, None),
                                        ConsistentRead=True).get("Item")
    if latest:
        head = sealed
        _put(world, {**latest, **{k: head[k] for k in (model.CHAIN_HASH, model.PREV_HASH) if k in head}}, latest=True)


def _expired(item: dict[str, dict], now: float) -> bool:
    """A version whose expiry has come: TTL may delete it at any moment and every read already hides it
    (docs/audit.md, what may be absent), so editing it changes nothing anyone reads."""
    expires = item.get(model.EXPIRES_AT, {}).get("N")
    return expires is not None and int(expires) <= now


def table_tactic(world: World, tactic: str, entity: str, rng: random.Random, version: int | None) -> Edit | None:
    import time

    now = time.time()
    items = [i for i in _history(world, entity) if not _expired(i, now)]  # the versions kept: the live ones
    if not items:
        return None
    numbers = [int(i[model.VERSION]["N"]) for i in items]
    v = version if version in numbers else rng.choice(numbers)
    if tactic == "rewrite-legacy":  # a version written before the chain that is still kept
        unchained = [n for n, i in zip(numbers, items) if model.CHAIN_HASH not in i]
        if not unchained:
            return None
        v = v if v in unchained else rng.choice(unchained)
    if tactic in ("strip", "strip-one"):  # a version that has chain attributes to strip
        chained = [n for n, i in zip(numbers, items) if model.CHAIN_HASH in i]
        if not chained:
            return None
        v = v if v in chained else rng.choice(chained)
    at = numbers.index(v)
    item = items[at]
    edit = Edit(tactic, entity, [v], "table")
    if tactic in ("rewrite", "rewrite-legacy"):
        _put(world, _rewrite(item))
    elif tactic == "relabel-principal":
        _put(world, {**item, model.PRINCIPAL: FORGED_PRINCIPAL})
    elif tactic == "relabel-actor":
        _put(world, {**item, model.ACTOR: {"S": "cfo@example.com"}})
    elif tactic == "relabel-change":
        _put(world, {**item, model.CHANGE_ID: {"S": "forged-change"}})
    elif tactic == "delete":
        world.cf.dynamodb.delete_item(TableName=world.cf.history_table, Key=_key(entity, v))
    elif tactic == "swap":
        if len(items) < 2:
            return None
        at = min(at, len(items) - 2)
        one, two = items[at], items[at + 1]
        keys = (model.PK, model.SK, model.VERSION)  # each keeps its number: their contents trade places
        _put(world, {**{k: one[k] for k in keys}, **{k: x for k, x in two.items() if k not in keys}})
        _put(world, {**{k: two[k] for k in keys}, **{k: x for k, x in one.items() if k not in keys}})
        edit.versions = [numbers[at], numbers[at + 1]]
    elif tactic in ("strip", "strip-one"):
        _strip(world, entity, v)
    elif tactic == "strip-all":
        for n in [None, *numbers]:
            _strip(world, entity, n)
        edit.versions = numbers
    elif tactic == "forge-recomputed":
        if len(items) < 2:
            return None
        at = min(at, len(items) - 2)  # not the head: a version the digest recorded below its head
        items[at] = _rewrite(items[at])
        _reseal(world, entity, items, at)
        edit.versions, edit.recomputed = [numbers[at]], True
    elif tactic == "append-forged":
        head = items[-1]
        forged = {**_rewrite(head), model.SK: {"S": model.history_sk(numbers[-1] + 1)},
                  model.VERSION: {"N": str(numbers[-1] + 1)}}
        forged = {k: x for k, x in forged.items() if k not in (model.PREV_HASH, model.CHAIN_HASH)}
        forged = chain.seal(forged, chain.stored_hash(head), keep_prev=model.PREV_HASH in head)
        _put(world, forged)
        latest = {**forged, model.SK: {"S": model.LATEST_SK}}
        _put(world, latest, latest=True)
        edit.versions, edit.appended = [numbers[-1] + 1], True
    elif tactic == "launder":
        _put(world, _rewrite(items[0]))
        for n in [None, *numbers]:
            _strip(world, entity, n, EVERY_CHAIN_ATTRIBUTE)
        world.cf.dynamodb.delete_item(TableName=world.cf.table, Key={
            model.PK: {"S": model.TABLE_PK}, model.SK: {"S": model.ADOPTION_CLOSED_SK}})
        again = world.cli("adopt", entity, "--reason", "routine")
        world.log.append(f"op {world.op}: the insider's adopt {entity} -> {again.status}")
        edit.versions = [numbers[0]]
    else:
        raise ValueError(f"unknown table tactic {tactic!r}")
    return edit


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in lines),
                    encoding="utf-8")


def file_tactic(world: World, tactic: str, entity: str, rng: random.Random, op: dict[str, Any]) -> Edit | None:
    if tactic.startswith("digest"):
        path = world.files.get(op["digest"])
        if path is None:
            return None
        taken = json.loads(path.read_text(encoding="utf-8"))
        mine = [h for h in taken["entities"] if h["entityId"] == entity]
        if not mine:
            return None
        if tactic == "digest-head":
            hashed = mine[0]["chainHash"] or "0" * 64
            mine[0]["chainHash"] = ("1" if hashed[0] == "0" else "0") + hashed[1:]
        else:
            taken["entities"] = [h for h in taken["entities"] if h["entityId"] != entity]
        path.write_text(json.dumps(taken, indent=1) + "\n", encoding="utf-8")
        return Edit(tactic, entity, [], "digest", file=path)
    if tactic.startswith("export"):
        path, digest = world.files.get(op["export"]), world.files.get(op["export"] + ".digest")
        if path is None or digest is None:
            return None
        lines = _lines(path)
        mine = [i for i, line in enumerate(lines) if line["entityId"] == entity]
        if not mine:
            return None
        edit = Edit(tactic, entity, [], "export", file=path)
        if tactic == "export-item":
            at = rng.choice(mine)
            lines[at]["item"] = _rewrite(lines[at]["item"])
            edit.versions = [lines[at]["version"]]
        elif tactic == "export-delete-line":
            if len(mine) < 2:
                return None
            at = rng.choice(mine[:-1])
            edit.versions = [lines[at]["version"]]
            del lines[at]
        elif tactic in ("export-cut-to-head", "export-flip-expiry"):
            if len(mine) < 2:
                return None
            edit.versions = [lines[i]["version"] for i in mine[:-1]]
            lines = [line for i, line in enumerate(lines) if i not in mine[:-1]]
            if tactic == "export-flip-expiry":
                taken = json.loads(digest.read_text(encoding="utf-8"))
                taken["historyExpires"] = not taken.get("historyExpires")
                digest.write_text(json.dumps(taken, indent=1) + "\n", encoding="utf-8")
        elif tactic == "export-forge-field":
            at = rng.choice(mine)
            field = rng.choice(["principal", "actor", "version"])
            lines[at][field] = {"principal": {"via": "api", "arn": "arn:aws:iam::123456789012:user/cfo"},
                                "actor": "cfo@example.com", "version": lines[at]["version"] + 100}[field]
            edit.versions = [lines[at]["version"] if field != "version" else lines[at]["version"] - 100]
            edit.tactic = f"export-forge-{field}"
        _write_lines(path, lines)
        return edit
    if tactic == "proof-edit":
        path = world.files.get(op["proof"])
        if path is None:
            return None
        text = path.read_text(encoding="utf-8")
        at = text.find('"chainHash"')
        quote = text.find('"', at + len('"chainHash"') + 1) if at >= 0 else -1
        if quote < 0:
            return None
        digit = text[quote + 1]
        text = text[:quote + 1] + ("1" if digit == "0" else "0") + text[quote + 2:]
        path.write_text(text, encoding="utf-8", newline="")
        return Edit(tactic, entity, [], "proof", file=path)
    raise ValueError(f"unknown file tactic {tactic!r}")
