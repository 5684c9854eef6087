"""Time: retry back-offs and Wait states sleep ``seconds * time_scale`` (the definition is untouched), and
so do the back-offs of the AWS SDK's own retries inside handlers run in-process (botocore's, e.g. DynamoDB's
ten attempts from 50 ms doubling: 25 s of sleep before a throttled write fails; the Lambda runtime's
processes sleep for real, as on AWS), and
each execution's thread remembers the seconds it was spared, so that limits on an execution's duration
count the time the definition asked for. Stock moto re-enters a Wait until whole seconds have passed.
https://docs.aws.amazon.com/step-functions/latest/dg/state-wait.html
https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html (Retry: IntervalSeconds,
BackoffRate)

Not an AWS behaviour, and inert unless a campaign asks: ``Holds`` keeps a window open. A fault campaign
registers an execution by name, and that execution's next wait (a Wait state or a Retry's back-off) first
runs what was registered (e.g. waits until other executions have ended), so that another writer runs
inside the window a fault opened, every time, instead of when the threads happen to allow it. And
``Holds.observer``, when set, is called at every wait with the execution's name (after what was held): the
simulation's scheduler (``changeflow.checks.simulation``) parks the execution there and decides when it
goes on, so that the interleaving of executions is a function of its seed."""

from __future__ import annotations

import threading
import types
from typing import Callable


class Clock:
    """The embedded stack's time scale: 1 sleeps for real, 0.001 turns a 30 s back-off into 30 ms."""

    scale: float = 1.0
    slept: list[tuple[str, float]] = []  # (kind, requested seconds), most recent last, bounded

    @classmethod
    def record(cls, kind: str, seconds: float) -> float:
        cls.slept.append((kind, float(seconds)))
        del cls.slept[:-1000]
        scaled = max(0.0, seconds * cls.scale)
        Virtual.add(max(0.0, seconds - scaled))
        return scaled


class Virtual:
    """Seconds an execution's thread was spared by the time scale (requested minus slept), so that limits
    on an execution's duration (the Express five minutes, TimeoutSeconds) count the time the definition
    asked for, not the compressed time."""

    skipped: dict[int, float] = {}
    lock = threading.Lock()

    @classmethod
    def add(cls, seconds: float) -> None:
        with cls.lock:
            ident = threading.get_ident()
            cls.skipped[ident] = cls.skipped.get(ident, 0.0) + seconds

    @classmethod
    def pop(cls, ident: int | None, keep: bool = True) -> float:
        with cls.lock:
            return cls.skipped.get(ident, 0.0) if keep else cls.skipped.pop(ident, 0.0)


class Holds:
    """What runs before an execution's next wait (once), by execution name; see the module docstring."""

    pending: dict[str, Callable[[], None]] = {}
    lock = threading.Lock()
    deciding = threading.local()  # the execution whose Retry is deciding, on this thread
    observer: Callable[[str], None] | None = None  # called at every wait, with the execution's name

    @classmethod
    def hold(cls, execution_name: str, until: Callable[[], None]) -> None:
        with cls.lock:
            cls.pending[execution_name] = until

    @classmethod
    def release(cls, execution_name: str | None) -> bool:
        """Run what is held for ``execution_name`` (once); ``True`` if something was."""
        with cls.lock:
            until = cls.pending.pop(execution_name, None) if execution_name else None
        if until is not None:
            until()
        observer = cls.observer
        if observer is not None and execution_name:
            observer(execution_name)
        return until is not None

    @classmethod
    def clear(cls) -> None:
        with cls.lock:
            cls.pending.clear()


def _execution_name(env) -> str | None:
    return env.states.context_object.context_object_data.get("Execution", {}).get("Name")


def patch_time() -> None:
    import time as real_time

    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function

    class ScaledTime(types.ModuleType):
        def __getattr__(self, name):
            return getattr(real_time, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            Holds.release(getattr(Holds.deciding, "name", None))
            real_time.sleep(Clock.record("retry", seconds))

    retrier_decl.time = ScaledTime("time")
    retry_body = retrier_decl.RetrierDecl._eval_body

    def _eval_body(self, env):  # the retry's back-off sleeps in here: let it know whose it is
        Holds.deciding.name = _execution_name(env)
        try:
            return retry_body(self, env)
        finally:
            Holds.deciding.name = None

    retrier_decl.RetrierDecl._eval_body = _eval_body

    def _wait_interval(self, env, wait_seconds):
        # stock moto re-enters the wait until whole seconds have passed, which would undo the scale;
        # StopExecution still interrupts the wait through the same event.
        Holds.release(_execution_name(env))
        if wait_seconds > 0:
            env.program_state_event.wait(Clock.record("wait", wait_seconds))

    wait_function.WaitFunction._wait_interval = _wait_interval

    from botocore import endpoint

    class ScaledSdkTime(types.ModuleType):
        def __getattr__(self, name):
            return getattr(real_time, name)

        @staticmethod
        def sleep(seconds: float) -> None:  # the SDK's back-off between attempts of one request
            real_time.sleep(Clock.record("sdk-retry", seconds))

    endpoint.time = ScaledSdkTime("time")
