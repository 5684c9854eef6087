"""The pieces each step Lambda strings together, shared so that the write step and the history step
build the same item from the same state data."""

from __future__ import annotations

import time
from typing import Any

from . import codec, items, model, store, wire
from .decisions import WRITE, classify_failed_write, decide
from .validation import Change


def now_ms() -> int:
    return int(time.time() * 1000)


def content_for(change: Change, request: dict[str, Any], fetched: dict[str, Any]) -> dict[str, Any] | None:
    """The content the change writes: a put's attributes, a rollback's restored version, a delete's none."""
    if change.operation == model.PUT:
        return wire.read_request(request)["attributes"]  # exact numbers, from the request's JSON text
    if change.operation == model.ROLLBACK:
        return codec.deserialize_item(fetched["content"])  # DynamoDB wire form: numbers as strings
    return None


def item_for(state: dict[str, Any], version: int, recorded_at: int, tombstone_ttl_days: int) -> dict[str, Any]:
    """The ``v0`` item of this execution's change, rebuilt from the execution's state data."""
    change = Change.from_json(state["fetched"]["change"])
    return items.build_latest(
        change,
        content_for(change, state["request"], state["fetched"]),
        state["fetched"]["latest"],
        version,
        recorded_at,
        state["execution"]["id"],
        tombstone_ttl_days=tombstone_ttl_days,
        source_version=change.toVersion,
    )


def write(client, table: str, state: dict[str, Any], tombstone_ttl_days: int = 0) -> dict[str, Any]:
    """Decide, then conditionally write ``v0``; a failed condition is classified from the old item."""
    change = Change.from_json(state["fetched"]["change"])
    outcome, version = decide(change, state["fetched"]["latest"])
    if outcome != WRITE:
        return {"outcome": outcome, "version": version, "recordedAt": None}
    recorded_at = now_ms()
    item = item_for(state, version, recorded_at, tombstone_ttl_days)
    try:
        store.write_latest(client, table, item, state["fetched"]["latest"])
    except store.ConditionFailed as failed:
        outcome, version = classify_failed_write(change, items.latest_state(failed.old_item))
        return {"outcome": outcome, "version": version, "recordedAt": None}
    return {"outcome": model.APPLIED, "version": version, "recordedAt": recorded_at}


def retention_tag(version: int, keep_versions: int, keep_days: int, now_s: int) -> tuple[int, int] | None:
    """Which history version the write of ``version`` pushes out of the retention window, and its expiry.

    Keep K versions: version n-K expires ``keep_days`` days from now (0: now). Keep D days only: the
    version just superseded (n-1) expires D days from now. Neither: nothing expires. One write, no scan.
    """
    if keep_versions > 0:
        target = version - keep_versions
    elif keep_days > 0:
        target = version - 1
    else:
        return None
    if target < 1:
        return None
    return target, now_s + keep_days * items.SECONDS_PER_DAY
