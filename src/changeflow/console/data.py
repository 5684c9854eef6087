"""What the console shows, read through the CLI's own client (``changeflow.client.Changeflow``) and the
audit (``changeflow.audit``): the same calls against the embedded stack, ``changeflow serve`` or AWS.

Every call here is a read (ListExecutions, DescribeExecution, GetExecutionHistory, DescribeStateMachine,
GetItem, Query, Scan) except ``repair``, which only the console's explicit POST reaches.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from changeflow_core import asof, items, model, principal, store, wire
from changeflow_core.errors import NotFound as CoreNotFound
from changeflow_core.errors import ValidationError

from .. import report
from ..audit import repair as audit_repair
from ..audit import verify as audit_verify
from ..client import TERMINAL, Changeflow, is_express, shown_status
from ..client.logged import UNKNOWN
from ..feed.follower import Follower
from ..feed.stream import Positions, StreamReader, stream_arn

PAGE = 50
FEED_SHOWN = 50  # the feed page's newest versions
VERIFY_AT_ONCE = 200  # up to this many versions, an entity's page runs verify itself; above, a link does
MAX_SCANNED = 1000  # executions examined for one page of an entity filter


def parse_json(text: Any) -> Any:
    """JSON text parsed with its numbers exact (``wire.loads``); anything else as it is."""
    if not isinstance(text, str):
        return text
    try:
        return wire.loads(text)
    except ValueError:
        return text


def change_request(execution_input: Any) -> Any:
    """The change request an execution carries: every entry point sends ``{"request": "<its JSON text>"}``
    (numbers exact, changeflow_core.wire), shown decoded; an older or hand-made input as it is."""
    value = parse_json(execution_input)
    try:
        return principal.request_in(value)
    except (ValueError, ValidationError):  # text that is not JSON (a log cut at 248 KB) is shown as it is
        return value


def describe_principal(value: Any) -> str:
    """Who AWS authenticated for a version, in one line (changeflow_core.principal.describe)."""
    return principal.describe(value if isinstance(value, dict) else None)


def pretty(value: Any, indent: str = "") -> str:
    """JSON indented by two spaces a level, numbers as JSON numbers with every digit (a stored 303.3 is a
    ``Decimal``: never shown as the string ``"303.3"``)."""
    value = parse_json(value) if not indent else value
    if isinstance(value, str) and not indent:
        return value
    inner = indent + "  "
    if isinstance(value, dict) and value:
        fields = [f"{inner}{compact(str(k))}: {pretty(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(fields) + "\n" + indent + "}"
    if isinstance(value, (list, tuple)) and value:
        return "[\n" + ",\n".join(inner + pretty(v, inner) for v in value) + "\n" + indent + "]"
    return compact(value)


def compact(value: Any) -> str:
    """JSON on one line, numbers as JSON numbers with every digit (``wire.dumps``)."""
    return wire.dumps(value, default=str)


def ms_date(ms: Any) -> str:
    """Epoch milliseconds as an ISO date (UTC)."""
    if ms is None:
        return ""
    try:
        return datetime.fromtimestamp(int(ms) / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (ValueError, OverflowError, OSError):
        return str(ms)


def s_date(seconds: Any) -> str:
    """Epoch seconds (DynamoDB TTL) as an ISO date (UTC)."""
    return ms_date(int(seconds) * 1000) if seconds is not None else ""


def when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    return "" if value is None else str(value)


def error_message(cause: Any) -> str | None:
    parsed = parse_json(cause)
    if isinstance(parsed, dict) and "errorMessage" in parsed:
        return str(parsed["errorMessage"])
    return None if cause is None else str(cause)


@dataclass
class Diff:
    field: str
    change: str  # added, removed, changed
    before: Any = None
    after: Any = None


def diff(before: dict[str, Any] | None, after: dict[str, Any]) -> list[Diff]:
    """Field by field, the content of ``after`` against ``before`` (a tombstone has no content)."""
    old = {} if before is None or before.get("deleted") else before["attributes"]
    new = {} if after.get("deleted") else after["attributes"]
    found = []
    for key in list(old) + [k for k in new if k not in old]:
        if key not in new:
            found.append(Diff(key, "removed", before=old[key]))
        elif key not in old:
            found.append(Diff(key, "added", after=new[key]))
        elif old[key] != new[key]:
            found.append(Diff(key, "changed", old[key], new[key]))
    return found


class FeedWindow:
    """The feed page's view (issue 36): the table's stream from its oldest record kept (24 hours), each version
    checked against the chain as ``changeflow tail`` checks it, the newest ``FEED_SHOWN`` kept. Each view of the
    page reads what was recorded since the last. An entity first met past version 1 is anchored on the hash
    history holds for the version before it. A break is shown where it happened, and that entity's later
    versions are not shown (``changeflow tail`` and ``verify`` say more); the others go on."""

    def __init__(self, client: Changeflow):
        self.client = client
        self.events: deque[dict[str, Any]] = deque(maxlen=FEED_SHOWN)
        self.broken: dict[str, str] = {}
        self.follower = Follower(client, self._emit, anchor_first=True)
        self.reader: StreamReader | None = None
        self.lock = threading.Lock()

    def _emit(self, event: dict[str, Any], origin: str) -> None:
        self.events.appendleft({**event, "origin": origin})

    def refresh(self) -> None:
        from changeflow_core.feed import ChainBreak

        with self.lock:
            if self.reader is None:
                self.reader = StreamReader(self.client.make("dynamodbstreams"), stream_arn(self.client), Positions())
            for _, records in self.reader.batches():
                for record in records:
                    entity = ((record.get("dynamodb") or {}).get("Keys") or {}).get(model.PK, {}).get("S")
                    if entity in self.broken:
                        continue
                    try:
                        self.follower.take_record(record)
                    except ChainBreak as exc:
                        self.broken[exc.entity_id] = exc.problem
                        self.events.appendleft({"entityId": exc.entity_id, "version": exc.version, "broken": exc.problem})


class Reader:
    """The console's reads of one stack, with the descriptions of ended executions cached (they never change)."""

    def __init__(self, client: Changeflow):
        self.client = client
        self._described: dict[str, dict[str, Any]] = {}
        self._unknown: set[str] = set()  # not found when asked without an entity
        self._lock = threading.Lock()
        self._definitions: dict[str, dict[str, Any]] = {}
        self._feed: FeedWindow | None = None

    def feed(self) -> FeedWindow:
        """The feed page's view, read up to now."""
        with self._lock:
            if self._feed is None:
                self._feed = FeedWindow(self.client)
        self._feed.refresh()
        return self._feed

    # --- executions ---------------------------------------------------------------------------------
    def describe(self, arn: str, entity_id: str | None = None) -> dict[str, Any] | None:
        with self._lock:
            if arn in self._described:
                return self._described[arn]
            if entity_id is None and arn in self._unknown:
                return None
        try:
            # past 90 days: read from the execution log, or from the versions of entity_id it wrote
            description = dict(self.client.describe(arn, entity_id))
        except self.client.sfn.exceptions.ExecutionDoesNotExist:
            with self._lock:  # gone, and not in the execution log either: it does not come back
                if entity_id is None:  # asked with its entity, the versions it wrote may still describe it
                    self._unknown.add(arn)
                else:
                    self._described[arn] = None
            return None
        description.pop("ResponseMetadata", None)
        description["status"] = shown_status(description["status"], description.get("error"))  # UNKNOWN, not FAILED
        if description["status"] in TERMINAL:
            with self._lock:
                if len(self._described) > 20_000:
                    self._described.clear()
                self._described[arn] = description
        return description

    def execution_arn(self, name: str) -> str:
        if name.startswith("arn:"):
            return name
        return self.client.state_machine_arn.replace(":stateMachine:", ":execution:") + ":" + name

    def list_executions(self, status: str = "", entity: str = "", since: datetime | None = None,
                        until: datetime | None = None, token: str | None = None) -> tuple[list[dict], str | None, int]:
        """One page of executions, newest first: ``(rows, next token, executions examined)``. Status is
        ListExecutions' own ``statusFilter`` (UNKNOWN: the FAILED ones that ended ``OutcomeUnknown``, which
        FAILED leaves out); entity and time are checked on each execution (time first, from the listing; the
        entity from the execution's input)."""
        rows: list[dict] = []
        examined = 0
        while True:
            kwargs: dict[str, Any] = {"stateMachineArn": self.client.state_machine_arn, "maxResults": 100}
            if status:
                kwargs["statusFilter"] = "FAILED" if status == UNKNOWN else status
            if token:
                kwargs["nextToken"] = token
            if self.client.state_machine_type() == "EXPRESS":  # ListExecutions refuses Express: the log lists them
                page = {"executions": self.client.executions(MAX_SCANNED)}
            else:
                page = self.client.sfn.list_executions(**kwargs)
            listed = sorted(page["executions"], key=lambda e: e["startDate"], reverse=True)
            token = page.get("nextToken")
            for summary in listed:
                examined += 1
                start = summary["startDate"]
                if since and start < since or until and start > until:
                    continue
                description = self.describe(summary["executionArn"]) or {}
                request = change_request(description.get("input"))
                entity_id = request.get("entityId") if isinstance(request, dict) else None
                shown = shown_status(summary["status"], description.get("error"))
                if entity and entity_id != entity or status and shown != status:
                    continue
                output = parse_json(description.get("output"))
                rows.append({
                    "name": summary["name"], "arn": summary["executionArn"], "status": shown,
                    # an Express execution's page is found by its ARN (its name is not unique, nor an ARN's end)
                    "link": summary["executionArn"] if is_express(summary["executionArn"]) else summary["name"],
                    "start": start, "stop": summary.get("stopDate"),
                    "entity": entity_id, "operation": request.get("operation") if isinstance(request, dict) else None,
                    "outcome": output.get("outcome") if isinstance(output, dict) else None,
                    "version": output.get("version") if isinstance(output, dict) else None,
                    "error": description.get("error"),
                })
            if not token or len(rows) >= PAGE or examined >= MAX_SCANNED:
                return rows, token, examined

    def definition(self, state_machine_arn: str) -> dict[str, Any]:
        """The deployed definition (DescribeStateMachine), as the execution ran it."""
        if state_machine_arn not in self._definitions:
            text = self.client.sfn.describe_state_machine(stateMachineArn=state_machine_arn)["definition"]
            self._definitions[state_machine_arn] = json.loads(text)
        return self._definitions[state_machine_arn]

    def history(self, arn: str) -> list[dict[str, Any]]:
        return list(self.client.history(arn))

    # --- entities -----------------------------------------------------------------------------------
    def latest(self, entity_id: str) -> dict[str, Any] | None:
        return items.view(store.get_item(self.client.dynamodb, self.client.table, entity_id, model.LATEST_SK))

    def as_of(self, entity_id: str, as_of: int | None, known_at: int | None) -> dict[str, Any]:
        """The version in effect at ``as_of`` as known at ``known_at`` (the read API's search):
        ``{"version": n or None, "message": what to say}``."""
        when = " and ".join(part for part in (as_of is not None and f"as of {asof.utc(as_of)}",
                                              known_at is not None and f"as known at {asof.utc(known_at)}") if part)
        try:
            found, _ = asof.version_at(self.client.dynamodb, self.client.table, self.client.history_table,
                                       entity_id, as_of, known_at)
        except (CoreNotFound, asof.Gone) as exc:
            return {"version": None, "message": str(exc)}
        return {"version": found["version"], "message": f"{when}: version {found['version']}, effective "
                                                        f"{asof.utc(found['effectiveAt'])}"}

    def versions_page(self, entity_id: str, before: int | None = None, size: int = PAGE) -> tuple[list[dict], int | None]:
        """One page of versions, newest first, each with its diff against the version before it:
        ``(rows, the version to continue before)``. One Query of ``size + 1`` items (the extra one is the
        oldest row's predecessor, for its diff), continuing from the key of version ``before``."""
        start = {model.PK: {"S": entity_id}, model.SK: {"S": model.history_sk(before)}} if before else None
        found, _ = store.query_history(self.client.dynamodb, self.client.history_table, entity_id,
                                              newest_first=True, limit=size + 1, start_key=start)
        views = [items.view(i) for i in found]
        shown = views[:size]
        by = report.redacted_by(views)  # which version redacted which, as the redact versions record it
        rows = []
        for i, v in enumerate(shown):
            previous = views[i + 1] if i + 1 < len(views) else None
            if previous is not None and previous["version"] != v["version"] - 1:
                previous = None  # a gap (expired or missing): no diff against an unrelated version
            # a redacted version's content is gone: no diff from it or to it (it would show the data deleted)
            comparable = not v.get("redacted") and not (previous or {}).get("redacted")
            rows.append({"view": v, "previous": previous, "redacted_at": by.get(v["version"]),
                         "diff": diff(previous, v) if comparable and (previous or v["version"] == 1) else None})
        more = len(views) > size  # the extra item exists: there is an older page
        return rows, (shown[-1]["version"] if more else None)

    def outcome(self, execution_arn: str | None, entity_id: str | None = None) -> tuple[str | None, str | None]:
        """``(outcome, status)`` of the execution that wrote a version of ``entity_id`` (``AGED_OUT`` once
        only the versions it wrote are kept: it applied them)."""
        if not execution_arn:
            return None, None
        try:
            description = self.describe(execution_arn)  # the cheap look: an entity page has many versions
        except Exception:  # noqa: BLE001 - another account's or an expired execution: shown as unknown
            return None, None
        if description is None:  # gone from Step Functions and from the log: the version item names it
            return ("applied", "AGED_OUT") if entity_id is not None else (None, None)
        if description["status"] == "AGED_OUT":  # described from the versions it wrote: it applied them
            return "applied", "AGED_OUT"
        output = parse_json(description.get("output"))
        return (output.get("outcome") if isinstance(output, dict) else None), description["status"]

    def verify(self, entity_id: str) -> audit_verify.Report:
        return audit_verify.verify(self.client, entity_id)

    def repair_can_act(self, entity_id: str) -> bool:
        """Repair writes v0's history item when it is missing, and nothing else."""
        latest = store.get_item(self.client.dynamodb, self.client.table, entity_id, model.LATEST_SK)
        if latest is None:
            return False
        version = int(latest[model.VERSION])
        return store.get_item(self.client.dynamodb, self.client.history_table, entity_id,
                              model.history_sk(version)) is None

    def repair(self, entity_id: str) -> tuple[list[str], list[str]]:
        return audit_repair.repair(self.client, entity_id)

    def search(self, text: str, limit: int = 100) -> tuple[list[str], bool]:
        """Entity ids containing ``text`` (a scan of the tables, as ``verify --all`` does)."""
        ids = [e for e in audit_verify.entities(self.client) if text in e]
        return ids[:limit], len(ids) > limit
