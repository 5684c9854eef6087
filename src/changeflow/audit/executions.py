"""Each version's ``executionArn`` checked against the execution that wrote it (``changeflow verify
--executions``): a version forged with a correct-looking hash names no execution that wrote it. Past Step
Functions' 90 days (and on Express) the execution is read from its execution log, which is best-effort: a
version whose execution's end the log lost is reported as one that cannot be vouched for, not passed."""

from __future__ import annotations

import json

from changeflow_core import model

from ..client import Changeflow
from .digests import raw_history


def check_executions(client: Changeflow, entity_id: str) -> list[str]:
    """Each version's executionArn names an execution that exists and reports writing that version of that
    entity for that change, by that operation. A version forged with a correct-looking hash fails here, and
    so does an adopt version passed off as a put once its chain was stripped (issue 32.9)."""
    problems = []
    for item in raw_history(client, entity_id):
        version = int(item[model.VERSION]["N"])
        arn = item.get(model.EXECUTION, {}).get("S")
        change_id, operation = item.get(model.CHANGE_ID, {}).get("S"), item.get(model.OPERATION, {}).get("S")
        if not arn:
            problems.append(f"version {version}: names no execution")
            continue
        try:
            described = client.describe(arn)  # past 90 days, Step Functions' answer comes from the execution log
        except client.sfn.exceptions.ExecutionDoesNotExist:  # forged, or aged out with no record in the log
            problems.append(f"version {version}: cannot be vouched for: its execution {arn} is neither in Step "
                            "Functions nor in the execution log (a forgery, or aged out of Step Functions' 90 "
                            "days while the log kept no record of it: the default level ERROR keeps failures only)")
            continue
        if described["status"] == "UNKNOWN":  # the log (best-effort) lost the event that ends it
            problems.append(f"version {version}: cannot be vouched for: {'; '.join(described.get('logGaps', []))}")
            continue
        if described["status"] != "SUCCEEDED":
            continue  # e.g. HistoryWriteFailed after v0 was written: the history item came from repair
        if described.get("output") is None:  # read from a log that keeps no execution data: nothing to compare
            problems.append(f"version {version}: cannot be vouched for: the execution log keeps no output "
                            "(StateMachineIncludeExecutionData=false)")
            continue
        try:
            output = json.loads(described["output"])
        except ValueError:  # the log cut it at 248 KB: a report of a few hundred bytes never is, unless forged
            problems.append(f"version {version}: cannot be vouched for: its execution's output in the log is "
                            "cut or not JSON")
            continue
        claimed = tuple(output.get(k) for k in ("entityId", "version", "changeId", "operation")) \
            if isinstance(output, dict) else (None, None, None, None)
        if claimed != (entity_id, version, change_id, operation):
            problems.append(f"version {version}: its execution reports {claimed}, not "
                            f"({entity_id!r}, {version}, {change_id!r}, {operation!r})")
    return problems
