"""Rendering for people: execution lines, version tables (like the tables in the seeds), and an execution
history rendered like the Step Functions console (event id, type, state, elapsed time, details)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Iterable

from changeflow_core import principal, wire

from .client import Execution


def table(headers: list[str], rows: list[list[Any]], max_width: int = 60) -> str:
    cells = [[_cell(v, max_width) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


class Whole(str):
    """A cell shown whole, never cut at the column's width: a workflow's error message (the last column, so
    nothing after it moves)."""


def _cell(value: Any, max_width: int) -> str:
    if isinstance(value, Whole):
        return value.replace("\n", " ")
    if value is None:
        text = ""
    elif isinstance(value, (dict, list)):
        text = wire.dumps(value, compact=True)  # numbers with every digit
    else:
        text = str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= max_width else text[: max_width - 1] + "…"


def ranges(numbers: Iterable[int]) -> str:
    """``[1, 3, 4, 5, 9]`` -> ``"1, 3..5, 9"``: a list of versions with its gaps visible."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)


def error_message(cause: str | None) -> str | None:
    """The ``errorMessage`` of a Lambda error cause (a JSON document; an API error body's ``message``),
    else the cause itself."""
    if not cause:
        return cause
    try:
        document = json.loads(cause)
        return document.get("errorMessage") or document.get("message") or cause
    except (ValueError, AttributeError):
        return cause


def executions(results: Iterable[Execution]) -> str:
    rows = []
    for e in results:
        out = e.output if isinstance(e.output, dict) else {}
        message = error_message(e.cause)
        rows.append([e.name, e.status, out.get("outcome"), out.get("version"), e.error,
                     Whole(message) if message else None])
    return table(["execution", "status", "outcome", "version", "error", "message"], rows)


def _time(ms: Any) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(int(ms) / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def patch_summary(record: dict[str, Any] | None) -> str:
    """What a patch changed, in one line: ``set {"status":"approved"}; remove draftNote``, and the fields a
    newer change had written, which it did not apply: ``; superseded status`` (issue 34)."""
    if not record:
        return ""
    parts = []
    if record.get("set"):
        parts.append("set " + wire.dumps(record["set"], compact=True))
    if record.get("remove"):
        parts.append("remove " + ", ".join(record["remove"]))
    if record.get("superseded"):
        parts.append("superseded " + ", ".join(record["superseded"]))
    return "; ".join(parts)


# principal: who AWS authenticated; actor: who the client claims to act for (changeflow_core.principal)
VERSION_COLUMNS = ["version", "deleted", "effectiveAt", "operation", "changeId", "principal", "actor (claimed)",
                   "expiresAt", "patch", "attributes"]


def redacted_by(views: Iterable[dict[str, Any]]) -> dict[int, int]:
    """``{n: m}``: version n was redacted by version m, from what each redact version records (``redacts``),
    among the versions given."""
    return {int(v["redacts"]): int(v["version"]) for v in views if v.get("redacts") is not None}


def operation(view: dict[str, Any]) -> str:
    """A version's operation, with the version a redaction removed the content of: ``redact of v2``."""
    if view.get("redacts") is not None:
        return f"{view['operation']} of v{view['redacts']}"
    return view["operation"] or ""


def redaction_note(view: dict[str, Any], by: dict[int, int]) -> str:
    """What a redacted version shows instead of its content (``redacted`` is what the item records); a redact
    version that holds the redacted form itself never had content of its own."""
    if view.get("redacts") is not None:
        return f"(no content: the redaction of version {view['redacts']})"
    at = by.get(view["version"])
    return f"(redacted at version {at}: content removed, hash kept)" if at else "(redacted: content removed, hash kept)"


def versions(entity_id: str, entity: dict[str, Any], head: str | None = None) -> str:
    """The table of versions under a head line: ``head``, or what ``v0`` holds. A redacted version says so
    (and which version redacted it), never an empty content; a redact version names the version it redacted."""
    rows = []
    by = redacted_by(entity["versions"])
    for v in entity["versions"]:
        content = ("(tombstone)" if v["deleted"] else redaction_note(v, by) if v.get("redacted")
                   else v["attributes"])
        rows.append([v["version"], "yes" if v["deleted"] else "", v["effectiveAt"], operation(v), v["changeId"],
                     principal.describe(v.get("principal")), v["actor"], v["expiresAt"], patch_summary(v.get("patch")),
                     content])
    latest = entity["latest"]
    if head is None and latest is None:
        head = f"entity {entity_id}: no v0"
    elif head is None:
        state = "tombstone" if latest["deleted"] else "live, redacted" if latest.get("redacted") else "live"
        head = f"entity {entity_id}: v0 = version {latest['version']} ({state}, effectiveAt {latest['effectiveAt']}"
        head += f", expires {latest['expiresAt']})" if latest["expiresAt"] else ")"
    return head + "\n" + table(VERSION_COLUMNS, rows)


def _json(text: Any) -> Any:
    try:
        return wire.loads(text)
    except (TypeError, ValueError):
        return text


def who(events: list[dict[str, Any]]) -> str | None:
    """``principal: ...   actor (claimed): ...`` of the execution's input, or None for an input without the
    principal envelope (changeflow_core.principal)."""
    started = next((e for e in events if e["type"] == "ExecutionStarted"), None)
    sent = _json(((started or {}).get("executionStartedEventDetails") or {}).get("input"))
    if not isinstance(sent, dict) or not isinstance(sent.get(principal.FIELD), dict):
        return None
    try:
        request = principal.request_in(sent)
    except ValueError:
        request = None
    actor = request.get("actor") if isinstance(request, dict) else None
    return f"principal: {principal.describe(sent[principal.FIELD])}   actor (claimed): {actor if actor else '(none)'}"


def history(events: list[dict[str, Any]]) -> str:
    """The console's event table, under who sent the change (the principal AWS authenticated, the claimed
    actor); retries show as repeated TaskScheduled/TaskFailed of the same state."""
    if not events:
        return "(no events)"
    start = events[0]["timestamp"]
    rows, state = [], ""
    for event in events:
        details = next((v for k, v in event.items() if k.endswith("EventDetails")), {}) or {}
        if event["type"].endswith("StateEntered"):
            state = details.get("name", state)
        elapsed = int((event["timestamp"] - start).total_seconds() * 1000)
        shown = {}
        for key in ("input", "output"):
            if key in details:
                cut = (details.get(f"{key}Details") or {}).get("truncated")  # the execution log cut it at 248 KB
                shown[key] = "(cut at 248 KB by the execution log) " + details[key] if cut else _json(details[key])
        if "error" in details:  # the error whole: the reason an execution failed is never cut
            shown = Whole(wire.dumps({"error": details["error"], "cause": error_message(details.get("cause"))},
                                     compact=True))
        rows.append([event["id"], event["type"], state, f"{elapsed} ms", shown or ""])
        if event["type"].endswith("StateExited"):
            state = ""
    head = who(events)
    return (head + "\n" if head else "") + table(["id", "type", "state", "elapsed", "details"], rows, max_width=100)


def aged_out(description: dict[str, Any]) -> str:
    """An execution that only the table remembers: its name and the versions it wrote (no content)."""
    rows = [[v["version"], v.get("changeId") or "", v.get("operation") or "", v.get("actor") or "",
             v.get("reason") or "", v.get("effectiveAt"), v.get("recordedAt") or ""] for v in description["versions"]]
    return (f"{description['name']}: AGED_OUT - Step Functions no longer keeps it and the execution log does not "
            f"hold it; the versions of {description['entityId']!r} it wrote:\n"
            + table(["version", "change", "operation", "actor", "reason", "effectiveAt", "recordedAt"], rows))


def feed_line(event: dict[str, Any]) -> str:
    """One ``VersionRecorded`` event (changeflow_core.feed) as ``changeflow tail`` prints it: when it was recorded,
    the entity and version, the operation, who, and the start of its chain hash; a redaction says what to erase."""
    what = event["operation"] or "?"
    if event.get("redacts"):
        what += f" of version {event['redacts']['version']}: erase it downstream"
    elif event.get("sourceVersion") is not None:
        what += f" to version {event['sourceVersion']}"
    elif event.get("adopts"):
        what += f" of versions 1..{event['adopts']}"
    if event.get("redacted"):
        what += " (its content redacted since)"
    who = principal.describe(event.get("principal"))
    if event.get("actor"):
        who += f", actor {event['actor']} (claimed)"
    chain = (event.get("chainHash") or "-")[:12]
    return f"{_time(event.get('recordedAt'))}  {event['entityId']}  v{event['version']}  {what}  by {who}  chain {chain}"
