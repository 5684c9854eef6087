"""Each version's ``executionArn`` checked against the execution that wrote it (``changeflow verify
--executions``): a version forged with a correct-looking hash names no execution that wrote it."""

from __future__ import annotations

import json

from changeflow_core import model

from ..client import Changeflow
from .digests import raw_history


def check_executions(client: Changeflow, entity_id: str) -> list[str]:
    """Each version's executionArn names an execution that exists and reports writing that version of that
    entity for that change. A version forged with a correct-looking hash fails here."""
    problems = []
    for item in raw_history(client, entity_id):
        version = int(item[model.VERSION]["N"])
        arn = item.get(model.EXECUTION, {}).get("S")
        change_id = item.get(model.CHANGE_ID, {}).get("S")
        if not arn:
            problems.append(f"version {version}: names no execution")
            continue
        try:
            described = client.sfn.describe_execution(executionArn=arn)
        except client.sfn.exceptions.ExecutionDoesNotExist:
            problems.append(f"version {version}: its execution {arn} does not exist (or aged out of Step Functions)")
            continue
        if described["status"] != "SUCCEEDED":
            continue  # e.g. HistoryWriteFailed after v0 was written: the history item came from repair
        output = json.loads(described.get("output") or "{}")
        claimed = (output.get("entityId"), output.get("version"), output.get("changeId"))
        if claimed != (entity_id, version, change_id):
            problems.append(f"version {version}: its execution reports {claimed}, not "
                            f"({entity_id!r}, {version}, {change_id!r})")
    return problems
