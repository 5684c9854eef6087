"""POST /changes over real HTTP on `changeflow serve` (issue 9 items 1, 2, 5 and 8; issue 10's API items):
execution names one-to-one in (entityId, changeId), a retry after a failed execution applied, bodies over
the maximum refused before anything starts, and API Gateway's own answers to bad requests."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination

from changeflow.client import names
from changeflow.local.lambdas import LambdaServiceError, fault_hook
from changeflow.local.server import EmbeddedServer
from changeflow_core import names as core_names
from changeflow_core.submissions import CHANGE_ID_PATTERN
from changeflow_core.validation import MAX_REQUEST_BYTES, request_size
from conftest import ROOT
from conftest import http_exchange as http

pytestmark = pytest.mark.enable_socket
T0 = 1_767_225_600_000


def post(api, request):
    status, _, body = http("POST", f"{api}/changes", json.dumps(request))
    return status, json.loads(body)


def finish(answer):
    assert wait_for_termination(answer["executionArn"], 30)


def name_of(arn):
    return arn.split(":")[7]  # arn:aws:states:REGION:ACCOUNT:execution:MACHINE:NAME


@pytest.fixture(scope="module")
def server():
    with EmbeddedServer(port=0, time_scale=0.001) as running:
        yield running


@pytest.fixture(scope="module")
def api(server):
    return f"{server.url}/v1"


def stored(server, entity):
    item = server.stack.client("dynamodb").get_item(
        TableName=server.stack.outputs["ChangeTableName"], Key={"pk": {"S": entity}, "sk": {"S": "v0"}},
        ConsistentRead=True).get("Item")
    return item


def describe(server, arn):
    return server.stack.client("stepfunctions").describe_execution(executionArn=arn)


# --- item 1: execution names ------------------------------------------------------------------------------

COLLIDING = [
    [("doc#1", "c1"), ("doc/1", "c1"), ("doc 1", "c1")],
    [("ユーザー1", "c1"), ("データー1", "c1")],
    [("tenant#" + "x" * 90 + "#A", "c1"), ("tenant#" + "x" * 90 + "#B", "c1")],
    [("a--b", "c"), ("a", "b--c")],
]


@pytest.mark.parametrize("pairs", COLLIDING, ids=["punctuation", "unicode", "long-shared-prefix", "separator"])
def test_changes_of_different_entities_never_share_an_execution_and_each_is_applied(api, server, pairs):
    answers = []
    for number, (entity, change) in enumerate(pairs):
        status, answer = post(api, {"entityId": f"n1-{entity}", "operation": "put", "changeId": change,
                                    "attributes": {"n": number}})
        assert status == 200 and answer["status"] == "RUNNING", answer
        answers.append(answer)
    assert len({a["executionArn"] for a in answers}) == len(pairs)
    for number, ((entity, _), answer) in enumerate(zip(pairs, answers)):
        finish(answer)
        assert json.loads(describe(server, answer["executionArn"])["output"])["outcome"] == "applied"
        assert stored(server, f"n1-{entity}")["n"] == {"N": str(number)}


def test_the_api_and_the_cli_name_the_same_change_alike(api):
    request = {"entityId": "n1-same", "operation": "put", "changeId": "c-9", "attributes": {}}
    status, answer = post(api, request)
    finish(answer)
    assert name_of(answer["executionArn"]) == names.execution_name(request) == core_names.execution_name("n1-same", "c-9")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=128)),
                min_size=2, max_size=6, unique=True),
       st.integers(min_value=1, max_value=core_names.MAX_ATTEMPT))
def test_names_are_one_to_one_short_and_loggable(pairs, attempt):
    firsts = [core_names.execution_name(e, c) for e, c in pairs]
    retries = [core_names.execution_name(e, c, attempt) for e, c in pairs]
    assert len(set(firsts)) == len(pairs) and len(set(retries)) == len(pairs)
    for name in firsts + retries:
        assert len(name) <= 80 and re.fullmatch(r"[0-9A-Za-z_-]+", name), name
    if attempt > 1:
        assert not set(firsts) & set(retries)


# --- item 2: retries after a failed execution ---------------------------------------------------------------

def test_a_retry_after_a_refused_request_is_the_first_attempt_and_applied(api, server):
    bad = {"entityId": "r2-valid", "operation": "put", "changeId": "c1", "attributes": {"version": 9}}
    status, first = post(api, bad)  # "version" is a name the item model reserves: refused, nothing started
    assert status == 400 and first["field"] == "attributes.version"
    status, again = post(api, {**bad, "attributes": {"v": 1}})
    assert status == 200 and again["status"] == "RUNNING"
    assert name_of(again["executionArn"]) == core_names.execution_name("r2-valid", "c1", 1)
    finish(again)
    assert json.loads(describe(server, again["executionArn"])["output"])["outcome"] == "applied"
    assert stored(server, "r2-valid")["v"] == {"N": "1"}


# --- issue 27 item 7: what the API can know at once -------------------------------------------------------

def executions(server) -> int:
    return len(server.stack.client("stepfunctions").list_executions(
        stateMachineArn=server.stack.outputs["ChangeStateMachineArn"])["executions"])


REJECTED = [  # (request fields beyond entityId and changeId, the field the 400 names)
    ({"operation": "put", "attributes": {"version": 1}}, "attributes.version"),
    ({"operation": "put", "attributes": {"chainHash": "x"}}, "attributes.chainHash"),
    ({"operation": "patch", "set": {"a": 1}, "remove": ["a"]}, "remove[0]"),
    ({"operation": "patch", "set": {"changeIds": 1}}, "set.changeIds"),
    ({"operation": "patch", "set": {}, "remove": []}, "set"),
    ({"operation": "rollback"}, "toVersion"),
    ({"operation": "delete", "attributes": {}}, "attributes"),
    ({"operation": "put", "attributes": {}, "actor": "a\u0000b"}, "actor"),
]
# What API Gateway's request model refuses first, with its own 400 (tests/test_template.py): still nothing starts
REFUSED_BY_THE_MODEL = [
    {"operation": "put", "attributes": {}, "colour": "red"},
    {"operation": "upsert", "attributes": {}},
    {"operation": "patch", "remove": ["a", "a"]},
    {"operation": "rollback", "toVersion": 0},
    {"operation": "put", "attributes": {}, "expectedVersion": 1.5},
    {"operation": "put", "attributes": {}, "effectiveAt": -1},
]


@pytest.mark.parametrize("fields", REFUSED_BY_THE_MODEL)
def test_a_request_the_model_refuses_starts_nothing(api, server, fields):
    before = executions(server)
    status, answer = post(api, {"entityId": "r7-model", "changeId": "c1", **fields})
    assert (status, answer) == (400, {"message": "Invalid request body"}) and executions(server) == before


@pytest.mark.parametrize("fields,field", REJECTED, ids=[f for _, f in REJECTED])
def test_a_request_the_workflow_would_reject_is_a_400_naming_the_field_and_starts_nothing(api, server, fields, field):
    # GIVEN a request the fetch step would fail with ValidationError
    request = {"entityId": "r7-bad", "changeId": "c1", **fields}
    before, calls = executions(server), list(server.stack.function("SubmitChangeFunction").api_calls)
    # WHEN it is posted
    status, answer = post(api, request)
    # THEN a 400 names the field, as the workflow would; no execution started, no AWS call made
    assert status == 400 and answer["field"] == field and field in answer["message"], answer
    assert executions(server) == before
    assert list(server.stack.function("SubmitChangeFunction").api_calls) == calls
    assert stored(server, "r7-bad") is None


_NAMES = st.sampled_from(["a", "version", "chainHash", "changeIds", "b.c", "", "x" * 300])
_VALUES = st.one_of(st.integers(-3, 3), st.text(max_size=3), st.none(), st.booleans(),
                    st.lists(st.integers(), max_size=2), st.floats(allow_nan=False, allow_infinity=False))
_REQUESTS = st.fixed_dictionaries({"entityId": st.just("e"), "changeId": st.just("c")}, optional={
    "operation": st.sampled_from(["put", "patch", "delete", "rollback", "merge", None]),
    "attributes": st.one_of(st.dictionaries(_NAMES, _VALUES, max_size=3), st.lists(st.integers(), max_size=1)),
    "set": st.dictionaries(_NAMES, _VALUES, max_size=3),
    "remove": st.one_of(st.lists(_NAMES, max_size=3), st.text(max_size=2)),
    "toVersion": _VALUES, "expectedVersion": _VALUES, "effectiveAt": _VALUES,
    "actor": _VALUES, "reason": _VALUES, "extra": _VALUES})


@settings(max_examples=400, deadline=None)
@given(_REQUESTS)
def test_the_front_function_refuses_exactly_what_the_fetch_step_refuses(request):
    from changeflow_core import submissions
    from changeflow_core.errors import ValidationError
    from changeflow_core.validation import validate_request

    try:
        validate_request(request, {"name": "c", "startTime": "2026-01-01T00:00:00Z"})
        expected = None
    except ValidationError as exc:
        expected = exc.field
    try:
        submissions.check(request)
        refused = None
    except submissions.Refused as exc:
        assert exc.status == 400
        refused = exc.field
    assert refused == expected


def test_retries_of_a_change_that_keeps_failing_cost_the_same_few_calls_each(api, server):
    # GIVEN a change whose every execution fails (the expected version is never current)
    request = {"entityId": "r7-retry", "operation": "put", "changeId": "c1", "attributes": {"v": 1},
               "expectedVersion": 9}
    front = server.stack.function("SubmitChangeFunction")
    calls = []
    for attempt in range(1, 9):
        # WHEN the client sends it again after each failure
        before = len(front.api_calls)
        status, answer = post(api, request)
        calls.append(len(front.api_calls) - before)
        # THEN the n-th submission starts the n-th attempt...
        assert status == 200 and name_of(answer["executionArn"]) == core_names.execution_name("r7-retry", "c1", attempt)
        finish(answer)
        assert describe(server, answer["executionArn"])["error"] == "VersionConflict"
    # ...with as many AWS calls the 8th time as the 3rd: nothing walks the earlier attempts (the first
    # attempt's name and its status, the latest number, the latest attempt's status, a claim, a start)
    assert max(calls[2:]) == min(calls[2:]) <= 7, calls
    # and the corrected change is the 9th attempt, applied
    status, answer = post(api, {**request, "expectedVersion": 0})
    assert name_of(answer["executionArn"]) == core_names.execution_name("r7-retry", "c1", 9)
    finish(answer)
    assert json.loads(describe(server, answer["executionArn"])["output"])["outcome"] == "applied"


def test_concurrent_submissions_of_a_failed_change_start_one_new_attempt(server):
    # GIVEN a change whose first attempt failed
    from changeflow_core import submissions

    stack = server.stack
    sfn, dynamodb = stack.client("stepfunctions"), stack.client("dynamodb")
    machine, table = stack.outputs["ChangeStateMachineArn"], stack.outputs["ChangeTableName"]
    attempts_table = stack.template.physical_name("AttemptsTable")
    request = {"entityId": "r7-race", "operation": "put", "changeId": "c1", "attributes": {}, "expectedVersion": 3}
    first, _ = submissions.submit(sfn, dynamodb, machine, "STANDARD", table, request, attempts_table)
    finish(first)
    release = threading.Event()

    def slow(function, event, invoke):
        if function.logical_id == "FetchLatestFunction":
            release.wait(10)
        return invoke()

    # WHEN four clients send it again at once, while the attempt they start is still running
    before, answers = executions(server), []
    with fault_hook(stack.lambdas, slow):
        threads = [threading.Thread(target=lambda: answers.append(submissions.submit(
            sfn, dynamodb, machine, "STANDARD", table, request, attempts_table))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        # THEN one second attempt started, and every client is answered that execution
        assert executions(server) == before + 1
        assert {(answer["executionArn"], n) for answer, n in answers} == {
            (first["executionArn"].replace(core_names.execution_name("r7-race", "c1"),
                                           core_names.execution_name("r7-race", "c1", 2)), 2)}
        release.set()
    finish(answers[0][0])


def test_a_retry_after_a_version_conflict_is_applied(api, server):
    status, first = post(api, {"entityId": "r2-conflict", "operation": "put", "changeId": "c1",
                               "attributes": {"v": 1}, "expectedVersion": 4})
    finish(first)
    assert describe(server, first["executionArn"])["error"] == "VersionConflict"
    status, again = post(api, {"entityId": "r2-conflict", "operation": "put", "changeId": "c1", "attributes": {"v": 1}})
    finish(again)
    assert json.loads(describe(server, again["executionArn"])["output"])["outcome"] == "applied"


def test_a_retry_after_a_lambda_outage_is_applied(api, server):
    def outage(function, event, invoke):
        if function.logical_id == "FetchLatestFunction":
            raise LambdaServiceError()
        return invoke()

    request = {"entityId": "r2-outage", "operation": "put", "changeId": "c1", "attributes": {"v": 1}}
    with fault_hook(server.stack.lambdas, outage):
        status, first = post(api, request)
        finish(first)
    assert describe(server, first["executionArn"])["status"] == "FAILED" and stored(server, "r2-outage") is None
    status, again = post(api, request)
    finish(again)
    assert stored(server, "r2-outage")["v"] == {"N": "1"}


def test_a_retry_after_success_answers_that_execution_and_its_outcome_and_starts_none(api, server):
    request = {"entityId": "r2-done", "operation": "put", "changeId": "c1", "attributes": {"v": 1}, "effectiveAt": T0}
    _, first = post(api, request)
    finish(first)
    status, again = post(api, request)
    assert status == 200 and again["executionArn"] == first["executionArn"]
    assert again["status"] == "SUCCEEDED" and again["outcome"] == "applied" and again["output"]["version"] == 1
    stale = {**request, "entityId": "r2-done", "changeId": "c0", "effectiveAt": T0 - 1}
    _, older = post(api, stale)
    finish(older)
    assert post(api, stale)[1]["outcome"] == "stale"  # "its outcome": not "duplicate"


def test_a_retry_while_the_first_runs_answers_that_execution_even_with_another_body(api, server):
    release = threading.Event()

    def slow(function, event, invoke):
        if function.logical_id == "FetchLatestFunction":
            release.wait(10)
        return invoke()

    request = {"entityId": "r2-running", "operation": "put", "changeId": "c1", "attributes": {"v": 1}}
    # On Lambda each function has its own processes; the in-process dispatch makes invocations take turns
    # (one Powertools metric set per process), which would hold the front function behind the slow step.
    lambdas = server.stack.lambdas
    lambdas.invoke_lock, shared = contextlib.nullcontext(), lambdas.invoke_lock
    with fault_hook(lambdas, slow):
        _, first = post(api, request)
        _, same = post(api, request)
        _, other = post(api, {**request, "attributes": {"v": 2}})
        release.set()
        finish(first)
    lambdas.invoke_lock = shared
    assert first["executionArn"] == same["executionArn"] == other["executionArn"]
    assert other["status"] == "RUNNING"


def test_the_front_function_may_call_what_it_calls_in_either_workflow_type(api, server):
    """STANDARD calls StartExecution and DescribeExecution, and after a failure GetItem and UpdateItem on
    the attempts table; EXPRESS StartExecution and GetItem (tests/test_submit_express.py); the policy is
    their union, on this machine and these tables only."""
    from changeflow.local.template import Template

    template = Template(ROOT / "template.yaml")
    statements = template.function_properties("SubmitChangeFunction")["Policies"][0]["Statement"]
    assert {a for s in statements for a in s["Action"]} == {
        "states:StartExecution", "states:DescribeExecution", "dynamodb:GetItem", "dynamodb:UpdateItem"}
    assert {s["Resource"] for s in statements} == {
        server.stack.outputs["ChangeStateMachineArn"],
        server.stack.outputs["ChangeStateMachineArn"].replace(":stateMachine:", ":execution:") + ":*",
        template.arn("ChangeTable"), template.arn("AttemptsTable")}
    attempts_actions = {a for s in statements if s["Resource"] == template.arn("AttemptsTable") for a in s["Action"]}
    assert attempts_actions == {"dynamodb:GetItem", "dynamodb:UpdateItem"}
    request = {"entityId": "r2-policy", "operation": "put", "changeId": "c1", "attributes": {}, "expectedVersion": 1}
    front = server.stack.function("SubmitChangeFunction")
    front.api_calls.clear()
    _, first = post(api, request)
    finish(first)
    post(api, {**request, "expectedVersion": 0})  # a retry: DescribeExecution of the first (failed), a claim
    calls = {f"{service}:{op}:{(params or {}).get('TableName', '')}" for service, op, params, _ in front.api_calls}
    attempts_table = template.physical_name("AttemptsTable")
    assert calls == {"stepfunctions:StartExecution:", "stepfunctions:DescribeExecution:",
                     f"dynamodb:GetItem:{attempts_table}", f"dynamodb:UpdateItem:{attempts_table}"}


# --- item 5: the maximum request size -----------------------------------------------------------------------

def sized(size):
    """A request that StartExecution would receive as ``size`` bytes (validation.request_size: the input
    that carries its text), for every changeId of one character."""
    request = {"entityId": "r5-big", "operation": "put", "changeId": "c1", "attributes": {"s": ""}}
    request["attributes"]["s"] = "x" * (size - request_size(request))
    assert request_size(request) == size
    return request


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_bodies_over_the_maximum_request_size_are_refused_before_anything_starts(api, server, extra):
    request = sized(MAX_REQUEST_BYTES + extra)
    request["changeId"] = f"c{extra + 1}"
    before = len(server.stack.client("stepfunctions").list_executions(
        stateMachineArn=server.stack.outputs["ChangeStateMachineArn"])["executions"])
    status, answer = post(api, request)
    after = len(server.stack.client("stepfunctions").list_executions(
        stateMachineArn=server.stack.outputs["ChangeStateMachineArn"])["executions"])
    if extra <= 0:
        assert status == 200 and answer["status"] == "RUNNING" and after == before + 1
        finish(answer)
    else:
        assert status == 413 and str(MAX_REQUEST_BYTES) in answer["message"] and after == before


# --- item 8 and issue 10: API Gateway's own answers ---------------------------------------------------------

@pytest.mark.parametrize("method,path", [
    ("GET", "/entities"), ("DELETE", "/entities/x"), ("PUT", "/changes"), ("POST", "/changes/"),
    ("GET", "/entities/x/"), ("GET", ""), ("GET", "/"), ("GET", "/entities//versions"), ("PATCH", "/nothing/here"),
])
def test_unknown_routes_and_methods_get_api_gateways_missing_authentication_token(api, method, path):
    status, headers, body = http(method, f"{api}{path}", "{}" if method in ("PUT", "POST", "PATCH") else None)
    assert (status, json.loads(body)) == (403, {"message": "Missing Authentication Token"})
    assert headers["Content-Type"] == "application/json"


def test_a_change_id_with_a_trailing_newline_is_refused_and_starts_nothing(api, server):
    status, answer = post(api, {"entityId": "r8-nl", "operation": "put", "changeId": "ab\n", "attributes": {}})
    assert (status, answer) == (400, {"message": "Invalid request body"})
    assert stored(server, "r8-nl") is None


def test_the_change_id_pattern_means_the_same_in_python_and_ecmascript():
    samples = ["ab", "ab\n", "a\nb", "\nab", "", "a" * 64, "a" * 65, "a.b-c_d", "ab\r", "ab\u2028", "ü"]
    python = [re.search(CHANGE_ID_PATTERN, s) is not None for s in samples]
    assert python == [True, False, False, False, False, True, False, True, False, False, False]
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = f"const p = new RegExp({json.dumps(CHANGE_ID_PATTERN)}); " \
             f"console.log(JSON.stringify({json.dumps(samples)}.map(s => p.test(s))))"
    assert json.loads(subprocess.run([node, "-e", script], capture_output=True, text=True, check=True).stdout) == python


def test_the_template_uses_that_pattern():
    from changeflow.local.template import Template

    body = Template(ROOT / "template.yaml").resources["ChangeApi"]["Properties"]["DefinitionBody"]
    assert body["definitions"]["ChangeRequest"]["properties"]["changeId"]["pattern"] == CHANGE_ID_PATTERN
    assert "$" not in CHANGE_ID_PATTERN


def test_a_body_that_is_not_utf8_gets_a_json_400(api, server):
    status, headers, body = http("POST", f"{api}/changes", b'{"entityId": "r8-\xff", "operation": "put"}')
    assert status == 400 and json.loads(body) == {"message": "Invalid request body"}


def test_a_body_over_api_gateways_10_mb_quota_is_413(api, server):
    [rest] = server.routes
    assert rest.max_payload == 10 * 1024 * 1024
    status, _, body = http("POST", f"{api}/changes", b" " * (rest.max_payload + 1))
    assert (status, json.loads(body)) == (413, {"message": "Request Too Long"})


def test_an_integration_past_the_29_second_timeout_is_504(api, server):
    [rest] = server.routes
    assert rest.integration_timeout == 29.0
    release = threading.Event()

    def slow(function, event, invoke):
        if function.logical_id == "SubmitChangeFunction":
            release.wait(10)
        return invoke()

    rest.integration_timeout = 0.3  # the same rule with a shorter clock
    try:
        with fault_hook(server.stack.lambdas, slow):
            status, _, body = http("POST", f"{api}/changes", json.dumps(
                {"entityId": "r10-slow", "operation": "put", "changeId": "c1", "attributes": {}}))
            release.set()
    finally:
        rest.integration_timeout = 29.0
    assert (status, json.loads(body)) == (504, {"message": "Endpoint request timed out"})
    # the front function runs on after the 504 (as on AWS): let it finish here, or its StartExecution lands
    # in whichever test runs next (under load it did, in a test that asserts nothing was started)
    front = server.stack.function("SubmitChangeFunction")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
            op == "StartExecution" and "r10-slow" in json.dumps(params, default=str)
            for _, op, params, _ in list(front.api_calls)):
        time.sleep(0.01)


@pytest.mark.parametrize("code,status,http_status", [
    ("ThrottlingException", 429, 400), ("ExecutionLimitExceeded", 503, 400),
    ("ServiceUnavailable", 503, 503), ("StateMachineDoesNotExist", 500, 400)])
def test_step_functions_errors_answer_retry_later_or_a_server_error(api, server, code, status, http_status):
    front = server.stack.function("SubmitChangeFunction")
    server.stack.lambdas.load(front)
    sfn = front.module.sfn

    def refuse(**kwargs):
        from botocore.awsrequest import AWSResponse
        from moto.core.botocore_stubber import MockRawResponse

        parsed = {"Error": {"Code": code, "Message": f"{code} happened"},
                  "ResponseMetadata": {"HTTPStatusCode": http_status, "HTTPHeaders": {}, "RetryAttempts": 0}}
        return AWSResponse("https://states.embedded/", http_status, {}, MockRawResponse(b"")), parsed

    sfn.meta.events.register_first("before-call.sfn.StartExecution", refuse, unique_id="test-refuse")
    try:
        answer_status, headers, body = http("POST", f"{api}/changes", json.dumps(
            {"entityId": "r10-busy", "operation": "put", "changeId": code, "attributes": {}}))
    finally:
        sfn.meta.events.unregister("before-call.sfn.StartExecution", unique_id="test-refuse")
    message = json.loads(body)["message"]
    assert answer_status == status and code in message and "$" not in message and "#set" not in message
    if status in (429, 503):
        assert headers["Retry-After"] == "1"


def test_the_translated_template_has_one_stage_and_string_gateway_status_codes():
    from changeflow.local.cfn import transform

    for stage in ("v1", "Stage"):
        resources = transform(ROOT / "template.yaml", {"ApiStageName": stage})["Resources"]
        stages = [r for r in resources.values() if r["Type"] == "AWS::ApiGateway::Stage"]
        assert [s["Properties"]["StageName"] for s in stages] == [{"Ref": "ApiStageName"}]
        # without OpenApiVersion SAM gives the Deployment StageName "Stage": a second, unconfigured stage
        # (which also collides with ApiStageName=Stage at deploy time)
        [deployment] = [r for r in resources.values() if r["Type"] == "AWS::ApiGateway::Deployment"]
        assert "StageName" not in deployment["Properties"]
        [api] = [r for r in resources.values() if r["Type"] == "AWS::ApiGateway::RestApi"]
        for response in api["Properties"]["Body"]["x-amazon-apigateway-gateway-responses"].values():
            assert isinstance(response["statusCode"], str)


# --- the execution input: numbers as sent, and bodies the front function refuses itself -------------------

def test_numbers_reach_the_execution_input_digit_for_digit(api, server):
    body = ('{"entityId": "r3-digits", "operation": "put", "changeId": "c1", "attributes": '
            '{"a": 0.12345678901234567890123456789012345678, "b": 12345678901234567890.123456789012345678, '
            '"c": 9.9999999999999999999999999999999999999E+125, "d": -0.0, "e": 1e-130}}')
    status, _, answer = http("POST", f"{api}/changes", body)
    arn = json.loads(answer)["executionArn"]
    finish({"executionArn": arn})
    sent = describe(server, arn)["input"]
    for literal in ("0.12345678901234567890123456789012345678", "12345678901234567890.123456789012345678",
                    "9.9999999999999999999999999999999999999E+125", "-0.0", "1e-130"):  # each exactly as sent
        assert literal in sent, (literal, sent)


def front_event(body: bytes | str, base64_encoded: bool = False) -> dict:
    import base64

    from conftest import load_event

    event = load_event("functions/submit_change.json")
    if base64_encoded:
        event.update(body=base64.b64encode(body).decode("ascii"), isBase64Encoded=True)
    else:
        event["body"] = body
    return event


@pytest.mark.parametrize("body,base64_encoded", [
    (b'{"entityId": "r8-\xff\xfe", "operation": "put", "changeId": "c1"}', True),  # not UTF-8
    ('{"entityId": "r8-nan", "operation": "put", "changeId": "c1", "attributes": {"n": NaN}}', False),
    ('{"entityId": "r8-inf", "operation": "put", "changeId": "c1", "attributes": {"n": -Infinity}}', False),
    ('{"entityId": "r8-\\ud800", "operation": "put", "changeId": "c1", "attributes": {}}', False),  # lone surrogate
    ('{"entityId": "r8-nl", "operation": "put", "changeId": "ab\\n", "attributes": {}}', False),
    ('["not", "an", "object"]', False),
    ("[" * 100_000, False),
])
def test_the_front_function_refuses_what_no_model_should_pass_with_a_json_400(server, body, base64_encoded):
    front = server.stack.function("SubmitChangeFunction")
    before = front.api_calls.copy()
    payload, failed = server.stack.lambdas.invoke(front, front_event(body, base64_encoded))
    assert not failed and payload["statusCode"] == 400, payload
    assert json.loads(payload["body"])["message"].startswith("Invalid request body")
    assert list(front.api_calls) == list(before)  # nothing started


def test_the_events_file_is_a_change_the_front_function_starts(server):
    front = server.stack.function("SubmitChangeFunction")
    payload, failed = server.stack.lambdas.invoke(front, front_event(load_body := json.dumps(
        {"entityId": "r2-event", "operation": "put", "changeId": "evt-1", "attributes": {"a": 1}})))
    assert not failed and payload["statusCode"] == 200 and json.loads(payload["body"])["status"] == "RUNNING"
    finish(json.loads(payload["body"]))
    carried = json.loads(describe(server, json.loads(payload["body"])["executionArn"])["input"])
    assert json.loads(carried["request"]) == json.loads(load_body)  # the request's text, as every entry point sends it
