"""Termination: each execution sets an event when it ends, so that waiting for one needs no polling (the
client's wait hook on the embedded stack; on AWS the client polls DescribeExecution), and the waiter reads what
DescribeExecution would answer of it from moto's model (``ended_execution``), without a request. No AWS
behaviour changes."""

from __future__ import annotations

import json
import threading

from ..originals import ORIGINALS


class Termination:
    """Who waits for which execution, and which executions have ended. An ended execution leaves only its
    ARN in ``ended`` (the string its Execution already holds: a set slot, not an Event with its Condition
    and lock for every execution a long ``serve`` ever ran); an Event exists only while someone waits."""

    events: dict[str, threading.Event] = {}
    ended: set[str] = set()
    lock = threading.Lock()

    @classmethod
    def event(cls, execution_arn: str) -> threading.Event | None:
        """The event to wait on, or ``None`` when the execution has ended already."""
        with cls.lock:
            if execution_arn in cls.ended:
                return None
            return cls.events.setdefault(execution_arn, threading.Event())

    @classmethod
    def end(cls, execution_arn: str) -> None:
        with cls.lock:
            cls.ended.add(execution_arn)
            event = cls.events.pop(execution_arn, None)
        if event is not None:
            event.set()


def wait_for_termination(execution_arn: str, timeout: float) -> bool:
    """Block until the execution (started in this process) has ended; ``False`` on timeout."""
    event = Termination.event(execution_arn)
    return True if event is None else event.wait(timeout)


def ended_execution(execution_arn: str) -> dict | None:
    """What DescribeExecution answers of an ended Standard execution, the fields a waiting client reads (name,
    ARN, status, input, output, error, cause), built as moto's response builds them; ``None`` while it runs,
    for an Express execution (no DescribeExecution on AWS) or an unknown ARN. The request's own work (signing,
    IAM, serialising and parsing: about 1.5 ms of a change's CPU) is what it saves; the answer is the same
    (tests/test_moto_perf.py)."""
    parts = execution_arn.split(":")
    if len(parts) < 8 or parts[5] != "execution" or execution_arn not in Termination.ended:
        return None
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    try:
        execution = stepfunctions_parser_backends[parts[4]][parts[3]].describe_execution(execution_arn)
    except Exception:  # noqa: BLE001 - not one of this process's (or gone): the client asks the API
        return None
    status = getattr(execution.status, "value", execution.status)
    if status not in ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"):  # redriven since: running again
        return None
    described = {"executionArn": execution_arn, "name": execution.name, "status": status,
                 "input": execution.execution_input}
    if status == "SUCCEEDED" and execution.output is not None:  # as moto's: the text stored, or as JSON
        output = execution.output
        described["output"] = output if isinstance(output, str) else json.dumps(output)
    for field, value in (("error", execution.error), ("cause", execution.cause)):
        if value is not None:
            described[field] = value
    return described


def forget_terminations() -> None:
    """Drop the events of a stack's executions (a new stack reuses names, so it would reuse ARNs)."""
    with Termination.lock:
        Termination.events.clear()
        Termination.ended.clear()


def patch_termination() -> None:
    from moto.stepfunctions.parser.backend import execution

    communication = execution.BaseExecutionWorkerCommunication
    original = ORIGINALS.setdefault("terminated", communication.terminated)

    def terminated(self):
        try:
            original(self)
        finally:
            Termination.end(self.execution.exec_arn)

    communication.terminated = terminated
