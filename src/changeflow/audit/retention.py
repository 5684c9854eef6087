"""Which versions may be absent from history: the one rule ``verify`` and ``verify --since-digest`` share.

A version is written once and never deleted by changeflow. Only the retention window lets one go: with
``HistoryRetentionVersions=K`` the write of version ``m+K`` tags version ``m`` to expire ``HistoryRetentionDays``
days later (0: at once); with days only, the write of ``m+1`` tags ``m``. DynamoDB TTL never deletes an item
before its expiry. So version ``m`` may be absent (deleted, or past its expiry) only if

- the window has passed it: ``m <= current - K`` (``current - 1`` with days only; nothing without a window),
- and its tag can have come due: the version whose write tagged it was recorded at least
  ``HistoryRetentionDays`` days ago (when that version is gone too, the newest stored version before it
  bounds when: ``recordedAt`` never goes back from one version to the next).

Anything else absent was removed by someone: a version inside the window, or one tagged a moment ago but
deleted before its expiry. An expiry attribute set early by hand is the same removal, and is caught the same
way (the chain covers ``recordedAt``, so the time the rule reads cannot be moved unseen).
"""

from __future__ import annotations

import bisect
from typing import Iterable

from changeflow_core import items

# The write step's clock (recordedAt) and the history step's clock (the expiry it tags) are the same AWS clock a few
# seconds apart; a window this wide keeps a legitimate expiry from looking early.
CLOCK_SLACK_S = 300


def retention_window(client) -> tuple[int, int]:
    """(HistoryRetentionVersions, HistoryRetentionDays) of the stack the client talks to (0, 0: keep all)."""
    outputs = client.outputs or {}
    return int(outputs.get("HistoryRetentionVersions") or 0), int(outputs.get("HistoryRetentionDays") or 0)


def unexplained_absences(window: tuple[int, int], kept: Iterable[int], recorded_ms: dict[int, int],
                         current: int, now_s: float, upto: int | None = None) -> list[int]:
    """Versions 1..``upto`` (default ``current``) missing from ``kept`` (the unexpired history versions)
    that no retention rule lets go. ``current``: the entity's newest version (v0's, or history's newest
    with no v0); ``recorded_ms``: recordedAt (epoch ms) of every version still stored, v0 included."""
    keep_versions, keep_days = window
    lag = keep_versions if keep_versions > 0 else (1 if keep_days > 0 else None)
    present = set(kept)
    # the write of version + lag tagged it; recordedAt never goes back from one version to the next, so the
    # newest stored version up to that one says when the tag was set, at the earliest (a running maximum,
    # found by bisection: one pass however many versions have gone)
    versions = sorted(recorded_ms)
    latest_at, running = [], None
    for v in versions:
        running = recorded_ms[v] if running is None else max(running, recorded_ms[v])
        latest_at.append(running)
    found = []
    for version in range(1, (current if upto is None else upto) + 1):
        if version in present:
            continue
        if lag is None or version > current - lag:
            found.append(version)  # no window, or inside it: nothing ever tags this version
            continue
        at = bisect.bisect_right(versions, version + lag)
        tagged = latest_at[at - 1] if at else None
        if tagged is not None and tagged / 1000 + keep_days * items.SECONDS_PER_DAY > now_s + CLOCK_SLACK_S:
            found.append(version)  # tagged, but its expiry has not come yet
    return found
