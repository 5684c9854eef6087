"""Termination: each execution sets an event when it ends, so that waiting for one needs no polling (the
client's wait hook on the embedded stack; on AWS the client polls DescribeExecution). No AWS behaviour
changes."""

from __future__ import annotations

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
