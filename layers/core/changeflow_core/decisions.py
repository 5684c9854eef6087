"""What to do with a change, given the stored state: the rules of the ratchet in one function.

Used twice: before the conditional write (from the consistent read), and after a failed condition
(from the item DynamoDB returned with the failure), so both agree on stale / duplicate / conflict.
"""

from __future__ import annotations

from typing import Any

from . import model
from .errors import VersionConflict
from .validation import Change

WRITE = "write"


def decide(change: Change, latest: dict[str, Any] | None) -> tuple[str, int]:
    """``(outcome, version)``: ``WRITE`` with the version to write, or ``duplicate``/``stale`` with the
    version the entity already has. Raises ``VersionConflict`` when the caller's expectation fails."""
    current = latest["version"] if latest else 0
    if latest and change.changeId in latest["changeIds"]:
        return model.DUPLICATE, latest["changeIds"][change.changeId]
    if change.expectedVersion is not None and change.expectedVersion != current:
        raise VersionConflict(
            f"entity {change.entityId!r} is at version {current}, not the expected {change.expectedVersion}"
        )
    if latest and change.effectiveAt < latest["effectiveAt"]:
        return model.STALE, current
    return WRITE, current + 1


def classify_failed_write(change: Change, old_latest: dict[str, Any] | None) -> tuple[str, int]:
    """Why a conditional ``v0`` write failed, from the item it met: duplicate, stale, or a conflict
    with another writer (fetch again). Raises ``VersionConflict`` for a caller-supplied expectation."""
    outcome, version = decide(change, old_latest)
    if outcome == WRITE:
        return model.CONFLICT, version - 1
    return outcome, version
