"""Observability proven from what the handlers really emit, not from how they are configured:

1. X-Ray: each step handler runs in its own fresh Python process in Lambda mode (trace header, task root,
   a UDP "daemon" the test listens on, tracing not disabled); the subsegments the SDK streams to that
   socket carry the annotations and one ``dynamodb`` subsegment per DynamoDB call.
2. Metrics: the EMF records the handlers print (in-process, and from the real workflow on the embedded
   stack) count each outcome by operation, in the Changeflow namespace, as Count.
3. Logs: Powertools' JSON log lines of a real execution carry its correlation ids.
4. Template: log groups with retention, execution logging, tracing and the alarms, as CloudFormation would
   resolve them; and the history-failure metric filter's pattern against a Step Functions log event.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from changeflow.local.template import Template
from conftest import EXAMPLE_SEAL_KEY, ROOT, load_event, proven, table_specs

T0 = 1_767_225_600_000
ENTITY = "user#1001"  # the entity of the events/functions payloads
CHAIN = ["fetch_latest", "update_latest", "put_history", "delete_tombstone", "tag_ttl", "read_api"]
# Parameters for the traced run: a retention window, so that tag_ttl's payload (version 5) really tags
# version 1 with one UpdateItem; with the defaults it makes no DynamoDB call at all.
TRACED_PARAMETERS = {"HistoryRetentionVersions": "4", "HistoryRetentionDays": "1", "TimeIndexes": "true"}
ALARM_TOPIC = "arn:aws:sns:us-east-1:123456789012:ops"


# =====================================================================================================
# 1. X-Ray, in a Lambda-like process per handler
# =====================================================================================================

# Runs in a fresh interpreter. "seed" mode runs the whole chain with tracing disabled and reports the
# table's items before each step; "trace" mode puts one such snapshot, then imports ONE handler (its cold
# start: Powertools' Tracer patches botocore here, so the seeding is not traced) and invokes it once.
DRIVER = r'''
import importlib.util, json, os, sys

job = json.loads(open(sys.argv[1], encoding="utf-8").read())
sys.path.insert(0, job["layer"])

import boto3
from moto import mock_aws


class Context:
    def __init__(self, name):
        self.function_name = name
        self.function_version = "$LATEST"
        self.invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + name
        self.memory_limit_in_mb = 256
        self.aws_request_id = "11111111-2222-3333-4444-555555555555"

    def get_remaining_time_in_millis(self):
        return 10_000


def load(step):
    os.environ.update(step["env"])
    spec = importlib.util.spec_from_file_location("app_" + step["name"], step["path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def invoke(module, step):
    try:
        return {"result": module.lambda_handler(step["event"], Context(step["env"]["AWS_LAMBDA_FUNCTION_NAME"]))}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def scan(client):
    return [{"table": t, "item": i} for t in client.list_tables()["TableNames"]
            for i in client.scan(TableName=t, ConsistentRead=True)["Items"]]


with mock_aws():
    client = boto3.client("dynamodb", region_name="us-east-1")
    for table in job["tables"]:
        client.create_table(**table)
    boto3.client("secretsmanager", region_name="us-east-1").create_secret(  # the payloads' seal key
        Name=job["seal"]["name"], SecretString=job["seal"]["key"])
    for entry in job["seed"]:
        client.put_item(TableName=entry["table"], Item=entry["item"])
    if job["mode"] == "seed":
        report = {"before": [], "outcomes": []}
        for step in job["steps"]:
            report["before"].append(scan(client))
            report["outcomes"].append(invoke(load(step), step))
    else:
        step, = job["steps"]
        module = load(step)
        calls = []
        module.dynamodb.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
        report = invoke(module, step)
        report["calls"] = calls
print("\n@@REPORT@@" + json.dumps(report, default=bytes.hex))  # the chain hash is Binary
'''

XRAY_PACKET_HEADER = {"format": "json", "version": 1}


def _traced_steps(template: Template) -> dict[str, dict]:
    """Per handler directory: its code path, the environment the template gives it, and its payload."""
    steps = {}
    for logical_id in template.of_type("AWS::Serverless::Function"):
        props = template.function_properties(logical_id)
        name = Path(props["CodeUri"]).name
        env = {key: str(value) for key, value in props["Environment"]["Variables"].items()}
        env["AWS_LAMBDA_FUNCTION_NAME"] = template.physical_name(logical_id)
        env["LAMBDA_TASK_ROOT"] = str(ROOT / props["CodeUri"])
        steps[name] = {"name": name, "path": str(ROOT / props["CodeUri"] / "app.py"), "env": env,
                       "event": load_event(f"functions/{name}.json")}
    return steps


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "POWERTOOLS_", "_X_AMZN", "LAMBDA_"))}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_SESSION_TOKEN="testing",
               AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.devnull,
               AWS_SHARED_CREDENTIALS_FILE=os.devnull, PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def _start(job: dict, env: dict[str, str], folder: Path, name: str) -> subprocess.Popen:
    job_file = folder / f"{name}.json"
    seal_secret = Template(ROOT / "template.yaml").physical_name("SealKeySecret")
    job_file.write_text(json.dumps({**job, "seal": {"name": seal_secret, "key": EXAMPLE_SEAL_KEY}}), encoding="utf-8")
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(job_file)], env=env, cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _report(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.rsplit("@@REPORT@@", 1)[1])


def _flatten(entity: dict, packet: int, parent: dict | None = None):
    """A streamed document and any subsegments nested in it, each with its parent and trace ids and the
    number of the UDP packet it came in (``_packet``; ``_nested`` if it was inside another document)."""
    entity["_packet"], entity["_nested"] = packet, parent is not None
    if parent is not None:
        entity.setdefault("parent_id", parent["id"])
        entity.setdefault("trace_id", parent.get("trace_id"))
    yield entity
    for child in entity.get("subsegments", []):
        yield from _flatten(child, packet, entity)


@pytest.fixture(scope="module")
def xray(tmp_path_factory):
    """Every handler invoked once in its own Lambda-like process, and what each sent to the daemon:
    ``{name: {"trace_id", "parent", "report", "entities"}}``."""
    folder = tmp_path_factory.mktemp("xray")
    template = Template(ROOT / "template.yaml", overrides=TRACED_PARAMETERS)
    steps = _traced_steps(template)
    layer = str(ROOT / template.resolve(template.resources["CoreLayer"]["Properties"]["ContentUri"]))
    tables = table_specs(template)

    # The chain's table state before each step, from the real handlers (untraced, in their own process).
    seeding = _start({"mode": "seed", "layer": layer, "tables": tables, "seed": [],
                      "steps": [steps[name] for name in CHAIN]},
                     _child_env({"POWERTOOLS_TRACE_DISABLED": "true", "AWS_XRAY_SDK_ENABLED": "false"}), folder, "seed")
    seeded = _report(seeding)
    assert [o.get("error") for o in seeded["outcomes"]] == [None] * len(CHAIN), seeded["outcomes"]
    before = dict(zip(CHAIN, seeded["before"]))

    daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    daemon.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    daemon.bind(("127.0.0.1", 0))
    daemon.settimeout(0.2)
    runs, processes = {}, {}
    try:
        for name in CHAIN:
            trace_id = f"1-{int(time.time()):08x}-{secrets.token_hex(12)}"
            parent = secrets.token_hex(8)
            env = _child_env({
                **steps[name]["env"],
                "_X_AMZN_TRACE_ID": f"Root={trace_id};Parent={parent};Sampled=1",
                "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{daemon.getsockname()[1]}",
                "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
            })
            assert "POWERTOOLS_TRACE_DISABLED" not in env
            job = {"mode": "trace", "layer": layer, "tables": tables, "seed": before[name], "steps": [steps[name]]}
            processes[name] = _start(job, env, folder, name)
            runs[name] = {"trace_id": trace_id, "parent": parent, "entities": []}
        for name, process in processes.items():
            runs[name]["report"] = _report(process)

        by_trace = {run["trace_id"]: run for run in runs.values()}
        deadline, packets = time.monotonic() + 10, 0
        while time.monotonic() < deadline:
            try:
                packet = daemon.recv(65_535).decode("utf-8")
            except socket.timeout:
                if all(any(e["name"] == "## lambda_handler" for e in r["entities"]) for r in runs.values()):
                    break
                continue
            header, _, body = packet.partition("\n")
            assert json.loads(header) == XRAY_PACKET_HEADER
            packets += 1
            for entity in _flatten(json.loads(body), packets):
                by_trace[entity["trace_id"]]["entities"].append(entity)
    finally:
        daemon.close()
        for process in processes.values():
            if process.poll() is None:
                process.kill()
    return runs


def handler_subsegment(run: dict) -> dict:
    found = [e for e in run["entities"] if e["name"] == "## lambda_handler"]
    assert len(found) == 1, f"expected one '## lambda_handler' subsegment, got {[e['name'] for e in run['entities']]}"
    return found[0]


# What each step does with its payload (run after the steps before it, as the events chain).
EXPECTED_RESULTS = {
    "fetch_latest": lambda r: r["latest"] is None and r["change"]["changeId"] == "example-put-1",
    "update_latest": lambda r: (r["outcome"], r["version"]) == ("applied", 1),
    "put_history": lambda r: (r["version"], r["outcome"], r["history"]) == (1, "applied", "written"),
    "delete_tombstone": lambda r: (r["outcome"], r["version"]) == ("applied", 2),
    "tag_ttl": lambda r: r["tagged"] == [1],
    "read_api": lambda r: r["statusCode"] == 200 and [i["version"] for i in json.loads(r["body"])["items"]] == [1],
}
DYNAMODB_CALLS = {
    "fetch_latest": ["Query"],  # v0 and the newest history version in one read (issue 26.2)
    "update_latest": ["PutItem"],
    "put_history": ["PutItem"],
    "delete_tombstone": ["PutItem"],
    "tag_ttl": ["UpdateItem"],
    "read_api": ["Query"],
}
ANNOTATIONS = {
    "fetch_latest": {"entityId": ENTITY},
    "update_latest": {"entityId": ENTITY, "version": 1, "outcome": "applied"},
    "put_history": {"entityId": ENTITY, "version": 1, "outcome": "applied"},
    "delete_tombstone": {"entityId": ENTITY, "version": 2, "outcome": "applied"},
    "tag_ttl": {"entityId": ENTITY, "version": 5},
    "read_api": {"entityId": ENTITY},
}


@pytest.mark.parametrize("name", CHAIN)
def test_xray_every_dynamodb_call_is_a_subsegment_of_the_handler_subsegment(xray, name):
    # GIVEN the step handler in a fresh Lambda-like process (trace header, task root, daemon on UDP)
    run = xray[name]
    report = run["report"]
    assert "error" not in report, report
    assert EXPECTED_RESULTS[name](report["result"]), report["result"]  # the chain state really was there
    # WHEN it handles its events/functions payload
    handler = handler_subsegment(run)
    # THEN "## lambda_handler" hangs under Lambda's own segment (the Parent of the trace header) ...
    assert handler["trace_id"] == run["trace_id"] and handler["parent_id"] == run["parent"]
    assert handler["in_progress"] is False and handler["end_time"] >= handler["start_time"]
    # ... and each DynamoDB call the handler's client made is one closed, successful aws subsegment in it; a
    # function that seals reads the seal key first, at its first invocation (this process's), traced too
    assert report["calls"] == DYNAMODB_CALLS[name]
    calls = sorted((e for e in run["entities"] if e.get("namespace") == "aws"), key=lambda e: e["start_time"])
    assert [c["aws"]["operation"] for c in calls if c["name"] != "dynamodb"] == (
        ["GetSecretValue"] if name != "read_api" else [])
    calls = [c for c in calls if c["name"] == "dynamodb"]
    assert [c["aws"]["operation"] for c in calls] == report["calls"]
    for call in calls:
        assert call["name"] == "dynamodb"  # the SDK names it by endpoint prefix; the console shows DynamoDB
        assert call["parent_id"] == handler["id"] and call["trace_id"] == run["trace_id"]
        assert call["aws"]["table_name"] == "changeflow-ChangeTable" and call["aws"]["region"] == "us-east-1"
        assert not call.get("fault") and not call.get("error") and call["http"]["response"]["status"] == 200
        assert handler["start_time"] <= call["start_time"] <= call["end_time"] <= handler["end_time"]
        # streamed as it closed (Lambda mode: streaming threshold 0), ahead of the handler's own document
        assert not call["_nested"] and call["_packet"] < handler["_packet"]


@pytest.mark.parametrize("name", [
    name
    for name in CHAIN
])
def test_xray_handler_subsegment_carries_the_searchable_annotations(xray, name):
    # GIVEN a handler run in Lambda mode WHEN it has handled its payload
    annotations = handler_subsegment(xray[name])["annotations"]
    # THEN its "## lambda_handler" subsegment carries entityId (version and outcome for a version write),
    # next to Powertools' own ColdStart (a fresh process: true) and Service
    assert annotations == {**ANNOTATIONS[name], "ColdStart": True, "Service": "changeflow"}


# =====================================================================================================
# 2. Metrics (EMF)
# =====================================================================================================

def emf_records(lines):
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "_aws" in record:
            yield record


def counted(lines, name: str) -> list[tuple[str, float]]:
    """``(operation, value)`` of every EMF record of metric ``name``, each checked to be a Count in the
    Changeflow namespace with the dimensions operation and service."""
    found = []
    for record in emf_records(lines):
        for directive in record["_aws"]["CloudWatchMetrics"]:
            definitions = [m for m in directive["Metrics"] if m["Name"] == name]
            if not definitions:
                continue
            assert directive["Namespace"] == "Changeflow"
            assert definitions == [{"Name": name, "Unit": "Count"}]
            assert ["operation", "service"] in [sorted(d) for d in directive["Dimensions"]]
            assert record["service"] == "changeflow"
            value = record[name]
            found.append((record["operation"], sum(value) if isinstance(value, list) else value))
    return found


OUTCOME_METRICS = {"ChangesApplied", "ChangesStale", "ChangesDuplicate", "VersionConflicts"}


def outcome_metrics(lines) -> set[str]:
    names = {m["Name"] for r in emf_records(lines) for d in r["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}
    return names & OUTCOME_METRICS


@pytest.fixture
def run(lambda_module, context, tables, capsys):
    """``run(step, event)`` -> ``(result or the ChangeflowError raised, stdout lines)``."""
    from changeflow_core.errors import ChangeflowError

    modules = {}

    def invoke(step, event):
        module = modules.setdefault(step, lambda_module(step))
        capsys.readouterr()
        try:
            result = module.lambda_handler(event, context)
        except ChangeflowError as exc:
            result = exc
        return result, capsys.readouterr().out.splitlines()

    return invoke


def test_emf_an_applied_write_counts_changes_applied_by_operation(run):
    # GIVEN a put applied to a new entity, then a delete applied on top of it
    written, put_lines = run("update_latest", load_event("functions/update_latest.json"))
    deleted, delete_lines = run("delete_tombstone", load_event("functions/delete_tombstone.json"))
    assert written["outcome"] == deleted["outcome"] == "applied"
    # THEN each counts ChangesApplied once under its own operation, and no other outcome
    assert counted(put_lines, "ChangesApplied") == [("put", 1)]
    assert counted(delete_lines, "ChangesApplied") == [("delete", 1)]
    assert outcome_metrics(put_lines) == outcome_metrics(delete_lines) == {"ChangesApplied"}


def test_emf_an_older_change_counts_changes_stale(run):
    event = load_event("functions/update_latest.json")
    event["latest"] = {"present": True, "version": 4, "effectiveAt": T0 + 1, "changeIds": {"x": 4},
                       "deleted": False}
    result, lines = run("update_latest", proven(event, "update_latest"))  # ChangeIsStale: to the report step
    assert json.loads(str(result))["outcome"] == "stale"
    assert counted(lines, "ChangesStale") == [("put", 1)] and outcome_metrics(lines) == {"ChangesStale"}


def test_emf_a_redelivered_change_counts_changes_duplicate(run):
    event = load_event("functions/update_latest.json")
    event["latest"] = {"present": True, "version": 1, "effectiveAt": T0,
                       "changeIds": {"example-put-1": 1}, "deleted": False}
    result, lines = run("update_latest", proven(event, "update_latest"))  # as the fetch that read it proved it
    assert (result["outcome"], result["version"]) == ("duplicate", 1)
    assert counted(lines, "ChangesDuplicate") == [("put", 1)] and outcome_metrics(lines) == {"ChangesDuplicate"}


def test_emf_a_write_that_lost_the_race_counts_a_version_conflict(run):
    # GIVEN v0 was created by another writer after this change's read saw no v0
    run("update_latest", load_event("functions/update_latest.json"))
    other = load_event("functions/update_latest.json")
    other["change"]["changeId"] = "someone-else"
    # WHEN its conditional write fails THEN the conflict (WriteConflict, to the back-off) is counted
    result, lines = run("update_latest", proven(other, "update_latest"))
    assert type(result).__name__ == "WriteConflict"
    assert counted(lines, "VersionConflicts") == [("put", 1)] and outcome_metrics(lines) == {"VersionConflicts"}


@pytest.mark.parametrize("step, operation", [("update_latest", "put"), ("delete_tombstone", "delete")])
def test_emf_an_expected_version_mismatch_counts_a_version_conflict_and_still_fails(run, step, operation):
    from changeflow_core.errors import VersionConflict

    # GIVEN a caller expecting version 7 of an entity that is at version 1 (or absent)
    event = load_event(f"functions/{step}.json")
    event["change"]["expectedVersion"] = 7
    # WHEN the write step handles it THEN it raises the named failure, and the metric is still flushed
    result, lines = run(step, proven(event, step))
    assert isinstance(result, VersionConflict)
    assert counted(lines, "VersionConflicts") == [(operation, 1)] and outcome_metrics(lines) == {"VersionConflicts"}


def test_emf_each_history_put_attempt_reports_its_retry_count(run):
    event = load_event("functions/put_history.json")
    event["retryCount"] = 2  # the third attempt: $$.State.RetryCount
    result, lines = run("put_history", event)
    assert result["history"] == "written"
    assert counted(lines, "HistoryPutRetries") == [("put", 2)]


def test_emf_fetch_counts_a_received_change_by_operation(run):
    result, lines = run("fetch_latest", load_event("functions/fetch_latest.json"))
    assert result["change"]["operation"] == "put"
    assert counted(lines, "ChangesReceived") == [("put", 1)] and counted(lines, "ChangesRejected") == []


def test_emf_fetch_counts_an_invalid_request_as_rejected(run):
    from changeflow_core.errors import ValidationError

    event = load_event("functions/fetch_latest.json")
    event["request"]["request"]["operation"] = "upsert"
    result, lines = run("fetch_latest", event)
    assert isinstance(result, ValidationError)
    assert counted(lines, "ChangesRejected") == [("invalid", 1)] and counted(lines, "ChangesReceived") == []


def put(at: int, change: str, entity: str = "doc#1", **extra) -> dict:
    return {"entityId": entity, "operation": "put", "attributes": {"at": at}, "effectiveAt": at,
            "changeId": change, **extra}


def test_emf_the_real_workflow_counts_every_outcome_from_the_update_step(stack, cf):
    # GIVEN four changes through the real state machine: applied, redelivered, older, wrong expectation
    assert cf.submit(put(T0 + 100, "a")).output["outcome"] == "applied"
    assert cf.submit(put(T0 + 100, "a")).output["outcome"] == "duplicate"
    assert cf.submit(put(T0 + 50, "old")).output["outcome"] == "stale"
    assert cf.submit(put(T0 + 200, "b", expectedVersion=0)).error == "VersionConflict"
    # THEN the logs (what CloudWatch would ingest) hold one count of each, from the step that decided it:
    # the write step for applied and duplicate, the fetch step for stale and a wrong expectation
    update_logs = list(stack.function("UpdateLatestFunction").logs)
    fetch_logs = list(stack.function("FetchLatestFunction").logs)
    for metric in ("ChangesApplied", "ChangesDuplicate"):
        assert counted(update_logs, metric) == [("put", 1)], metric
    for metric in ("ChangesStale", "VersionConflicts"):
        assert counted(fetch_logs, metric) == [("put", 1)], metric
    assert counted(fetch_logs, "ChangesReceived") == [("put", 1)] * 4


def test_emf_the_real_workflow_reports_the_retry_count_of_the_history_put(stack, cf):
    from changeflow.local.lambdas import fault_hook

    failures = iter([True, True])

    def flaky(function, event, invoke):
        if function.logical_id == "PutHistoryFunction" and next(failures, False):
            raise RuntimeError("transient")  # fails before the handler runs: no metric from these attempts
        return invoke()

    # GIVEN a history put that fails twice WHEN the state machine's Retry runs it a third time
    with fault_hook(stack.lambdas, flaky):
        assert cf.submit(put(T0, "c")).output["outcome"] == "applied"
    # THEN that attempt counts its $$.State.RetryCount
    assert counted(list(stack.function("PutHistoryFunction").logs), "HistoryPutRetries") == [("put", 2)]


def test_emf_the_history_step_counts_the_versions_it_tags_and_the_tags_it_misses(make_stack):
    # issue 37.2: the expiry tags run in the history step, so their counts come from its function
    from changeflow.checks.faults import Injector
    from changeflow.client import Changeflow

    stack = make_stack(HistoryRetentionVersions="1", HistoryRetentionDays="30")
    cf = Changeflow.for_embedded(stack)
    history = stack.function("PutHistoryFunction")
    stack.lambdas.load(history)
    # GIVEN versions 1 and 2 (2 tags 1), then version 3 while every tag is throttled past the client's tries
    for at in (T0, T0 + 1):
        assert cf.submit(put(at, f"c{at}")).output["outcome"] == "applied"
    with Injector().throttle(history, "UpdateItem", 100, client="tagging"):
        assert cf.submit(put(T0 + 2, "c3")).output["outcome"] == "applied"
    # THEN VersionsTaggedForExpiry counts the one tag made, and ExpiryTagsMissed the two tags version 3 could
    # not make (version 2's, and the healing tag of version 1, which would have found it tagged already); a
    # count of 0 is never sent
    logs = list(history.logs)
    assert counted(logs, "VersionsTaggedForExpiry") == [("put", 1)]
    assert counted(logs, "ExpiryTagsMissed") == [("put", 2)]
    assert counted(list(stack.function("TagTtlFunction").logs), "VersionsTaggedForExpiry") == []  # retired


# =====================================================================================================
# 3. Logs: correlation ids on the JSON lines of a real execution
# =====================================================================================================

def own_process_per_function():
    """A fault hook that gives each function back only the log keys it appended itself.

    On Lambda each function runs in its own processes; the embedded stack runs all of them in this one,
    where every Powertools Logger of the service "changeflow" shares one formatter, so a key that one
    handler forgot to append would be lent by the step before it (same execution, same value) and the
    test could not see it. Each function keeps what its warm container would: its own keys."""
    kept: dict[str, dict] = {}

    def hook(function, event, invoke):
        logger = function.module.logger
        logger.clear_state()
        logger.append_keys(**kept.get(function.logical_id, {}))
        try:
            return invoke()
        finally:
            kept[function.logical_id] = dict(logger.get_current_keys())

    return hook


@pytest.fixture
def logged_stack(make_stack):
    """The embedded stack with Powertools' JSON log lines in the functions' logs, one key set per function
    (as if each function had its own process), at LogLevel=DEBUG: each step's summary line is DEBUG (at the
    default, INFO, a change writes only its EMF lines: see the section on what a change logs)."""
    from changeflow.local.lambdas import fault_hook

    stack = make_stack(LogLevel="DEBUG")
    stack.warm()
    with fault_hook(stack.lambdas, own_process_per_function()):
        yield stack


def json_log_lines(function) -> list[dict]:
    lines = []
    for line in function.logs:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "level" in record and "message" in record:
            lines.append(record)
    return lines


def test_logs_of_a_workflow_execution_carry_its_execution_change_and_entity(logged_stack):
    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(logged_stack)
    # GIVEN a put and then a delete of one entity through the real state machine
    put_run = cf.submit({"entityId": "doc#7", "operation": "put", "attributes": {"a": 1}, "changeId": "p-1",
                         "effectiveAt": T0})
    delete_run = cf.submit({"entityId": "doc#7", "operation": "delete", "changeId": "d-1", "effectiveAt": T0 + 1})
    assert put_run.status == delete_run.status == "SUCCEEDED"
    change_of = {put_run.name: "p-1", delete_run.name: "d-1"}
    expected = {  # function -> the executions that ran it
        "FetchLatestFunction": {put_run.name, delete_run.name},
        "UpdateLatestFunction": {put_run.name},
        "DeleteTombstoneFunction": {delete_run.name},
        "PutHistoryFunction": {put_run.name, delete_run.name},  # with the expiry tags (issue 37.2)
    }
    for logical_id, executions in expected.items():
        lines = json_log_lines(logged_stack.function(logical_id))
        # THEN every JSON line names its execution, and each execution that ran the step logged
        assert lines, f"{logical_id} wrote no JSON log line"
        assert {line.get("execution") for line in lines} == executions, logical_id
        for line in lines:
            assert line.get("entityId") == "doc#7", (logical_id, line)
            assert line.get("changeId") == change_of[line["execution"]], (logical_id, line)
    assert not json_log_lines(logged_stack.function("TagTtlFunction"))  # retired: the definition never names it




def test_logs_of_a_read_api_request_carry_its_request_id_as_correlation_id(logged_stack):
    # GIVEN the read API's proxy event WHEN API Gateway invokes the read function with it
    event = load_event("functions/read_api.json")
    payload, failed = logged_stack.lambdas.invoke(logged_stack.function("ReadApiFunction"), event)
    assert not failed and payload["statusCode"] == 200
    # THEN its JSON log lines (at least one) carry correlation_id = requestContext.requestId
    lines = json_log_lines(logged_stack.function("ReadApiFunction"))
    assert lines, "the read function wrote no JSON log line"
    assert {line.get("correlation_id") for line in lines} == {event["requestContext"]["requestId"]}


def test_logs_the_read_api_takes_each_requests_id_as_its_correlation_id(logged_stack):
    # request by request, against the real proxy event shape
    function = logged_stack.function("ReadApiFunction")
    for request_id in ("req-1", "req-2"):
        event = load_event("functions/read_api.json")
        event["requestContext"]["requestId"] = request_id
        payload, failed = logged_stack.lambdas.invoke(function, event)
        assert not failed and payload["statusCode"] == 200
        assert function.module.logger.get_correlation_id() == request_id


# =====================================================================================================
# 3b. What a change logs: Lambda's advanced logging controls (issue 37.2), as the embedded stack applies them
# (changeflow.local.logging_controls, from https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html)
# =====================================================================================================

def all_lines(stack) -> dict[str, list[str]]:
    return {f.logical_id: list(f.logs) for f in stack.lambdas.functions.values() if f.logs}


def clear_logs(stack) -> None:
    for function in stack.lambdas.functions.values():
        function.logs.clear()


def test_at_the_default_levels_a_change_logs_its_metrics_and_nothing_else(stack, cf):
    # GIVEN an entity, then an update of it at the template's default log levels (INFO, Lambda's own WARN)
    stack.stop_pipes()  # the workflow's lines alone: the feed's enrichment counts its batches whenever the pipe runs
    assert cf.submit(put(T0, "first")).output["outcome"] == "applied"
    clear_logs(stack)
    assert cf.submit(put(T0 + 1, "second")).output["outcome"] == "applied"
    lines = all_lines(stack)
    # THEN every line the functions send is an EMF document: no step summary (DEBUG), no START/END/REPORT
    # (INFO platform lines under a system level of WARN), no zero count
    assert lines and all(json.loads(line).get("_aws") for found in lines.values() for line in found), lines
    # AND the metrics are all there: the change received and applied, each counted once, by operation
    assert counted(lines["FetchLatestFunction"], "ChangesReceived") == [("put", 1)]
    assert counted(lines["UpdateLatestFunction"], "ChangesApplied") == [("put", 1)]
    # (a first history put retried nothing; the change feed's function, which publishes the version after the
    # workflow, sends its own EMF document: issue 36)
    assert set(lines) - {"FeedEventsFunction"} == {"FetchLatestFunction", "UpdateLatestFunction"}


def test_lambdas_own_lines_and_the_step_summaries_come_back_at_the_levels_that_send_them(make_stack):
    from changeflow.client import Changeflow

    # GIVEN a stack whose functions send Lambda's INFO lines and the application's DEBUG lines
    stack = make_stack(FunctionSystemLogLevel="INFO", LogLevel="DEBUG")
    execution = Changeflow.for_embedded(stack).submit(put(T0, "c"))
    lines = stack.function("UpdateLatestFunction").logs
    records = [json.loads(line) for line in lines]
    # THEN each invocation has Lambda's three JSON records (the text format's START, END and REPORT)
    assert [r["type"] for r in records if "type" in r] == ["platform.start", "platform.runtimeDone", "platform.report"]
    report = next(r for r in records if r.get("type") == "platform.report")["record"]
    assert report["metrics"]["memorySizeMB"] == 256 and report["metrics"]["billedDurationMs"] >= 1
    # AND the step's summary line, with its correlation keys
    summary, = [r for r in records if r.get("message") == "v0 write"]
    assert summary["level"] == "DEBUG" and summary["execution"] == execution.name


def test_lambda_sends_a_line_without_a_level_as_info_so_the_metrics_need_info():
    from changeflow.local.logging_controls import LoggingControls, level_of

    emf = '{"_aws":{"Timestamp":1,"CloudWatchMetrics":[]},"ChangesApplied":[1.0]}'
    # a line's level is its "level" key; missing or invalid, INFO (the EMF document has none)
    assert level_of(emf) == "INFO" and level_of("plain text") == "INFO" and level_of('{"level":"loud"}') == "INFO"
    assert level_of('{"level":"WARNING","message":"m"}') == "WARN" and level_of('{"level":"debug"}') == "DEBUG"
    # at WARN, Lambda would drop every EMF line (and every metric with it); at INFO it sends them
    assert not LoggingControls("JSON", "WARN", "WARN").sends(emf)
    assert LoggingControls("JSON", "INFO", "WARN").sends(emf)
    assert not LoggingControls("JSON", "INFO", "WARN").sends('{"level":"DEBUG","message":"v0 write"}')
    # the text format filters nothing, and writes Lambda's three lines
    assert LoggingControls("Text", "ERROR", "WARN").sends('{"level":"DEBUG"}')
    assert [line.split()[0] for line in LoggingControls().platform_lines("r-1", 5.0, 256)] == ["START", "END", "REPORT"]
    assert LoggingControls("JSON", "INFO", "WARN").platform_lines("r-1", 5.0, 256) == []


def test_template_every_function_logs_json_at_the_levels_the_parameters_name(template):
    props = template.body["Globals"]["Function"]["LoggingConfig"]
    assert props == {"LogFormat": "JSON", "ApplicationLogLevel": {"Ref": "LogLevel"},
                     "SystemLogLevel": {"Ref": "FunctionSystemLogLevel"}}
    parameters = template.body["Parameters"]
    assert parameters["FunctionSystemLogLevel"]["Default"] == "WARN"
    # no level above INFO is offered: it would drop the EMF metrics (a line without a level is INFO)
    assert parameters["LogLevel"]["Default"] == "INFO" and set(parameters["LogLevel"]["AllowedValues"]) <= {"DEBUG", "INFO"}
    for function in functions(template):
        assert "LoggingConfig" not in template.resources[function]["Properties"], function  # Globals' for all
        assert template.function_properties(function)["LoggingConfig"]["LogFormat"] == "JSON"


def test_a_functions_environment_tells_powertools_lambdas_level(stack):
    for function in stack.lambdas.functions.values():
        assert function.environment["AWS_LAMBDA_LOG_FORMAT"] == "JSON"
        assert function.environment["AWS_LAMBDA_LOG_LEVEL"] == "INFO"


# =====================================================================================================
# 4. Template: log groups, execution logging, tracing, alarms
# =====================================================================================================

@pytest.fixture(scope="module")
def template():
    return Template(ROOT / "template.yaml", overrides={"AlarmTopicArn": "none"})  # a deploy must say (no default)


def functions(template):
    return list(template.of_type("AWS::Serverless::Function"))


def log_groups(template) -> dict[str, dict]:
    return template.of_type("AWS::Logs::LogGroup")


def test_template_every_function_has_its_own_log_group_with_retention(template):
    groups = {template.resolve(spec["Properties"]["LogGroupName"]): spec for spec in log_groups(template).values()}
    for function in functions(template):
        # Lambda's log group name, from the function's (generated) name, so CloudFormation owns it
        name = f"/aws/lambda/{template.physical_name(function)}"
        assert name in groups, f"{function} has no AWS::Logs::LogGroup {name}"
        props = groups[name]["Properties"]
        assert props["LogGroupName"] == {"Fn::Sub": f"/aws/lambda/${{{function}}}"}
        assert props["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    shorter = Template(ROOT / "template.yaml", overrides={"LogRetentionDays": "7"})
    for logical_id, spec in log_groups(shorter).items():
        # the execution log is the audit trail past Step Functions' 90 days: its own, longer retention; so are the
        # records verify --principals matches versions with (issue 33) and the seal's tamper evidence
        expected = "731" if logical_id in ("ChangeStateMachineLogGroup", "ChangeApiAccessLogGroup",
                                           "ChangeEventsJournalLogGroup", "SealTamperEvidenceLogGroup") else "7"
        assert shorter.resolve(spec["Properties"])["RetentionInDays"] == expected


def test_template_state_machine_logs_executions_at_the_configured_level_to_a_retained_group(template):
    machine = template.resources["ChangeStateMachine"]["Properties"]
    logging_ = machine["Logging"]
    assert logging_["Level"] == {"Ref": "StateMachineLogLevel"}
    assert logging_["IncludeExecutionData"] == {"Ref": "StateMachineIncludeExecutionData"}
    # content stays out by default (docs/privacy.md): failures only, no state's data; the operator opts in
    assert template.resolve(logging_)["Level"] == "ERROR" and template.resolve(logging_)["IncludeExecutionData"] == "false"
    everything = Template(ROOT / "template.yaml", overrides={"StateMachineLogLevel": "ALL",
                                                               "StateMachineIncludeExecutionData": "true"})
    resolved = everything.resolve(everything.resources["ChangeStateMachine"]["Properties"]["Logging"])
    assert (resolved["Level"], resolved["IncludeExecutionData"]) == ("ALL", "true")
    destination, = logging_["Destinations"]
    group, attribute = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"]
    assert attribute == "Arn" and group in log_groups(template)
    assert template.resources[group]["Properties"]["RetentionInDays"] == {"Ref": "ExecutionLogRetentionDays"}
    assert int(template.resolve(template.resources[group]["Properties"])["RetentionInDays"]) > 90
    assert template.resolve(destination)["CloudWatchLogsLogGroup"]["LogGroupArn"].endswith(":*")


def test_template_tracing_is_active_everywhere(template):
    assert template.body["Globals"]["Function"]["Tracing"] == "Active"
    for function in functions(template):
        props = template.function_properties(function)
        assert props["Tracing"] == "Active", function
        assert "POWERTOOLS_TRACE_DISABLED" not in props["Environment"]["Variables"], function
    assert template.resources["ChangeStateMachine"]["Properties"]["Tracing"] == {"Enabled": True}
    for api in template.of_type("AWS::Serverless::Api").values():
        assert api["Properties"]["TracingEnabled"] is True


def alarm_on(template, namespace: str, metric: str) -> dict:
    found = [spec["Properties"] for spec in template.of_type("AWS::CloudWatch::Alarm").values()
             if spec["Properties"].get("Namespace") == namespace and spec["Properties"].get("MetricName") == metric]
    assert len(found) == 1, f"expected one alarm on {namespace} {metric}, found {len(found)}"
    return template.resolve(found[0])


def history_failure_filter(template) -> dict:
    machine_group = template.physical_name("ChangeStateMachineLogGroup")
    found = [template.resolve(spec["Properties"]) for spec in template.of_type("AWS::Logs::MetricFilter").values()]
    found = [f for f in found if f["LogGroupName"] == machine_group and "HistoryWriteFailed" in f["FilterPattern"]]
    assert len(found) == 1, "expected one metric filter for HistoryWriteFailed on the state machine's log group"
    return found[0]


def fires_on_the_first_occurrence(alarm: dict) -> bool:
    return (alarm["Statistic"] == "Sum" and alarm["Threshold"] == 1 and alarm["EvaluationPeriods"] == 1
            and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
            and alarm["TreatMissingData"] == "notBreaching")


def math_alarm_on(template, namespace: str, metric: str) -> dict:
    """The one alarm whose metric math reads ``namespace`` ``metric``."""
    found = [template.resolve(spec["Properties"]) for spec in template.of_type("AWS::CloudWatch::Alarm").values()
             if any(q.get("MetricStat", {}).get("Metric", {}).get("MetricName") == metric
                    and q["MetricStat"]["Metric"].get("Namespace") == namespace
                    for q in spec["Properties"].get("Metrics", []))]
    assert len(found) == 1, f"expected one metric-math alarm on {namespace} {metric}, found {len(found)}"
    return found[0]


def client_error_filter(template) -> dict:
    machine_group = template.physical_name("ChangeStateMachineLogGroup")
    found = [template.resolve(spec["Properties"]) for spec in template.of_type("AWS::Logs::MetricFilter").values()]
    found = [f for f in found if f["LogGroupName"] == machine_group
             and f["MetricTransformations"][0]["MetricName"] == "ExecutionsFailedByClient"]
    assert len(found) == 1, "expected one metric filter for client errors on the state machine's log group"
    return found[0]


@pytest.mark.parametrize("topic", [None, ALARM_TOPIC], ids=["none", "topic"])
def test_template_alarms_on_failed_executions_and_history_write_failures(topic):
    template = Template(ROOT / "template.yaml", overrides={"AlarmTopicArn": topic or "none"})
    # failed executions: Step Functions' own metric, for this state machine, less the client's own errors
    failed = math_alarm_on(template, "AWS/States", "ExecutionsFailed")
    stat, = [q["MetricStat"] for q in failed["Metrics"] if q.get("MetricStat", {}).get("Metric", {}).get(
        "MetricName") == "ExecutionsFailed"]
    assert stat["Metric"]["Dimensions"] == [{"Name": "StateMachineArn", "Value": template.arn("ChangeStateMachine")}]
    assert stat["Stat"] == "Sum" and (failed["Threshold"], failed["EvaluationPeriods"]) == (1, 1)
    assert failed["ComparisonOperator"] == "GreaterThanOrEqualToThreshold" and failed["TreatMissingData"] == "notBreaching"
    assert failed.get("AlarmActions") == ([topic] if topic else None)
    # history write failures: a metric filter on the execution log group, and an alarm on its metric
    metric_filter = history_failure_filter(template)
    assert "ExecutionFailed" in metric_filter["FilterPattern"]
    transformation, = metric_filter["MetricTransformations"]
    assert transformation["MetricValue"] == "1"
    history = alarm_on(template, transformation["MetricNamespace"], transformation["MetricName"])
    assert fires_on_the_first_occurrence(history)
    for alarm in (failed, history):
        if topic:
            assert alarm["AlarmActions"] == [topic]
        else:
            assert "AlarmActions" not in alarm  # AWS::NoValue: the property is dropped, not []


# --- the metric filter's pattern against Step Functions' execution log events -------------------------

def sfn_log_event(history_event: dict, execution_arn: str) -> dict:
    """An execution history event as Step Functions writes it to CloudWatch Logs (vended log format:
    id, type, details, previous_event_id, event_timestamp, execution_arn, redrive_count)."""
    details_key = next(k for k in history_event if k.endswith("EventDetails"))
    return {
        "id": str(history_event["id"]),
        "type": history_event["type"],
        "details": history_event[details_key],
        "previous_event_id": str(history_event.get("previousEventId", 0)),
        "event_timestamp": str(int(history_event["timestamp"].timestamp() * 1000)),
        "execution_arn": execution_arn,
        "redrive_count": "0",
    }


@pytest.fixture(scope="module")
def execution_log_events():
    """Real last events of three executions on the embedded stack, in the execution log's format:
    ``{"history_write_failed", "version_conflict", "succeeded"}``."""
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack
    from changeflow.local.lambdas import LambdaServiceError, fault_hook

    def broken(function, event, invoke):
        if function.logical_id == "PutHistoryFunction":
            raise RuntimeError("history table unavailable")
        return invoke()

    def outage(function, event, invoke):
        if function.logical_id == "FetchLatestFunction":
            raise LambdaServiceError()
        return invoke()

    with pytest.MonkeyPatch.context() as patch:
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                           "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}.items():
            patch.setenv(key, value)
        for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            patch.delenv(key, raising=False)
        # under an AuthorizationPolicy, a direct StartExecution (its caller unknown) is denied
        policy = json.dumps([{"principals": ["arn:*"], "entities": [""], "operations": ["put"]}])
        with EmbeddedStack(ROOT, time_scale=0.0005, parameters={"AuthorizationPolicy": policy}) as stack:
            cf = Changeflow.for_embedded(stack)
            forbidden = cf.submit(put(T0, "denied", entity="x1"))
            assert forbidden.error == "Forbidden"
            forbidden_event = sfn_log_event(list(cf.history(forbidden.arn))[-1], forbidden.arn)
        with EmbeddedStack(ROOT, time_scale=0.0005) as stack:
            cf = Changeflow.for_embedded(stack)
            succeeded = cf.submit(put(T0, "ok", entity="e1"))
            conflict = cf.submit(put(T0 + 1, "late", entity="e1", expectedVersion=0))
            invalid = cf.submit({**put(T0 + 2, "bad", entity="e1"), "attributes": {"version": 1}})
            missing = cf.submit({"entityId": "e1", "operation": "rollback", "toVersion": 7, "changeId": "rb"})
            with fault_hook(stack.lambdas, broken):
                history_failed = cf.submit(put(T0, "lost", entity="e2"))
            with fault_hook(stack.lambdas, outage):
                lambda_outage = cf.submit(put(T0, "down", entity="e3"))
            assert (succeeded.status, conflict.error, history_failed.error) == ("SUCCEEDED", "VersionConflict",
                                                                                "HistoryWriteFailed")
            assert (invalid.error, missing.error, lambda_outage.status) == ("ValidationError", "NotFound", "FAILED")
            ended = {"history_write_failed": history_failed, "version_conflict": conflict, "succeeded": succeeded,
                     "validation_error": invalid, "not_found": missing, "lambda_outage": lambda_outage}
            return {"forbidden": forbidden_event,
                    **{key: sfn_log_event(list(cf.history(run.arn))[-1], run.arn) for key, run in ended.items()}}


_TERM = re.compile(r'\(\s*\$((?:\.[A-Za-z_][A-Za-z0-9_]*)+)\s*=\s*"([^"*]*)"\s*\)')


def _split_top(text: str, operator: str) -> list[str]:
    """``text`` split at ``operator`` outside parentheses."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0 and text.startswith(operator, i):
            parts.append(text[start:i])
            start = i = i + len(operator)
            continue
        i += 1
    return parts + [text[start:]]


def _expression_matches(text: str, event: dict) -> bool:
    text = text.strip()
    if len(_split_top(text, "&&")) > 1:
        return all(_expression_matches(part, event) for part in _split_top(text, "&&"))
    if len(_split_top(text, "||")) > 1:
        return any(_expression_matches(part, event) for part in _split_top(text, "||"))
    match = _TERM.fullmatch(text)
    if match is None:  # a parenthesised group: ( A || B )
        assert text.startswith("(") and text.endswith(")"), f"term {text!r} is outside the subset this test evaluates"
        return _expression_matches(text[1:-1], event)
    value = event
    for key in match.group(1).split(".")[1:]:
        value = value.get(key) if isinstance(value, dict) else None
    return value == match.group(2)


def json_pattern_matches(pattern: str, event: dict) -> bool:
    """CloudWatch Logs' JSON filter syntax, only as far as this template uses it: ``{ E }`` where E joins
    terms ``($.a.b = "literal")`` with ``&&`` and ``||`` and groups them in parentheses (AWS: "Metric
    filter syntax for JSON log events"). Anything else is refused rather than guessed."""
    body = pattern.strip()
    assert body.startswith("{") and body.endswith("}"), pattern
    return _expression_matches(body[1:-1], event)


def test_template_client_errors_page_no_one_and_every_system_failure_pages(template, execution_log_events):
    # GIVEN the last execution log event of a success, three client errors and two system failures
    pattern = client_error_filter(template)["FilterPattern"]
    alarm = math_alarm_on(template, "AWS/States", "ExecutionsFailed")
    by_id = {q["Id"]: q for q in alarm["Metrics"]}
    expression, = [q["Expression"] for q in alarm["Metrics"] if q.get("ReturnData")]
    client_metric = by_id["client"]["MetricStat"]["Metric"]
    transformation, = client_error_filter(template)["MetricTransformations"]
    assert (client_metric["Namespace"], client_metric["MetricName"]) == (
        transformation["MetricNamespace"], transformation["MetricName"])

    def pages(events: list[dict]) -> bool:
        """The alarm's state for one period with these executions ending: ExecutionsFailed counts the
        failed ones (AWS/States), the filter the client errors; FILL(m, 0) is m, or 0 with no data."""
        failed = sum(e["type"] == "ExecutionFailed" for e in events)
        client = sum(json_pattern_matches(pattern, e) for e in events)
        values = {"failed": failed or None, "client": client or None}
        assert re.fullmatch(r"FILL\((\w+), 0\) - FILL\((\w+), 0\)", expression), expression
        left, right = re.findall(r"FILL\((\w+), 0\)", expression)
        value = (values[left] or 0) - (values[right] or 0)
        return value >= alarm["Threshold"]

    events = execution_log_events
    clients = [events[k] for k in ("validation_error", "not_found", "version_conflict", "forbidden")]
    systems = [events[k] for k in ("history_write_failed", "lambda_outage")]
    # THEN client errors, alone or together, never page; each system failure pages, among any client errors
    assert all(json_pattern_matches(pattern, e) for e in clients)
    assert not any(json_pattern_matches(pattern, e) for e in systems + [events["succeeded"]])
    assert not pages(clients + [events["succeeded"]])
    for system in systems:
        assert pages([system]) and pages(clients + [system])


def test_template_history_filter_matches_only_an_execution_that_failed_with_history_write_failed(
        template, execution_log_events):
    pattern = history_failure_filter(template)["FilterPattern"]
    assert execution_log_events["history_write_failed"]["type"] == "ExecutionFailed"
    assert json_pattern_matches(pattern, execution_log_events["history_write_failed"])
    assert not json_pattern_matches(pattern, execution_log_events["version_conflict"])
    assert not json_pattern_matches(pattern, execution_log_events["succeeded"])


def test_template_history_filter_on_moto_logs(template, execution_log_events):
    """The same events through moto's CloudWatch Logs FilterLogEvents, if moto can evaluate the pattern."""
    from moto import mock_aws

    pattern = history_failure_filter(template)["FilterPattern"]
    with mock_aws():
        logs = boto3.client("logs", region_name="us-east-1")
        logs.create_log_group(logGroupName="g")
        logs.create_log_stream(logGroupName="g", logStreamName="s")
        now = int(time.time() * 1000)
        events = list(execution_log_events.values())
        logs.put_log_events(logGroupName="g", logStreamName="s",
                            logEvents=[{"timestamp": now + i, "message": json.dumps(e)} for i, e in enumerate(events)])
        matched = logs.filter_log_events(logGroupName="g", filterPattern=pattern)["events"]
        found = [json.loads(e["message"]) for e in matched]
    if len(found) == len(execution_log_events):
        pytest.skip("moto cannot evaluate JSON filter patterns: a pattern starting with '{' matches every event "
                    "(moto/logs/utils.py UnsupportedFilterPattern); the pattern is checked by "
                    "test_template_history_filter_matches_only_an_execution_that_failed_with_history_write_failed")
    assert found == [execution_log_events["history_write_failed"]]


# --- where a handler's output goes: the function's log, never the terminal (issue 13) ----------------
def test_a_log_handler_bound_to_a_closed_stream_is_pointed_at_the_function_logs():
    # GIVEN a stdlib handler bound to a stream that has been closed since (a finished test's capture, to
    # which Powertools bound its handler). logging.Handler.setStream flushes the old stream first, so
    # healing it with setStream raised "I/O operation on closed file" and made the suite order-dependent.
    import io

    from changeflow.local import lambdas

    closed = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # what pytest's capture is: flush() raises once closed
    handler = logging.StreamHandler(closed)
    logger = logging.getLogger("changeflow-test-closed-stream")
    logger.addHandler(handler)
    closed.close()
    try:
        # WHEN the embedded stack routes stdout again THEN the handler writes to the router
        lambdas._heal_log_streams()
        assert handler.stream is lambdas._STDOUT
    finally:
        logger.removeHandler(handler)


def test_a_warning_a_handler_raises_goes_to_its_log_not_the_terminal(stack, capsys, monkeypatch):
    # GIVEN the read function, with the domain code it calls raising a warning
    import warnings

    from changeflow_core import reads

    versions = reads.versions

    def warned(*args, **kwargs):
        warnings.warn("a warning the domain code raised", UserWarning, stacklevel=2)
        return versions(*args, **kwargs)

    monkeypatch.setattr(reads, "versions", warned)
    event = load_event("functions/read_api.json")
    function = stack.function("ReadApiFunction")
    # WHEN API Gateway invokes it
    payload, failed = stack.lambdas.invoke(function, event)
    assert not failed and payload["statusCode"] == 200
    # THEN the warning is in the function's log (on Lambda, stderr goes to CloudWatch Logs), not on stderr
    assert any("a warning the domain code raised" in line for line in function.logs)
    assert "a warning the domain code raised" not in capsys.readouterr().err


def test_the_read_function_logs_no_powertools_warning_on_any_call(stack):
    # Issue 38.5: a read publishes no application metric, and Powertools warned "No application metrics to
    # publish" on every call: noise in every read's log. Cold and warm, the log holds the read's line only.
    event = load_event("functions/read_api.json")
    function = stack.function("ReadApiFunction")
    for _ in range(2):
        payload, failed = stack.lambdas.invoke(function, event)
        assert not failed and payload["statusCode"] == 200
    assert [line for line in function.logs if "warn" in line.lower()] == []


def test_an_unhandled_error_logs_its_traceback_and_the_payload_keeps_the_handlers_frames(stack):
    # The Lambda runtime's error payload: errorMessage, errorType, stackTrace (from the handler on), and the
    # runtime logs "[ERROR] type: message" with the traceback to the function's log.
    event = load_event("functions/fetch_latest.json")
    event["request"]["request"]["operation"] = "upsert"
    function = stack.function("FetchLatestFunction")
    payload, failed = stack.lambdas.invoke(function, event)
    assert failed and payload["errorType"] == "ValidationError"
    assert payload["stackTrace"] and all("changeflow/local/lambdas.py" not in frame for frame in payload["stackTrace"])
    assert any("fetch_latest/app.py" in frame for frame in payload["stackTrace"])
    [logged] = [line for line in function.logs if line.startswith("[ERROR] ValidationError: ")]
    assert payload["errorMessage"] in logged and "Traceback (most recent call last):" in logged
