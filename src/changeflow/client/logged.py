"""An execution as its execution log tells it, for an Express execution (the log is its only history) and a
Standard one past Step Functions' 90 days. The log is best-effort: "Amazon CloudWatch Logs are delivered on
a best-effort basis. The completeness and timeliness of log entries are not guaranteed", and an input or
output over 248 KB escaped arrives cut, with ``truncated`` in its inputDetails/outputDetails
(https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html). So what is read from it says what it
lacks (``logGaps``), and an execution that must have ended but whose end event is missing is ``UNKNOWN``,
never ``RUNNING``. The table and its hash chain are the authoritative record (docs/audit.md)."""

from __future__ import annotations

import time
from typing import Any

# The event that ends an execution, and the status it gives it.
TERMINAL_EVENTS = {"ExecutionSucceeded": "SUCCEEDED", "ExecutionFailed": "FAILED",
                   "ExecutionTimedOut": "TIMED_OUT", "ExecutionAborted": "ABORTED"}
UNKNOWN = "UNKNOWN"  # ended (past Express's 5 minutes, or aged out of Step Functions), its end not in the log
EXPRESS_LIMIT_S = 300  # https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html
DELIVERY_GRACE_S = 600  # how late a log event may still arrive before its absence is reported


def truncated(details: dict[str, Any], field: str) -> bool:
    """Whether the log cut this event's ``input`` or ``output`` (HistoryEventExecutionDataDetails)."""
    return bool((details.get(f"{field}Details") or {}).get("truncated"))


def description(arn: str, name: str, state_machine_arn: str, records: list[dict[str, Any]], closed: bool,
                now_s: float | None = None) -> dict[str, Any]:
    """DescribeExecution's fields from an execution's log records (oldest first). ``closed``: Step
    Functions says it has ended (it aged out); otherwise an Express execution has ended once its 5 minutes
    and the log's delivery grace have passed since its first event."""
    now_s = time.time() if now_s is None else now_s
    started = next((r for r in records if r.get("type") == "ExecutionStarted"), None)
    ended = next((r for r in records if r.get("type") in TERMINAL_EVENTS), None)
    gaps = []
    found = {"executionArn": arn, "name": name, "stateMachineArn": state_machine_arn}
    if started is None:
        gaps.append("the log has no ExecutionStarted event: the execution's input is unknown")
    else:
        details = started.get("details") or {}
        found["input"] = details.get("input")
        if truncated(details, "input"):
            found["inputDetails"] = {"included": True, "truncated": True}
            gaps.append("the log cut the execution's input at 248 KB (escaped)")
    if ended is not None:
        found["status"] = TERMINAL_EVENTS[ended["type"]]
        details = ended.get("details") or {}
        found.update({k: details[k] for k in ("output", "error", "cause") if k in details})
        if truncated(details, "output"):
            found["outputDetails"] = {"included": True, "truncated": True}
            gaps.append("the log cut the execution's output at 248 KB (escaped)")
    else:
        first = min((int(r["event_timestamp"]) for r in records if r.get("event_timestamp")), default=None)
        over = first is not None and now_s - first / 1000 > EXPRESS_LIMIT_S + DELIVERY_GRACE_S
        found["status"] = UNKNOWN if closed or over else "RUNNING"
        if found["status"] == UNKNOWN:
            gaps.append("the log has no event that ends the execution: its outcome is unknown")
            found["cause"] = ("the execution has ended, but its execution log has no event that ends it "
                              "(CloudWatch Logs delivery is best-effort); the table and its chain are the record")
    if gaps:
        found["logGaps"] = gaps
    return found
