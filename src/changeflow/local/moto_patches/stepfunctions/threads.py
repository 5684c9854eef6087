"""The interpreter's Task-state threads (speed only). moto's interpreter runs every state it runs under a
timeout (``ExecutionState._evaluate_with_timeout``: every Task state) in a thread of its own, three a change
here, and waits for it; ``Thread.start`` also waits until the new thread runs: a clone(2), a start handshake
and two switches of the GIL each time, which a busy second core makes longer.

- **A state without a timeout runs on the execution's own thread.** With no ``TimeoutSeconds`` (or
  ``TimeoutSecondsPath``), moto's timeout is 99,999,999 s, three years, longer than any execution may run (one
  year: https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html), so the wait cannot end
  before the target does and the separate thread changes nothing but the cost; its target runs in place, in
  an empty ``contextvars`` context as a new thread's would. The Express limit's patch (``express.py``) does the
  same for a Standard program without TimeoutSeconds. changeflow's Task states have none.
- **A state with a timeout runs on a pooled thread.** ``start`` hands its target to an idle thread of a pool
  (a new daemon thread when none is idle, so that a state abandoned at its timeout, still running, never
  holds up another), in an empty context. The timeout still fires while the target runs on (States.Timeout).

What runs, on which input, under which timeout, and what the history records are unchanged
(tests/test_moto_perf.py); a target's exception goes to ``threading.excepthook`` as a thread's does.
Thread-local data outlives a task on a pooled thread, as it does on Lambda, whose runtime answers every
invocation of a warm environment on one thread. The execution's own thread (``ExecutionWorker.start``) is left
a ``threading.Thread``: StopExecution finds the execution's environment only once that thread has made it,
and ``Thread.start``'s wait for the thread to run is what made a stop right after the start find it (from a
pool, one in a full run did not)."""

from __future__ import annotations

import contextvars
import queue
import sys
import threading
from typing import Any, Callable

from ..originals import ORIGINALS

IDLE_THREADS = 32  # threads kept waiting for work; more than the stack's concurrent executions usually need


class Pool:
    """Daemon threads that run one target at a time; ``submit`` never waits for a thread to start."""

    def __init__(self, idle: int = IDLE_THREADS) -> None:
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads between two targets, each about to take one from the queue
        self._keep = idle
        self.started = 0  # threads ever started (tests: the pool reuses them)

    def submit(self, target: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if spawn:
                self.started += 1
            else:
                self._idle -= 1  # this target is that idle thread's
        self._work.put(target)
        if spawn:
            threading.Thread(target=self._serve, daemon=True, name="sfn-interpreter").start()

    def _serve(self) -> None:
        while True:
            self._work.get()()
            with self._lock:
                if self._idle >= self._keep:
                    return
                self._idle += 1


POOL = Pool()
_HERE = threading.local()  # .in_place: the state being evaluated on this thread has no timeout (above)


class PooledThread:
    """What moto's interpreter asks of a ``threading.Thread``: ``start``, ``join``, ``is_alive``, ``ident``."""

    pool = POOL

    def __init__(self, group: Any = None, target: Callable[..., Any] | None = None, name: str | None = None,
                 args: tuple = (), kwargs: dict | None = None, *, daemon: bool | None = None) -> None:
        self._call = (target, args, kwargs or {})
        self._started = False
        self._ended = threading.Event()
        self.name = name or "sfn-interpreter-task"
        self.daemon = True
        self.ident: int | None = None

    def start(self) -> None:
        if self._started:
            raise RuntimeError("threads can only be started once")
        self._started = True
        if getattr(_HERE, "in_place", False):
            _HERE.in_place = False  # this target only: a thread it starts in turn is pooled
            self._run()
        else:
            self.pool.submit(self._run)

    def _run(self) -> None:
        self.ident = threading.get_ident()
        target, args, kwargs = self._call
        try:
            if target is not None:
                contextvars.Context().run(target, *args, **kwargs)  # a new thread's context is empty
        except BaseException:  # noqa: BLE001 - reported as an uncaught exception of a thread is
            threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), self)))
        finally:
            self._call = (None, (), {})
            self._ended.set()

    def join(self, timeout: float | None = None) -> None:
        self._ended.wait(timeout)

    def is_alive(self) -> bool:
        return self._started and not self._ended.is_set()


def patch_interpreter_threads() -> None:
    from moto.stepfunctions.parser.asl.component.state.exec import execute_state

    execute_state.Thread = PooledThread
    state = execute_state.ExecutionState
    original = ORIGINALS.setdefault("evaluate_with_timeout", state._evaluate_with_timeout)

    def _evaluate_with_timeout(self, env):
        _HERE.in_place = self.timeout.is_default_value()  # moto's 99,999,999 s: no TimeoutSeconds (docstring)
        try:
            return original(self, env)
        finally:
            _HERE.in_place = False

    state._evaluate_with_timeout = _evaluate_with_timeout
