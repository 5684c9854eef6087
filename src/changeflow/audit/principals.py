"""Each version's principal matched with what AWS itself wrote when the change came in (``changeflow verify
--principals``, issue 33). The seal stops every forgery but one kind: whoever may invoke an entry point's
function directly (``lambda:InvokeFunction``) hands it a request API Gateway or EventBridge never saw, and the
function seals what it is given. What they cannot make is the record those services keep:

- ``api``: the stage's access log, which API Gateway writes (template.yaml ``AccessLogSetting``): the version's
  ``requestId`` must be a ``POST /changes`` answered 200 whose signer (``userArn`` and ``caller``, or the
  authorizer's ``principalId``) is the version's principal, and no other version may name the same request.
- ``events``: the events journal, the rule's second target, which EventBridge writes: the version's event
  ``id`` must be there with the same account, source and region, its detail must be this very change (entity
  and change id), and no other version may name the same event.
- ``stepfunctions``: nothing to match: the version already says its caller is not known.

A version older than the log's retention cannot be matched (and is said so, not refused). Logs arrive within
seconds to minutes: a version recorded a moment ago may not be matched yet, and the problem says so (run it
again). docs/identity.md says who can still forge, and how that shows.
"""

from __future__ import annotations

import json
import time
from typing import Any

from changeflow_core import chain, codec, items, model, validation, wire

from ..client import Changeflow
from .digests import raw_history

DELIVERY_S = 600  # logs arrive within minutes: a missing record of a version younger than this may still come
ACCESS_LOG_OUTPUT, JOURNAL_OUTPUT = "ChangeApiAccessLogGroupName", "ChangeEventsJournalLogGroupName"


class Journals:
    """The access log and the events journal of one stack, read once (every event of each group) and indexed
    by request id and event id; which ids versions already named, across the entities checked."""

    def __init__(self, client: Changeflow):
        self.client = client
        self._logs: dict[str, tuple[dict[str, dict], int | None]] = {}
        self.claimed: dict[tuple[str, str], str] = {}  # (kind, id) -> the version that named it

    def _read(self, output: str, key: str) -> tuple[dict[str, dict], int | None]:
        """``{id: record}`` of the log group the stack output names, and the group's retention in days."""
        if output not in self._logs:
            group = self.client.outputs.get(output)
            records: dict[str, dict] = {}
            retention = None
            if group:
                logs = self.client.make("logs")
                described = logs.describe_log_groups(logGroupNamePrefix=group).get("logGroups", [])
                retention = next((g.get("retentionInDays") for g in described if g["logGroupName"] == group), None)
                kwargs: dict[str, Any] = {"logGroupName": group}
                while described:
                    page = logs.filter_log_events(**kwargs)
                    for event in page.get("events", []):
                        try:
                            record = json.loads(event["message"])
                        except ValueError:
                            continue
                        if isinstance(record, dict) and record.get(key):
                            records.setdefault(str(record[key]), record)
                    if not page.get("nextToken"):
                        break
                    kwargs["nextToken"] = page["nextToken"]
            self._logs[output] = (records, retention)
        return self._logs[output]

    def check(self, entity_id: str, item: dict[str, Any], now_s: float) -> tuple[list[str], list[str]]:
        """``(problems, notes)`` of one history item (DynamoDB JSON)."""
        version = int(item[model.VERSION]["N"])
        principal = codec.to_plain(codec.deserialize_value(item[model.PRINCIPAL])) if model.PRINCIPAL in item else None
        recorded_s = int(item.get(model.RECORDED_AT, {}).get("N", "0")) / 1000
        where = f"version {version}"
        if not isinstance(principal, dict):
            return [f"{where}: records no principal: nothing vouches for who made it"], []
        via = principal.get("via")
        if via == "stepfunctions":
            return [], []
        if via == "api":
            found = self._api(principal, entity_id, version)
            log = "the API's access log"
        elif via == "events":
            found = self._event(principal, entity_id, item, version)
            log = "the events journal"
        else:
            return [f"{where}: a principal of an unknown kind ({str(via)[:40]!r})"], []
        if found is None:
            return [], []
        records, retention = self._read(ACCESS_LOG_OUTPUT if via == "api" else JOURNAL_OUTPUT,
                                        "requestId" if via == "api" else "id")
        age_days = (now_s - recorded_s) / 86400
        if found == "missing" and retention is not None and age_days > retention:
            return [], [f"{where}: recorded {age_days:.0f} days ago, past {log}'s {retention} days: not matched"]
        if found == "missing":
            recent = " (recorded minutes ago: the log may not have it yet, run this again)" \
                if now_s - recorded_s < DELIVERY_S else ""
            return [f"{where}: its principal ({_named(principal)}) was not vouched for by AWS: {log} has no "
                    f"record of its {'request' if via == 'api' else 'event'} (an entry point's function invoked "
                    f"directly, or the log's records removed){recent}"], []
        return [f"{where}: {found}"], []

    def _claim(self, kind: str, identifier: str, entity_id: str, version: int) -> str | None:
        owner = self.claimed.setdefault((kind, identifier), f"version {version} of {entity_id!r}")
        return None if owner == f"version {version} of {entity_id!r}" else owner

    def _api(self, principal: dict[str, Any], entity_id: str, version: int) -> str | None:
        request_id = principal.get("requestId")
        if not request_id:
            return ("its api principal names no API request (requestId): nothing in the access log can vouch for "
                    "it (recorded before issue 33, or by a direct invocation of the front function)")
        records, _ = self._read(ACCESS_LOG_OUTPUT, "requestId")
        line = records.get(request_id)
        if line is None:
            return "missing"
        if line.get("method") != "POST" or line.get("path") != "/changes" or str(line.get("status")) != "200":
            return (f"its request {request_id} was {line.get('method')} {line.get('path')} answered "
                    f"{line.get('status')}, not a change API Gateway started")
        signer = _signer(line)
        if signer != _signer_of(principal):
            return f"its principal says {_named(principal)}, but API Gateway logged request {request_id} from {signer}"
        other = self._claim("request", request_id, entity_id, version)
        return f"request {request_id} is named by {other} too: one request starts one change" if other else None

    def _event(self, principal: dict[str, Any], entity_id: str, item: dict[str, Any], version: int) -> str | None:
        records, _ = self._read(JOURNAL_OUTPUT, "id")
        event = records.get(str(principal.get("id")))
        if event is None:
            return "missing"
        said = {k: event.get(k) for k in ("account", "source", "region")}
        if said != {k: principal.get(k) for k in said}:
            return f"its principal says {_named(principal)}, but EventBridge journaled event {principal.get('id')} as {said}"
        change = _change_of(event.get("detail"))
        if (change.get("entityId"), change.get("changeId")) != (entity_id, item.get(model.CHANGE_ID, {}).get("S")):
            return (f"event {principal.get('id')} carried change {change.get('changeId')!r} of "
                    f"{change.get('entityId')!r}, not this version's")
        differs = _differs(change, item)
        if differs:  # its id replayed by a direct invocation of the event function, with another change
            return f"event {principal.get('id')} carried another change than this version records: {differs}"
        other = self._claim("event", str(principal.get("id")), entity_id, version)
        return f"event {principal.get('id')} is named by {other} too: one event starts one change" if other else None


def _signer(line: dict[str, Any]) -> tuple:
    arn = line.get("userArn")
    if arn and arn != "-":
        return ("arn", arn, line.get("caller") if line.get("caller") != "-" else "")
    principal_id = line.get("principalId")
    return ("authorizer", principal_id) if principal_id and principal_id != "-" else ("anonymous",)


def _signer_of(principal: dict[str, Any]) -> tuple:
    if principal.get("arn"):
        return ("arn", principal["arn"], principal.get("caller") or "")
    if principal.get("authorizer"):
        return ("authorizer", principal.get("id"))
    return ("anonymous",)


def _named(principal: dict[str, Any]) -> str:
    return str(principal.get("arn") or principal.get("id") or principal.get("source") or "anonymous")


def _change_of(detail: Any) -> dict[str, Any]:
    """The change an event's detail carries: itself, or its text form ``{"request": "<JSON text>"}`` (numbers
    exact, as the workflow read them)."""
    if isinstance(detail, dict) and isinstance(detail.get(wire.TEXT_FIELD), str) and len(detail) == 1:
        try:
            detail = wire.loads(detail[wire.TEXT_FIELD])
        except (ValueError, RecursionError):
            return {}
    return detail if isinstance(detail, dict) else {}


def _differs(change: dict[str, Any], item: dict[str, Any]) -> str | None:
    """What the version (DynamoDB JSON) records otherwise than the change its event carried: the operation, or
    a put's content (its hash, which a redaction keeps)."""
    operation = item.get(model.OPERATION, {}).get("S")
    if change.get("operation") != operation:
        return f"operation {change.get('operation')!r}, not {operation!r}"
    if operation != model.PUT:
        return None
    try:
        sent = chain.content_hash(items.to_wire(validation.validate_attributes(change.get("attributes"))))
    except validation.ValidationError:
        return "attributes the workflow refuses"
    redacted = item.get(model.REDACTED)
    kept = chain.hash_text(codec.deserialize_value(redacted)) if redacted else chain.content_hash(item)
    return None if sent == kept else "other content"


def check_principals(client: Changeflow, entity_id: str, journals: Journals | None = None,
                     now_s: float | None = None) -> tuple[list[str], list[str]]:
    """``(problems, notes)`` for every version of one entity."""
    journals = journals or Journals(client)
    now_s = time.time() if now_s is None else now_s
    problems: list[str] = []
    notes: list[str] = []
    for item in raw_history(client, entity_id):
        found, said = journals.check(entity_id, item, now_s)
        problems += found
        notes += said
    return problems, notes
