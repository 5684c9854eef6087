"""The scheduler: which execution goes on next is the seed's choice, not the threads'.

The embedded stack runs each Standard execution on a thread of its own (moto's interpreter). Left alone,
their interleaving is whatever the machine's load makes it. Here every execution thread stops at each
**boundary** and waits for its turn:

- before each Lambda task (``LambdaService.invoke``, known by the execution name every task's payload
  carries: the handler is where an execution reads and writes the table; the stack runs one invocation at
  a time and every DynamoDB request is atomic, so between two boundaries an execution touches nothing
  another one sees);
- at each wait (a Retry's back-off, the conflict loop's Wait state: ``Holds.observer`` in the embedded
  clock), whatever its length.

The scheduler's thread lets one execution go at a time, and only once every execution it knows of is stopped
at a boundary or has ended (none is "running"), so the set it chooses from is the same on every run. It
chooses with the operation's own random stream among the candidates sorted by execution name; a waiting
execution may be **held** (the adversary's long back-off: until N other steps have gone, or until every
execution alive when it began to wait has ended), which is how 17 writers get into one lost response's
window. Executions are known from the moment StartExecution creates their worker (``ExecutionWorker.start``,
redrives included), before their thread runs, so none is missed.

What is not the scheduler's: threads that are not executions. The simulation starts a batch of executions
with the gate closed (``batch``) so that no choice is made before all of them exist; during an import
(``external``) the importer's own threads start executions whenever they get to it, so a choice waits until
no execution has been created for ``quiet`` seconds.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ...local.moto_patches.stepfunctions.clock import Holds

STUCK_S = 120.0  # an execution running this long between two boundaries: given up on (reported)


@dataclass
class Policy:
    """The adversary's choices for one operation: its own random stream, and how a wait is held."""

    rng: random.Random
    hold_until_others_end: float = 0.3  # chance that a wait lasts until every other execution has ended
    hold_steps_mean: float = 2.0  # otherwise it is held for this many other steps on average (geometric)
    eager: frozenset = frozenset()  # executions that go first whenever they can (the victim of a fault)
    sticky: float = 0.0  # chance that the execution chosen last goes on again (fewer conflicts)
    oldest_first: bool = False  # the execution created first goes first (one change at a time: an import's)
    patient: frozenset = frozenset()  # executions whose every wait lasts until the others have ended

    def holds(self, name: str) -> tuple[str, int]:
        return ("others-end", 0) if name in self.patient else self.hold()

    def hold(self) -> tuple[str, int]:
        if self.rng.random() < self.hold_until_others_end:
            return "others-end", 0
        steps = 0
        while self.rng.random() < self.hold_steps_mean / (1 + self.hold_steps_mean):
            steps += 1
        return "steps", steps


@dataclass
class Stop:
    name: str
    kind: str  # "lambda:<function>" or "wait"
    go: threading.Event = field(default_factory=threading.Event)
    hold: str = ""  # "", "steps" or "others-end"
    steps: int = 0
    others: frozenset = frozenset()
    order: int = 0


class Scheduler:
    """Install with ``with Scheduler(stack).installed():``; set ``policy`` per operation."""

    def __init__(self, stack) -> None:
        self.stack = stack
        self.cond = threading.Condition()
        self.alive: dict[str, str] = {}  # execution name -> "running" | "stopped"
        self.stops: dict[str, Stop] = {}
        self.policy = Policy(random.Random(0))
        self.trace: list[str] = []  # every choice: "name kind"
        self.problems: list[str] = []  # the scheduler's own: an execution stuck between two boundaries
        self.gates = 0
        self.externals = 0
        self.quiet = 0.0
        self.last_created = 0.0
        self.on_end: list[Callable[[str], None]] = []
        self._counter = 0
        self._last = ""
        self._created_order: dict[str, int] = {}
        self._running_since: dict[str, float] = {}
        self._stopping = False
        self._thread: threading.Thread | None = None

    # --- the hooks ---------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def installed(self) -> Iterator["Scheduler"]:
        from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker, SyncExecutionWorker

        scheduler, original_start = self, ExecutionWorker.start
        lambdas = self.stack.lambdas
        original_invoke = lambdas.invoke

        def start(worker) -> None:
            if isinstance(worker, SyncExecutionWorker):  # Express, run on the caller's thread: not scheduled
                return original_start(worker)
            name = worker._evaluation_details.execution_details.name
            scheduler._created(name)
            logic = worker._execution_logic  # the worker's own (a redrive's differs)

            def bound() -> None:
                try:
                    logic()
                finally:
                    scheduler._ended(name)

            worker._execution_logic = bound
            try:
                original_start(worker)
            except BaseException:
                scheduler._ended(name)
                raise

        def invoke(function, event) -> Any:
            execution = event.get("execution") if isinstance(event, dict) else None
            if isinstance(execution, dict) and isinstance(execution.get("name"), str):
                scheduler._boundary(f"lambda:{function.logical_id}", execution["name"])
            return original_invoke(function, event)

        ExecutionWorker.start = start
        lambdas.invoke = invoke
        Holds.observer = lambda name: scheduler._boundary("wait", name)
        self._thread = threading.Thread(target=self._loop, name="simulation-scheduler", daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            with self.cond:
                self._stopping = True
                for stop in self.stops.values():
                    stop.go.set()
                self.cond.notify_all()
            self._thread.join(10)
            ExecutionWorker.start = original_start
            lambdas.invoke = original_invoke
            Holds.observer = None

    def _created(self, name: str) -> None:
        with self.cond:
            self.alive[name] = "running"
            self._running_since[name] = time.monotonic()
            self.last_created = time.monotonic()
            self._counter += 1
            self._created_order[name] = self._counter
            self.cond.notify_all()

    def _ended(self, name: str) -> None:
        with self.cond:
            self.alive.pop(name, None)
            self.stops.pop(name, None)
            self._running_since.pop(name, None)
            self.trace.append(f"{name} end")
            self.cond.notify_all()
            callbacks = list(self.on_end)
        for callback in callbacks:
            callback(name)

    def _boundary(self, kind: str, bound: str) -> None:
        """Called on the thread doing execution ``bound``'s work: stop here until the scheduler says go."""
        with self.cond:
            if self.alive.get(bound) != "running" or self._stopping:
                return  # not a running execution of this stack (a test calling Holds, a Lambda not a task)
            self._counter += 1
            stop = Stop(bound, kind, order=self._counter)
            if kind == "wait":
                stop.hold, stop.steps = self.policy.holds(bound)
                # every other execution alive, but those held until the others end already: the earlier
                # hold is the longer one (else two such holds would wait for each other)
                stop.others = frozenset(n for n in self.alive if n != bound and not (
                    n in self.stops and self.stops[n].hold == "others-end"))
            self.stops[bound] = stop
            self.alive[bound] = "stopped"
            self._running_since.pop(bound, None)
            self.cond.notify_all()
        stop.go.wait()

    # --- what the simulation's driver uses -----------------------------------------------------------------
    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """No choice is made while the batch's executions are being started."""
        with self.cond:
            self.gates += 1
        try:
            yield
        finally:
            with self.cond:
                self.gates -= 1
                self.cond.notify_all()

    @contextlib.contextmanager
    def external(self, quiet: float = 0.3) -> Iterator[None]:
        """Threads that are not the simulation's start executions (an import): a choice waits until none
        has been created for ``quiet`` seconds."""
        with self.cond:
            self.externals += 1
            self.quiet = max(self.quiet, quiet)
        try:
            yield
        finally:
            with self.cond:
                self.externals -= 1
                if not self.externals:
                    self.quiet = 0.0
                self.cond.notify_all()

    def idle(self, timeout: float = 300.0) -> bool:
        """Wait until no execution is alive."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.alive:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 1.0))
        return True

    # --- the choice ------------------------------------------------------------------------------------------
    def _ready(self) -> float | None:
        """None when a choice can be made now, else how long to wait before looking again."""
        if self.gates or not self.stops:
            return 1.0
        now = time.monotonic()
        running = [n for n, s in self.alive.items() if s == "running"]
        if running:
            stuck = [n for n in running if now - self._running_since.get(n, now) > STUCK_S]
            for name in stuck:
                self.problems.append(f"scheduler: execution {name} ran {STUCK_S:.0f} s without reaching a boundary")
                self._running_since.pop(name, None)
                self.alive[name] = "lost"
            return None if stuck and len(stuck) == len(running) else 1.0
        if self.externals and now - self.last_created < self.quiet:
            return self.quiet - (now - self.last_created)
        return None

    def _eligible(self, stop: Stop) -> bool:
        if stop.hold == "steps":
            return stop.steps <= 0
        if stop.hold == "others-end":
            return not (stop.others & set(self.alive))
        return True

    def _choose(self) -> Stop:
        stops = sorted(self.stops.values(), key=lambda s: s.name)
        eligible = [s for s in stops if self._eligible(s)]
        if not eligible:  # every one is held (each waiting for the others): the one held longest goes
            eligible = [min(stops, key=lambda s: s.order)]
            # the others it waited for are held too: its hold is over
        eager = [s for s in eligible if s.name in self.policy.eager]
        last = next((s for s in eligible if s.name == self._last), None)
        if eager:
            chosen = eager[0]
        elif self.policy.oldest_first:
            chosen = min(eligible, key=lambda s: self._created_order.get(s.name, 0))
        elif last is not None and len(eligible) > 1 and self.policy.rng.random() < self.policy.sticky:
            chosen = last
        else:
            chosen = eligible[self.policy.rng.randrange(len(eligible))] if len(eligible) > 1 else eligible[0]
        self._last = chosen.name
        for stop in stops:
            if stop is not chosen and stop.hold == "steps":
                stop.steps -= 1
        return chosen

    def _loop(self) -> None:
        with self.cond:
            while not self._stopping:
                wait = self._ready()
                if wait is not None:
                    self.cond.wait(wait)
                    continue
                chosen = self._choose()
                del self.stops[chosen.name]
                self.alive[chosen.name] = "running"
                self._running_since[chosen.name] = time.monotonic()
                self.trace.append(f"{chosen.name} {chosen.kind}")
                chosen.go.set()
