"""The entry points and the read side over real HTTP on 127.0.0.1 against `changeflow serve`'s server
(started and stopped by the tests): POST /changes (the template's own request model and its front
function; tests/test_submit.py has the rest), the read routes (the real read Lambda), and EventBridge PutEvents routed per the template's
rule; with a plain HTTP client and with boto3 pointed at the endpoint."""

from __future__ import annotations

import json
import time

import boto3
import pytest

from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
from changeflow.cli import main
from changeflow.local.server import EmbeddedServer
from changeflow_core.names import event_execution_name, execution_name
from conftest import EVENTS, http_exchange

pytestmark = pytest.mark.enable_socket
T0 = 1_767_225_600_000


def http(method, url, body=None, content_type="application/json"):
    status, _, raw = http_exchange(method, url, body, content_type, timeout=30)
    return status, json.loads(raw or b"null")


@pytest.fixture
def api(server):
    return f"{server.url}/v1"


@pytest.fixture
def aws(server):
    def client(service):
        return boto3.client(service, endpoint_url=server.url, region_name="us-east-1")
    return client


def post_change(api, request):
    status, body = http("POST", f"{api}/changes", json.dumps(request))
    if status == 200 and "executionArn" in body:
        assert wait_for_termination(body["executionArn"], 30)
    return status, body


def executions(aws, server):
    return aws("stepfunctions").list_executions(stateMachineArn=server.stack.outputs["ChangeStateMachineArn"])["executions"]


def test_post_changes_starts_an_execution_named_after_entity_and_change(api, aws, server):
    status, body = post_change(api, {"entityId": "doc#1", "operation": "put", "changeId": "chg-1", "attributes": {"a": 1}})
    assert status == 200 and body["executionArn"].endswith(":" + execution_name("doc#1", "chg-1"))
    description = aws("stepfunctions").describe_execution(executionArn=body["executionArn"])
    assert json.loads(description["output"])["outcome"] == "applied"


def test_execution_names_stay_valid_for_long_and_odd_entity_ids(api):
    entity = "Tenant#ACME|User#" + "ü" * 200 + " <x>"
    status, body = post_change(api, {"entityId": entity, "operation": "put", "changeId": "c-1", "attributes": {}})
    name = body["executionArn"].rsplit(":", 1)[1]
    assert status == 200 and len(name) <= 80 and "--c-1--" in name
    assert all(ch in "-_" or (ch.isascii() and ch.isalnum()) for ch in name)


def test_quotes_and_unicode_in_the_body_pass_intact(api):
    attributes = {"q": "it's \"quoted\" \\ back/slash", "u": "Zürich — 東京 😀", "nl": "a\nb\tc"}
    post_change(api, {"entityId": "doc#2", "operation": "put", "changeId": "chg-2", "attributes": attributes})
    status, latest = http("GET", f"{api}/entities/doc%232")
    assert status == 200 and latest["attributes"] == attributes


@pytest.mark.parametrize("body", [
    "{not json",
    json.dumps({"entityId": "e", "operation": "put", "attributes": {}}),  # no changeId
    json.dumps({"entityId": "e", "operation": "upsert", "changeId": "c"}),
    json.dumps({"entityId": "", "operation": "put", "changeId": "c"}),
    json.dumps({"entityId": "e", "operation": "put", "changeId": "has space"}),
    json.dumps({"entityId": "e", "operation": "put", "changeId": "c", "extra": 1}),
    json.dumps({"entityId": "e", "operation": "rollback", "changeId": "c", "toVersion": "1"}),
    json.dumps(["not", "an", "object"]),
])
def test_malformed_bodies_are_400_and_start_nothing(api, aws, server, body):
    status, answer = http("POST", f"{api}/changes", body)
    assert status == 400 and answer == {"message": "Invalid request body"}
    assert executions(aws, server) == []


def test_a_body_that_is_not_json_content_is_415(api, aws, server):
    status, _ = http("POST", f"{api}/changes", "entityId=e", content_type="application/x-www-form-urlencoded")
    assert status == 415 and executions(aws, server) == []


def test_the_same_change_id_twice_starts_one_execution_and_the_retry_gets_its_outcome(api, aws, server):
    request = {"entityId": "doc#3", "operation": "put", "changeId": "chg-3", "attributes": {"v": 1}}
    first = post_change(api, request)
    status, again = post_change(api, request)  # a client retry after the first finished
    assert (status, again["executionArn"], again["status"]) == (200, first[1]["executionArn"], "SUCCEEDED")
    assert again["outcome"] == "applied"
    assert len(executions(aws, server)) == 1
    status, page = http("GET", f"{api}/entities/doc%233/versions")
    assert [v["version"] for v in page["items"]] == [1]


def test_read_latest_and_404_for_a_tombstone_or_nothing(api):
    post_change(api, {"entityId": "doc#5", "operation": "put", "changeId": "a", "attributes": {"v": 1}, "effectiveAt": T0})
    status, latest = http("GET", f"{api}/entities/doc%235")
    assert status == 200 and latest["version"] == 1 and latest["attributes"] == {"v": 1}
    post_change(api, {"entityId": "doc#5", "operation": "delete", "changeId": "b", "effectiveAt": T0 + 1})
    status, body = http("GET", f"{api}/entities/doc%235")
    assert status == 404 and "expiresAt" not in json.dumps(body) and "attributes" not in json.dumps(body)
    # the 404 says what happened (issue 13): deleted at version 2, on the delete's effective time (T0 + 1 ms)
    assert body["message"] == "entity 'doc#5' was deleted at version 2 on 2026-01-01T00:00:00.001Z"
    assert http("GET", f"{api}/entities/never")[0] == 404


def test_versions_newest_first_paginated_to_the_end(api):
    for i in range(7):
        post_change(api, {"entityId": "doc#6", "operation": "put", "changeId": f"c{i}", "attributes": {"i": i},
                          "effectiveAt": T0 + i})
    seen, cursor, pages = [], None, 0
    while True:
        query = "?limit=3" + (f"&cursor={cursor}" if cursor else "")
        status, page = http("GET", f"{api}/entities/doc%236/versions{query}")
        assert status == 200 and len(page["items"]) <= 3
        seen += [v["version"] for v in page["items"]]
        pages += 1
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert seen == [7, 6, 5, 4, 3, 2, 1] and pages == 3
    assert http("GET", f"{api}/entities/doc%236/versions?cursor=garbage")[0] == 400
    assert http("GET", f"{api}/entities/doc%236/versions?limit=0")[0] == 400


def test_one_version_and_the_execution_behind_it(api, aws):
    _, started = post_change(api, {"entityId": "doc#7", "operation": "put", "changeId": "c1", "attributes": {"v": 1}})
    status, version = http("GET", f"{api}/entities/doc%237/versions/1")
    assert status == 200 and version["attributes"] == {"v": 1}
    status, behind = http("GET", f"{api}/entities/doc%237/versions/1/execution")
    assert status == 200 and behind["executionArn"] == started["executionArn"]
    history = aws("stepfunctions").get_execution_history(executionArn=behind["executionArn"])["events"]
    assert history[0]["type"] == "ExecutionStarted"
    assert http("GET", f"{api}/entities/doc%237/versions/2")[0] == 404
    assert http("GET", f"{api}/entities/doc%237/versions/x")[0] == 400


def test_expired_versions_are_filtered_from_reads():
    with EmbeddedServer(port=0, time_scale=0.001, parameters={"HistoryRetentionVersions": "1"}) as server:
        api = f"{server.url}/v1"
        for i in range(3):
            post_change(api, {"entityId": "doc#8", "operation": "put", "changeId": f"c{i}", "attributes": {"i": i},
                              "effectiveAt": T0 + i})
        time.sleep(1.1)  # the expiry of versions 1 and 2 is "now" (retention days 0)
        status, page = http("GET", f"{api}/entities/doc%238/versions")
        assert [v["version"] for v in page["items"]] == [3]
        assert http("GET", f"{api}/entities/doc%238/versions/1")[0] == 404


def started_executions(aws, server, count: int = 1, timeout: float = 30.0) -> list[dict]:
    """The executions the rule's function starts (Lambda invokes it asynchronously): once ``count`` exist."""
    deadline = time.monotonic() + timeout
    while len(found := executions(aws, server)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_put_events_matching_the_rule_starts_the_workflow_with_the_detail(aws, server):
    entries = json.loads((EVENTS / "eventbridge" / "put-events.json").read_text())
    answer = aws("events").put_events(Entries=entries)
    assert answer["FailedEntryCount"] == 0
    [started] = started_executions(aws, server)
    assert started["name"] == event_execution_name(answer["Entries"][0]["EventId"])  # a redelivery finds it
    assert wait_for_termination(started["executionArn"], 30)
    description = aws("stepfunctions").describe_execution(executionArn=started["executionArn"])
    # the rule's InputTransformer (the detail, and who sent it), sealed by the rule's function (issue 33)
    sent = json.loads(description["input"])
    assert sent["request"] == json.loads(entries[0]["Detail"]) and sent["v"] == 2 and len(sent["seal"]) == 43
    assert sent["principal"]["via"] == "events" and sent["principal"]["event"]["source"] == entries[0]["Source"]
    assert json.loads(description["output"])["outcome"] == "applied"


def test_an_event_that_does_not_match_the_rule_starts_none(aws, server):
    answer = aws("events").put_events(Entries=[
        {"Source": "someone.else", "DetailType": "ChangeRequested", "EventBusName": "changeflow-changes",
         "Detail": json.dumps({"entityId": "x"})},
        {"Source": "changeflow.client", "DetailType": "Other", "EventBusName": "changeflow-changes",
         "Detail": json.dumps({"entityId": "x"})}])
    # another source is refused by the bus's policy (ChangeBusOnlyThisSource); another detail type matches no rule
    assert [e.get("ErrorCode") for e in answer["Entries"]] == ["NotAuthorizedForSourceException", None]
    assert executions(aws, server) == []


def test_an_event_that_cannot_start_an_execution_goes_to_the_dead_letter_queue(aws, server):
    machine = server.stack.outputs["ChangeStateMachineArn"]
    aws("stepfunctions").delete_state_machine(stateMachineArn=machine)
    entries = json.loads((EVENTS / "eventbridge" / "put-events.json").read_text())
    aws("events").put_events(Entries=entries)
    queue = server.stack.outputs["ChangeEventsDeadLetterQueueUrl"].rsplit("/", 1)[1]
    sqs = aws("sqs")
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    # the rule's function cannot start it: Lambda tries it three times, then sends its invocation record
    # (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html)
    deadline, messages = time.monotonic() + 30, []
    while not messages and time.monotonic() < deadline:
        messages = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=0).get("Messages", [])
        time.sleep(0.05)
    record = json.loads(messages[0]["Body"])
    assert record["requestContext"]["condition"] == "RetriesExhausted" and record["requestContext"]["approximateInvokeCount"] == 3
    assert record["requestPayload"]["request"]["changeId"] == "evt-0001"
    assert record["responsePayload"]["errorType"] == "StateMachineDoesNotExist"
    assert record["requestContext"]["functionArn"].startswith(server.stack.function("ReceiveChangeEventFunction").arn)


def test_submit_through_each_entry_point(server, capsys):
    for via, change in (("api", "api-put-0001"), ("events", None)):
        path = EVENTS / ("api/post-change.json" if via == "api" else "workflow/put.json")
        assert main(["submit", str(path), "--via", via, "--json", "--endpoint-url", server.url]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["status"] == "SUCCEEDED" and result["output"]["outcome"] == "applied"
        if change:
            assert result["output"]["changeId"] == change


def test_the_read_function_answers_its_events_payload_in_process(server):
    # events/functions/read_api.json is what `sam local invoke ReadApiFunction -e ...` feeds it
    function = server.stack.function("ReadApiFunction")
    event = json.loads((EVENTS / "functions" / "read_api.json").read_text())
    payload, failed = server.stack.lambdas.invoke(function, event)
    assert not failed and payload["statusCode"] == 200 and json.loads(payload["body"]) == {"items": [], "nextCursor": None}


def test_submit_via_events_reports_the_new_execution_of_a_redelivered_change(server, aws):
    from changeflow.client import Changeflow

    cf = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=server.url)
    request = {"entityId": "doc#9", "operation": "put", "changeId": "evt-9", "effectiveAt": T0, "attributes": {"v": 1}}
    first = cf.submit_via_events(request, timeout=30)
    again = cf.submit_via_events(request, timeout=30)  # EventBridge delivers at least once
    assert first.arn != again.arn
    assert (first.output["outcome"], again.output["outcome"]) == ("applied", "duplicate")
