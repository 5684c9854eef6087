"""Content stays out of logs, traces and names by default (issue 27 item 4).

A change is sent through the API's front function, on the embedded stack, with a marker in its content
and another in its entity id. What leaves the table is then collected: the state machine's execution log
(CloudWatch Logs, as Step Functions delivers it), every function's log lines, what the handlers hand to
X-Ray (annotations and metadata: a spy on Powertools' Tracer, which the embedded stack runs with tracing
disabled), and the executions' names and ARNs (what the execution log, CloudTrail and the console's lists
show). By default (the execution log at ERROR, without execution data) no content reaches any of them;
the operator's opt-in (``StateMachineLogLevel=ALL``, ``StateMachineIncludeExecutionData=true``) puts it
in the execution log; ``HashEntityIds=true`` keeps the entity id out of all of them.
"""

from __future__ import annotations

import json
import secrets

import pytest

from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
from conftest import load_event

T0 = 1_767_225_600_000


@pytest.fixture
def traced(monkeypatch):
    """Every (key, value) the handlers hand to X-Ray through Powertools' Tracer."""
    from aws_lambda_powertools import Tracer

    seen: list[tuple[str, object]] = []
    annotate, metadata = Tracer.put_annotation, Tracer.put_metadata

    def put_annotation(self, key, value):
        seen.append((key, value))
        return annotate(self, key, value)

    def put_metadata(self, key, value, namespace=None):
        seen.append((key, value))
        return metadata(self, key, value, namespace)

    monkeypatch.setattr(Tracer, "put_annotation", put_annotation)
    monkeypatch.setattr(Tracer, "put_metadata", put_metadata)
    return seen


def through_the_api(stack, request: dict) -> str:
    front = stack.function("SubmitChangeFunction")
    event = load_event("functions/submit_change.json")
    event["body"] = json.dumps(request)
    payload, failed = stack.lambdas.invoke(front, event)
    answer = json.loads(payload["body"])
    assert not failed and payload["statusCode"] == 200, payload
    assert wait_for_termination(answer["executionArn"], 30)
    return answer["executionArn"]


def leaves_the_table(make_stack, traced, **parameters) -> dict[str, str]:
    """Run a put, a patch and a delete carrying the markers; return what left the table, by where."""
    content, entity = f"ssn-{secrets.token_hex(6)}", f"patient-{secrets.token_hex(6)}"
    stack = make_stack(**parameters)
    arns = [through_the_api(stack, {"entityId": entity, "operation": "put", "changeId": "c1", "effectiveAt": T0,
                                    "attributes": {"ssn": content, "n": 1}}),
            through_the_api(stack, {"entityId": entity, "operation": "patch", "changeId": "c2",
                                    "effectiveAt": T0 + 1, "set": {"note": content}}),
            through_the_api(stack, {"entityId": entity, "operation": "put", "changeId": "c3", "effectiveAt": T0 + 2,
                                    "attributes": {"ssn": content}, "expectedVersion": 1}),  # fails: v2 is current
            through_the_api(stack, {"entityId": entity, "operation": "delete", "changeId": "c4",
                                    "effectiveAt": T0 + 3})]
    sfn, logs = stack.client("stepfunctions"), stack.client("logs")
    assert [sfn.describe_execution(executionArn=arn)["status"] for arn in arns] == [
        "SUCCEEDED", "SUCCEEDED", "FAILED", "SUCCEEDED"]
    group = stack.template.physical_name("ChangeStateMachineLogGroup")
    records, kwargs = [], {"logGroupName": group}
    while True:
        page = logs.filter_log_events(**kwargs)
        records += [e["message"] for e in page["events"]]
        if not page.get("nextToken"):
            break
        kwargs["nextToken"] = page["nextToken"]
    assert any('"ExecutionFailed"' in r for r in records)  # at ERROR, how the failed one failed
    if parameters.get("StateMachineLogLevel") == "ALL":
        assert len(records) > 40  # every state of every execution
    listed = sfn.list_executions(stateMachineArn=stack.outputs["ChangeStateMachineArn"])["executions"]
    function_logs = [line for f in stack.lambdas.functions.values() for line in f.logs]
    assert function_logs
    return {
        "content": content, "entity": entity,
        "execution log": "\n".join(records),
        "function logs": "\n".join(map(str, function_logs)),
        "x-ray": json.dumps([list(map(str, kv)) for kv in traced]),
        "names": json.dumps([(e["name"], e["executionArn"]) for e in listed]),
        "stored": json.dumps(stack.client("dynamodb").scan(TableName=stack.outputs["ChangeTableName"])["Items"],
                          default=bytes.hex),
    }


WHERE = ["execution log", "function logs", "x-ray", "names"]


def test_by_default_no_content_leaves_the_table(make_stack, traced):
    # GIVEN the default stack WHEN a put and a patch carry a marker in their content
    found = leaves_the_table(make_stack, traced)
    # THEN the table holds it, and nothing else does
    assert found["content"] in found["stored"]
    assert [where for where in WHERE if found["content"] in found[where]] == []
    # (the entity id is shown by default: in names and annotations, as the operator can search them)
    assert found["entity"] in found["names"] and found["entity"] in found["x-ray"]
    assert '"entityId"' in found["x-ray"]


def test_the_operators_opt_in_puts_content_in_the_execution_log(make_stack, traced):
    found = leaves_the_table(make_stack, traced, StateMachineLogLevel="ALL", StateMachineIncludeExecutionData="true")
    copies = found["execution log"].count(found["content"])
    assert copies >= 10, copies  # the "about 10 copies per put": every state's input and output
    assert [where for where in ("function logs", "x-ray", "names") if found["content"] in found[where]] == []


def test_hashed_entity_ids_leave_the_table_only_as_digests(make_stack, traced):
    # GIVEN HashEntityIds WHEN the changes run (at LogLevel=DEBUG: each step's summary line, with its log keys,
    # is DEBUG; at the default a change's functions write only its EMF lines, which carry no entity)
    found = leaves_the_table(make_stack, traced, HashEntityIds="true", LogLevel="DEBUG")
    # THEN the entity id is nowhere but the table (at ALL, a task's parameters would still carry it)
    assert found["entity"] in found["stored"]
    assert [where for where in WHERE if found["entity"] in found[where]] == []
    # and the id is still searchable by its digest, the same in annotations and log keys
    from changeflow_core.names import entity_ref

    digest = entity_ref(found["entity"], hashed=True)
    assert digest.startswith("sha256:") and digest in found["x-ray"] and digest in found["function logs"]


def test_the_cli_names_executions_as_the_api_does_with_hashed_entity_ids(make_stack):
    from changeflow.client import Changeflow
    from changeflow_core import names as core_names

    stack = make_stack(HashEntityIds="true")
    cf = Changeflow.for_embedded(stack)
    done = cf.submit({"entityId": "secret#1", "operation": "put", "changeId": "c1", "attributes": {}})
    assert done.status == "SUCCEEDED" and "secret" not in done.arn
    assert done.name == core_names.execution_name("secret#1", "c1", hashed=True)


def test_at_all_without_execution_data_task_parameters_still_carry_content_on_the_embedded_stack(make_stack, traced):
    """Why ERROR is the default: AWS documents execution data as states' input and output; a task's
    ``parameters`` (its payload: the change) are in every TaskScheduled record of the embedded stack's
    log at ALL even without data, so changeflow does not count on ALL keeping content out."""
    found = leaves_the_table(make_stack, traced, StateMachineLogLevel="ALL")
    assert found["content"] in found["execution log"]
    assert all('"TaskScheduled"' in line for line in found["execution log"].splitlines() if found["content"] in line)


# --- error paths with HashEntityIds (issue 33.5) ------------------------------------------------------------

@pytest.fixture
def xray_errors(monkeypatch):
    """What the X-Ray SDK would send of every exception a handler raises: the ``cause`` it records when the
    exception leaves Tracer's subsegment (``add_exception``: its message) and the metadata Tracer puts
    (``<handler> error``: the exception object, as the SDK serialises it). The embedded stack runs with
    tracing disabled, so the SDK's dummy subsegment receives them; the SDK's own conversions turn them into
    what a segment document would carry."""
    from aws_xray_sdk.core.models.dummy_entities import DummySubsegment
    from aws_xray_sdk.core.models.throwable import Throwable
    from aws_xray_sdk.core.utils.conversion import metadata_to_dict

    seen: list[str] = []
    put_metadata, add_exception = DummySubsegment.put_metadata, DummySubsegment.add_exception

    def record_metadata(self, key, value, namespace="default"):
        seen.append(json.dumps({key: metadata_to_dict(value)}, default=str))
        return put_metadata(self, key, value, namespace)

    def record_exception(self, exception, stack, remote=False):
        seen.append(json.dumps(Throwable(exception, stack, remote).to_dict(), default=str))
        return add_exception(self, exception, stack, remote)

    monkeypatch.setattr(DummySubsegment, "put_metadata", record_metadata)
    monkeypatch.setattr(DummySubsegment, "add_exception", record_exception)
    return seen


def where_errors_land(stack, cf, runs, xray_errors) -> dict[str, list[str]]:
    """Every place an error's text reaches: the functions' ``[ERROR]`` lines (every version's too), what X-Ray
    recorded, the causes in the executions' histories, and the state machine's execution log."""
    functions = [*stack.lambdas.functions.values(),
                 *(v for versions in stack.lambdas.versions.values() for v in versions.values())]
    errors = [line for f in functions for line in f.logs if line.startswith("[ERROR]")]
    causes = [json.dumps(e, default=str) for r in runs for e in cf.history(r.arn)
              if any(k.endswith("EventDetails") and "cause" in e[k] for k in e)]
    execution_log = [e["message"] for e in stack.client("logs").filter_log_events(
        logGroupName=stack.template.physical_name("ChangeStateMachineLogGroup"))["events"]]
    return {"[ERROR] lines": errors, "x-ray": xray_errors, "history causes": causes, "execution log": execution_log}


def test_with_hashed_entity_ids_no_error_names_the_entity(make_stack, xray_errors, caplog):
    """GIVEN HashEntityIds, WHEN a stale change, a version conflict, a validation error, a forbidden change and
    a redact of an entity that does not exist fail (or end stale) in the workflow, THEN their messages name
    the entity by its digest only: in the function logs (the runtime's ``[ERROR]`` line, and Tracer's own
    log of the exception), in what goes to X-Ray (the cause and the exception as metadata), and in the
    execution history (every event's cause) and the execution log."""
    from changeflow.client import Changeflow
    from changeflow_core.names import entity_ref

    entity, denied = f"patient-{secrets.token_hex(6)}", f"secret-{secrets.token_hex(6)}"
    # the policy lets IAM principals (POST /changes) change "patient-..." entities; a direct StartExecution,
    # whose caller the workflow cannot know, is denied whatever it changes
    policy = json.dumps([{"principals": ["arn:*"], "entities": ["patient-"],
                          "operations": ["put", "patch", "delete", "rollback", "redact", "adopt"]}])
    stack = make_stack(HashEntityIds="true", AuthorizationPolicy=policy)
    cf = Changeflow.for_embedded(stack)
    put = {"entityId": entity, "operation": "put", "attributes": {"n": 1}}
    api = {
        "applied": {**put, "changeId": "c1", "effectiveAt": T0 + 10},
        "stale": {**put, "changeId": "c2", "effectiveAt": T0},
        "conflict": {**put, "changeId": "c3", "effectiveAt": T0 + 20, "expectedVersion": 7},
        "not found": {"entityId": entity + "-x", "operation": "redact", "changeId": "c6", "redactVersion": 1,
                      "reason": "gone"},
    }
    runs = {name: cf.wait(through_the_api(stack, request)) for name, request in api.items()}
    runs["invalid"] = cf.submit({"entityId": entity, "operation": "put", "changeId": "c4"})  # no attributes
    runs["forbidden"] = cf.submit({**put, "entityId": denied, "changeId": "c5"})
    assert {name: (r.status, r.error or r.output["outcome"]) for name, r in runs.items()} == {
        "applied": ("SUCCEEDED", "applied"), "stale": ("SUCCEEDED", "stale"), "conflict": ("FAILED", "VersionConflict"),
        "invalid": ("FAILED", "ValidationError"), "forbidden": ("FAILED", "Forbidden"),
        "not found": ("FAILED", "NotFound")}

    tracer_log = [r.getMessage() + (caplog.text if r.exc_info else "") for r in caplog.records
                  if r.name.startswith("aws_lambda_powertools")]
    found = {**where_errors_land(stack, cf, runs.values(), xray_errors), "Tracer's log": tracer_log}
    errors, causes, execution_log = found["[ERROR] lines"], found["history causes"], found["execution log"]
    # THEN the errors were there to read (one per failure, and the stale change's)
    assert len(errors) >= 5 and len(xray_errors) >= 10 and len(causes) >= 5 and execution_log
    for name in ("ChangeIsStale", "VersionConflict", "ValidationError", "Forbidden", "NotFound"):
        assert any(name in line for line in errors), name
    # AND no error names the entity, the denied one or the missing one, except by digest
    for raw in (entity, denied, entity + "-x"):
        assert {where: [x for x in lines if raw in x] for where, lines in found.items()} == {
            where: [] for where in found}, raw
    for raw, where in ((entity, "a stale change"), (denied, "a forbidden change"), (entity + "-x", "a redact")):
        assert any(entity_ref(raw, True) in line for line in errors), where
        assert any(entity_ref(raw, True) in x for x in xray_errors), where
        assert any(entity_ref(raw, True) in c for c in causes), where


def test_with_hashed_entity_ids_a_history_conflict_names_the_entity_by_its_digest_only(make_stack, xray_errors):
    """GIVEN HashEntityIds, WHEN the history step meets what an insider changed in the table (another
    change's item where the version goes; an adoption's versions rewritten before its history step), THEN
    the execution fails HistoryWriteFailed, and its cause names the entity by its digest only: in the
    runtime's ``[ERROR]`` line, X-Ray, the execution history and the execution log (docs/privacy.md)."""
    from changeflow.client import Changeflow
    from changeflow.local.lambdas import fault_hook
    from changeflow_core import model
    from changeflow_core.names import entity_ref

    stack = make_stack(HashEntityIds="true")
    cf = Changeflow.for_embedded(stack)
    taken, adopted = f"patient-{secrets.token_hex(6)}", f"patient-{secrets.token_hex(6)}"

    def key(entity, version=None):
        return {model.PK: {"S": entity}, model.SK: {"S": model.history_sk(version) if version else model.LATEST_SK}}

    def put(entity, change, at):
        run = cf.submit({"entityId": entity, "operation": "put", "attributes": {"n": at}, "effectiveAt": T0 + at,
                         "changeId": change})
        assert run.output["outcome"] == "applied", run

    # another change's item where the next version of `taken` goes
    put(taken, "c1", 1)
    first = cf.dynamodb.get_item(TableName=cf.history_table, Key=key(taken, 1))["Item"]
    cf.dynamodb.put_item(TableName=cf.history_table, Item={**first, **key(taken, 2), model.VERSION: {"N": "2"},
                                                           model.CHANGE_ID: {"S": "insider"}})
    runs = [cf.submit({"entityId": taken, "operation": "put", "attributes": {"n": 2}, "effectiveAt": T0 + 2,
                       "changeId": "c2"})]
    # versions written before the chain, one rewritten between the adoption's write and its history step
    put(adopted, "c1", 1)
    put(adopted, "c2", 2)
    for version in (1, 2, None):
        cf.dynamodb.update_item(TableName=cf.table if version is None else cf.history_table,
                                Key=key(adopted, version), UpdateExpression="REMOVE prevHash, chainHash")

    def rewrite_before_the_history_step(function, event, invoke):
        if function.logical_id == "PutHistoryFunction" and event.get("change", {}).get("operation") == "adopt":
            cf.dynamodb.update_item(TableName=cf.history_table, Key=key(adopted, 1), UpdateExpression="SET n = :x",
                                    ExpressionAttributeValues={":x": {"N": "99"}})
        return invoke()

    with fault_hook(stack.lambdas, rewrite_before_the_history_step):
        runs.append(cf.submit({"entityId": adopted, "operation": "adopt", "changeId": "a1"}))
    assert [(r.status, r.error) for r in runs] == [("FAILED", "HistoryWriteFailed")] * 2, [r.cause for r in runs]
    assert all("HistoryConflict" in r.cause for r in runs)

    found = where_errors_land(stack, cf, runs, xray_errors)
    for entity in (taken, adopted):
        assert {where: [x for x in lines if entity in x] for where, lines in found.items()} == {
            where: [] for where in found}, entity
        for where, lines in found.items():
            assert any(entity_ref(entity, True) in line for line in lines), (entity, where)


def test_a_refused_request_leaves_only_the_number_it_quotes_in_the_logs(make_stack, xray_errors):
    """GIVEN the default stack, WHEN a change is refused for a number DynamoDB cannot store (a
    ValidationError that quotes it as sent: docs/guarantees.md, item 8) or for a reserved name, THEN the
    error's message (in the ``[ERROR]`` line, X-Ray, the history's causes and the execution log at ERROR)
    holds the field and that number, and nothing else of the request's content (docs/privacy.md)."""
    from changeflow.client import Changeflow

    stack = make_stack()
    cf = Changeflow.for_embedded(stack)
    content = f"ssn-{secrets.token_hex(6)}"
    number = "1234567890123456789012345678901234567890" + str(1 + secrets.randbelow(9))  # 41 digits
    runs = [cf.submit({"entityId": "p#1", "operation": "put", "changeId": "c1", "effectiveAt": T0,
                       "attributes": {"ssn": content, "salary": json.loads(number)}}),
            cf.submit({"entityId": "p#1", "operation": "put", "changeId": "c2", "effectiveAt": T0,
                       "attributes": {"ssn": content, "version": 3}})]
    assert [(r.status, r.error) for r in runs] == [("FAILED", "ValidationError")] * 2
    event = load_event("functions/submit_change.json")  # through the API: refused by the front function
    event["body"] = json.dumps({"entityId": "p#1", "operation": "put", "changeId": "c3", "effectiveAt": T0,
                                "attributes": {"ssn": content}})[:-2] + f', "salary": {number}}}}}'
    payload, failed = stack.lambdas.invoke(stack.function("SubmitChangeFunction"), event)
    assert not failed and payload["statusCode"] == 400 and number in payload["body"], payload
    front = [str(line) for line in stack.function("SubmitChangeFunction").logs]
    assert [line for line in front if content in line] == [] and any(number in line for line in front)
    found = where_errors_land(stack, cf, runs, xray_errors)
    assert all(lines for lines in found.values())
    assert {where: [x for x in lines if content in x] for where, lines in found.items()} == {w: [] for w in found}
    for where, lines in found.items():
        assert any(f"attributes.salary: {number} has 41 significant digits" in x for x in lines), where
        assert any("attributes.version: is a name the item model reserves" in x for x in lines), where
