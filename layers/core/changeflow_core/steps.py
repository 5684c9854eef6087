"""The pieces each step Lambda strings together, shared so that the write step and the history step
build the same item from the same state data.

What travels between steps is small and exact: the normalised change, the decision's view of ``v0``
(never its content), and the change's own content once, as DynamoDB's JSON (numbers as strings), built by
the fetch step. No later step reads the raw request again.

Every step that writes takes only what the step before it proved (``changeflow_core.seal``): the fetch step
proves the change, its content and the ``v0`` it read for this execution (``proof``), the v0 write proves what it wrote
(``written.proof``), the history step its report (``proof`` beside ``report``). A step invoked directly,
with an input no step of this stack made, writes nothing (``seal.Unproven``).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from . import authorization, carried, chainwork, clocks, items, lostwrites, model, principal, seal, store, wire
from .decisions import (
    MAX_ATTEMPTS, WRITE, ChangeIsStale, LatestWriteFailed, WriteConflict, classify_failed_write, decide, merged,
    report,
)
from .errors import NotFound, VersionConflict
from .validation import Change, validate_attributes, validate_request


def now_ms() -> int:
    return int(time.time() * 1000)


# --- step 1: fetch ------------------------------------------------------------------------------------
def rollback_content(client, history_table: str, entity_id: str, version: int, now_s: float | None = None) -> dict:
    """Version ``version``'s content exactly as stored (DynamoDB's JSON), or ``NotFound`` if it is missing,
    expired or a tombstone."""
    item = client.get_item(TableName=history_table, ConsistentRead=True,
                           Key={model.PK: {"S": entity_id}, model.SK: {"S": model.history_sk(version)}}).get("Item")
    expires = (item or {}).get(model.EXPIRES_AT, {}).get("N")
    if item is None or (expires is not None and int(expires) <= (time.time() if now_s is None else now_s)):
        raise NotFound(f"the entity has no version {version}")
    if item.get(model.DELETED, {}).get("BOOL"):
        raise NotFound(f"version {version} of the entity is a deletion; it has no content")
    if model.REDACTED in item:
        raise NotFound(f"version {version} of the entity was redacted; its content is gone")
    return {name: value for name, value in item.items() if name not in model.RESERVED}


def take(event: dict[str, Any], policy: list | None = None,
         key: seal.Key | None = None) -> tuple[Change, dict | None, int]:
    """``(change, content, attempt)``: the request validated (first time: its envelope's seal checked with
    ``key``), or the change the first fetch validated, taken from the state after a back-off with its proof
    (``VersionConflict`` / ``LatestWriteFailed`` once the attempts are spent). A put's content becomes
    DynamoDB JSON here, once."""
    if "request" in event:
        # the envelope an entry point built and sealed for this execution
        sent, who, received_at = principal.unwrap(event["request"], event["execution"]["name"], key)
        # numbers exact: parsed here, never by a double parser
        request = wire.read_request({wire.TEXT_FIELD: sent} if isinstance(sent, str) else sent)
        change = validate_request(request, event["execution"], principal=who, received_at=received_at)
        authorization.check(policy, change.principal, change.entityId, change.operation)  # the stack's policy
        content = items.to_wire(validate_attributes(request["attributes"])) if change.operation == model.PUT else None
        return change, content, 1
    try:
        require_step(key, event, "the fetch step after a back-off")
    except seal.Unproven as exc:
        tried, error = event.get("tried"), event.get("error") or {}
        if type(tried) is not int or not isinstance(error, dict) or lostwrites.lost(event) is None:
            raise  # after a failed condition nothing was written (and a forged input tried nothing): Unproven
        raise lostwrites.unproven(tried, exc) from exc  # the write before this read may have landed
    change, content, attempt = Change.from_json(event["change"]), event.get("content"), event["attempt"]
    lost = lostwrites.lost(event)
    if attempt > MAX_ATTEMPTS and lost is None:  # a lost answer: the read settles it first (fetch)
        give_up(event.get("error") or {})
    if attempt > MAX_ATTEMPTS + 1:  # the step after the last read kept failing too: no more attempts
        raise lostwrites.unknown(change, lost["version"], "every step after it kept failing")
    return change, content, attempt


def give_up(last: dict[str, Any]) -> None:
    """The attempts are spent, and the last write is known not to have landed: the named failure."""
    if last.get("Error") == lostwrites.CONDITION_FAILED:
        raise VersionConflict(f"the entity kept changing through {MAX_ATTEMPTS} attempts")
    raise LatestWriteFailed(f"the v0 write failed {MAX_ATTEMPTS} times; last: {last.get('Error')}: "
                            f"{str(last.get('Cause'))[:1000]}")


def _step(name: str, step: dict[str, Any]) -> dict[str, Any]:
    """What the fetch step's proof covers: the change, its content and the ``v0`` it was decided against (a
    writer's condition expects that version: a real payload replayed with another ``latest`` is not proven)."""
    return {"execution": name, "change": step.get("change"), "content": step.get("content"),
            "latest": step.get("latest")}


def require_step(key: seal.Key | None, event: dict[str, Any], what: str) -> None:
    """``seal.Unproven`` unless ``event`` carries the fetch step's proof of its change, content and ``latest``
    for this execution: a step invoked with anything else writes nothing."""
    if key is None:
        raise seal.Unproven(f"{what}: no seal key to check the proof with")
    key.require(seal.STEP, _step(event["execution"]["name"], event), event.get("proof"), what)


def proven(key: seal.Key, name: str, result: dict[str, Any]) -> dict[str, Any]:
    """The fetch result with its proof for the next steps: the change, content and latest, for this execution."""
    return {**result, "proof": key.prove(seal.STEP, _step(name, result))}


def writers_named(event: dict[str, Any], defaults: dict[str, str]) -> dict[str, str]:
    """The function that writes v0 for each operation: the version ARNs the state machine's definition
    passes (``writers`` {update, tombstone}: those of the release the execution started on, since SAM
    publishes no new fetch version when only a writer changes), else ``defaults`` (a direct invocation)."""
    named = event.get("writers") or {}
    update = named.get("update", defaults[model.PUT])
    tombstone = named.get("tombstone", defaults[model.DELETE])
    # a redact or an adopt writes v0 as an update does (the tombstone writer where the entity is deleted)
    return {model.PUT: update, model.PATCH: update, model.ROLLBACK: update, model.DELETE: tombstone,
            model.REDACT: update, model.ADOPT: update}


def fetch(client, table: str, history_table: str, change: Change, content: dict | None, attempt: int,
          writers: dict[str, str], lost: dict[str, Any] | None = None,
          adoption_closed: bool = False, key: seal.Key | None = None,
          execution_name: str | None = None) -> dict[str, Any]:
    """Read ``v0`` consistently (making sure history holds the version it holds: ``store.read_latest``),
    and a rollback's source version, and decide. A stale change ends here (``ChangeIsStale``); the result
    names the function that writes ``v0`` for this operation (the state machine calls it by that name) and
    the version it tries to write (``tries``). ``lost``: the write before this read may have landed
    (``lostwrites``): settled first, from the data, or ``OutcomeUnknown``. ``adoption_closed``: the stack's
    ChainAdoptionClosed (an adopt is refused). With ``key``, the result carries the proof of its change and
    content for execution ``execution_name`` (``proven``).
    Every state of the attempt must be able to carry the result (``carried.check``), or nothing is
    written: a ``ValidationError`` names the field that takes the room."""
    item, latest, helped = store.read_latest(client, table, history_table, change.entityId)
    repaired = {"historyRepaired": helped} if helped is not None else {}  # in the task result: the audit trail
    if lost is not None:
        latest = lostwrites.resolve(client, history_table, change, latest, lost["version"])
        if attempt > MAX_ATTEMPTS and change.changeId not in (latest or {}).get("changeIds", {}):
            give_up(lost["error"])  # it did not land: the named failure take() leaves to this read
    if change.operation == model.ROLLBACK and content is None:
        content = rollback_content(client, history_table, change.entityId, change.toVersion)
    if attempt == 1 and change.operation != model.PATCH:
        items.check_item_size_of_values(change, items.from_wire(content) if content is not None else None)
    change = merged(change, latest, item)  # a patch: field by field, on every attempt (clocks)
    outcome, version = decide(change, latest)
    if change.operation not in (model.PATCH, *model.CHAIN_OPERATIONS):  # a whole document: the field clocks
        latest = clocks.without(latest)  # of v0 are not needed, so not carried from state to state
    if outcome == model.DUPLICATE:  # nothing to write: the history step copies v0 if it must
        # tries: the version it holds, so that the read after a failed step finds it again past the 16 ids
        duplicate = {"change": {**change.to_json(), "set": None, "remove": None, "superseded": None},
                     "latest": latest, "content": None, "writer": writers[change.operation], "attempt": attempt,
                     "tries": version, **repaired}
        return proven(key, execution_name, duplicate) if key is not None else duplicate
    if change.operation == model.PATCH:  # applied to the version just read, on every attempt
        content = patch_content(item, change) if outcome == WRITE else None
    writer = writers[change.operation]
    if change.operation in model.CHAIN_OPERATIONS and outcome != model.DUPLICATE:  # on every attempt, like a patch
        change, content = chainwork.prepare(client, table, history_table, change, item, latest, adoption_closed)
        outcome, version = decide(change, latest)
        writer = writers[model.DELETE] if latest["deleted"] else writer  # a deleted entity stays a tombstone
    result = {"change": change.to_json(), "latest": latest, "content": content, "writer": writer,
              "attempt": attempt, "tries": version if outcome == WRITE else None, **repaired}
    if key is not None:
        result = proven(key, execution_name, result)
    carried.check(result)
    if outcome == model.STALE:
        raise ChangeIsStale(report(change, model.STALE, version))
    return result


def patch_content(item: dict | None, change: Change) -> dict:
    """A patch's new content as DynamoDB JSON, from the ``v0`` item just read: ``NotFound`` if there is no
    live entity to patch (never written, deleted, or its tombstone expired), ``ValidationError`` if the
    result would not fit the item (the state: ``carried.check``, on the whole result)."""
    if item is None or item.get(model.DELETED):
        state = "was deleted" if item is not None else "does not exist"
        raise NotFound(f"the entity {state}: a patch changes a live entity (create it with a put)")
    if item.get(model.REDACTED) is not None:  # issue 32.8: no current content to patch
        raise NotFound("the entity's current content was redacted: a patch changes content it no longer has "
                       "(give it content again with a put)")
    values = items.patched(item, change)
    items.check_item_size_of_values(change, values)
    return items.to_wire(values)


# --- step 2: the conditional v0 write -------------------------------------------------------------------
def recorded_time(latest: dict[str, Any] | None) -> int:
    """This version's ``recordedAt``: the write step's clock, but never before the version it follows. The
    Lambda hosts' clocks differ a little, and known-at reads (``asof``) search recorded time in version
    order; a version whose host's clock was behind records its predecessor's time instead."""
    previous = (latest or {}).get("recordedAt")
    return max(now_ms(), previous) if previous is not None else now_ms()


def item_for(state: dict[str, Any], version: int, recorded_at: int, tombstone_ttl_days: int,
             keep_prev: bool = True) -> dict[str, Any]:
    """The ``v0`` item of this execution's change, from the state data the fetch step made."""
    change = Change.from_json(state["change"])
    values = items.from_wire(state.get("content")) if change.operation != model.DELETE else None
    return items.latest_item(change, values, state["latest"], version, recorded_at, state["execution"]["id"],
                             tombstone_ttl_days=tombstone_ttl_days, source_version=change.toVersion,
                             keep_prev=keep_prev)


def write(client, table: str, state: dict[str, Any], tombstone_ttl_days: int = 0,
          keep_prev: bool = True, key: seal.Key | None = None) -> dict[str, Any]:
    """Conditionally write ``v0``, once the fetch step's proof of the change is checked with ``key``
    (``seal.Unproven``: nothing written); a failed condition is classified from the old item DynamoDB returns:
    a duplicate is reported, a stale change raises ``ChangeIsStale``, another writer ``WriteConflict``
    (``VersionConflict`` once the attempts are spent). The result carries its proof for the history step."""
    require_step(key, state, "the v0 write")
    result = _write(client, table, state, tombstone_ttl_days, keep_prev)
    return {**result, "proof": key.prove(seal.WRITTEN, {"execution": state["execution"]["name"], "written": result})}


def _write(client, table: str, state: dict[str, Any], tombstone_ttl_days: int, keep_prev: bool) -> dict[str, Any]:
    change = Change.from_json(state["change"])
    outcome, version = decide(change, state["latest"])
    if outcome == model.STALE:
        raise ChangeIsStale(report(change, outcome, version))
    if outcome != WRITE:
        return {"outcome": outcome, "version": version, "recordedAt": None}
    recorded_at = recorded_time(state["latest"])
    try:
        store.write_latest(client, table, item_for(state, version, recorded_at, tombstone_ttl_days, keep_prev),
                           state["latest"])
    except store.ConditionFailed as failed:
        met = items.latest_state(failed.old_item)
        change = merged(change, met, failed.old_item)  # a patch: decided again on the fields of the v0 it met
        outcome, version = classify_failed_write(change, met)
        if outcome == model.STALE:
            raise ChangeIsStale(report(change, outcome, version)) from None
        if outcome == model.CONFLICT:
            if state["attempt"] >= MAX_ATTEMPTS:
                raise VersionConflict(f"the entity kept changing through {MAX_ATTEMPTS} attempts; "
                                      f"it is at version {version}") from None
            # no entity id here: this error travels in the state beside the content (carried.ERROR_BYTES)
            raise WriteConflict(f"the entity moved to version {version} after it was read "
                                f"(attempt {state['attempt']})") from None
        return {"outcome": outcome, "version": version, "recordedAt": None}
    return {"outcome": model.APPLIED, "version": version, "recordedAt": recorded_at}


# --- step 3: history --------------------------------------------------------------------------------------
def record_history(client, table: str, history_table: str, state: dict[str, Any],
                   keep_prev: bool = True, key: seal.Key | None = None) -> dict[str, Any]:
    """Put version n's history item (the same item ``v0`` got), or make sure a duplicate's exists; return
    the execution's output and what the history put did.

    A duplicate whose version this very execution wrote (its v0 write landed but the answer was lost, and
    the fresh read found the change already there) is reported ``applied``: the item names the execution
    that wrote it. A change delivered again in another execution stays ``duplicate``."""
    require_step(key, state, "the history put")
    written = {name: value for name, value in state["written"].items() if name != "proof"}
    key.require(seal.WRITTEN, {"execution": state["execution"]["name"], "written": written},
                state["written"].get("proof"), "the history put (the v0 write's result)")
    change = Change.from_json(state["change"])
    outcome, superseded = written["outcome"], None
    if outcome == model.APPLIED:
        item = item_for(state, written["version"], written["recordedAt"], tombstone_ttl_days=0, keep_prev=keep_prev)
        written_now = store.put_history(client, history_table, items.history_of(item, state["latest"]))
        history = "written" if written_now else "present"
    else:  # a duplicate: the first delivery may have stopped before its history put
        history, stored = store.settle_history(client, table, history_table, change.entityId, written["version"])
        superseded = []
        if stored is not None and (stored.get(model.EXECUTION), stored.get(model.CHANGE_ID)) == (
                state["execution"]["id"], change.changeId):
            outcome = model.APPLIED
        if stored is not None and stored.get(model.CHANGE_ID) == change.changeId:  # what it superseded then
            superseded = (stored.get(model.PATCH_RECORD) or {}).get("superseded") or []
    if (change.chainRecord or {}).get(model.REDACTION):  # after version m is in history: it authorises this
        chainwork.redact(client, history_table, change.entityId, change.chainRecord[model.REDACTION])
    if (change.chainRecord or {}).get(model.ADOPTION):  # and anchors the versions an adoption bound
        chainwork.anchor_adopted(client, history_table, change.entityId, change.chainRecord[model.ADOPTION])
    told = report(change, outcome, written["version"], superseded)
    return {**told, "history": history}  # the execution's output: the expiry tags are this step's (issue 37.2)


def tagged_part(told: dict[str, Any]) -> dict[str, Any]:
    """What the expiry step acts on, of the history step's report: the proof covers exactly this."""
    return {name: told[name] for name in ("entityId", "operation", "version", "changeId")}


def require_report(key: seal.Key | None, event: dict[str, Any]) -> None:
    """``seal.Unproven`` unless the expiry step's input is the history step's report, as it proved it."""
    if key is None:
        raise seal.Unproven("the expiry tags: no seal key to check the proof with")
    key.require(seal.REPORT, {"execution": event["execution"]["name"], "report": tagged_part(event)},
                event.get("proof"), "the expiry tags")


# --- the history step's expiry tags (TTL tagging, issue 37.2) and the stale report ----------------------------
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


def retention_tags(version: int, keep_versions: int, keep_days: int, now_s: int) -> list[tuple[int, int]]:
    """The tag of ``version`` and, to heal a tag an earlier execution missed, the one before it: two
    conditional updates per change at most (O(1)); a version already tagged is left as it is."""
    tag = retention_tag(version, keep_versions, keep_days, now_s)
    if tag is None:
        return []
    target, expires_at = tag
    return [(target, expires_at)] + ([(target - 1, expires_at)] if target > 1 else [])


# A tag that fails is caught by these names only (a DynamoDB error, a timeout or a lost connection of the
# tagging client), never a bug of the code around it: botocore's two roots of what a request can raise.
TAG_ERRORS = (ClientError, BotoCoreError)
# The history step's client for the tags, bounded: 2 tries of up to 1 s to connect and 1 s to answer, and
# a back-off of up to 1 s between them (standard retry mode), so a tag that fails is caught inside the step's
# time and never times the step out (whose Retry would run the history put again).
TAGGING_CLIENT = Config(retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=1, read_timeout=1)
# What one tag may take with it (5 s), and a margin: with less time left a tag is reported missed, not tried.
TAG_BUDGET_MS = 6_000


def _error_name(exc: Exception) -> str:
    return exc.response.get("Error", {}).get("Code", "ClientError") if isinstance(exc, ClientError) \
        else type(exc).__name__


def expiry_tags(client, history_table: str, entity_id: str, version: int, keep_versions: int, keep_days: int,
                now_s: int, time_left_ms: Callable[[], int] | None = None) -> dict[str, Any]:
    """Tag what the change to ``version`` pushes out of the retention window (``retention_tags``: n-K, and
    n-K-1 if an earlier execution missed it; no scan), after the history put, in the same step.

    Never raises for a tag: the change is applied and reported whatever happens here. A tag that fails
    (``TAG_ERRORS``), or that there is no time left for (``time_left_ms`` under ``TAG_BUDGET_MS``), is
    reported in ``missed`` with the error's name; the next change to the entity tags it again, ``changeflow
    verify`` reports it until then and ``changeflow repair`` tags it. Returns ``{"tagged": [versions newly
    tagged], "expiresAt"}``, plus ``"missed"`` and ``"error"`` when a tag was missed."""
    tags = retention_tags(version, keep_versions, keep_days, now_s)
    tagged, missed, error = [], [], None
    for target, expires_at in tags:
        if time_left_ms is not None and time_left_ms() < TAG_BUDGET_MS:
            missed.append(target)
            error = error or "NoTimeLeft"
            continue
        try:
            if store.tag_expiry(client, history_table, entity_id, target, expires_at):
                tagged.append(target)
        except TAG_ERRORS as exc:
            missed.append(target)
            error = error or _error_name(exc)
    result = {"tagged": tagged, "expiresAt": tags[0][1] if tags else None}
    return {**result, "missed": missed, "error": error} if missed else result


def stale_report(error: dict[str, Any]) -> dict[str, Any]:
    """The output of a stale change, from the ``ChangeIsStale`` error the fetch or write step raised
    (``errorMessage`` is the output as JSON)."""
    result = json.loads(error["errorMessage"])
    if result.get("outcome") != model.STALE:
        raise ValueError(f"not a stale change's report: {error.get('errorType')}")
    return result
