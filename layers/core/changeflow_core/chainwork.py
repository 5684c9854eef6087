"""The chain's own operations, as the workflow runs them (``chain`` says what they record):

- ``redact``: version m removes the content of an earlier version n. The fetch step reads version n and
  records its hashes in the change (``chainRedacts``: its version, the hash of its content, the hash of
  what remains of it); the write step writes version m with them, bound into the chain like any version;
  the history step, once m is in history, replaces item n by its redacted form (``redact``). Version m
  carries the content of the version before it, none if that is version n (v0 then holds no content).
- ``adopt``: version m binds the versions written before the chain (no chain attributes), once: it records
  how many and the hash of a chain recomputed over them (``chainAdopts``), so that stripping the chain
  from an item later is still caught.

Both take effect when the version before them did (not a change of content: valid time stays, the ratchet
never makes one stale and a later change is never stale because of one), and a
deleted entity stays deleted (the tombstone writer writes them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from botocore.exceptions import ClientError

from . import chain, items, model, names, store
from .errors import HistoryConflict, NotFound, ValidationError
from .validation import Change


def _history(client, history_table: str, entity_id: str,
             versions: tuple[int, int] | None = None) -> list[dict[str, dict]]:
    found, start = [], None
    while True:
        page, start = store.query_history(client, history_table, entity_id, newest_first=False, start_key=start,
                                          consistent=True, raw=True, versions=versions)
        found.extend(page)
        if not start:
            return found


def _raw_version(client, history_table: str, entity_id: str, version: int) -> dict[str, dict] | None:
    key = {model.PK: {"S": entity_id}, model.SK: {"S": model.history_sk(version)}}
    return client.get_item(TableName=history_table, Key=key, ConsistentRead=True).get("Item")


def adoption_closed(client, table: str) -> dict[str, dict] | None:
    """The table's record that adoption was closed (``changeflow adopt --all --close``), or ``None``."""
    key = {model.PK: {"S": model.TABLE_PK}, model.SK: {"S": model.ADOPTION_CLOSED_SK}}
    return client.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")


def prepare(client, table: str, history_table: str, change: Change, item: dict[str, Any] | None,
            latest: dict[str, Any] | None, closed_by_stack: bool = False) -> tuple[Change, dict | None]:
    """``(change with its chain record and effectiveAt, content)`` for a redact or an adopt, from the ``v0``
    item just read; ``NotFound`` or ``ValidationError`` (by name) when there is nothing it may do (an adopt
    on a stack deployed with ``ChainAdoptionClosed``, or after ``adopt --all --close``)."""
    if latest is None:
        raise NotFound(f"entity {names.shown(change.entityId)} does not exist")
    if change.operation == model.REDACT:
        record = _redaction(client, history_table, change, latest)
        erased = record[model.REDACTION]
        gone = erased["contentHash"] if latest["version"] in chain.redacted_versions(erased) else None
    else:
        if closed_by_stack:
            raise ValidationError("operation", "adoption is closed for this stack (ChainAdoptionClosed=true): every "
                                  "entity was adopted, so versions without a chain had it removed since")
        closed = adoption_closed(client, table)
        if closed is not None:
            raise ValidationError("operation", f"adoption was closed at {closed.get('closedAt', {}).get('S')}: every "
                                  "entity was adopted then, so versions without a chain had it removed since")
        record, gone = _adoption(client, history_table, change, latest), None
    gone = gone or chain.hash_text((item or {}).get(model.REDACTED))  # v0's content redacted already
    content = None
    if gone is not None:  # no copy of redacted content: its redacted form, the same hash (chain._born_redacted)
        record[model.REDACTED] = gone
    elif not latest["deleted"]:
        content = items.to_wire(items.content_of(item))
    effective_at = latest["effectiveAt"]  # not a change of content: valid time does not move
    return dataclasses.replace(change, chainRecord=record, effectiveAt=effective_at), content


def _redaction(client, history_table: str, change: Change, latest: dict[str, Any]) -> dict[str, Any]:
    n = change.redactVersion
    if n > latest["version"]:
        raise NotFound(f"entity {names.shown(change.entityId)} has no version {n} (it is at version {latest['version']})")
    target = _raw_version(client, history_table, change.entityId, n)
    expires = int(target[model.EXPIRES_AT]["N"]) if target is not None and model.EXPIRES_AT in target else None
    if target is None or items.is_expired({model.EXPIRES_AT: expires}):
        raise NotFound(f"entity {names.shown(change.entityId)} has no version {n} (missing or expired)")
    if target.get(model.DELETED, {}).get("BOOL"):
        raise ValidationError("redactVersion", f"version {n} is a deletion: it has no content to redact")
    if model.REDACTED in target:
        raise ValidationError("redactVersion", f"version {n} is redacted already")
    return {model.REDACTION: chain.redaction_record(target, _copies(client, history_table, change.entityId, target,
                                                                     latest["version"]))}


COPYING = (model.REDACT, model.ADOPT, model.ROLLBACK)  # the operations whose version copies another's content


def _copies(client, history_table: str, entity_id: str, target: dict[str, dict], newest: int) -> list[dict]:
    """The versions after ``target`` that hold its content as a copy: a redact or adopt version (which
    carries the content of the version before it) or a rollback, holding exactly the same content. One
    Query of the versions since (a redaction is rare)."""
    n, content = int(target[model.VERSION]["N"]), chain.content_hash(target)
    if newest <= n:
        return []
    found = _history(client, history_table, entity_id, versions=(n + 1, newest))
    return [w for w in found if w.get(model.OPERATION, {}).get("S") in COPYING and model.REDACTED not in w
            and not w.get(model.DELETED, {}).get("BOOL") and chain.content_hash(w) == content]


def _adoption(client, history_table: str, change: Change, latest: dict[str, Any]) -> dict[str, Any]:
    history = _history(client, history_table, change.entityId)
    legacy = []
    for wire in history:
        if chain.format_of(wire) != chain.FORMAT_LEGACY:
            if model.ADOPTION in wire:
                raise ValidationError("operation", f"entity {names.shown(change.entityId)} was adopted at version "
                                                   f"{wire[model.VERSION]['N']} already")
            break
        legacy.append(wire)
    relabelled = chain.stripped_operations(legacy)
    if relabelled:
        raise ValidationError("operation", f"{relabelled[0]}: adopt binds only versions written before the chain")
    stripped = [w for w in history[len(legacy):] if chain.format_of(w) == chain.FORMAT_LEGACY]
    if stripped:
        raise ValidationError("operation", f"version {stripped[0][model.VERSION]['N']} has no chain hash but follows "
                              "versions that have one: its chain attributes were removed (adopt binds only "
                              "versions written before the chain)")
    if not legacy:
        raise ValidationError("operation", f"entity {names.shown(change.entityId)} has no versions written before the chain: "
                                           "nothing to adopt")
    numbers = [int(w[model.VERSION]["N"]) for w in legacy]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ValidationError("operation", f"versions written before the chain are not 1..{numbers[-1]} "
                                           "(some are missing or expired): they cannot be bound")
    # anchors: the history step writes each bound version's anchor (anchor_adopted), so that the versions kept
    # are still recomputed once a retention window expires the oldest (issue 32.10)
    return {model.ADOPTION: {"versions": numbers[-1], "chainHash": chain.adoption_hash(change.entityId, legacy),
                             "anchors": 1}}


def anchor_adopted(client, history_table: str, entity_id: str, record: dict[str, Any]) -> int:
    """Write each version an adoption bound its anchor (``model.ADOPTED_PREV``: the recomputed chain's hash
    before it), once the adopt version is in history: how many it wrote now. Idempotent (the history step's
    retries); a version gone meanwhile (expired) is skipped. ``HistoryConflict`` if the versions no longer
    recompute to the hash the adoption recorded (changed since it read them)."""
    legacy = [w for w in _history(client, history_table, entity_id) if int(w[model.VERSION]["N"]) <= record["versions"]]
    if not legacy or int(legacy[0][model.VERSION]["N"]) != 1:
        return 0  # the oldest expired before the step ran: nothing to recompute the anchors from
    if chain.adoption_hash(entity_id, legacy) != record["chainHash"]:
        raise HistoryConflict(f"the versions of {names.shown(entity_id)} adopted at 1..{record['versions']} "
                              "changed since")
    written = 0
    for version, anchor in chain.adoption_anchors(entity_id, legacy).items():
        written += _anchor_one(client, history_table, entity_id, version, anchor)
    return written


def _anchor_one(client, history_table: str, entity_id: str, version: int, anchor: str) -> int:
    try:
        client.update_item(
            TableName=history_table, Key={model.PK: {"S": entity_id}, model.SK: {"S": model.history_sk(version)}},
            UpdateExpression="SET #anchor = :anchor",
            # an item still there, written before the chain, not anchored already (or anchored the same)
            ConditionExpression="attribute_exists(#pk) AND attribute_not_exists(#chainHash) AND "
                                "(attribute_not_exists(#anchor) OR #anchor = :anchor)",
            ExpressionAttributeNames={"#pk": model.PK, "#chainHash": model.CHAIN_HASH, "#anchor": model.ADOPTED_PREV},
            ExpressionAttributeValues={":anchor": {"B": bytes.fromhex(anchor)}})
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return 0
        raise
    return 1


def redact(client, history_table: str, entity_id: str, record: dict[str, Any]) -> str:
    """Replace each history item the redaction erases (the version it names and its copies) by its redacted
    form: ``redacted`` if it removed content now, else ``redacted already`` or ``gone``."""
    done = [_redact_one(client, history_table, entity_id, k, record["contentHash"])
            for k in sorted(chain.redacted_versions(record))]
    return "redacted" if "redacted" in done else done[0]


def _redact_one(client, history_table: str, entity_id: str, n: int, kept: str) -> str:
    """Replace history item ``n`` by its redacted form (``chain.redacted_form``), once: ``redacted``,
    ``redacted already`` or ``gone`` (expired meanwhile). Idempotent, so the history step's retries and
    ``changeflow repair`` may run it again; ``HistoryConflict`` if the item there is not the one the
    redaction recorded (``kept``: the hash of its content). A conditional put: a concurrent expiry tag fails it
    and a retry runs again."""
    target = _raw_version(client, history_table, entity_id, n)
    if target is None:
        return "gone"
    if model.REDACTED in target:
        if chain.hash_text(target[model.REDACTED]["B"]) == kept:
            return "redacted already"
        raise HistoryConflict(f"version {n} of {names.shown(entity_id)} was redacted, but not by this redaction")
    if chain.content_hash(target) != kept:
        raise HistoryConflict(f"version {n} of {names.shown(entity_id)} is not the version this redaction recorded")
    attribute_names = {"#chainHash": model.CHAIN_HASH, "#expiresAt": model.EXPIRES_AT}
    conditions, values = [], {}
    if model.CHAIN_HASH in target:
        conditions.append("#chainHash = :chainHash")  # the very item whose hashes were recorded
        values[":chainHash"] = target[model.CHAIN_HASH]
    else:
        conditions.append("attribute_not_exists(#chainHash)")
    if model.EXPIRES_AT in target:
        conditions.append("#expiresAt = :expiresAt")  # an expiry tag in between: read again (a retry)
        values[":expiresAt"] = target[model.EXPIRES_AT]
    else:
        conditions.append("attribute_not_exists(#expiresAt)")
    try:
        client.put_item(TableName=history_table, Item=chain.redacted_form(target),
                        ConditionExpression=" AND ".join(conditions), ExpressionAttributeNames=attribute_names,
                        **({"ExpressionAttributeValues": values} if values else {}))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            raise RedactionRaced(f"version {n} of {names.shown(entity_id)} changed while it was redacted") from exc
        raise
    return "redacted"


class RedactionRaced(Exception):
    """The item changed between the read and the conditional put (an expiry tag): the step is retried."""
