"""Campaign 1c, concurrent changes that merge by field (issue 34): K writers at once, with server-given
times (no ``effectiveAt``: each change takes the moment its entry point received it, as a user's client
leaves it), through direct starts, ``POST /changes`` on ``changeflow serve`` and EventBridge, on Standard or
Express, with or without faults. Three mixes: patches of different fields (every one must land), patches of
overlapping fields, and patches mixed with puts and deletes.

The order is the race's, so the reference model (``checks/reference_model.py``) is replayed in the order
the table recorded: each version's change applied in version order (the model must say ``applied``, with
the same superseded fields), each change reported stale checked against the version it names (the model
must say ``stale`` there), each ``NotFound`` against a version where nothing was live; then every version,
``v0``, each field's time and every as-of answer must be the model's. The invariants of every campaign
(``reliability.check``: nothing lost, nothing doubled, ``verify`` clean) run too."""

from __future__ import annotations

import json
import random
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from changeflow_core import principal, wire

from ..client import Changeflow, Execution
from .faults import Injector
from .reference_model import Model, as_of_violations, table_violations
from .reliability import STEPS, Tally, check, post_json

MODES = ("different", "overlapping", "mixed")
FIELDS = ("a", "b", "c", "d")
MERGE_FAULTS = [(step, kind) for step in STEPS
                for kind in ("before", "lost", "timeout", "service")]


def changes(entity: str, k: int, mode: str, rng: random.Random) -> list[dict[str, Any]]:
    """K changes with no effectiveAt: patches of a field each (``different``), patches of one to three of
    four fields, some removing one (``overlapping``), or those mixed with puts and deletes (``mixed``)."""
    made, prefix = [], id_prefix(entity)
    for i in range(k):
        change = {"entityId": entity, "changeId": f"{prefix}-{i}"}
        roll = rng.random()
        if mode == "different":
            made.append({**change, "operation": "patch", "set": {f"f{i}": i}})
        elif mode == "mixed" and roll < 0.1:
            made.append({**change, "operation": "delete"})
        elif mode == "mixed" and roll < 0.3:
            made.append({**change, "operation": "put", "attributes": {"a": i, "by": i}})
        else:
            named = rng.sample(FIELDS, rng.randint(1, 3))
            removed = named[:1] if len(named) > 1 and rng.random() < 0.2 else []
            made.append({**change, "operation": "patch", "set": {f: i for f in named if f not in removed},
                         **({"remove": removed} if removed else {})})
    return made


def id_prefix(entity: str) -> str:
    """Change ids the API's request model accepts (``^[A-Za-z0-9_.-]{1,64}``), from the entity id."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", entity)[:40]


# --- the entry points ---------------------------------------------------------------------------------
def submit_direct(cf: Changeflow, requests: list[dict]) -> list[tuple[dict, Execution]]:
    """StartExecution for each at once (the direct-start envelope: the start is the receipt)."""
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(zip(requests, pool.map(lambda r: cf.submit(r, redeliver=False), requests)))


def submit_api(cf: Changeflow, requests: list[dict], api: str) -> list[tuple[dict, Execution]]:
    """A SigV4-signed ``POST /changes`` for each at once (``api``: the stage's URL on serve)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    def post(request: dict) -> Execution:
        body = json.dumps(request).encode("utf-8")
        signed = AWSRequest(method="POST", url=f"{api}/changes", data=body,
                            headers={"Content-Type": "application/json"})
        SigV4Auth(Credentials("testing", "testing"), "execute-api", "us-east-1").add_auth(signed)
        status, answer = post_json(f"{api}/changes", body, dict(signed.headers.items()))
        if status != 200 or not (answer or {}).get("executionArn"):
            return Execution(name="(not started)", arn="", status="REJECTED", input=request, error=f"HTTP {status}",
                             cause=json.dumps(answer))
        return cf.wait(answer["executionArn"], 300)

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(zip(requests, pool.map(post, requests)))


def submit_events(cf: Changeflow, requests: list[dict], timeout: float = 300.0) -> list[tuple[dict, Execution]]:
    """PutEvents for each at once (the ingestion time is the receipt); each execution found by its input."""
    import time

    events, since = cf.make("events"), int(time.time() * 1000) - 1000

    def put(request: dict) -> None:
        answer = events.put_events(Entries=[{
            "Source": cf.outputs["ChangeEventSource"], "DetailType": "ChangeRequested",
            "EventBusName": cf.outputs["ChangeBusName"], "Detail": wire.execution_input(request)}])
        if answer.get("FailedEntryCount"):
            raise RuntimeError(f"PutEvents refused {request['changeId']}: {answer['Entries'][0]}")

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        list(pool.map(put, requests))
    wanted, found, examined = {r["changeId"] for r in requests}, {}, set()
    deadline = time.monotonic() + timeout
    while len(found) < len(wanted) and time.monotonic() < deadline:
        for arn, sent in started_since(cf, since, examined).items():
            examined.add(arn)
            request = principal.request_in(json.loads(sent or "null"))
            if isinstance(request, dict) and request.get("changeId") in wanted:
                found[request["changeId"]] = arn
        time.sleep(0.1)
    return [(r, cf.wait(found[r["changeId"]], max(1.0, deadline - time.monotonic())) if r["changeId"] in found
             else Execution(name="(no execution)", arn="", status="LOST", input=r)) for r in requests]


def started_since(cf: Changeflow, since_ms: int, examined: set[str]) -> dict[str, str | None]:
    """``{execution ARN: its input}`` of the executions started since ``since_ms`` but those ``examined``:
    ListExecutions (Standard) or the execution log's ExecutionStarted events (Express, whose executions only
    the log lists)."""
    found: dict[str, str | None] = {}
    if cf.state_machine_type() == "EXPRESS":
        logs = cf.make("logs")
        kwargs = {"logGroupName": cf._log_group(), "startTime": since_ms,
                  "filterPattern": '{ $.type = "ExecutionStarted" }'}
        while True:
            page = logs.filter_log_events(**kwargs)
            for event in page.get("events", []):
                record = json.loads(event["message"])
                if record.get("type") == "ExecutionStarted" and record["execution_arn"] not in examined:
                    found[record["execution_arn"]] = (record.get("details") or {}).get("input")
            if not page.get("nextToken"):
                return found
            kwargs["nextToken"] = page["nextToken"]
    kwargs = {"stateMachineArn": cf.state_machine_arn, "maxResults": 100}
    while True:
        page = cf.sfn.list_executions(**kwargs)
        for summary in page["executions"]:
            if summary["startDate"].timestamp() * 1000 < since_ms:
                return found
            if summary["executionArn"] not in examined:
                found[summary["executionArn"]] = cf.sfn.describe_execution(
                    executionArn=summary["executionArn"]).get("input")
        if not page.get("nextToken"):
            return found
        kwargs["nextToken"] = page["nextToken"]


# --- one case -------------------------------------------------------------------------------------------
def merge_case(cf: Changeflow, entity: str, k: int, mode: str, seed: int, submit=submit_direct, stack=None,
               faults: int = 0, tally: Tally | None = None) -> Tally:
    """A base put, then K changes of ``mode`` at once through ``submit`` (``submit_direct``, or a
    ``functools.partial`` of ``submit_api``/``submit_events``), ``faults`` of them hit by a recoverable
    fault (``stack``: the embedded stack whose Lambda dispatch suffers it)."""
    rng = random.Random(seed)
    tally = tally or Tally(f"1c. merge by field ({mode})")
    base = {"entityId": entity, "operation": "put", "attributes": {f: -1 for f in FIELDS},
            "changeId": f"{id_prefix(entity)}-base"}
    submitted = [(base, cf.submit(base, redeliver=False))]
    requests = changes(entity, k, mode, rng)
    injector = Injector()
    rules = [(*rng.choice(MERGE_FAULTS), 1) for _ in range(faults)]
    if faults:
        with injector.around(stack.lambdas, rules):
            submitted += submit(cf, requests)
    else:
        submitted += submit(cf, requests)
    tally.faults.update(injector.injected)
    tally.cases += 1
    check(cf, entity, submitted, tally)
    tally.violations.extend(replay_violations(cf, entity, submitted))
    if mode == "different":
        said = [(e.output or {}).get("outcome") or e.error for _, e in submitted]
        latest = (cf.entity(entity)["latest"] or {}).get("attributes") or {}
        lost = [f"f{i}" for i in range(k) if latest.get(f"f{i}") != i]
        if said != ["applied"] * (k + 1) or lost:
            tally.violations.append(f"merge [{entity}]: patches of different fields did not all land: said "
                                    f"{sorted(set(map(str, said)))}, fields lost {lost}")
    return tally


def replay_violations(cf: Changeflow, entity: str, submitted: list[tuple[dict, Execution]]) -> list[str]:
    """The reference model replayed in the order the table recorded (module docstring)."""
    found: list[str] = []
    state = cf.entity(entity)
    by_change = {r["changeId"]: (r, e) for r, e in submitted}
    stale_at: dict[int, list[tuple[dict, Execution]]] = {}
    not_found = []
    for request, execution in submitted:
        outcome = (execution.output or {}).get("outcome")
        if execution.status == "SUCCEEDED" and outcome == "stale":
            stale_at.setdefault(execution.output["version"], []).append((request, execution))
        elif execution.status == "FAILED" and execution.error == "NotFound":
            not_found.append(request)
        elif execution.status != "SUCCEEDED" or outcome != "applied":
            found.append(f"merge [{entity}]: {request['changeId']} ended {execution.status} {outcome or execution.error}")
    model, live_at = Model(), []

    def timed(request: dict, execution: Execution) -> dict:
        return {**request, "effectiveAt": execution.output["effectiveAt"]}

    def expect_stale(version: int) -> None:
        for request, execution in stale_at.pop(version, []):
            if model.apply(timed(request, execution)) != ("SUCCEEDED", "stale") or \
                    model.superseded != execution.output.get("superseded"):
                found.append(f"merge [{entity}]: {request['changeId']} was stale against version {version} "
                             f"(superseded {execution.output.get('superseded')}); the model says otherwise "
                             f"(superseded {model.superseded})")

    for version in state["versions"]:
        expect_stale(version["version"] - 1)
        request, execution = by_change.get(version["changeId"], (None, None))
        if request is None or execution.output is None:
            found.append(f"merge [{entity}]: version {version['version']} has no execution that says it wrote it")
            return found
        result = model.apply(timed(request, execution))
        if result != ("SUCCEEDED", "applied") or model.superseded != execution.output.get("superseded"):
            found.append(f"merge [{entity}]: {request['changeId']} wrote version {version['version']} superseding "
                         f"{execution.output.get('superseded')}; the model says {result} {model.superseded}")
        live_at.append(not model.latest["deleted"])
    expect_stale(len(state["versions"]))
    found.extend(f"merge [{entity}]: {request['changeId']} stale against version {n}, which is not the one it read"
                 for n, left in stale_at.items() for request, _ in left)
    if not_found and all(live_at):  # a patch is NotFound only where nothing was live (after a delete)
        found.append(f"merge [{entity}]: {[r['changeId'] for r in not_found]} NotFound, but the entity was never deleted")
    found.extend(table_violations(cf, entity, model))
    found.extend(as_of_violations(cf, entity, model))
    return found


# --- the campaign's rows (make reliability) -------------------------------------------------------------
WORKFLOWS = {"Standard": {}, "Express": {"WorkflowType": "EXPRESS", "StateMachineLogLevel": "ALL",
                                        "StateMachineIncludeExecutionData": "true"}}
# Waits and back-offs at their real length, as on AWS: at 0.25, on Express (whose steps also write the
# execution log), 3 to 17 of 50 writers spent their 10 writes (VersionConflict) while the back-offs were
# shorter than the queue of embedded steps in one process; at 1.0 none did, and the case ran faster (31 s
# against 43 s: fewer rounds of conflicts).
TIME_SCALE = 1.0


def rows(ks: tuple[int, ...] = (10, 50), seeds: int = 1, workflows: tuple[str, ...] = tuple(WORKFLOWS),
         time_scale: float = TIME_SCALE) -> list[Tally]:
    """Three rows: patches of different fields (every one must land) through direct starts, the API and
    EventBridge on Standard and Express; overlapping fields and patches mixed with puts and deletes through
    direct starts and the API, a tenth of the executions hit by a fault. Each case on a stack of its own
    (an Express execution is described from the execution log, which moto reads whole)."""
    different = Tally(f"1c. merge by field: patches of different fields, K={'/'.join(map(str, ks))}, "
                      "server-given times (direct, API, EventBridge; Standard, Express)")
    overlapping = Tally("1d. merge by field: overlapping fields, with faults (direct, API; Standard, Express)")
    mixed = Tally("1e. merge by field: patches mixed with puts and deletes, with faults (direct, API; "
                  "Standard, Express)")
    for workflow in workflows:
        for seed in range(seeds):
            for k in ks:
                for path in ("direct", "api", "events"):
                    served_case(workflow, path, k, "different", seed, different, time_scale=time_scale)
                for path in ("direct", "api"):
                    for mode, tally in (("overlapping", overlapping), ("mixed", mixed)):
                        served_case(workflow, path, k, mode, seed, tally, faults=max(1, k // 10),
                                    time_scale=time_scale)
    return [different, overlapping, mixed]


def served_case(workflow: str, path: str, k: int, mode: str, seed: int, tally: Tally, faults: int = 0,
                time_scale: float = TIME_SCALE) -> None:
    """One case on its own ``changeflow serve`` (``WORKFLOWS[workflow]``), its line on stderr as it ends."""
    import sys
    import time
    from functools import partial

    from ..local.server import EmbeddedServer

    started, before = time.perf_counter(), len(tally.violations)
    with EmbeddedServer(port=0, time_scale=time_scale, parameters=WORKFLOWS[workflow]) as server:
        cf = Changeflow.for_embedded(server.stack)  # in this process: waits on the executions' ends, no polling
        submit = {"direct": submit_direct, "events": submit_events,
                  "api": partial(submit_api, api=f"{server.url}/{server.routes[0].stage}")}[path]
        merge_case(cf, f"{mode}#{workflow}-{path}-{k}-{seed}", k, mode, seed, submit, stack=server.stack,
                   faults=faults, tally=tally)  # it waits for every execution it started
    print(f"{mode} {workflow} {path} K={k}: {time.perf_counter() - started:.0f} s, "
          f"{len(tally.violations) - before} violations", file=sys.stderr, flush=True)


def main() -> int:
    """``python -m changeflow.checks.merging [K ...]``: the merge rows alone, as ``make reliability`` prints them."""
    import sys
    import time

    from .reliability import report

    started = time.perf_counter()
    ks = tuple(int(k) for k in sys.argv[1:]) or (10, 50)
    tallies = rows(ks)
    print(report(tallies))
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 1 if any(t.violations for t in tallies) else 0


if __name__ == "__main__":
    raise SystemExit(main())
