"""A started change's outcome read from the data, not from Step Functions: what lets an import on AWS go at the
start rate the quotas allow.

Describing every execution costs a DescribeExecution call (its bucket refills 15 a second in the largest
Regions: docs/transfer.md) or, for an Express execution, a CloudWatch Logs query. The table answers instead,
with reads DynamoDB does not ration that tightly: ``v0`` (consistent GetItem) lists the change ids it applied
(``changeIds``: the last ``model.RECENT_CHANGE_IDS``) and its effective time.

- **before starting**: the change id already in ``v0``'s ids is ``duplicate`` without starting anything;
- **after starting**: the id in ``v0`` and its history item written (the workflow's last write step) is
  ``applied``; ``v0`` newer than the change is ``stale`` (the ratchet never lets it in afterwards);
- **neither after ``describe_after`` seconds** (the workflow rejected it, failed, or is slow): the execution is
  described after all, once, as ``Changeflow.wait`` does.
"""

from __future__ import annotations

import time
from typing import Any

from changeflow_core import model, store

from ..client import Changeflow, Execution


def _latest(client: Changeflow, entity_id: str) -> dict[str, Any] | None:
    return store.get_item(client.dynamodb, client.table, entity_id, model.LATEST_SK)


def _outcome(client: Changeflow, request: dict[str, Any], latest: dict[str, Any] | None) -> tuple[str, int] | None:
    if latest is None:
        return None
    version = (latest.get(model.CHANGE_IDS) or {}).get(request["changeId"])
    if version is not None:
        history = store.get_item(client.dynamodb, client.history_table, request["entityId"],
                                 model.history_sk(int(version)))
        if history is not None and history.get(model.CHANGE_ID) == request["changeId"]:
            return "applied", int(version)
        return None  # v0 is written, its history item not yet: the execution is still at work
    if int(latest.get(model.EFFECTIVE_AT) or 0) > int(request["effectiveAt"]):
        return "stale", int(latest[model.VERSION])
    return None


def already_done(client: Changeflow, request: dict[str, Any]) -> Execution | None:
    """``duplicate`` when ``v0`` already lists the change: nothing needs to start."""
    latest = _latest(client, request["entityId"])
    version = (latest or {}).get(model.CHANGE_IDS, {}).get(request["changeId"]) if latest else None
    if version is None:
        return None
    return Execution("(not started: duplicate)", "", "SUCCEEDED", request,
                     output={"outcome": model.DUPLICATE, "version": int(version), "changeId": request["changeId"]})


def settle(client: Changeflow, request: dict[str, Any], arn: str, timeout: float = 300.0,
           describe_after: float = 20.0, sleep=time.sleep) -> Execution:
    """The outcome of the change ``request`` whose execution ``arn`` was started, read from the data."""
    began = time.monotonic()
    delay = 0.05
    while time.monotonic() - began < describe_after:
        found = _outcome(client, request, _latest(client, request["entityId"]))
        if found is not None:
            outcome, version = found
            return Execution(arn.split(":")[-1], arn, "SUCCEEDED", request,
                             output={"outcome": outcome, "version": version, "changeId": request["changeId"]})
        sleep(delay)
        delay = min(delay * 2, 1.0)
    return client.wait(arn, max(1.0, timeout - (time.monotonic() - began)))
