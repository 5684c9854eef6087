"""Operations that write through the workflow: a batch of changes started together (K concurrent writers,
with faults at any step boundary, redeliveries, server-given or client-given times, through StartExecution
or ``POST /changes`` signed on ``serve``), and redrives of the executions that failed. After each, the
outcome and version checkers (``check_writes``) read what every execution was told against the table."""

from __future__ import annotations

import random
import time
from typing import Any

from ..faults import Planned
from .check_writes import check_outcomes, check_versions
from .scheduler import Policy
from .world import Run, World


def policy(op: dict[str, Any]) -> Policy:
    """The scheduler's choices for ``op``: its own random stream (``seed``), how long a wait is held
    (``hold``: the chance it lasts until the others end), ``eager`` (requests whose executions go first
    whenever they can: a fault's victim), ``patient`` (requests whose every wait lasts until the others have
    ended: the victim's back-off outlasting everyone) and ``sticky`` (the chance the last execution goes on
    again)."""
    from ...client import names

    def named(key: str) -> frozenset:
        chosen = op.get(key, ())
        return frozenset(names.execution_name(r) for r in op.get("requests", []) if r.get("changeId") in chosen)

    return Policy(random.Random(op["seed"]), hold_until_others_end=op.get("hold", 0.3),
                  hold_steps_mean=op.get("holdSteps", 2.0), eager=named("eager"), sticky=op.get("sticky", 0.0),
                  patient=named("patient"))


def start(world: World, request: dict[str, Any], via: str, redeliver: bool) -> Run | None:
    """Start one change; ``None`` when the entry point refused it before anything started."""
    if via == "api":
        from changeflow_core import wire

        status, answer = world.http("POST", "/changes", wire.dumps(request).encode("utf-8"))
        if status != 200 or not isinstance(answer, dict) or not answer.get("executionArn"):
            world.log.append(f"op {world.op}: POST /changes {request.get('changeId')} answered {status} {answer}")
            return None
        arn = answer["executionArn"]
        run = Run(world.op, request, arn, arn.split(":")[-1])
    else:
        name, arn = world.cf.start(request, redeliver=redeliver)
        run = Run(world.op, request, arn, name)
    world.runs.append(run)
    return run


def run_changes(world: World, op: dict[str, Any]) -> None:
    """``op``: ``entity``, ``requests`` (started in this order, all before any goes on), ``faults``
    (``[change, step, kind, times, skip]``), ``via`` (stepfunctions or api), ``again`` (indices of requests
    that are redeliveries of an earlier one: a new execution of the same change)."""
    world.scheduler.policy = policy(op)
    plan = [Planned(*fault) for fault in op.get("faults", [])]
    server_time = any("effectiveAt" not in r for r in op["requests"])
    runs = []
    with world.injector.planned(world.stack.lambdas, plan):
        with world.scheduler.batch():
            for i, request in enumerate(op["requests"]):
                if server_time and i:
                    time.sleep(0.003)  # a server-given time is the start's millisecond: each its own, in order
                run = start(world, request, op.get("via", "stepfunctions"), redeliver=True)
                if run is not None:
                    runs.append(run)
        for run in runs:
            world.ended(run)
    world.scheduler.idle(60)
    entities = sorted({r.request["entityId"] for r in runs})
    for entity in entities:
        if entity in world.tampered:
            continue
        check_outcomes(world, entity, [r for r in runs if r.request["entityId"] == entity])
        check_versions(world, entity)


def run_redrive(world: World, op: dict[str, Any]) -> None:
    """Redrive every execution of ``entity`` that ended FAILED (RedriveExecution, as `aws stepfunctions
    redrive-execution` does): it goes on from the step that failed; what it is told then is checked too."""
    world.scheduler.policy = policy(op)
    failed = [r for r in world.executions_of(op["entity"]) if r.execution and r.execution.status == "FAILED"]
    redriven = []
    with world.scheduler.batch():
        for run in failed:
            try:
                world.cf.sfn.redrive_execution(executionArn=run.arn)
            except world.cf.sfn.exceptions.ClientError as exc:  # noqa: PERF203 - e.g. not redrivable
                world.log.append(f"op {world.op}: redrive of {run.name} refused: {exc}")
                continue
            redriven.append(run)
    for run in redriven:
        _wait_redriven(world, run)
    world.scheduler.idle(60)
    if op["entity"] not in world.tampered and redriven:
        check_outcomes(world, op["entity"], redriven)
        check_versions(world, op["entity"])


def _wait_redriven(world: World, run: Run) -> None:
    """A redriven execution reuses its ARN: wait until DescribeExecution says it ended again."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if world.cf.describe(run.arn)["status"] != "RUNNING":
            break
        time.sleep(0.02)
    world.ended(run)
