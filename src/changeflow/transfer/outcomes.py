"""A started change's outcome read from the data, not from Step Functions: what lets an import on AWS go at the
start rate the quotas allow.

Describing every execution costs a DescribeExecution call (its bucket refills 15 a second in the largest
Regions: docs/transfer.md) or, for an Express execution, a CloudWatch Logs query. The table answers instead,
with reads DynamoDB does not ration that tightly: ``v0`` (consistent GetItem) lists the change ids it applied
(``changeIds``: the last ``model.RECENT_CHANGE_IDS``) and its effective time.

- **before starting**: the change id already in ``v0``'s ids is ``duplicate`` without starting anything; so is
  one past those ids that the entity's history holds, when the change is as old as ``v0`` (``Applied``: a
  change older than ``v0`` is ``stale`` whatever it was, and one newer than ``v0`` was never applied, since
  the ratchet keeps ``v0`` at the newest time it applied);
- **after starting**: the id in ``v0`` and its history item written (the workflow's last write step) is
  ``applied``; ``v0`` newer than the change is ``stale`` (the ratchet never lets it in afterwards), unless
  ``v0`` has forgotten ids and the history holds the change: then the version it wrote, ``applied`` by this
  execution or ``duplicate`` (more newer changes than ``v0`` remembers may land before the outcome is read);
- **neither after ``describe_after`` seconds** (the workflow rejected it, failed, or is slow): the execution is
  described after all, once, as ``Changeflow.wait`` does.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from changeflow_core import model, store

from ..client import Changeflow, Execution


def _latest(client: Changeflow, entity_id: str) -> dict[str, Any] | None:
    return store.get_item(client.dynamodb, client.table, entity_id, model.LATEST_SK)


DESCRIBE = ("describe", 0)  # what _outcome answers when only the execution can tell


def _outcome(client: Changeflow, request: dict[str, Any], latest: dict[str, Any] | None,
             arn: str) -> tuple[str, int] | None:
    if latest is None:
        return None
    ids = latest.get(model.CHANGE_IDS) or {}
    version = ids.get(request["changeId"])
    if version is not None:
        history = store.get_item(client.dynamodb, client.history_table, request["entityId"],
                                 model.history_sk(int(version)))
        if history is not None and history.get(model.CHANGE_ID) == request["changeId"]:
            return "applied", int(version)
        return None  # v0 is written, its history item not yet: the execution is still at work
    if int(latest.get(model.EFFECTIVE_AT) or 0) > int(request["effectiveAt"]):
        if len(ids) < int(latest[model.VERSION]):  # v0 forgot some ids: history says if this change wrote one
            earlier = Applied(client).version_of(request["entityId"], request["changeId"])
            if earlier == Applied.UNKNOWABLE:
                return DESCRIBE  # the data cannot tell (a retention window expired the oldest): its execution can
            if earlier is not None:
                history = store.get_item(client.dynamodb, client.history_table, request["entityId"],
                                         model.history_sk(earlier)) or {}
                return ("applied" if history.get(model.EXECUTION) == arn else model.DUPLICATE), earlier
        return "stale", int(latest[model.VERSION])
    return None


class Applied:
    """The change ids an entity's history holds (``{change id: version}``), for what ``v0``'s last
    ``model.RECENT_CHANGE_IDS`` no longer name: read once per entity (one Query of its history items, their
    change ids only); on a change id not found, the versions written since are read (one small Query), so
    that another writer's versions (another run of the same source) are seen too. At most ``entities``
    entities are held at once, the least recently asked about dropped first (and read again if asked again):
    memory is bounded by the entities in flight, not by the source.

    ``version_of`` is the version that applied a change id, None when the history shows it never was, and
    ``UNKNOWABLE`` when the history no longer holds every version from 1 (a retention window expired the
    oldest), so that its absence proves nothing."""

    UNKNOWABLE = -1

    def __init__(self, client: Changeflow, entities: int = 256):
        self.client, self.entities = client, entities
        self._known: OrderedDict[str, _History] = OrderedDict()
        self._lock = threading.Lock()

    def version_of(self, entity_id: str, change_id: str) -> int | None:
        with self._lock:
            history = self._known.get(entity_id)
            if history is not None:
                self._known.move_to_end(entity_id)
        if history is None:
            history = _History()
            with self._lock:
                self._known[entity_id] = history
                while len(self._known) > self.entities:
                    self._known.popitem(last=False)
        if change_id not in history.ids:  # an entity's records run one at a time: no one else reads it now
            self._read(entity_id, history)
        return history.ids.get(change_id, None if history.whole() else self.UNKNOWABLE)

    def note(self, entity_id: str, change_id: str, version: int) -> None:
        with self._lock:
            history = self._known.get(entity_id)
            if history is not None and version == history.newest + 1:  # else the next read finds it, in order
                history.add(change_id, version)

    def _read(self, entity_id: str, history: "_History") -> None:
        """The entity's history items after the newest ``history`` holds, their change ids only."""
        start = None
        while True:
            page = self.client.dynamodb.query(
                TableName=self.client.history_table, ConsistentRead=True,
                KeyConditionExpression="#pk = :pk AND #sk BETWEEN :after AND :last",
                ProjectionExpression="#sk, #changeId",
                ExpressionAttributeNames={"#pk": model.PK, "#sk": model.SK, "#changeId": model.CHANGE_ID},
                ExpressionAttributeValues={":pk": {"S": entity_id},
                                           ":after": {"S": model.history_sk(history.newest + 1)},
                                           ":last": {"S": model.history_sk(10 ** model.VERSION_DIGITS - 1)}},
                **({"ExclusiveStartKey": start} if start else {}))
            for item in page.get("Items", []):
                history.add(item.get(model.CHANGE_ID, {}).get("S"), model.version_of_sk(item[model.SK]["S"]))
            start = page.get("LastEvaluatedKey")
            if not start:
                return


class _History:
    """What ``Applied`` knows of one entity's history: change ids by version, and which versions it saw."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.count = self.newest = 0

    def add(self, change_id: str | None, version: int) -> None:
        if version > self.newest:  # versions arrive in order, each once
            self.count, self.newest = self.count + 1, version
            if change_id:
                self.ids[change_id] = version

    def whole(self) -> bool:
        """Whether every version from 1 to the newest is in the history (none expired)."""
        return self.count == self.newest


def already_done(client: Changeflow, request: dict[str, Any], applied: Applied | None = None) -> Execution | None:
    """``duplicate`` when the entity already has the change: ``v0`` lists it, or (``applied``) its history
    holds it and the change is exactly as old as ``v0``. Nothing needs to start."""
    latest = _latest(client, request["entityId"])
    if latest is None:
        return None
    version = (latest.get(model.CHANGE_IDS) or {}).get(request["changeId"])
    if version is None and applied is not None and int(latest.get(model.EFFECTIVE_AT) or 0) == request["effectiveAt"]:
        version = applied.version_of(request["entityId"], request["changeId"])
    if version is None:
        return None
    if version == Applied.UNKNOWABLE:
        return Execution("(not started: outcome unknown)", "", "FAILED", request, error="OutcomeUnknown", cause=(
            f"this record is as old as the entity's version {latest.get(model.VERSION)}, and its change id is neither "
            f"among the {model.RECENT_CHANGE_IDS} that version remembers nor in the history the stack still keeps "
            "(a retention window expired its oldest versions): whether it was applied cannot be known, so it is not "
            "sent; give records their own effective times (--effective-at-field), or new data a later --effective-at"))
    return Execution("(not started: duplicate)", "", "SUCCEEDED", request,
                     output={"outcome": model.DUPLICATE, "version": int(version), "changeId": request["changeId"]})


def settle(client: Changeflow, request: dict[str, Any], arn: str, timeout: float = 300.0,
           describe_after: float = 20.0, sleep=time.sleep) -> Execution:
    """The outcome of the change ``request`` whose execution ``arn`` was started, read from the data."""
    began = time.monotonic()
    delay = 0.05
    while time.monotonic() - began < describe_after:
        found = _outcome(client, request, _latest(client, request["entityId"]), arn)
        if found == DESCRIBE:
            break
        if found is not None:
            outcome, version = found
            return Execution(arn.split(":")[-1], arn, "SUCCEEDED", request,
                             output={"outcome": outcome, "version": version, "changeId": request["changeId"]})
        sleep(delay)
        delay = min(delay * 2, 1.0)
    return client.wait(arn, max(1.0, timeout - (time.monotonic() - began)))
