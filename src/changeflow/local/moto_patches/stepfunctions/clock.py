"""Time: retry back-offs and Wait states sleep ``seconds * time_scale`` (the definition is untouched), and
each execution's thread remembers the seconds it was spared, so that limits on an execution's duration
count the time the definition asked for. Stock moto re-enters a Wait until whole seconds have passed.
https://docs.aws.amazon.com/step-functions/latest/dg/state-wait.html
https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html (Retry: IntervalSeconds,
BackoffRate)"""

from __future__ import annotations

import threading
import types


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


def patch_time() -> None:
    import time as real_time

    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function

    class ScaledTime(types.ModuleType):
        def __getattr__(self, name):
            return getattr(real_time, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            real_time.sleep(Clock.record("retry", seconds))

    retrier_decl.time = ScaledTime("time")

    def _wait_interval(self, env, wait_seconds):
        # stock moto re-enters the wait until whole seconds have passed, which would undo the scale;
        # StopExecution still interrupts the wait through the same event.
        if wait_seconds > 0:
            env.program_state_event.wait(Clock.record("wait", wait_seconds))

    wait_function.WaitFunction._wait_interval = _wait_interval
