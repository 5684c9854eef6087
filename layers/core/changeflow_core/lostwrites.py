"""A ``v0`` write whose answer was lost: did it land? (issue 32 items 1 and 2)

The write step is never retried blindly: when it fails for a reason that is not a failed condition (a Lambda
error, a timeout, a lost response) the workflow backs off and reads again. Before, that read asked only the
ids ``v0`` remembers (the last ``model.RECENT_CHANGE_IDS``); once more writers than that moved ``v0`` on in
the back-off, a write that had landed was taken for one that had not: the change was reported ``stale``, or
written a second time.

So the fetch step records in the state, before the conditional write, the version that write tries to write
(``tries``); the back-off carries it to the next read (``tried``), with the name of the write's error. If the
error was a failed condition (``WriteConflict``) nothing was written. Otherwise the next read settles it
from the version itself, where the rule "whoever moves ``v0`` from n to n+1 makes sure history has n"
(``store.read_latest``) keeps it:

- ``v0`` below the version tried: the write did not land (versions only go up);
- ``v0`` at it or past it: the item of that version (``v0`` itself, or its history item) names the change
  that wrote it: this change (applied, or a duplicate if another execution of it wrote it), or another one
  (not landed);
- past it, with that history item gone (a retention window expired it and TTL deleted it): nothing can
  tell, and the execution ends ``OutcomeUnknown``, naming the version.

One consistent GetItem, on this path only: the happy path carries one number more in its state.
"""

from __future__ import annotations

from typing import Any

from . import model, store
from .errors import OutcomeUnknown
from .validation import Change

CONDITION_FAILED = "WriteConflict"  # the write's condition failed: it wrote nothing


def lost(event: dict[str, Any]) -> dict[str, Any] | None:
    """``{"version", "error"}`` of the write before this read when its outcome is not known (its answer was
    lost); ``None`` on the first read, after a failed condition, or from a state without ``tried``."""
    error = event.get("error") or {}
    if event.get("tried") is None or error.get("Error") == CONDITION_FAILED:
        return None
    return {"version": int(event["tried"]), "error": error}


def resolve(client, history_table: str, change: Change, latest: dict[str, Any] | None,
            tried: int) -> dict[str, Any] | None:
    """The decision's view of ``v0``, with this change among the ids it remembers when its write of
    ``tried`` landed (so the decision says ``duplicate`` of that version, and the history step ``applied``
    if this execution wrote it). ``OutcomeUnknown`` when nothing can tell."""
    if latest is None or change.changeId in latest["changeIds"] or latest["version"] <= tried:
        return latest  # not reached, or v0 is that version (its own id is among those remembered)
    item = store.get_item(client, history_table, change.entityId, model.history_sk(tried))
    if item is None:
        raise unknown(change, tried, f"history no longer holds version {tried} (a retention window let it go; "
                                     f"the entity is at version {latest['version']})")
    if item.get(model.CHANGE_ID) != change.changeId:
        return latest
    return {**latest, "changeIds": {**latest["changeIds"], change.changeId: tried}}



def unproven(tried: int, why: Exception) -> OutcomeUnknown:
    """The read after a write whose answer was lost cannot check its proof (the payload changed between the
    steps, or the seal key was rotated under the execution): it cannot settle the write either."""
    return OutcomeUnknown(f"the v0 write of version {tried} may have landed (it failed without an answer), and the "
                          f"read that would settle it cannot check its input ({why}): whether the change was "
                          "applied cannot be known. Send the same change id again")


def unknown(change: Change, tried: int, why: str) -> OutcomeUnknown:
    """The named error, saying what is known: the version the change may have written, and why no more."""
    return OutcomeUnknown(f"the v0 write of version {tried} by change {change.changeId!r} may have landed (it "
                          f"failed without an answer), and {why}: whether the change was applied cannot be known. "
                          "Send the same change id again")
