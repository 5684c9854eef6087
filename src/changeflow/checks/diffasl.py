"""A second opinion on the state machine: the same change requests run through moto's ASL interpreter
(the embedded stack) and through LocalStack's (``localstack-core``, in-process, no server), with the
project's real handlers answering every Lambda task in both, then compared.

moto's interpreter began as a port of LocalStack's; LocalStack keeps its own checked against AWS with
recorded snapshot tests. A difference between the two points at where one has drifted from AWS; the AWS
documentation decides which. Agreement is weaker evidence (both may share an inherited mistake).

Compared, for every execution of every path: the sequence of history events (type and state name),
each state's output, the final status with its output or error, and the table afterwards. Timestamps,
request ids and stack traces are left out. Known, explained differences live in
``tests/asl_known_differences.json``; any other difference fails the run.

Runs in its own python3.13 virtualenv (``make diff-asl``): LocalStack's interpreter needs Python >= 3.12.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import re
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .diffasl_faults import faults as scenario_faults

KNOWN_DIFFERENCES = "tests/asl_known_differences.json"
TIME_SCALE = 0.001  # Wait states and retry back-offs, in both interpreters
# Values that differ from run to run by nature: wall-clock times, ids drawn at random, stack traces.
VOLATILE_KEYS = {"recordedAt", "startTime", "StartTime", "requestId", "stackTrace", "expiresAt", "waitSeconds",
                 "timestamp", "startDate", "stopDate",
                 # the hash chain covers recordedAt, so each link differs from run to run too
                 "prevHash", "chainHash",
                 # the Lambda integration's envelope around a task's result, as AWS returns it: the embedded
                 # stack adds it (moto_patches.stepfunctions.lambda_tasks, issue 27.8); LocalStack's interpreter,
                 # driven through the same in-process Lambda seam here, returns the payload without it
                 "SdkHttpMetadata", "SdkResponseMetadata",
                 # the seal and the steps' proofs (issue 33): MACs under each stack's own random key
                 "seal", "proof",
                 # keys made of a recordedAt: the time index's (the version before's time, issue 37) and the
                 # changes index's hour (issue 35)
                 "priorRecorded", "recordedHour"}


@dataclass
class Scenario:
    """One path through the workflow: setup changes, then the change under test; faults around it."""

    name: str
    requests: list[dict]
    faults: list[tuple[str, str, int]] = field(default_factory=list)  # (function logical id, kind, times)
    # DynamoDB throttles of a function's client: (function logical id, client attribute, operation, times)
    throttles: list[tuple[str, str, str, int]] = field(default_factory=list)
    rival_writes: int = 0  # another writer gets in between fetch and write this many times
    lost_then_unreadable: bool = False  # the write lands, its answer is lost, and every read after it fails
    altered: bool = False  # the v0 writer is handed content its proof does not cover (seal.Unproven)
    params: dict[str, str] = field(default_factory=dict)
    # What the design says the change under test ends in: an outcome ("applied", "stale", "duplicate")
    # or a named error; and Lambda invocations it must at least make ({function logical id: count}).
    expect: str = "applied"
    at_least: dict[str, int] = field(default_factory=dict)

    def check(self, run: "Run") -> list[str]:
        """What a run got wrong by the design, whatever the other interpreter did."""
        last = run.executions[-1]
        problems = []
        if self.expect in ("applied", "stale", "duplicate"):
            outcome = (last["output"] or {}).get("outcome") if isinstance(last["output"], dict) else None
            if last["status"] != "SUCCEEDED" or outcome != self.expect:
                problems.append(f"expected outcome {self.expect}, got {last['status']} {outcome or last['error']}")
        elif last["status"] != "FAILED" or last["error"] != self.expect:
            problems.append(f"expected the named error {self.expect}, got {last['status']} {last['error']}")
        for function, count in self.at_least.items():
            if last["invocations"].get(function, 0) < count:
                problems.append(f"expected {function} invoked at least {count} times, "
                                f"got {last['invocations'].get(function, 0)}")
        return problems


def _put(entity: str, change: str, at: int, **attributes) -> dict:
    return {"entityId": entity, "operation": "put", "attributes": attributes or {"n": 1}, "changeId": change,
            "effectiveAt": at, "actor": "diff@example.com", "reason": "differential run"}


def _patch(entity: str, change: str, at: int) -> dict:
    return {"entityId": entity, "operation": "patch", "set": {"title": "patched", "extra": [1, 2.5]},
            "remove": ["n"], "changeId": change, "effectiveAt": at}


def scenarios() -> list[Scenario]:
    e = "doc#diff"
    base = [_put(e, "c1", 1000, title="first", n=1)]
    return [
        Scenario("create", [_put(e, "c1", 1000, title="first")]),
        Scenario("update", base + [_put(e, "c2", 2000, title="second")]),
        Scenario("stale", base + [_put(e, "c0", 500, title="late")], expect="stale"),
        Scenario("duplicate", base + [_put(e, "c1", 1000, title="first", n=1)], expect="duplicate"),
        Scenario("delete", base + [{"entityId": e, "operation": "delete", "changeId": "c2", "effectiveAt": 2000}]),
        Scenario("revive", base + [{"entityId": e, "operation": "delete", "changeId": "c2", "effectiveAt": 2000},
                                   _put(e, "c3", 3000, title="back")]),
        Scenario("rollback", base + [_put(e, "c2", 2000, title="second"),
                                     {"entityId": e, "operation": "rollback", "toVersion": 1, "changeId": "c3",
                                      "effectiveAt": 3000}]),
        Scenario("patch", base + [_patch(e, "c2", 2000)]),
        Scenario("patch after a conflict", base + [_patch(e, "c2", 2000)], rival_writes=1,
                 at_least={"FetchLatestFunction": 2, "UpdateLatestFunction": 2}),
        Scenario("patch of nothing", [_patch(e, "c1", 1000)], expect="NotFound"),
        Scenario("conflict", base + [_put(e, "c2", 2000, title="second")], rival_writes=1,
                 at_least={"FetchLatestFunction": 2, "UpdateLatestFunction": 2}),
        Scenario("history put retried", base + [_put(e, "c2", 2000, title="second")],
                 faults=[("PutHistoryFunction", "service", 1)], at_least={"PutHistoryFunction": 2}),
        Scenario("ValidationError", [{"entityId": e, "operation": "put", "changeId": "bad"}],
                 expect="ValidationError"),
        Scenario("NotFound", base + [{"entityId": e, "operation": "rollback", "toVersion": 7, "changeId": "c2",
                                      "effectiveAt": 2000}], expect="NotFound"),
        Scenario("VersionConflict", base + [{**_put(e, "c2", 2000), "expectedVersion": 5}],
                 expect="VersionConflict"),
        Scenario("LatestWriteFailed", base + [_put(e, "c2", 2000)],
                 faults=[("UpdateLatestFunction", "service", 100)], expect="LatestWriteFailed",
                 at_least={"FetchLatestFunction": 2}),
        Scenario("HistoryWriteFailed", base + [_put(e, "c2", 2000)],
                 faults=[("PutHistoryFunction", "service", 100)], expect="HistoryWriteFailed",
                 at_least={"PutHistoryFunction": 2}),
        Scenario("LatestReadFailed", base + [_put(e, "c2", 2000)],
                 faults=[("FetchLatestFunction", "service", 100)], expect="LatestReadFailed",
                 at_least={"FetchLatestFunction": 2}),
        Scenario("OutcomeUnknown", base + [_put(e, "c2", 2000)], lost_then_unreadable=True, expect="OutcomeUnknown",
                 at_least={"FetchLatestFunction": 2, "UpdateLatestFunction": 1}),
        Scenario("ReportFailed", base + [_put(e, "c0", 500, title="late")],
                 faults=[("PutHistoryFunction", "service", 100)], expect="ReportFailed",
                 at_least={"PutHistoryFunction": 2}),
        Scenario("Forbidden", [_put(e, "c1", 1000, title="first")], expect="Forbidden",  # a direct start: no ARN
                 params={"AuthorizationPolicy": '[{"principals": ["arn:*"], "entities": [""], "operations": ["put"]}]'}),
        Scenario("Unproven", base + [_put(e, "c2", 2000)], altered=True, expect="Unproven",
                 at_least={"UpdateLatestFunction": 1}),
        # the history step's expiry tag throttled past its client's tries: the change is still applied
        Scenario("expiry tag missed", base + [_put(e, "c2", 2000)], params={"HistoryRetentionVersions": "1"},
                 throttles=[("PutHistoryFunction", "tagging", "UpdateItem", 100)], at_least={"PutHistoryFunction": 1}),
    ]


# --- running ------------------------------------------------------------------------------------------
@dataclass
class Run:
    executions: list[dict]  # per request: {"status", "output", "error", "cause", "events", "invocations"}
    table: list[dict]


def _invocations(stack) -> dict[str, int]:
    """Each workflow function's invocations (not the digest's, which a schedule runs between changes, nor the
    feed's, which the table's stream runs after them)."""
    workflow = stack.workflow_functions()
    return {f.logical_id: f.invocations for f in stack.lambdas.functions.values() if f.logical_id in workflow}


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] - before.get(k, 0)}


def _table(stack) -> list[dict]:
    from changeflow_core import codec

    dynamodb = stack.client("dynamodb")
    names = {stack.outputs["ChangeTableName"], stack.outputs["HistoryTableName"]}
    found = []
    for name in sorted(names):
        for page in dynamodb.get_paginator("scan").paginate(TableName=name):
            found.extend(codec.deserialize_item(i) for i in page["Items"])
    return sorted(found, key=lambda i: (i["pk"], i["sk"]))


def run_moto(scenario: Scenario) -> Run:
    from ..client import Changeflow
    from ..local.embedded import EmbeddedStack

    executions = []
    with EmbeddedStack(parameters=scenario.params, time_scale=TIME_SCALE) as stack:
        client = Changeflow.for_embedded(stack)
        for i, request in enumerate(scenario.requests):
            last = i == len(scenario.requests) - 1
            before = _invocations(stack)
            with scenario_faults(stack, scenario) if last else contextlib.nullcontext():
                _, arn = client.start(request, name=f"diff-{i}")
                done = client.wait(arn, timeout=120)
            events = list(client.history(arn))
            # Step Functions' own status (the client shows OutcomeUnknown's FAILED as UNKNOWN), as LocalStack's
            executions.append({"status": client.describe(arn)["status"], "output": done.output, "error": done.error,
                               "cause": done.cause, "events": events,
                               "invocations": _delta(before, _invocations(stack))})
        return Run(executions, _table(stack))


def _install_localstack_lambda(stack) -> None:
    """LocalStack's Lambda task integration calls a boto3 Lambda client: give it one whose ``Invoke`` is
    answered by the embedded stack's dispatch (the same one moto's interpreter uses)."""
    import boto3
    from botocore.config import Config
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_task import lambda_eval_utils

    def boto_client_for(service: str, region: str, state_credentials: Any = None):
        client = boto3.client(service, region_name=region,
                              config=Config(parameter_validation=False, retries={"total_max_attempts": 1}))
        client.meta.events.register_first("before-call.lambda.Invoke", stack.lambdas.before_call)
        return client

    lambda_eval_utils.boto_client_for = boto_client_for


def _scale_localstack_time() -> None:
    """The same time scale as the embedded stack's moto patch: back-offs and Waits in milliseconds."""
    import time as real_time

    from localstack.services.stepfunctions.asl.component.common.retry import retrier_decl
    from localstack.services.stepfunctions.asl.component.state.state_wait.wait_function import wait_function

    class ScaledTime(types.ModuleType):
        def __getattr__(self, name):
            return getattr(real_time, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            real_time.sleep(max(0.0, seconds * TIME_SCALE))

    retrier_decl.time = ScaledTime("time")

    def _wait_interval(self, env, wait_seconds):
        if wait_seconds > 0:
            env.program_state_event.wait(wait_seconds * TIME_SCALE)

    wait_function.WaitFunction._wait_interval = _wait_interval


class _Terminated:
    def terminated(self) -> None:  # the worker runs synchronously: nothing to signal
        pass


def _run_one_localstack(definition: str, sm_arn: str, name: str, request: dict, region: str, account: str) -> dict:
    from localstack.aws.api.stepfunctions import StateMachineType
    from localstack.services.stepfunctions.asl.eval.evaluation_details import (
        AWSExecutionDetails, EvaluationDetails, ExecutionDetails, StateMachineDetails,
    )
    from localstack.services.stepfunctions.asl.eval.program_state import ProgramEnded, ProgramError
    from localstack.services.stepfunctions.backend.execution_worker import SyncExecutionWorker

    sm_name = sm_arn.rsplit(":", 1)[1]
    role = f"arn:aws:iam::{account}:role/ChangeStateMachineRole"
    start = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    details = EvaluationDetails(
        aws_execution_details=AWSExecutionDetails(account=account, region=region, role_arn=role),
        execution_details=ExecutionDetails(arn=f"arn:aws:states:{region}:{account}:execution:{sm_name}:{name}",
                                           name=name, role_arn=role, inpt=request, start_time=start),
        state_machine_details=StateMachineDetails(arn=sm_arn, name=sm_name, typ=StateMachineType.STANDARD,
                                                  definition=definition),
    )
    worker = SyncExecutionWorker(evaluation_details=details, exec_comm=_Terminated(),
                                 cloud_watch_logging_session=None, activity_store={})
    worker.start()
    state = worker.env.program_state()
    result = {"status": "RUNNING", "output": None, "error": None, "cause": None,
              "events": worker.env.event_manager.get_event_history()}
    if isinstance(state, ProgramEnded):
        result.update(status="SUCCEEDED", output=worker.env.states.get_input())
    elif isinstance(state, ProgramError):
        result.update(status="FAILED", error=(state.error or {}).get("error"), cause=(state.error or {}).get("cause"))
    return result


def run_localstack(scenario: Scenario) -> Run:
    import logging

    from changeflow_core import principal

    from ..local.embedded import EmbeddedStack

    # LocalStack logs every failed state at ERROR with its internals; the event history says it better.
    logging.getLogger("localstack").setLevel(logging.CRITICAL)

    executions = []
    with EmbeddedStack(parameters=scenario.params, time_scale=TIME_SCALE) as stack:
        _install_localstack_lambda(stack)
        _scale_localstack_time()
        sm_arn = stack.outputs["ChangeStateMachineArn"]
        definition = stack.client("stepfunctions").describe_state_machine(stateMachineArn=sm_arn)["definition"]
        account = sm_arn.split(":")[4]
        for i, request in enumerate(scenario.requests):
            last = i == len(scenario.requests) - 1
            before = _invocations(stack)
            with scenario_faults(stack, scenario) if last else contextlib.nullcontext():
                # the execution input of a direct start: the request's JSON text in the envelope (principal)
                carried = json.loads(principal.direct_input(request))
                result = _run_one_localstack(definition, sm_arn, f"diff-{i}", carried, stack.region, account)
            executions.append({**result, "invocations": _delta(before, _invocations(stack))})
        return Run(executions, _table(stack))


# --- comparing ----------------------------------------------------------------------------------------
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _parsed(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def normalise(value: Any) -> Any:
    """Drop what differs by nature (times, random ids, stack traces); keep everything else."""
    value = _parsed(value)
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in sorted(value.items()) if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str):
        return _UUID.sub("<uuid>", value)
    return value


def _event_view(event: dict) -> dict:
    """An event as compared: its type, the state it belongs to, and its data (input, output, error)."""
    view = {"type": str(event["type"])}
    for key, details in event.items():
        if not key.endswith("EventDetails") or not isinstance(details, dict):
            continue
        for name in ("name", "resourceType", "resource"):
            if name in details:
                view[name] = details[name]
        for name in ("input", "output", "error", "cause", "parameters"):
            if name in details:
                view[name] = normalise(details[name])
    return view


def compare(scenario: Scenario, moto: Run, localstack: Run) -> list[dict]:
    """The differences between two runs of one scenario, each ``{"where", "moto", "localstack"}``."""
    found = []

    def differ(where: str, a: Any, b: Any) -> None:
        if a != b:
            found.append({"scenario": scenario.name, "where": where, "moto": a, "localstack": b})

    for i, (a, b) in enumerate(zip(moto.executions, localstack.executions)):
        label = f"execution {i + 1} of {len(moto.executions)}"
        differ(f"{label}: status", a["status"], b["status"])
        differ(f"{label}: output", normalise(a["output"]), normalise(b["output"]))
        differ(f"{label}: error", a["error"], b["error"])
        differ(f"{label}: cause", normalise(a["cause"]), normalise(b["cause"]))
        states_a = [e["stateEnteredEventDetails"]["name"] for e in a["events"] if "stateEnteredEventDetails" in e]
        states_b = [e["stateEnteredEventDetails"]["name"] for e in b["events"] if "stateEnteredEventDetails" in e]
        differ(f"{label}: states entered", states_a, states_b)
        differ(f"{label}: Lambda invocations", a.get("invocations"), b.get("invocations"))
        views_a, views_b = [_event_view(e) for e in a["events"]], [_event_view(e) for e in b["events"]]
        differ(f"{label}: event types", [v["type"] for v in views_a], [v["type"] for v in views_b])
        if [v["type"] for v in views_a] == [v["type"] for v in views_b]:
            for n, (va, vb) in enumerate(zip(views_a, views_b)):
                differ(f"{label}: event {n + 1} ({va['type']})", va, vb)
    differ("table afterwards", normalise(moto.table), normalise(localstack.table))
    return found


def _known(root: Path) -> list[dict]:
    path = root / KNOWN_DIFFERENCES
    return json.loads(path.read_text(encoding="utf-8"))["differences"] if path.exists() else []


def _explained(difference: dict, known: list[dict]) -> dict | None:
    for entry in known:
        if entry["scenario"] in (difference["scenario"], "*") and difference["where"].endswith(entry["where"]):
            if entry.get("moto", difference["moto"]) == difference["moto"] and \
                    entry.get("localstack", difference["localstack"]) == difference["localstack"]:
                return entry
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m changeflow.checks.diffasl", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="run only this path (repeatable)")
    parser.add_argument("--json", action="store_true", help="print every difference as JSON")
    args = parser.parse_args(argv)
    if sys.version_info < (3, 12):
        print("changeflow diff-asl: LocalStack's interpreter needs Python >= 3.12; run `make diff-asl`",
              file=sys.stderr)
        return 2
    from ..common.project import project_root

    root = project_root()
    known = _known(root)
    chosen = [s for s in scenarios() if not args.only or s.name in args.only]
    unexplained, explained, wrong, started = [], [], [], time.monotonic()
    rows = []
    for scenario in chosen:
        t0 = time.monotonic()
        moto, localstack = run_moto(scenario), run_localstack(scenario)
        differences = compare(scenario, moto, localstack)
        for interpreter, run in (("moto", moto), ("localstack", localstack)):
            wrong.extend(f"{scenario.name}: {interpreter}: {p}" for p in scenario.check(run))
        mine = [(d, _explained(d, known)) for d in differences]
        unexplained.extend(d for d, why in mine if why is None)
        explained.extend((d, why) for d, why in mine if why is not None)
        verdict = "same" if not differences else (
            f"{sum(1 for _, w in mine if w is None)} unexplained, {sum(1 for _, w in mine if w)} known")
        rows.append((scenario.name, len(scenario.requests), verdict, time.monotonic() - t0))
    width = max(len(r[0]) for r in rows)
    print(f"{'path':<{width}}  executions  moto vs LocalStack   seconds")
    for name, count, verdict, seconds in rows:
        print(f"{name:<{width}}  {count:>10}  {verdict:<18}  {seconds:7.1f}")
    for difference, why in explained:
        print(f"known: {difference['scenario']}: {difference['where']}: {why['explanation']}")
    for difference in unexplained:
        print(f"UNEXPLAINED: {difference['scenario']}: {difference['where']}\n"
              f"  moto:       {json.dumps(difference['moto'], default=str)[:600]}\n"
              f"  localstack: {json.dumps(difference['localstack'], default=str)[:600]}")
    for problem in wrong:
        print(f"AGAINST THE DESIGN: {problem}")
    if args.json:
        print(json.dumps(unexplained, default=str, indent=1))
    print(f"{len(chosen)} paths, {len(unexplained)} unexplained differences, {len(explained)} known, "
          f"{len(wrong)} results against the design, {time.monotonic() - started:.0f} s")
    return 1 if unexplained or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
