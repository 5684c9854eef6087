"""A discrete-event simulation (SimPy) of changeflow's workflow on a platform: the embedded stack or AWS.

What it takes from the project rather than copying: the step order, the conflict loop, the back-off draw and
every Task's Retry policy come from the ASL (``workflow.read``); whether a change writes, is stale or a
duplicate, and whether a failed conditional write is a conflict, from ``changeflow_core.decisions``
(``decide``, ``classify_failed_write``); when the attempts are spent, from ``changeflow_core.steps.take``;
the ids ``v0`` remembers from ``changeflow_core.items.next_change_ids``.

What it models: Step Functions' StartExecution and StateTransition token buckets (a throttled start is
refused, a throttled transition waits: AWS delays it), Lambda's account concurrency and per-function
scaling rate (over either, the invocation fails with ``Lambda.TooManyRequestsException`` and the Task's
Retry, or its Catch, takes over), cold and warm environments, DynamoDB request latency, one partition's
write rate (a throttled write waits, as the SDK's retries make it), and the conditional write of ``v0``
against the entity's state at the moment the write lands. The embedded stack is one process: its steps
take turns (``one_process``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import simpy

from changeflow_core import items, model as core_model
from changeflow_core.decisions import WRITE, classify_failed_write, decide
from changeflow_core.errors import VersionConflict
from changeflow_core.seal import Key
from changeflow_core.steps import proven, take
from changeflow_core.validation import Change

from .quotas import Quota
from .workflow import Step, Workflow

SIMULATED_KEY = Key(b"the capacity simulation's own seal key")  # steps.take checks the proof it is handed

Z99 = 2.3263  # the standard normal's 99th percentile


@dataclass(frozen=True)
class Dist:
    """A latency in seconds: ``fixed`` (always ``median``), ``exp`` (exponential with mean ``median``),
    ``lognormal`` given its median and 99th percentile, or ``empirical`` (drawn from measured ``samples``)."""

    median: float
    p99: float | None = None
    kind: str = "lognormal"
    samples: tuple[float, ...] = ()

    @property
    def sigma(self) -> float:
        return 0.0 if not self.p99 or self.p99 <= self.median else math.log(self.p99 / self.median) / Z99

    @property
    def mean(self) -> float:
        if self.kind == "empirical":
            return sum(self.samples) / len(self.samples)
        if self.kind == "fixed":
            return self.median
        if self.kind == "exp":
            return self.median
        return self.median * math.exp(self.sigma ** 2 / 2)

    def sample(self, rng: random.Random) -> float:
        if self.kind == "empirical":
            return rng.choice(self.samples)
        if self.kind == "fixed" or self.median == 0:
            return self.median
        if self.kind == "exp":
            return rng.expovariate(1 / self.median)
        return rng.lognormvariate(math.log(self.median), self.sigma)


def fixed(seconds: float) -> Dist:
    return Dist(seconds, kind="fixed")


def empirical(samples: list[float]) -> Dist:
    ordered = sorted(samples)
    return Dist(ordered[len(ordered) // 2], ordered[-1], kind="empirical", samples=tuple(ordered))


@dataclass(frozen=True)
class Platform:
    """Where the workflow runs: its latencies and its limits (None: unlimited)."""

    name: str
    transition: Dist  # Step Functions' own time per state entered
    invoke: Dist  # a warm Lambda invocation's overhead
    handler: Dist  # a handler's own work, DynamoDB requests excluded
    read: Dist  # one DynamoDB read (consistent Query)
    write: Dist  # one DynamoDB PutItem
    cold_start: Dist | None = None  # a new execution environment's init; None: never cold (in-process)
    start: Dist | None = None  # StartExecution's own time before the first state (embedded: in the one process)
    one_process: bool = False  # the embedded stack: every step's work takes turns in one process
    # who gets the one process next: with probability ``interleave`` a request queues in the order asked
    # (1: every execution interleaves with every other, the most conflicts), otherwise the execution
    # started first goes first (0: one runs on while the others queue, the fewest conflicts); the embedded
    # stack's threads and its GIL lie between the two (calibration fits it)
    interleave: float = 1.0
    # the share of a state transition's time spent in the one process (the rest: thread hand-offs and
    # timers, which do not hold it); 1 on a platform without one process has no effect
    transition_held: float = 1.0
    entry_bucket: tuple[float, float] | None = None  # the API stage (bucket, refill): over it 429, nothing starts
    start_bucket: tuple[float, float] | None = None  # StartExecution (bucket, refill)
    transition_bucket: tuple[float, float] | None = None  # StateTransition (bucket, refill): Standard only
    lambda_concurrency: int | None = None
    lambda_scaling: tuple[float, float] | None = None  # new environments (bucket, refill) per function
    partition_wru: float | None = None  # one partition's write units per second
    write_units: float = 2.0  # units of one v0 or history put (1 KB with the hash chain: 2)
    read_units: float = 1.0

    def window(self) -> float:
        """Mean read-to-write window of a change: the rest of the fetch after its read, the write's state
        transition, its invocation and its handler up to the write landing."""
        return self.handler.mean / 2 + self.transition.mean + self.invoke.mean + self.handler.mean / 2 + self.write.mean


def aws(table: dict[str, Quota], standard: bool = True, entry: str = "direct", **latencies: Dist) -> Platform:
    """AWS with the quotas of ``table``. Latencies (assumed, not measured: see docs/capacity.md; the cost
    model bills durations on the same figures, ``changeflow.cost.prices.AWS_LATENCY``): a Standard state
    transition 25 ms median (Express 10 ms), a warm Lambda invoke 15 ms, a handler's own work 3 ms, a
    DynamoDB request 5 ms median (p99 20 ms, "single-digit milliseconds"), a cold start 400 ms median."""
    from changeflow.cost.prices import AWS_LATENCY as L

    base = dict(transition=Dist(*L["standard_transition" if standard else "express_transition"]),
                invoke=Dist(*L["invoke"]), handler=Dist(*L["handler"]), read=Dist(*L["dynamodb"]),
                write=Dist(*L["dynamodb"]), cold_start=Dist(*L["cold_start"]))
    base.update(latencies)
    q = table
    start = q["sfn_standard_start" if standard else "sfn_express_start"]
    trans = q["sfn_standard_transition"]
    stage = table.get("api_stage") if entry == "api" else None  # POST /changes: the stack's stage throttle first
    return Platform(name=f"AWS {'Standard' if standard else 'Express'}" + (" via POST /changes" if stage else ""),
                    **base, entry_bucket=(stage.bucket or stage.rate, stage.rate) if stage else None,
                    start_bucket=(start.bucket or start.rate, start.rate),
                    transition_bucket=(trans.bucket or trans.rate, trans.rate) if standard else None,
                    lambda_concurrency=int(q["lambda_concurrency"].rate),
                    lambda_scaling=(q["lambda_scaling"].bucket or 0, q["lambda_scaling"].rate),
                    partition_wru=q["ddb_partition_write"].rate)


class Bucket:
    """A token bucket in simulated time, full at the start."""

    def __init__(self, env: simpy.Environment, bucket: float, refill: float):
        self.env, self.size, self.refill = env, bucket, refill
        self.tokens, self.last = bucket, env.now

    def _fill(self) -> None:
        self.tokens = min(self.size, self.tokens + (self.env.now - self.last) * self.refill)
        self.last = self.env.now

    def try_take(self, n: float = 1.0) -> bool:
        self._fill()
        if self.tokens >= n - 1e-9:
            self.tokens -= n
            return True
        return False

    def take(self, n: float = 1.0):
        """Wait until ``n`` tokens are there, then take them (a throttled request that waits or is retried)."""
        while not self.try_take(n):  # at least a microsecond: a float remainder must not stall the clock
            yield self.env.timeout(max(1e-6, (n - self.tokens) / self.refill))


class TaskFailed(Exception):
    def __init__(self, error: str):
        super().__init__(error)
        self.error = error


@dataclass
class Result:
    outcome: str  # applied, duplicate, stale, VersionConflict, ThrottledStart, or a failure's error name
    order: int = 0  # the execution's place in start order
    started_at: float = 0.0
    seconds: float = 0.0
    transitions: int = 0
    invocations: int = 0
    read_units: float = 0.0
    write_units: float = 0.0
    conflicts: int = 0
    cold_starts: int = 0
    lambda_throttles: int = 0


@dataclass
class Entity:
    latest: dict[str, Any] | None = None
    bucket: Bucket | None = None


@dataclass
class Simulation:
    """One run: a platform, the workflow, a seed. ``k_writers`` or ``poisson`` adds executions; ``run``
    runs them to the end and returns their results."""

    platform: Platform
    workflow: Workflow
    seed: int = 1
    results: list[Result] = field(default_factory=list)

    def __post_init__(self):
        p = self.platform
        self.env = simpy.Environment()
        self.rng = random.Random(self.seed)
        self.entities: dict[str, Entity] = {}
        self.process = simpy.PriorityResource(self.env, capacity=1) if p.one_process else None
        self.started = 0
        self.entry = Bucket(self.env, *p.entry_bucket) if p.entry_bucket else None
        self.starts = Bucket(self.env, *p.start_bucket) if p.start_bucket else None
        self.transitions = Bucket(self.env, *p.transition_bucket) if p.transition_bucket else None
        self.busy = 0
        self.idle: dict[str, int] = {}
        self.scaling: dict[str, Bucket] = {}

    # --- what a change goes through ---------------------------------------------------------------------
    def entity(self, entity_id: str) -> Entity:
        if entity_id not in self.entities:
            p = self.platform
            self.entities[entity_id] = Entity(bucket=Bucket(self.env, p.partition_wru, p.partition_wru)
                                              if p.partition_wru else None)
        return self.entities[entity_id]

    def turn(self, result: "Result"):
        """A request for the one process, in the platform's order."""
        interleaved = self.platform.interleave >= 1 or self.rng.random() < self.platform.interleave
        return self.process.request(priority=1 << 40 if interleaved else result.order)

    def busy_for(self, dist: Dist, result: "Result"):
        """Spend a latency; on the embedded stack, holding the one process."""
        seconds = dist.sample(self.rng)
        if self.process is None:
            yield self.env.timeout(seconds)
            return
        with self.turn(result) as turn:
            yield turn
            yield self.env.timeout(seconds)

    def enter(self, step: Step, result: Result):
        result.transitions += 1
        if self.transitions is not None:
            yield from self.transitions.take()
        held = self.platform.transition_held
        if self.process is None or held >= 1:
            yield from self.busy_for(self.platform.transition, result)
            return
        seconds = self.platform.transition.sample(self.rng)
        with self.turn(result) as turn:
            yield turn
            yield self.env.timeout(seconds * held)
        yield self.env.timeout(seconds * (1 - held))

    def invoke(self, function: str, work, result: Result):
        """One Lambda invocation running ``work`` (a generator of DynamoDB requests); raises TaskFailed."""
        p = self.platform
        result.invocations += 1
        if p.lambda_concurrency is not None and self.busy >= p.lambda_concurrency:
            result.lambda_throttles += 1
            raise TaskFailed("Lambda.TooManyRequestsException")
        cold = False
        if p.cold_start is not None:
            if self.idle.get(function, 0) > 0:
                self.idle[function] -= 1
            else:
                scaling = self.scaling.setdefault(function, Bucket(self.env, *p.lambda_scaling)) \
                    if p.lambda_scaling else None
                if scaling is not None and not scaling.try_take():
                    result.lambda_throttles += 1
                    raise TaskFailed("Lambda.TooManyRequestsException")
                cold = True
                result.cold_starts += 1
        self.busy += 1
        try:
            if self.process is not None:  # the invoke lock: the whole handler in one turn
                with self.turn(result) as turn:
                    yield turn
                    value = yield from self._handler(work, cold)
            else:
                value = yield from self._handler(work, cold)
        finally:
            self.busy -= 1
            if p.cold_start is not None:
                self.idle[function] = self.idle.get(function, 0) + 1
        return value

    def _handler(self, work, cold: bool):
        p = self.platform
        overhead = p.invoke.sample(self.rng) + (p.cold_start.sample(self.rng) if cold else 0.0)
        yield self.env.timeout(overhead + p.handler.sample(self.rng))
        value = yield from work
        return value

    def run_task(self, step: Step, function: str, make_work, result: Result):
        """A Task with its Retry policies (read from the ASL): a matching error is retried after the
        policy's delay (full jitter: uniform up to it); any other raises TaskFailed for the Catch."""
        retries = 0
        while True:
            try:
                value = yield from self.invoke(function, make_work(), result)
                return value
            except TaskFailed as failed:
                policy = step.retry_for(failed.error)
                if policy is None or retries >= policy.max_attempts:
                    raise
                retries += 1
                result.transitions += 1  # Standard bills a retry as a transition
                ceiling = policy.ceiling(retries)
                yield self.env.timeout(self.rng.uniform(0, ceiling) if policy.jitter == "FULL" else ceiling)

    # --- DynamoDB work of each step ---------------------------------------------------------------------
    def fetch_work(self, change: Change, result: Result, seen: list):
        yield self.env.timeout(self.platform.read.sample(self.rng))
        result.read_units += self.platform.read_units
        latest = self.entity(change.entityId).latest
        seen[:] = [None if latest is None else {**latest, "changeIds": dict(latest["changeIds"])}]
        return decide(change, seen[0])

    def put(self, entity: Entity, result: Result):
        units = self.platform.write_units
        if entity.bucket is not None:
            yield from entity.bucket.take(units)
        yield self.env.timeout(self.platform.write.sample(self.rng))
        result.write_units += units

    def write_work(self, change: Change, fetched: dict | None, attempt: int, result: Result):
        outcome, _ = decide(change, fetched)  # as steps.write: a duplicate or stale change writes nothing
        if outcome != WRITE:
            if outcome == core_model.STALE:
                raise TaskFailed("ChangeIsStale")
            return outcome
        entity = self.entity(change.entityId)
        yield from self.put(entity, result)
        stored = entity.latest
        if (stored["version"] if stored else 0) == (fetched["version"] if fetched else 0):
            version = (fetched["version"] if fetched else 0) + 1
            entity.latest = {"version": version, "effectiveAt": change.effectiveAt,
                             "changeIds": items.next_change_ids(change, fetched, version)}
            return core_model.APPLIED
        outcome, _ = classify_failed_write(change, stored)
        if outcome == core_model.CONFLICT:
            raise TaskFailed("VersionConflict" if attempt >= self.workflow.max_attempts else "WriteConflict")
        if outcome == core_model.STALE:
            raise TaskFailed("ChangeIsStale")
        return outcome

    def history_work(self, change: Change, result: Result):
        yield from self.put(self.entity(change.entityId), result)

    def tag_work(self):
        yield self.env.timeout(0)

    # --- one execution ----------------------------------------------------------------------------------
    def execution(self, change: Change):
        started = self.env.now
        self.started += 1
        result = Result("applied", order=self.started, started_at=started)
        if self.entry is not None and not self.entry.try_take():
            result.outcome = "ThrottledRequest"  # the stage's 429: no StartExecution
            self.results.append(result)
            return
        if self.starts is not None and not self.starts.try_take():
            result.outcome = "ThrottledStart"
            self.results.append(result)
            return
        try:
            if self.platform.start is not None:
                yield from self.busy_for(self.platform.start, result)
            result.outcome = yield from self._path(change, result)
        except TaskFailed as failed:
            result.outcome = failed.error
        result.seconds = self.env.now - started
        self.results.append(result)

    def _path(self, change: Change, result: Result):
        w = self.workflow
        fetch, seen = w.applied[0], []
        yield from self.enter(fetch, result)
        outcome, _ = yield from self.run_task(fetch, "fetch", lambda: self.fetch_work(change, result, seen), result)
        if outcome == core_model.STALE:
            for step in w.stale[1:]:
                yield from self.enter(step, result)
                yield from self.run_task(step, "tag", self.tag_work, result)
            return core_model.STALE
        attempt = 1
        write = w.steps[w.write]
        while True:
            yield from self.enter(write, result)
            try:
                outcome = yield from self.run_task(write, "write", lambda: self.write_work(
                    change, seen[0], attempt, result), result)
                break
            except TaskFailed as failed:
                if failed.error in ("VersionConflict", "ChangeIsStale"):
                    raise
                result.conflicts += failed.error == "WriteConflict"
                for step in w.conflict_loop[:-1]:  # the back-off, its wait, the fetch again
                    yield from self.enter(step, result)
                    if step.type == "Wait":
                        low, high = w.backoff_range(attempt)
                        yield self.env.timeout(self.rng.randint(low, high))
                    elif step.name == w.fetch_again:
                        attempt += 1
                        try:  # the core's rule: past the attempts, VersionConflict or LatestWriteFailed
                            # as the state machine hands it on: with the fetch step's proof (issue 33)
                            state = proven(SIMULATED_KEY, "simulated", {"change": change.to_json(), "content": None})
                            take({**state, "attempt": attempt, "error": {"Error": failed.error},
                                  "execution": {"name": "simulated"}}, None, SIMULATED_KEY)
                        except VersionConflict:
                            raise TaskFailed("VersionConflict") from None
                        except Exception as spent:  # LatestWriteFailed
                            raise TaskFailed(type(spent).__name__) from None
                        outcome, _ = yield from self.run_task(step, "fetch", lambda: self.fetch_work(
                            change, result, seen), result)
                        if outcome == core_model.STALE:
                            raise TaskFailed("ChangeIsStale")
        after = list(w.applied[w.applied.index(write) + 1:])
        for step in after:
            yield from self.enter(step, result)
            work = (lambda: self.history_work(change, result)) if step is after[0] and outcome == core_model.APPLIED \
                else self.tag_work
            yield from self.run_task(step, step.name, work, result)
        return outcome if outcome != WRITE else core_model.APPLIED

    # --- workloads --------------------------------------------------------------------------------------
    def k_writers(self, k: int, entity_id: str = "hot#1", effective_at: int = 1_000) -> None:
        """``k`` changes to one entity at once, one shared effectiveAt: every one must apply (the
        benchmark's contention run)."""
        for i in range(k):
            self.env.process(self.execution(Change(entity_id, "put", effective_at, f"{entity_id}-c{i}")))

    def poisson(self, rate: float, entities: int, seconds: float) -> None:
        """A Poisson stream of ``rate`` changes/s for ``seconds``, each to one of ``entities`` entities
        chosen uniformly; effectiveAt is the arrival time (ms)."""
        def arrivals():
            n = 0
            while True:
                yield self.env.timeout(self.rng.expovariate(rate))
                if self.env.now > seconds:
                    return
                n += 1
                entity = f"e#{self.rng.randrange(entities)}"
                self.env.process(self.execution(Change(entity, "put", int(self.env.now * 1000) + 1, f"{entity}-{n}")))
        self.env.process(arrivals())

    def run(self, until: float | None = None) -> list[Result]:
        self.env.run(until=until)
        return self.results


def summary(results: list[Result], since: float = 0.0) -> dict[str, Any]:
    """Per applied change (the benchmark's way: totals over every execution / applied), outcomes, and times
    to outcome of the executions that started (p50 and p99 picked as changeflow.cost.contention picks them);
    ``since``: only executions started at or after that time (a warm-up left out)."""
    results = [r for r in results if r.started_at >= since]
    started = [r for r in results if r.outcome not in ("ThrottledStart", "ThrottledRequest")]
    applied = sum(1 for r in results if r.outcome == core_model.APPLIED)
    per = max(applied, 1)
    seconds = sorted(r.seconds for r in started)
    pick = lambda q: seconds[min(len(seconds) - 1, int(q * len(seconds)))] if seconds else 0.0  # noqa: E731
    return {"executions": len(results), "applied": applied,
            "version_conflicts": sum(1 for r in results if r.outcome == "VersionConflict"),
            "throttled_starts": sum(1 for r in results if r.outcome == "ThrottledStart"),
            "throttled_requests": sum(1 for r in results if r.outcome == "ThrottledRequest"),
            "other": sorted({r.outcome for r in started} - {core_model.APPLIED, "VersionConflict"}),
            "transitions_per_applied": sum(r.transitions for r in started) / per,
            "invocations_per_applied": sum(r.invocations for r in started) / per,
            "read_units_per_applied": sum(r.read_units for r in started) / per,
            "write_units_per_applied": sum(r.write_units for r in started) / per,
            "conflicts_per_applied": sum(r.conflicts for r in started) / per,
            "cold_starts": sum(r.cold_starts for r in started),
            "lambda_throttles": sum(r.lambda_throttles for r in started),
            "p50_s": pick(0.5), "p99_s": pick(0.99), "mean_s": sum(seconds) / len(seconds) if seconds else 0.0}
