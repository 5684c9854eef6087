"""What the commands print besides their tables (JSON with every digit of every number), the one rule for
the exit status of a set of executions (``run`` and ``submit``), and the errors they name."""

from __future__ import annotations

import json
import sys
from typing import Any

from changeflow_core import wire

from .. import report
from ..client import Changeflow, Execution, named_errors
from ..client.logged import UNKNOWN
from ..common.errors import FAILED, OK, REJECTED, NotFound


def execution_status(results: list[Execution], known: set[str], history_hint: str = "changeflow history {name}") -> int:
    """One rule for ``run`` and ``submit``: 0 when every execution SUCCEEDED; 1 when a change was rejected
    (FAILED with one of the workflow's named errors, refused before it started, or a 4xx from the API);
    3 when an execution ended otherwise (an error the workflow does not name, TIMED_OUT, ABORTED) or its
    outcome is UNKNOWN (``OutcomeUnknown``: send the same change id again)."""
    failures = [e for e in results if not _rejected(e, known) and e.status != "SUCCEEDED"]
    for e in failures:
        if e.status == UNKNOWN:
            print(f"changeflow: the outcome of execution {e.name} is unknown: {report.error_message(e.cause)}",
                  file=sys.stderr)
            continue
        print(f"changeflow: execution {e.name} ended {e.status} with {e.error!r}, not one of the workflow's "
              f"named errors: see its history (`{history_hint.format(name=e.name)}`)", file=sys.stderr)
    if failures:
        return FAILED
    return REJECTED if any(e.status != "SUCCEEDED" for e in results) else OK


def _rejected(e: Execution, known: set[str]) -> bool:
    if e.status == "REJECTED":  # POST /changes answered with an error status
        return (e.error or "").startswith("HTTP 4")
    return e.status == "REFUSED" or (e.status == "FAILED" and e.error in known)


def known_errors(client: Changeflow) -> set[str]:
    """The workflow's named errors, read from the deployed definition, and the tooling's own refusal."""
    definition = json.loads(client.sfn.describe_state_machine(stateMachineArn=client.state_machine_arn)["definition"])
    return named_errors(definition) | {"ValidationError"}


def public(e: Execution, arn: bool = True) -> dict[str, Any]:
    """An execution for --json: ``cause`` is the error message (the traceback stays in the function's log)."""
    shown = e.to_json()
    shown["cause"] = report.error_message(e.cause)
    if not arn:
        shown.pop("arn")
    return shown


def dump(document: Any) -> None:
    sys.stdout.write(wire.dumps(document, default=str))  # numbers with every digit, never through float
    sys.stdout.write("\n")


def no_such_entity(entity_id: str) -> NotFound:
    return NotFound(f"no such entity: {entity_id!r} has no v0 and no version in history "
                    "(`changeflow verify --all` lists every entity)")
