"""What the capacity model and the simulation need from the state machine, read from
``statemachines/change.asl.json`` (never copied), and from ``changeflow_core.decisions``: the states an
applied change passes through, the loop a write conflict takes, the back-off it waits, and each Task's
Retry policy. An edit of the ASL changes what this module returns, and so the tables and the simulation.

This is a reading of one workflow's shape, not an interpreter: it follows ``Next``, ``Catch`` and the
back-off's ``States.MathRandom`` expression, and raises ``WorkflowShapeError`` when the ASL no longer has
the shape the model assumes (a conflict loop back to the write, a Wait fed by a drawn back-off).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# States.MathRandom(start, States.ArrayGetItem(States.Array(c1, c2, ...), $.attempt)): the back-off's draw
BACKOFF = re.compile(r"States\.MathRandom\(\s*(?P<start>\d+)\s*,\s*States\.ArrayGetItem\(\s*States\.Array\("
                     r"(?P<ends>[\d,\s]+)\)\s*,\s*\$\.(?P<index>\w+)\s*\)\s*\)")


class WorkflowShapeError(ValueError):
    """The ASL no longer has a shape the capacity model knows: say which, rather than model it wrongly."""


@dataclass(frozen=True)
class RetryPolicy:
    """One ``Retry`` entry of a Task (AWS: the delay before retry n is IntervalSeconds × BackoffRate^(n-1),
    capped at MaxDelaySeconds; ``FULL`` jitter draws it uniformly between 0 and that)."""

    errors: tuple[str, ...]
    interval: float = 1.0
    max_attempts: int = 3
    backoff_rate: float = 2.0
    max_delay: float | None = None
    jitter: str = "NONE"

    def ceiling(self, retry: int) -> float:
        """The un-jittered delay before retry ``retry`` (1-based)."""
        delay = self.interval * self.backoff_rate ** (retry - 1)
        return min(delay, self.max_delay) if self.max_delay is not None else delay

    def matches(self, error: str) -> bool:
        return error in self.errors or ("States.ALL" in self.errors and not error.startswith("States.Runtime"))


@dataclass(frozen=True)
class Step:
    """A state on the way of a change: its name, its type, and for a Task its Retry policies."""

    name: str
    type: str
    retries: tuple[RetryPolicy, ...] = ()

    def retry_for(self, error: str) -> RetryPolicy | None:
        """The first Retry entry matching ``error`` (AWS evaluates them in order); None: not retried."""
        for policy in self.retries:
            if policy.matches(error):
                return policy if policy.max_attempts > 0 else None
        return None


@dataclass(frozen=True)
class Workflow:
    """The shape of one change's workflow, as the ASL has it."""

    applied: tuple[Step, ...]  # StartAt to End on the happy path
    stale: tuple[Step, ...]  # StartAt to End when the first fetch finds the change stale
    conflict_loop: tuple[Step, ...]  # from the write's WriteConflict Catch back to the write (included)
    write: str  # the conditional v0 write's state
    fetch_again: str  # the fetch after a back-off
    backoff_start: int  # MathRandom's inclusive start (seconds)
    backoff_ends: tuple[int, ...]  # MathRandom's exclusive end, by attempt (the array indexed by $.attempt)
    max_attempts: int  # conditional v0 writes per change before VersionConflict (changeflow_core)
    source: str = ""
    steps: dict[str, Step] = field(default_factory=dict)

    @property
    def transitions_per_applied(self) -> int:
        """State transitions of an applied change without a conflict (Standard bills each state entered)."""
        return len(self.applied)

    @property
    def transitions_per_conflict(self) -> int:
        return len(self.conflict_loop)

    @property
    def invocations_per_applied(self) -> int:
        return sum(1 for s in self.applied if s.type == "Task")

    @property
    def invocations_per_conflict(self) -> int:
        return sum(1 for s in self.conflict_loop if s.type == "Task")

    def backoff_range(self, attempt: int) -> tuple[int, int]:
        """The whole seconds a back-off after write attempt ``attempt`` may wait: ``[low, high]`` (MathRandom's
        end is exclusive)."""
        ends = self.backoff_ends
        end = ends[min(attempt, len(ends) - 1)]
        return self.backoff_start, max(self.backoff_start, end - 1)

    @property
    def worst_case_wait(self) -> int:
        """Seconds of back-off waits of a change that conflicts on every one of its write attempts."""
        return sum(self.backoff_range(a)[1] for a in range(1, self.max_attempts))

    def summary(self) -> dict[str, Any]:
        return {"transitions_per_applied": self.transitions_per_applied,
                "transitions_per_stale": len(self.stale),
                "transitions_per_conflict": self.transitions_per_conflict,
                "invocations_per_applied": self.invocations_per_applied,
                "invocations_per_conflict": self.invocations_per_conflict,
                "backoff_ceilings": [self.backoff_range(a)[1] for a in range(1, self.max_attempts)],
                "worst_case_wait_s": self.worst_case_wait, "max_attempts": self.max_attempts}


def _retries(state: dict[str, Any]) -> tuple[RetryPolicy, ...]:
    return tuple(RetryPolicy(tuple(r["ErrorEquals"]), float(r.get("IntervalSeconds", 1)), int(r.get("MaxAttempts", 3)),
                             float(r.get("BackoffRate", 2.0)),
                             float(r["MaxDelaySeconds"]) if "MaxDelaySeconds" in r else None,
                             r.get("JitterStrategy", "NONE")) for r in state.get("Retry", ()))


def _catch(state: dict[str, Any], error: str) -> str | None:
    for catcher in state.get("Catch", ()):
        if error in catcher["ErrorEquals"]:
            return catcher["Next"]
    return None


def read(path: Path, max_attempts: int | None = None) -> Workflow:
    """The workflow of the ASL file at ``path``; ``max_attempts`` defaults to changeflow_core's."""
    if max_attempts is None:
        from changeflow_core.decisions import MAX_ATTEMPTS as max_attempts  # the rule the handlers apply
    definition = json.loads(Path(path).read_text(encoding="utf-8"))
    states = definition["States"]
    steps = {name: Step(name, s["Type"], _retries(s)) for name, s in states.items()}

    def walk(start: str, first_catch: str | None = None) -> list[str]:
        """The states from ``start`` following ``Next`` to an ``End`` (a Task first leaving by ``first_catch``)."""
        path, name = [], start
        while True:
            if name in path:
                raise WorkflowShapeError(f"the path from {start!r} loops at {name!r}")
            path.append(name)
            state = states[name]
            if first_catch and len(path) == 1:
                nxt = _catch(state, first_catch)
                if nxt is None:
                    raise WorkflowShapeError(f"{name!r} has no Catch for {first_catch}")
            elif state.get("End") or state["Type"] in ("Succeed", "Fail"):
                return path
            else:
                nxt = state["Next"]
            name = nxt

    applied = walk(definition["StartAt"])
    tasks = [n for n in applied if states[n]["Type"] == "Task"]
    write = next((n for n in tasks if _catch(states[n], "WriteConflict")), None)
    if write is None:
        raise WorkflowShapeError("no Task on the applied path catches WriteConflict (the conditional write)")
    stale = walk(definition["StartAt"], "ChangeIsStale")
    # the loop: from the write's WriteConflict Catch, following Next, until the write again
    loop, name = [], _catch(states[write], "WriteConflict")
    while name != write:
        if name in loop or name is None:
            raise WorkflowShapeError(f"the WriteConflict path from {write!r} does not come back to it")
        loop.append(name)
        name = states[name].get("Next")
    loop.append(write)
    fetch_again = next((n for n in reversed(loop[:-1]) if states[n]["Type"] == "Task"), None)
    wait = next((n for n in loop if states[n]["Type"] == "Wait"), None)
    if wait is None or fetch_again is None:
        raise WorkflowShapeError("the conflict loop has no Wait or no fetch before the write")
    seconds_path = states[wait].get("SecondsPath", "")
    key = seconds_path.removeprefix("$.") + ".$"
    drawn = [states[n]["Parameters"][key] for n in loop if key in states[n].get("Parameters", {})]
    match = BACKOFF.search(drawn[0]) if drawn else None
    if match is None:
        raise WorkflowShapeError(f"the Wait {wait!r} is not fed by States.MathRandom over an array indexed by "
                                 "the attempt")
    ends = tuple(int(x) for x in match["ends"].split(","))
    return Workflow(applied=tuple(steps[n] for n in applied), stale=tuple(steps[n] for n in stale),
                    conflict_loop=tuple(steps[n] for n in loop), write=write, fetch_again=fetch_again,
                    backoff_start=int(match["start"]), backoff_ends=ends, max_attempts=int(max_attempts),
                    source=str(path), steps=steps)
