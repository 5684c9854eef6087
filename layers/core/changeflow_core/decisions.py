"""What to do with a change, given the stored state: the rules of the ratchet in one function, and the
signals that tell the state machine which way to go.

``decide`` is used twice: by the fetch step (from the consistent read) and by the write step after a
failed condition (from the item DynamoDB returned with the failure), so both agree on stale / duplicate /
conflict. The state machine has no Choice states: an outcome that leaves the happy path is a named error
that a ``Catch`` routes (``ChangeIsStale`` to the report, ``WriteConflict`` to the back-off).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from . import clocks, model, names
from .errors import ChangeflowError, VersionConflict
from .validation import Change

WRITE = "write"
MAX_ATTEMPTS = 10  # conditional v0 writes per change before VersionConflict (the ASL's back-off table has 11)


class ChangeIsStale(ChangeflowError):
    """Not an error: the stored effectiveAt is newer, nothing is written. The message is the execution's
    output (JSON), which the report step returns; the execution succeeds with outcome ``stale``. With
    ``HashEntityIds`` the message names the entity by its digest (``names.shown``): it is logged, traced
    and kept in the execution history as the error's cause. ``result`` (the entity id itself) is for the
    step that raises it; it is not an attribute X-Ray's SDK would serialise with the exception."""

    def __init__(self, result: dict[str, Any]):
        self._result = result
        shown = {**result, "entityId": names.entity_ref(result["entityId"], True)} if names.hashing() else result
        super().__init__(json.dumps(shown, separators=(",", ":")))

    @property
    def result(self) -> dict[str, Any]:
        return self._result


class WriteConflict(ChangeflowError):
    """Another writer changed ``v0`` between this change's read and its conditional write: the state
    machine backs off and reads again."""


class LatestWriteFailed(ChangeflowError):
    """The ``v0`` write kept failing (Lambda errors, timeouts) through every attempt."""


def report(change: Change, outcome: str, version: int, superseded: list[str] | None = None) -> dict[str, Any]:
    """The execution's output: the same seven fields on every path. ``superseded``: the fields of a patch
    that a newer change had written, so it did not apply them (all of them when it is stale); ``[]`` for
    every other change."""
    lost = change.superseded if superseded is None else superseded
    return {"entityId": change.entityId, "operation": change.operation, "outcome": outcome, "version": version,
            "changeId": change.changeId, "effectiveAt": change.effectiveAt, "superseded": list(lost or [])}


def merged(change: Change, latest: dict[str, Any] | None, item: dict[str, Any] | None) -> Change:
    """A patch with the fields a newer change wrote (``superseded``), decided field by field against the
    ``v0`` just read (its clocks, and its values for equal times: ``clocks.superseded``); any other change
    as it is. ``item``: that ``v0`` (plain values), ``None`` where it holds no content."""
    if change.operation != model.PATCH or latest is None:
        return change
    content = {k: v for k, v in (item or {}).items() if k not in model.RESERVED}
    return dataclasses.replace(change, superseded=clocks.superseded(change, clocks.of_state(latest), content))


def decide(change: Change, latest: dict[str, Any] | None) -> tuple[str, int]:
    """``(outcome, version)``: ``WRITE`` with the version to write, or ``duplicate``/``stale`` with the
    version the entity already has. Raises ``VersionConflict`` when the caller's expectation fails.

    A change whose id is among the ids ``v0`` remembers (the last ``model.RECENT_CHANGE_IDS`` changes,
    whatever their effectiveAt) is a duplicate: it reports the version it wrote and writes nothing. A patch
    already ``merged`` is stale only when a newer change wrote every field it names; any other change when
    it is older than ``v0`` (a patch not merged too: a state from before field clocks)."""
    current = latest["version"] if latest else 0
    if latest and change.changeId in latest["changeIds"]:
        return model.DUPLICATE, latest["changeIds"][change.changeId]
    if change.expectedVersion is not None and change.expectedVersion != current:
        raise VersionConflict(
            f"the entity is at version {current}, not the expected {change.expectedVersion}"
        )
    if latest and change.operation == model.PATCH and change.superseded is not None:  # merged: field by field
        lost = set(change.superseded)
        return (model.STALE, current) if all(name in lost for name in clocks.named(change)) else (WRITE, current + 1)
    if latest and change.effectiveAt < latest["effectiveAt"]:  # a whole document older than v0's
        return model.STALE, current
    return WRITE, current + 1


def classify_failed_write(change: Change, old_latest: dict[str, Any] | None) -> tuple[str, int]:
    """Why a conditional ``v0`` write failed, from the item it met: duplicate, stale, or a conflict
    with another writer (fetch again). Raises ``VersionConflict`` for a caller-supplied expectation.
    A patch is decided on the fields it names: ``merged`` against that item first."""
    outcome, version = decide(change, old_latest)
    if outcome == WRITE:
        return model.CONFLICT, version - 1
    return outcome, version
