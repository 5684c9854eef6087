"""Building items and reading them back.

The ``v0`` item of version n and the history item of version n are built by the same function from the
same inputs (the change, its content, the state it was decided on, and the version and recorded time the
write step chose), so a history put that runs again after a redrive writes exactly what ``v0`` held.
A history item is the ``v0`` item with the history sort key and without the tombstone's expiry: history
expires by the retention window only.
"""

from __future__ import annotations

import json
import time
from typing import Any


from . import chain, clocks, codec, model
from .errors import ValidationError
from .validation import Change, validate_attributes

SECONDS_PER_DAY = 86_400


def latest_state(item: dict[str, Any] | None, present: bool = True) -> dict[str, Any] | None:
    """The part of a stored item a decision needs (never the content): small enough for any payload."""
    if item is None:
        return None
    return {
        "present": present,
        "version": int(item[model.VERSION]),
        "effectiveAt": int(item[model.EFFECTIVE_AT]),
        "changeIds": {k: int(v) for k, v in (item.get(model.CHANGE_IDS) or {}).items()},
        "deleted": bool(item.get(model.DELETED, False)),
        "chainHash": chain.hash_text(item.get(model.CHAIN_HASH)),  # hex in the state, whatever the format
        # the next version records no earlier (steps.write): recorded time stays in version order
        "recordedAt": int(item[model.RECORDED_AT]) if item.get(model.RECORDED_AT) is not None else None,
        # the field clocks as stored (deltas), where the item has them: a patch is decided field by field
        **{name: item[name] for name in (model.FIELD_CLOCKS, model.FIELD_CLOCK_BASE) if item.get(name) is not None},
    }


def next_change_ids(change: Change, latest: dict[str, Any] | None, version: int) -> dict[str, int]:
    """The ids ``v0`` remembers after this change: the last ``RECENT_CHANGE_IDS`` applied, whatever their
    effectiveAt, so that a change delivered again (a redelivery, or a retry of a failed execution that got
    a newer default effectiveAt) is recognised and never writes a second version. Bounded: a change id
    reused after that many other changes is no longer recognised, and ``changeflow verify`` reports the
    second version it writes."""
    ids = dict(latest["changeIds"]) if latest else {}
    ids[change.changeId] = version
    newest = sorted(ids.items(), key=lambda pair: pair[1])[-model.RECENT_CHANGE_IDS:]
    return dict(newest)


def build_latest(
    change: Change,
    content: dict[str, Any] | None,
    latest: dict[str, Any] | None,
    version: int,
    recorded_at: int,
    execution_arn: str,
    tombstone_ttl_days: int = 0,
    source_version: int | None = None,
    keep_prev: bool = True,
) -> dict[str, Any]:
    """The ``v0`` item (Python values, Decimals for numbers) for an applied change, from plain JSON content."""
    values = validate_attributes(content or {}) if change.operation != model.DELETE else None
    return latest_item(change, values, latest, version, recorded_at, execution_arn, tombstone_ttl_days,
                       source_version, keep_prev)


def latest_item(
    change: Change,
    values: dict[str, Any] | None,
    latest: dict[str, Any] | None,
    version: int,
    recorded_at: int,
    execution_arn: str,
    tombstone_ttl_days: int = 0,
    source_version: int | None = None,
    keep_prev: bool = True,
) -> dict[str, Any]:
    """The ``v0`` item from content already in the serializer's form (``from_wire``): nothing re-parsed.
    ``keep_prev``: store the previous version's hash too (a stack with a retention window: ``chain``)."""
    field_clocks = clocks.after(change, clocks.of_state(latest) if latest else None)
    item: dict[str, Any] = {
        model.PK: change.entityId,
        model.SK: model.LATEST_SK,
        model.VERSION: version,
        model.EFFECTIVE_AT: field_clocks.effective_at,  # a late patch: the newest of the fields' times
        model.CHANGE_ID: change.changeId,
        model.CHANGE_IDS: next_change_ids(change, latest, version),
        model.OPERATION: change.operation,
        model.EXECUTION: execution_arn,
        model.RECORDED_AT: recorded_at,
        **model.changes_index_keys(change.entityId, recorded_at),  # v0 only: the changes index (issue 35)
    }
    if change.principal is not None:
        item[model.PRINCIPAL] = change.principal
    if change.actor is not None:
        item[model.ACTOR] = change.actor
    if change.reason is not None:
        item[model.REASON] = change.reason
    if source_version is not None:
        item[model.SOURCE_VERSION] = source_version
    if change.operation == model.DELETE or (change.operation in model.CHAIN_OPERATIONS and latest
                                            and latest["deleted"]):  # a redact or adopt keeps a deleted entity so
        item[model.DELETED] = True
        item[model.EXPIRES_AT] = recorded_at // 1000 + tombstone_ttl_days * SECONDS_PER_DAY
    else:
        item.update(values or {})
    item.update(clocks.stored(field_clocks))
    if change.operation == model.PATCH:  # the audit answers "who changed this field" from the item itself
        item[model.PATCH_RECORD] = {"set": from_wire(change.set), "remove": list(change.remove or []),
                                    **({"superseded": list(change.superseded)} if change.superseded else {})}
    for name, record in (change.chainRecord or {}).items():  # what a redact or adopt binds into the chain
        item[name] = _stored(record)
    return sealed(item, latest, keep_prev)


def _stored(record: Any) -> Any:
    """A chain record as the item stores it: its hashes (hex in the state) as bytes, numbers as they are."""
    if isinstance(record, str):
        return bytes.fromhex(record)
    if isinstance(record, dict):
        return {k: _stored(v) for k, v in record.items()}
    return record


def patched(item: dict[str, Any], change: Change) -> dict[str, Any]:
    """A patch's new content: ``item``'s content (the fetched ``v0``) with the change's patch applied, but
    for the fields a newer change wrote (``superseded``: ``clocks``)."""
    lost = set(change.superseded or [])
    return apply_patch(content_of(item), {k: v for k, v in from_wire(change.set).items() if k not in lost},
                       [name for name in change.remove or [] if name not in lost])


def apply_patch(content: dict[str, Any], set_values: dict[str, Any], remove: list[str]) -> dict[str, Any]:
    """``content`` with ``set_values`` added or replacing (top-level fields, values replaced whole) and
    the ``remove`` fields dropped (one that is not there is dropped already)."""
    result = {**content, **set_values}
    for name in remove:
        result.pop(name, None)
    return result


def sealed(item: dict[str, Any], latest: dict[str, Any] | None, keep_prev: bool = True) -> dict[str, Any]:
    """``item`` with its link of the hash chain (format 2, ``chain``): this version's hash from the fetched
    version's (or the entity's genesis value), computed from data the write step already has; the
    previous hash stored too where ``keep_prev``."""
    prev = (latest or {}).get("chainHash") or chain.genesis(item[model.PK])
    linked = chain.seal(codec.serialize_item(item), prev, keep_prev)
    if keep_prev:
        item[model.PREV_HASH] = linked[model.PREV_HASH]["B"]
    item[model.CHAIN_HASH] = linked[model.CHAIN_HASH]["B"]
    return item


def to_wire(values: dict[str, Any]) -> dict[str, dict]:
    """Content as DynamoDB's JSON (numbers as strings): the form the workflow carries it in between
    steps, so that no JSON round trip (Step Functions, the Lambda runtime) can turn a number into a float."""
    return codec.serialize_item(values)


def from_wire(wire: dict[str, dict] | None) -> dict[str, Any]:
    """Content carried as DynamoDB's JSON back to the serializer's values (exact Decimals, sets, bytes)."""
    return {name: codec.deserialize_value(value) for name, value in (wire or {}).items()}


def wire_size(wire: Any) -> int:
    """Bytes a value adds to a state's input or output, counted the largest way a Step Functions engine
    counts them: AWS documents UTF-8 bytes; moto and LocalStack count ``json.dumps`` with its default
    separators (a space after each ``,`` and ``:``) and non-ASCII escaped (``\\u20ac``: 6 bytes for 3)."""
    return max(len(json.dumps(wire).encode("ascii")),
               len(json.dumps(wire, ensure_ascii=False).encode("utf-8", "surrogatepass")))


LATEST_ONLY = frozenset({model.EXPIRES_AT}) | model.CHANGES_INDEX_KEYS  # v0's, never its history item's


def history_of(latest_item: dict[str, Any], prior: dict[str, Any] | None = None) -> dict[str, Any]:
    """The history item that records ``latest_item``'s version, with the time indexes' keys when ``prior``
    (``latest_state`` of the version before it, which the decision was made on) says that version's times."""
    item = {k: v for k, v in latest_item.items() if k not in LATEST_ONLY}
    item[model.SK] = model.history_sk(int(latest_item[model.VERSION]))
    item.update(index_keys(int(latest_item[model.VERSION]), prior))
    return item


def index_keys(version: int, prior: dict[str, Any] | None) -> dict[str, int]:
    """The time indexes' keys of history item ``version`` (issue 37, ``changeflow_core.timeindex``): what it
    records of the version before it, from that version's ``latest_state`` (``None`` for version 1, which
    records 0). None when ``prior`` is not the version just before (a gap history cannot fill): the item is then
    found by the binary search alone; a clock the version before does not carry (legacy) is left out."""
    if version == 1:
        return {model.PRIOR_EFFECTIVE: 0, model.PRIOR_RECORDED: 0}
    if not prior or prior.get("version") is None or int(prior["version"]) != version - 1:
        return {}
    keys = {model.PRIOR_EFFECTIVE: model.prior_key(prior["effectiveAt"], version - 1)}
    if prior.get("recordedAt") is not None:
        keys[model.PRIOR_RECORDED] = model.prior_key(prior["recordedAt"], version - 1)
    return keys


def check_item_size(change: Change, content: dict[str, Any] | None) -> None:
    """Refuse a change whose item would exceed DynamoDB's 400 KB item limit, before anything is written."""
    values = validate_attributes(content or {}) if change.operation != model.DELETE else None
    check_item_size_of_values(change, values)


def check_item_size_of_values(change: Change, values: dict[str, Any] | None) -> None:
    """The same check for content in the serializer's form. The ids ``v0`` remembers (at most
    ``RECENT_CHANGE_IDS`` x 128 characters, ~8.4 KB) are left out: the request limit (224 KiB) keeps every
    item that far below 400 KB, so this check binds only for content that did not come from a request."""
    probe = latest_item(change, values, None, model.MAX_VERSION, int(time.time() * 1000), "arn:" + "x" * 200)
    size = codec.item_size(codec.serialize_item(probe))
    if size > codec.MAX_ITEM_BYTES:
        raise ValidationError("attributes", f"the item would be {size} bytes, over DynamoDB's 400 KB item limit")


def content_of(item: dict[str, Any]) -> dict[str, Any]:
    """The change's own attributes of a stored item (plain JSON)."""
    return {k: v for k, v in item.items() if k not in model.RESERVED}


def is_expired(item: dict[str, Any], now_s: float | None = None) -> bool:
    """DynamoDB deletes expired items lazily: reads treat an item past its expiry as gone."""
    expires = item.get(model.EXPIRES_AT)
    return expires is not None and int(expires) <= (time.time() if now_s is None else now_s)


def view(item: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored item (plain JSON) as the VIEW users read: audit fields plus ``attributes``."""
    if item is None:
        return None
    return {
        "entityId": item[model.PK],
        "version": int(item[model.VERSION]),
        "deleted": bool(item.get(model.DELETED, False)),
        "effectiveAt": int(item[model.EFFECTIVE_AT]),
        "expiresAt": int(item[model.EXPIRES_AT]) if item.get(model.EXPIRES_AT) is not None else None,
        "changeId": item.get(model.CHANGE_ID),
        "operation": item.get(model.OPERATION),
        "principal": item.get(model.PRINCIPAL),  # who AWS authenticated
        "actor": item.get(model.ACTOR),  # who the client says it acted for
        "reason": item.get(model.REASON),
        "recordedAt": item.get(model.RECORDED_AT),
        "executionArn": item.get(model.EXECUTION),
        "sourceVersion": item.get(model.SOURCE_VERSION),
        "patch": item.get(model.PATCH_RECORD),
        "attributes": content_of(item),
        **_clock_view(item),
        **_chain_view(item),
    }


def _clock_view(item: dict[str, Any]) -> dict[str, Any]:
    """Only where some field's effective time is not the version's (a patch merged by field, issue 34):
    ``fieldTimes`` {field: epoch ms} for those fields, removed ones included (``clocks.times``)."""
    if item.get(model.FIELD_CLOCKS) is None and item.get(model.FIELD_CLOCK_BASE) is None:
        return {}
    return {"fieldTimes": clocks.times(item)}


def _chain_view(item: dict[str, Any]) -> dict[str, Any]:
    """Only where they apply: ``redacted`` (this version's content was removed; its hash is kept),
    ``redacts`` (the version a redact version removed the content of), ``adopts`` (how many versions
    written before the chain an adopt version bound)."""
    shown: dict[str, Any] = {}
    if item.get(model.REDACTED) is not None:
        shown["redacted"] = True
    if isinstance(item.get(model.REDACTION), dict):
        shown["redacts"] = int(item[model.REDACTION]["version"])
    if isinstance(item.get(model.ADOPTION), dict):
        shown["adopts"] = int(item[model.ADOPTION]["versions"])
    return shown
