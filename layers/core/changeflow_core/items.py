"""Building items and reading them back.

The ``v0`` item of version n and the history item of version n are built by the same function from the
same inputs (the change, its content, the state it was decided on, and the version and recorded time the
write step chose), so a history put that runs again after a redrive writes exactly what ``v0`` held.
A history item is the ``v0`` item with the history sort key and without the tombstone's expiry: history
expires by the retention window only.
"""

from __future__ import annotations

import time
from typing import Any

from . import chain, codec, model
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
        "chainHash": item.get(model.CHAIN_HASH),
    }


def next_change_ids(change: Change, latest: dict[str, Any] | None, version: int) -> dict[str, int]:
    """The ids applied at the new effectiveAt: ties keep the earlier ones, a newer time starts afresh.

    A redelivered change can only pass the ratchet if its effectiveAt equals the stored one, so this
    map is exactly what is needed to recognise every duplicate that could otherwise add a version.
    """
    ids = {}
    if latest and latest["effectiveAt"] == change.effectiveAt:
        ids.update(latest["changeIds"])
    ids[change.changeId] = version
    return ids


def build_latest(
    change: Change,
    content: dict[str, Any] | None,
    latest: dict[str, Any] | None,
    version: int,
    recorded_at: int,
    execution_arn: str,
    tombstone_ttl_days: int = 0,
    source_version: int | None = None,
) -> dict[str, Any]:
    """The ``v0`` item (Python values, Decimals for numbers) for an applied change."""
    item: dict[str, Any] = {
        model.PK: change.entityId,
        model.SK: model.LATEST_SK,
        model.VERSION: version,
        model.EFFECTIVE_AT: change.effectiveAt,
        model.CHANGE_ID: change.changeId,
        model.CHANGE_IDS: next_change_ids(change, latest, version),
        model.OPERATION: change.operation,
        model.EXECUTION: execution_arn,
        model.RECORDED_AT: recorded_at,
    }
    if change.actor is not None:
        item[model.ACTOR] = change.actor
    if change.reason is not None:
        item[model.REASON] = change.reason
    if source_version is not None:
        item[model.SOURCE_VERSION] = source_version
    if change.operation == model.DELETE:
        item[model.DELETED] = True
        item[model.EXPIRES_AT] = recorded_at // 1000 + tombstone_ttl_days * SECONDS_PER_DAY
    else:
        item.update(validate_attributes(content or {}))
    return sealed(item, latest)


def sealed(item: dict[str, Any], latest: dict[str, Any] | None) -> dict[str, Any]:
    """``item`` with its link of the hash chain: the fetched version's hash (or the entity's genesis
    value) and this version's, computed from data the write step already has."""
    prev = (latest or {}).get("chainHash") or chain.genesis(item[model.PK])
    item[model.PREV_HASH] = prev
    item[model.CHAIN_HASH] = chain.link(prev, codec.serialize_item(item))
    return item


def history_of(latest_item: dict[str, Any]) -> dict[str, Any]:
    """The history item that records ``latest_item``'s version."""
    item = {k: v for k, v in latest_item.items() if k != model.EXPIRES_AT}
    item[model.SK] = model.history_sk(int(latest_item[model.VERSION]))
    return item


def check_item_size(change: Change, content: dict[str, Any] | None) -> None:
    """Refuse a change whose item would exceed DynamoDB's 400 KB item limit, before anything is written."""
    probe = build_latest(change, content, None, model.MAX_VERSION, int(time.time() * 1000), "arn:" + "x" * 200)
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
        "actor": item.get(model.ACTOR),
        "reason": item.get(model.REASON),
        "recordedAt": item.get(model.RECORDED_AT),
        "executionArn": item.get(model.EXECUTION),
        "sourceVersion": item.get(model.SOURCE_VERSION),
        "attributes": content_of(item),
    }
