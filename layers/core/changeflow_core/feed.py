"""The change feed (issue 36): every recorded version as one ``VersionRecorded`` event, and the running
chain check a consumer makes on what it receives.

A version enters the feed when its history item is written (an ``INSERT`` of sort key ``v#...`` in the
table's stream): the pipe (template.yaml ``FeedPipe``) filters the stream to those, its enrichment
(``functions/feed_events``) turns each into an event with ``events``, and the target publishes it. The same
function builds the events ``changeflow tail`` prints, from the same items, so a consumer of the bus, of the
Kinesis stream and of ``tail`` read one format.

An event (the ``detail`` on the bus; one JSON line with ``tail --json``)::

    {"entityId", "version", "operation", "deleted", "effectiveAt", "recordedAt", "changeId",
     "principal" (who AWS authenticated, or null), "actor" (the client's claim, or null), "reason",
     "executionArn", "chainHash", "prevHash", "contentHash", "chainForm",
     "redacts": {"version", "contentHash"} (a redaction: erase that version downstream),
     "redacted": true (this version's content was redacted before it was read),
     "sourceVersion" (a rollback), "adopts" (an adopt: the versions written before the chain it binds),
     "content" (only with FeedContent=full: the version's attributes in DynamoDB JSON, numbers exact),
     "contentOmitted" (content left out: too large for one event)}

``chainForm`` is the version as the hash chain hashes it, in DynamoDB JSON: every attribute but the key and
the expiry, its content replaced by the content's hash (``chain.redacted_form``). ``chain.link(prevHash,
chainForm)`` recomputes ``chainHash``, so a consumer checks each event against the one before it without the
content (``ChainCursor``); with the content, ``chain.content_hash(content) == contentHash`` checks it too.
Hashes are hex. Numbers in ``content`` and ``chainForm`` are DynamoDB's own strings: no JSON parser on the
way (EventBridge, Kinesis, a consumer's) turns one into a float.

Delivery is at least once and, on the bus, in no particular order: a consumer recognises a duplicate by
``(entityId, version)`` and puts an entity's versions in order by ``version`` (``changeflow.feed`` in the
toolkit does both, and fills a gap from history).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable

from . import chain, model

DETAIL_TYPE = "VersionRecorded"
CONTENT_NONE, CONTENT_FULL = "none", "full"
# One PutEvents entry is at most 256 KB (EventBridge quotas, "PutEvents entry size",
# https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html); a Kinesis record may be 1 MiB. An event
# is kept under the smaller, the envelope's fields (source, detail-type, resources, time) included: past it, the
# content is left out (``contentOmitted``) and the consumer reads the version from the read API.
MAX_EVENT_BYTES = 256 * 1024 - 2 * 1024


def is_version_record(record: dict[str, Any]) -> bool:
    """A stream record the feed publishes: a history item written (``INSERT``), with its new image. The pipe's
    filter says the same in EventBridge's pattern language (template.yaml ``FeedPipe``)."""
    keys = (record.get("dynamodb") or {}).get("Keys") or {}
    sort_key = (keys.get(model.SK) or {}).get("S", "")
    return record.get("eventName") == "INSERT" and sort_key.startswith(model.HISTORY_PREFIX)


def new_image(record: dict[str, Any]) -> dict[str, dict]:
    """The item a stream record wrote (DynamoDB JSON; binary as base64 text, as the stream's JSON carries it)."""
    return (record.get("dynamodb") or {}).get("NewImage") or {}


def _number(wire_value: dict | None) -> int | None:
    return int(Decimal(wire_value["N"])) if isinstance(wire_value, dict) and "N" in wire_value else None


def _text(wire_value: dict | None) -> str | None:
    return wire_value.get("S") if isinstance(wire_value, dict) else None


def _hex(wire_value: dict | None) -> str | None:
    """A hash attribute as hex: 32 bytes (bytes, boto3's Binary, or base64 text in JSON) or a format-1 hex string."""
    if not isinstance(wire_value, dict):
        return None
    if "B" in wire_value:
        raw = wire_value["B"]
        raw = base64.b64decode(raw) if isinstance(raw, str) else bytes(getattr(raw, "value", raw))
        return raw.hex()
    return wire_value.get("S")


def _json_wire(value: Any) -> Any:
    """A DynamoDB JSON value with binary as base64 text (what JSON can carry)."""
    if isinstance(value, dict):
        return {k: _json_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_wire(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if hasattr(value, "value") and isinstance(value.value, (bytes, bytearray)):  # boto3's Binary
        return base64.b64encode(bytes(value.value)).decode("ascii")
    return value


def _record_hex(wire_value: dict | None) -> dict[str, Any] | None:
    """A chain record (``chainRedacts``, ``chainAdopts``) with numbers as int and hashes as hex."""
    if not isinstance(wire_value, dict) or "M" not in wire_value:
        return None
    out: dict[str, Any] = {}
    for key, value in wire_value["M"].items():
        out[key] = _number(value) if "N" in value else _hex(value)
    return out


def _principal(wire_value: dict | None) -> dict[str, Any] | None:
    if not isinstance(wire_value, dict) or "M" not in wire_value:
        return None
    return {k: v.get("S", v.get("BOOL")) for k, v in wire_value["M"].items()}


def version_event(wire_item: dict[str, dict], prev_hash: str | None = None, content: str = CONTENT_NONE) -> dict:
    """The ``VersionRecorded`` event of one history item (DynamoDB JSON). ``prev_hash``: the chain hash of the
    version before it, where the item does not store it (outside a retention window it does not: the
    enrichment reads it). ``content``: ``full`` carries the version's attributes too (FeedContent)."""
    item = wire_item
    redacted = model.REDACTED in item
    form = _chain_form(item, content)
    content_hash = _hex(item[model.REDACTED]) if redacted else chain.content_hash(item)
    event: dict[str, Any] = {
        "entityId": _text(item.get(model.PK)),
        "version": _number(item.get(model.VERSION)),
        "operation": _text(item.get(model.OPERATION)),
        "deleted": bool((item.get(model.DELETED) or {}).get("BOOL", False)),
        "effectiveAt": _number(item.get(model.EFFECTIVE_AT)),
        "recordedAt": _number(item.get(model.RECORDED_AT)),
        "changeId": _text(item.get(model.CHANGE_ID)),
        "principal": _principal(item.get(model.PRINCIPAL)),
        "actor": _text(item.get(model.ACTOR)),
        "reason": _text(item.get(model.REASON)),
        "executionArn": _text(item.get(model.EXECUTION)),
        "chainHash": chain.stored_hash(item),
        "prevHash": chain.stored_prev(item) or prev_hash,
        "contentHash": content_hash,
        "chainForm": _json_wire(form) if form is not None else None,
    }
    redaction = _record_hex(item.get(model.REDACTION))
    if redaction is not None:
        event["redacts"] = {"version": redaction["version"], "contentHash": redaction["contentHash"]}
    if redacted:
        event["redacted"] = True
    if model.SOURCE_VERSION in item:
        event["sourceVersion"] = _number(item[model.SOURCE_VERSION])
    adoption = _record_hex(item.get(model.ADOPTION))
    if adoption is not None:
        event["adopts"] = adoption["versions"]
    if content == CONTENT_FULL and not redacted:
        event["content"] = _json_wire({k: v for k, v in item.items() if chain.is_content(k)})
        if size_of(event) > MAX_EVENT_BYTES:
            del event["content"]
            event["contentOmitted"] = f"over {MAX_EVENT_BYTES} bytes in one event: read version {event['version']}"
    return event


def _chain_form(item: dict[str, dict], content: str) -> dict[str, dict] | None:
    """What the chain hashes of ``item``, without its content: format 2 (and an adopt's recomputation of the
    versions written before the chain) takes the content by its hash, so the redacted form hashes the same
    (an item redacted already is that form). Format 1 hashes the content itself: its form is the whole item,
    sent only where the content may be (None otherwise)."""
    if model.REDACTED in item:
        form = dict(item)
    elif chain.format_of(item) == chain.FORMAT_1:
        form = dict(item) if content == CONTENT_FULL else None
    else:
        form = chain.redacted_form(item)
    if form is None:
        return None
    return {k: v for k, v in form.items() if k not in (model.PK, model.SK, model.EXPIRES_AT)}


def size_of(event: dict[str, Any]) -> int:
    return len(json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def previous_keys(items: Iterable[dict[str, dict]]) -> list[tuple[str, int]]:
    """``(entityId, version - 1)`` of each item that stores no ``prevHash`` and whose predecessor is not in
    ``items`` itself: what the enrichment must read to give every event its ``prevHash``."""
    items = list(items)
    present = {(_text(i.get(model.PK)), _number(i.get(model.VERSION))) for i in items}
    wanted = []
    for item in items:
        entity, version = _text(item.get(model.PK)), _number(item.get(model.VERSION))
        if chain.stored_prev(item) is None and version and version > 1 and (entity, version - 1) not in present:
            wanted.append((entity, version - 1))
    return sorted(set(wanted))


def events(items: list[dict[str, dict]], known: dict[tuple[str, int], str], content: str = CONTENT_NONE) -> list[dict]:
    """The events of ``items`` in their order; ``known``: chain hashes of versions outside ``items`` (by
    ``(entityId, version)``), read by the caller for ``previous_keys``. Version 1's ``prevHash`` is the
    entity's genesis value (``chain.genesis``)."""
    hashes = dict(known)
    for item in items:
        hashes[(_text(item.get(model.PK)), _number(item.get(model.VERSION)))] = chain.stored_hash(item)
    out = []
    for item in items:
        entity, version = _text(item.get(model.PK)), _number(item.get(model.VERSION))
        prev = chain.genesis(entity) if version == 1 else hashes.get((entity, version - 1))
        out.append(version_event(item, prev, content))
    return out


# --- the running chain check ------------------------------------------------------------------------------
class ChainBreak(Exception):
    """What a consumer received does not extend the chain it has checked so far: it must stop."""

    def __init__(self, entity_id: str, version: int, problem: str):
        super().__init__(f"entity {entity_id!r}: {problem}")
        self.entity_id, self.version, self.problem = entity_id, version, problem


@dataclass
class Head:
    """What a consumer keeps of one entity: the last version it took and that version's chain hash;
    ``legacy``: versions written before the chain it took (an adopt version binds them)."""

    version: int
    chain_hash: str | None
    legacy: list[dict[str, dict]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "chainHash": self.chain_hash}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Head":
        return cls(int(data["version"]), data.get("chainHash"))


def check_next(entity_id: str, head: Head | None, form: dict[str, dict] | None, version: int | None = None,
               chain_hash: str | None = None) -> tuple[Head, list[str]]:
    """The running check of one version, the audit's (``chain.audit_chain``) for one link: ``form`` must be
    version ``head.version + 1`` (version 1 when ``head`` is None), follow ``head``'s hash (the entity's
    genesis value for version 1, and for the adopt version after versions written before the chain), and
    hash to the hash it stores. ``(new head, notes)``; ``ChainBreak`` names the problem as ``changeflow
    verify`` does. ``form``: the history item, or an event's ``chainForm``; None for an event that carries
    none (a format-1 version without its content), whose ``version`` and ``chain_hash`` are then taken as read."""
    if form is not None:
        version, chain_hash = _number(form.get(model.VERSION)), chain.stored_hash(form)
    expected = 1 if head is None else head.version + 1
    if version != expected:
        gap = f"versions {expected}..{version - 1} are" if version - expected > 1 else f"version {expected} is"
        raise ChainBreak(entity_id, version, f"version {version}: follows version {expected - 1}; {gap} missing "
                                             "from the chain")
    if form is None:
        return Head(version, chain_hash), [f"version {version}: a format-1 version sent without its content; "
                                           "its link is not recomputed"]
    legacy = head.legacy if head is not None and head.chain_hash is None else []
    if chain_hash is None:
        if head is None or legacy:
            return Head(version, None, legacy + [form]), [f"version {version}: written before the chain; checked "
                                                          "when an adopt version binds it"]
        raise ChainBreak(entity_id, version, f"version {version}: has no chain hash (written before the chain, or "
                                             "its chain attributes were removed)")
    notes = []
    if legacy:  # the first chained version after versions written before the chain: the adopt that binds them
        adoption = _record_hex(form.get(model.ADOPTION))
        first = _number(legacy[0].get(model.VERSION))
        if adoption is None or adoption["versions"] != version - 1:
            raise ChainBreak(entity_id, version, f"version {first}: no chain hash (written before the chain, or "
                                                 "chain attributes removed), and no adopt version binds it")
        if first != 1:
            notes.append(f"versions {first}..{version - 1} adopted at version {version}; read from version {first}, "
                         "so not recomputed")
        elif chain.adoption_hash(entity_id, legacy) != adoption["chainHash"]:
            raise ChainBreak(entity_id, version, f"version 1: versions 1..{version - 1}, adopted at version "
                                                 f"{version}, changed since (their recomputed chain differs from "
                                                 "the one the adopt version recorded)")
        else:
            notes.append(f"versions 1..{version - 1} (written before the chain) adopted at version {version}")
    prev = chain.genesis(entity_id) if head is None or legacy else head.chain_hash
    stored_prev = chain.stored_prev(form)
    if prev is None:  # an anchor that is not known: the oldest version read stores no prevHash
        return Head(version, chain_hash), [f"version {version}: the oldest version read; stores no prevHash, so "
                                           "only the versions after it are recomputed"]
    if (stored_prev is not None or chain.format_of(form) == chain.FORMAT_1) and stored_prev != prev:
        raise ChainBreak(entity_id, version, f"version {version}: does not follow version {version - 1} (its "
                                             "prevHash is not that version's hash: a version was removed, "
                                             "swapped or inserted)")
    redacted_v1 = chain.format_of(form) == chain.FORMAT_1 and model.REDACTED in form
    if not redacted_v1 and chain.link(prev, form) != chain_hash:
        raise ChainBreak(entity_id, version, f"version {version}: its content or metadata changed after it was "
                                             "written (the recomputed hash differs from the stored one)")
    return Head(version, chain_hash), notes


# --- what the enrichment reads ------------------------------------------------------------------------------
BATCH_GET_KEYS = 100  # BatchGetItem: at most 100 keys a request


def read_hashes(client, history_table: str, keys: list[tuple[str, int]], attempts: int = 8) -> dict[tuple[str, int], str]:
    """The stored chain hashes of history versions ``keys`` (``(entityId, version)``), by one BatchGetItem a
    hundred keys, strongly consistent (version n-1's item was written before version n's, whose record is
    being read); a version that is not there (deleted) is simply absent. Unprocessed keys are asked again, up
    to ``attempts`` times (the SDK's own retries cover throttling of the request itself)."""
    found: dict[tuple[str, int], str] = {}
    names = {"#pk": model.PK, "#sk": model.SK, "#v": model.VERSION, "#h": model.CHAIN_HASH}
    for start in range(0, len(keys), BATCH_GET_KEYS):
        wanted = [{model.PK: {"S": entity}, model.SK: {"S": model.history_sk(version)}}
                  for entity, version in keys[start:start + BATCH_GET_KEYS]]
        request = {history_table: {"Keys": wanted, "ConsistentRead": True,
                                   "ProjectionExpression": "#pk, #sk, #v, #h", "ExpressionAttributeNames": names}}
        for _ in range(attempts):
            answer = client.batch_get_item(RequestItems=request)
            for item in answer.get("Responses", {}).get(history_table, []):
                hashed = chain.stored_hash(item)
                if hashed is not None:
                    found[(item[model.PK]["S"], _number(item[model.VERSION]))] = hashed
            request = answer.get("UnprocessedKeys") or {}
            if not request:
                break
        else:
            raise RuntimeError(f"{len(request[history_table]['Keys'])} keys left unprocessed by BatchGetItem")
    return found
