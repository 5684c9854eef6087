"""A principal nobody in the account can forge unseen (issue 33), tried as an attacker would, through the calls
they would make on AWS, on the embedded stack with IAM evaluated (moto_patches.iam): an identity with
``states:*``, with ``lambda:InvokeFunction``, with ``iam:PassRole`` and a rule of its own, an administrator
(``*``). Each either gets nothing recorded, or gets a version that ``changeflow verify --principals`` refuses
by name; the one way past both is changing the stack's own key policies, which the tamper alarm watches.
docs/identity.md ("Who can still forge") is the account of this file."""

from __future__ import annotations

import json
import time
import uuid

import boto3
import pytest
from botocore.exceptions import ClientError

from changeflow.cli import main
from changeflow.client import Changeflow
from changeflow_core import principal, seal
from conftest import load_event, sigv4_headers

ACCOUNT = "123456789012"
ALICE = f"arn:aws:iam::{ACCOUNT}:user/alice"
WRITERS = ("UpdateLatestFunction", "DeleteTombstoneFunction", "PutHistoryFunction", "TagTtlFunction")


def identity(make, name: str, actions: list[str] | str, resource: str = "*", endpoint: str | None = None):
    """An IAM user with one inline policy and an access key: a boto3 Session signing as it."""
    iam = make("iam")
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="granted", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": resource}]}))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    session = boto3.Session(aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"],
                            region_name="us-east-1")
    return (lambda service: session.client(service, endpoint_url=endpoint)), key


def put(entity: str, change: str, **extra) -> dict:
    return {"entityId": entity, "operation": "put", "changeId": change, "attributes": {"n": 1}, **extra}


def items(cf) -> list[dict]:
    return cf.dynamodb.scan(TableName=cf.table)["Items"]


def denied(call) -> str:
    with pytest.raises(ClientError) as raised:
        call()
    assert raised.value.response["Error"]["Code"] in ("AccessDeniedException", "AccessDenied"), raised.value.response
    return raised.value.response["Error"]["Message"]


def verify_principals(capsys, entity: str, url: str | None = None) -> tuple[int, str]:
    status = main(["verify", entity, "--principals", *(["--endpoint-url", url] if url else []), "--json"])
    return status, capsys.readouterr().out


def alice_signs(server, cf, change: dict):
    """alice, an IAM user, signs ``change`` through serve's API (SigV4): the execution, once ended."""
    from changeflow.checks.reliability import post_json

    iam = cf.make("iam")
    iam.create_user(UserName="alice")
    iam.put_user_policy(UserName="alice", PolicyName="invoke", PolicyDocument=json.dumps({  # AWS_IAM asks for it
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "execute-api:Invoke", "Resource": "*"}]}))
    key = iam.create_access_key(UserName="alice")["AccessKey"]
    url = f"{server.url}/{server.routes[0].stage}/changes"
    body = json.dumps(change).encode()
    status, answer = post_json(url, body, sigv4_headers("POST", url, body, {"Content-Type": "application/json"},
                                                        key["AccessKeyId"], key["SecretAccessKey"], token=None))
    assert status == 200, answer
    return cf.wait(answer["executionArn"], 30)


@pytest.fixture
def on_stack(stack, monkeypatch):
    """The CLI's remote commands pointed at the embedded stack (as tests/test_cli.py does)."""
    from changeflow.client import targets

    monkeypatch.setattr(targets, "client_for", lambda args: Changeflow.for_embedded(stack))
    return stack


# --- states:* --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("forged", [
    {"principal": {"via": "api", "arn": ALICE, "accountId": ACCOUNT, "caller": "AIDAALICE"}},
    {"principal": {"via": "events", "rule": "arn:aws:events:us-east-1:123456789012:rule/changeflow-changes/r",
                   "event": {"account": "999999999999", "source": "changeflow.client", "id": "e", "region": "us-east-1"}}},
    {"v": 2, "principal": {"via": "api", "arn": ALICE}, "name": "forged", "seal": "A" * seal.MAC_CHARS},
], ids=["api envelope", "events envelope", "a made-up seal"])
def test_a_user_with_states_star_cannot_start_an_execution_under_someone_elses_principal(stack, cf, forged):
    # GIVEN mallory, whose own policy grants states:* (Step Functions has no resource policy to stop her)
    make, _ = identity(stack.client, "mallory", "states:*")
    # WHEN she starts the stack's state machine with a hand-built envelope naming alice
    arn = make("stepfunctions").start_execution(stateMachineArn=cf.state_machine_arn, name="forged", input=json.dumps(
        {"request": json.dumps(put("t#1", "c1")), **forged}))["executionArn"]
    # THEN Step Functions starts it (IAM allows her), and the fetch step refuses it by name: nothing written
    execution = cf.wait(arn, 30)
    assert execution.status == "FAILED" and execution.error == "ValidationError"
    assert json.loads(execution.cause)["errorMessage"].startswith("seal: "), execution.cause
    assert items(cf) == []


def test_what_states_star_can_record_is_a_direct_start_whose_caller_is_unknown(stack, cf):
    make, _ = identity(stack.client, "mallory", "states:*")
    arn = make("stepfunctions").start_execution(stateMachineArn=cf.state_machine_arn, name="direct",
                                                input=principal.direct_input(put("t#2", "c1", actor="alice")))["executionArn"]
    assert cf.wait(arn, 30).status == "SUCCEEDED"
    (version,) = cf.entity("t#2")["versions"]
    assert version["principal"] == {"via": "stepfunctions"} and version["actor"] == "alice"  # a claim, shown so


def test_a_sealed_input_replayed_is_good_for_its_own_execution_only(stack, cf):
    # GIVEN a change through the API, and mallory, who may read executions and start them
    from test_principal import api_event, post

    answer = post(stack, api_event(put("t#3", "c1")))
    sealed = cf.sfn.describe_execution(executionArn=answer["executionArn"])["input"]
    make, _ = identity(stack.client, "mallory", "states:*")
    sfn = make("stepfunctions")
    # WHEN she starts it again under another name THEN the fetch step refuses it (the seal names its execution)
    arn = sfn.start_execution(stateMachineArn=cf.state_machine_arn, name="replayed", input=sealed)["executionArn"]
    execution = cf.wait(arn, 30)
    assert execution.error == "ValidationError" and json.loads(execution.cause)["errorMessage"].startswith("name: ")
    # and under its own name, Step Functions refuses it (a Standard workflow's names are unique for 90 days)
    name = answer["executionArn"].split(":")[-1]
    with pytest.raises(sfn.exceptions.ExecutionAlreadyExists):
        sfn.start_execution(stateMachineArn=cf.state_machine_arn, name=name, input=sealed.replace('"n":1', '"n":2'))
    assert len(cf.entity("t#3")["versions"]) == 1


# --- the key ----------------------------------------------------------------------------------------------
def test_no_identity_of_the_account_reads_or_replaces_the_seal_key(stack):
    # GIVEN an administrator whose policy allows everything, and the default credentials (the account's admin)
    admin, _ = identity(stack.client, "admin", "*")
    secret = stack.template.physical["SealKeySecret"]["Ref"]
    key = stack.template.physical["SealKey"]["Arn"]
    for make in (admin, stack.client):
        sm, kms = make("secretsmanager"), make("kms")
        # THEN the secret's policy denies reading and writing it, whatever the identity's own policy says
        assert "explicit deny in a resource-based policy" in denied(lambda: sm.get_secret_value(SecretId=secret))
        denied(lambda: sm.put_secret_value(SecretId=secret, SecretString="x" * 64))
        denied(lambda: sm.update_secret(SecretId=secret, SecretString="x" * 64))
        # and the key's policy lets nobody use the key outside Secrets Manager, nor grant it
        assert "no resource-based policy allows" in denied(lambda: kms.encrypt(KeyId=key, Plaintext=b"k"))
        denied(lambda: kms.create_grant(KeyId=key, GranteePrincipal=f"arn:aws:iam::{ACCOUNT}:user/admin",
                                        Operations=["Decrypt"]))


def test_reading_the_key_takes_changing_both_policies_and_each_change_is_alarmed(stack):
    # GIVEN an administrator who sets out to read the key
    admin, _ = identity(stack.client, "admin", "*")
    sm, kms = admin("secretsmanager"), admin("kms")
    secret, key = stack.template.physical["SealKeySecret"]["Ref"], stack.template.physical["SealKey"]["Arn"]
    # WHEN she removes the secret's policy THEN the key's policy still stops her: it lets only the functions decrypt
    sm.delete_resource_policy(SecretId=secret)
    assert "kms:Decrypt" in denied(lambda: sm.get_secret_value(SecretId=secret))
    # WHEN she also rewrites the key's policy THEN she can read it: the stack's own keys and policies changed
    policy = json.loads(kms.get_key_policy(KeyId=key, PolicyName="default")["Policy"])
    policy["Statement"].append({"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/admin"},
                                "Action": "kms:Decrypt", "Resource": "*"})
    kms.put_key_policy(KeyId=key, PolicyName="default", Policy=json.dumps(policy))
    assert len(sm.get_secret_value(SecretId=secret)["SecretString"]) == 64
    # AND each of those calls, as CloudTrail hands it to EventBridge, is what the tamper rule matches (moto's
    # matcher of rule patterns; its TestEventPattern answers no Result); the stack's own deploy is not
    from moto.events.models import EventPattern

    rule = stack.client("events").describe_rule(Name=stack.template.physical_name("SealTamperedRule"))
    pattern = EventPattern.load(rule["EventPattern"])
    for source, name in (("secretsmanager", "DeleteResourcePolicy"), ("kms", "PutKeyPolicy"),
                         ("lambda", "UpdateFunctionCode20150331v2"), ("iam", "PutRolePolicy")):
        for agent, matched in (("aws-cli/2.15", True), ("cloudformation.amazonaws.com", False)):
            trail = {"id": str(uuid.uuid4()), "detail-type": "AWS API Call via CloudTrail", "source": f"aws.{source}",
                     "account": ACCOUNT, "time": "2026-01-01T00:00:00Z", "region": "us-east-1", "resources": [],
                     "detail": {"eventSource": f"{source}.amazonaws.com", "eventName": name, "userAgent": agent}}
            assert pattern.matches_event(trail) is matched, (name, agent)


# --- lambda:InvokeFunction -------------------------------------------------------------------------------
@pytest.mark.parametrize("writer", WRITERS)
def test_a_direct_invoke_of_a_writer_writes_nothing(stack, cf, writer):
    # GIVEN mallory, who may invoke any function, and a payload that looks like the step's
    make, _ = identity(stack.client, "mallory", "lambda:InvokeFunction")
    payload = load_event(f"functions/{stack.function(writer).code_dir.name}.json")  # proven with another key
    lam = make("lambda")
    for event in (payload, {k: v for k, v in payload.items() if k != "proof"}):
        for qualifier in ({}, {"Qualifier": "1"}):  # $LATEST, and the version the state machine names
            answer = lam.invoke(FunctionName=stack.function(writer).name, Payload=json.dumps(event), **qualifier)
            # THEN the function refuses it by name, and nothing is written
            assert answer.get("FunctionError") == "Unhandled"
            assert json.loads(answer["Payload"].read())["errorType"] == "Unproven"
    assert items(cf) == []


def test_a_writer_refuses_a_real_proof_with_another_change_or_another_latest(stack, cf):
    # GIVEN the payload the state machine gave the v0 writer in a real execution (its history has it), and the
    # entity moved on since (what a replay meets: the payload's latest is no longer v0)
    execution = cf.submit(put("t#4", "c1"))
    scheduled = next(p for p in (json.loads(e["taskScheduledEventDetails"]["parameters"]) for e in cf.history(
        execution.arn) if e["type"] == "TaskScheduled") if "UpdateLatest" in p["FunctionName"])
    cf.submit(put("t#4", "c2"))
    now = cf.entity("t#4")["latest"]
    make, _ = identity(stack.client, "mallory", "lambda:InvokeFunction")
    real = scheduled["Payload"]
    # WHEN mallory replays it with another principal, another entity, or the latest v0 in place of the one its
    # proof was made for (which would let the replayed change pass the writer's condition at version 3)
    current = {**(real["latest"] or {}), "version": now["version"], "effectiveAt": now["effectiveAt"]}
    for event in ({**real, "change": {**real["change"], "principal": {"via": "api", "arn": ALICE}}},
                  {**real, "change": {**real["change"], "entityId": "t#5"}},
                  {**real, "latest": current}):
        answer = make("lambda").invoke(FunctionName=scheduled["FunctionName"], Payload=json.dumps(event))
        # THEN each is refused by name and nothing is written
        assert json.loads(answer["Payload"].read())["errorType"] == "Unproven"
    assert [v["changeId"] for v in cf.entity("t#4")["versions"]] == ["c1", "c2"]
    assert {json.dumps(v["principal"]) for v in cf.entity("t#4")["versions"]} == {json.dumps({"via": "stepfunctions"})}
    assert cf.entity("t#5")["versions"] == []


def test_a_writer_handed_what_its_proof_does_not_cover_ends_the_execution_unproven_not_unknown(stack, cf):
    # GIVEN an entity at version 1, and a v0 writer whose payload is changed between the steps (what a seal key
    # rotated under a running execution, or anything altering the state, looks like to the writer)
    from changeflow.local.lambdas import fault_hook

    cf.submit(put("t#6", "c1"))
    writes = []

    def altered(function, event, run):
        if function.logical_id == "UpdateLatestFunction":
            writes.append(event["change"]["changeId"])
            event["content"] = {**(event.get("content") or {}), "injected": {"S": "x"}}
        return run()

    with fault_hook(stack.lambdas, altered):
        ended = cf.submit(put("t#6", "c2"))
    # THEN the writer refused it once (no back-off, no second try) and the execution says so by name: its
    # outcome is known, nothing was written, never OutcomeUnknown ("may have landed")
    assert (ended.status, ended.error) == ("FAILED", "Unproven") and writes == ["c2"], (ended.error, ended.cause)
    assert [v["changeId"] for v in cf.entity("t#6")["versions"]] == ["c1"]
    assert cf.entity("t#6")["latest"]["version"] == 1


def test_a_direct_invoke_of_the_fetch_step_with_a_forged_envelope_is_refused(stack, cf):
    make, _ = identity(stack.client, "mallory", "lambda:InvokeFunction")
    event = load_event("functions/fetch_latest.json")  # sealed with another key than this stack's
    answer = make("lambda").invoke(FunctionName=stack.function("FetchLatestFunction").name, Payload=json.dumps(event))
    error = json.loads(answer["Payload"].read())
    assert error["errorType"] == "ValidationError" and error["errorMessage"].startswith("seal: ")


def test_lambda_refuses_an_invoke_no_policy_allows(stack, cf):
    make, _ = identity(stack.client, "reader", "states:Describe*")
    message = denied(lambda: make("lambda").invoke(FunctionName=stack.function("UpdateLatestFunction").name,
                                                   Payload=b"{}"))
    assert "lambda:InvokeFunction" in message and "no identity-based policy allows" in message


def test_a_direct_invoke_of_the_front_function_is_refused_by_verify_principals(server, capsys):
    # GIVEN alice, who signs a change through the API, and mallory, who may invoke any function
    cf = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=server.url)
    assert alice_signs(server, cf, put("t#6", "c1")).status == "SUCCEEDED"
    genuine = cf.entity("t#6")["versions"][0]["principal"]
    make, _ = identity(cf.make, "mallory", "lambda:InvokeFunction", endpoint=server.url)
    # WHEN she invokes the front function herself, with a requestContext that names alice: a new request id,
    # then alice's own (read from the access log, which she may be able to read too)
    from test_principal import api_event

    for change, request_id in (("c2", str(uuid.uuid4())), ("c3", genuine["requestId"])):
        event = api_event(put("t#6", change), user_arn=genuine["arn"], caller=genuine["caller"],
                          requestId=request_id)
        answer = json.loads(json.loads(make("lambda").invoke(FunctionName=server.stack.function(
            "SubmitChangeFunction").name, Payload=json.dumps(event))["Payload"].read())["body"])
        cf.wait(answer["executionArn"], 30)
    # THEN the function, which cannot tell, records both under alice...
    versions = cf.entity("t#6")["versions"]
    assert [v["principal"]["arn"] for v in versions] == [genuine["arn"]] * 3
    # ...and verify --principals refuses both by name: API Gateway logged neither (alice's id is hers, once)
    status, out = verify_principals(capsys, "t#6", server.url)
    (report,) = json.loads(out)
    assert status == 1 and len(report["problems"]) == 2, report
    assert report["problems"][0].startswith("version 2: its principal") and "access log has no record" in report["problems"][0]
    assert report["problems"][1].startswith("version 3: request ") and "version 1 of 't#6' too" in report["problems"][1]


def test_a_direct_invoke_of_the_event_function_is_refused_by_verify_principals(on_stack, capsys):
    stack = on_stack
    cf = Changeflow.for_embedded(stack)
    # GIVEN a change put on the bus (journaled by EventBridge), and mallory, who may invoke any function
    assert cf.submit_via_events(put("t#7", "c1"), timeout=30).status == "SUCCEEDED"
    make, _ = identity(stack.client, "mallory", "lambda:InvokeFunction")
    # WHEN she invokes the rule's function with an event of her making, from a partner's account
    delivered = load_event("functions/receive_event.json")
    delivered["request"] = {"request": json.dumps(put("t#7", "c2"))}
    delivered["event"] = {**delivered["event"], "account": "999999999999", "id": str(uuid.uuid4())}
    delivered["receivedAt"] = time.strftime("%Y-%m-%dT%H:%M:%S.999Z", time.gmtime())
    started = json.loads(make("lambda").invoke(FunctionName=stack.function("ReceiveChangeEventFunction").name,
                                               Payload=json.dumps(delivered))["Payload"].read())
    assert cf.wait(started["executionArn"], 30).status == "SUCCEEDED"
    # THEN the version says the partner sent it, and verify --principals refuses it: EventBridge never saw it
    assert cf.entity("t#7")["versions"][1]["principal"]["account"] == "999999999999"
    status, out = verify_principals(capsys, "t#7")
    (report,) = json.loads(out)
    assert status == 1 and [p.split(":")[0] for p in report["problems"]] == ["version 2"], report
    assert "events journal has no record of its event" in report["problems"][0]


def test_a_journaled_event_replayed_with_other_content_is_refused_by_verify_principals(make_stack, capsys,
                                                                                      monkeypatch):
    # GIVEN an Express stack (execution names are not deduped) and an event on the bus whose change wrote no
    # version (stale: older than the entity), journaled by EventBridge
    from changeflow.client import targets

    stack = make_stack(WorkflowType="EXPRESS", StateMachineLogLevel="ALL", StateMachineIncludeExecutionData="true")
    cf = Changeflow.for_embedded(stack)
    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    assert cf.submit_via_events(put("t#8", "c0"), timeout=30).output["outcome"] == "applied"
    assert cf.submit_via_events(put("t#8", "c1", effectiveAt=1), timeout=30).output["outcome"] == "stale"
    journal = [json.loads(e["message"]) for e in stack.client("logs").filter_log_events(
        logGroupName=cf.outputs["ChangeEventsJournalLogGroupName"])["events"]]
    event = next(j for j in journal if '\\"c1\\"' in json.dumps(j["detail"]))
    # WHEN mallory, who may invoke any function, hands the event function that event with other content
    make, _ = identity(stack.client, "mallory", "lambda:InvokeFunction")
    delivered = load_event("functions/receive_event.json")
    delivered["request"] = {"request": json.dumps(put("t#8", "c1", attributes={"n": 666, "owner": "mallory"}))}
    delivered["event"] = {k: v for k, v in event.items() if k != "detail"}
    delivered["receivedAt"] = time.strftime("%Y-%m-%dT%H:%M:%S.999Z", time.gmtime())
    started = json.loads(make("lambda").invoke(FunctionName=stack.function("ReceiveChangeEventFunction").name,
                                               Payload=json.dumps(delivered))["Payload"].read())
    assert cf.wait(started["executionArn"], 30).output["outcome"] == "applied"
    # THEN the version records the event's principal, and verify --principals refuses it: EventBridge journaled
    # that event with another change
    assert [v["attributes"] for v in cf.entity("t#8")["versions"]] == [{"n": 1}, {"n": 666, "owner": "mallory"}]
    status, out = verify_principals(capsys, "t#8")
    (report,) = json.loads(out)
    assert status == 1 and len(report["problems"]) == 1, report
    assert report["problems"][0].startswith(f"version 2: event {event['id']} carried another change"), report


# --- iam:PassRole, a rule of one's own -------------------------------------------------------------------------
def test_a_rule_of_someone_elses_cannot_reach_the_event_function_or_use_the_stacks_roles(stack, cf):
    # GIVEN mallory, who may make rules and pass any role
    make, _ = identity(stack.client, "mallory", ["events:*", "iam:PassRole"])
    events = make("events")
    bus = stack.outputs["ChangeBusName"]
    forged = '{"request": <detail>, "event": {"account": "999999999999", "source": "changeflow.client", ' \
             '"id": "x", "region": "us-east-1"}, "rule": "r"}'
    receive = stack.function("ReceiveChangeEventFunction").arn
    events.put_rule(Name="mallorys", EventBusName=bus, EventPattern=json.dumps({"source": ["changeflow.client"]}))
    events.put_targets(Rule="mallorys", EventBusName=bus, Targets=[
        # the stack's event function: its policy lets events.amazonaws.com invoke it for the stack's rule only
        {"Id": "function", "Arn": receive, "InputTransformer": {"InputPathsMap": {"detail": "$.detail"},
                                                                "InputTemplate": forged}},
        # the state machine, with a stack role that may start it: it trusts Lambda, not EventBridge
        {"Id": "machine", "Arn": cf.state_machine_arn,
         "RoleArn": stack.access.role_arn("ReceiveChangeEventFunction")}])
    before = stack.function("ReceiveChangeEventFunction").invocations
    # WHEN a change comes on the bus THEN only the stack's rule starts it: one execution, one version
    assert cf.submit_via_events(put("t#8", "c1"), timeout=30).status == "SUCCEEDED"
    stack.lambdas.drain(10)
    assert stack.function("ReceiveChangeEventFunction").invocations == before + 1
    assert len(cf.executions()) == 1 and len(cf.entity("t#8")["versions"]) == 1


def test_a_rule_with_a_role_of_ones_own_gets_an_unsealed_envelope_refused(stack, cf):
    # GIVEN mallory, who may even make a role that EventBridge can assume and that may start the machine
    make, _ = identity(stack.client, "mallory", ["events:*", "iam:*"])
    iam = make("iam")
    iam.create_role(RoleName="mallorys", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}, "Action": "sts:AssumeRole"}]}))
    iam.put_role_policy(RoleName="mallorys", PolicyName="start", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "states:StartExecution", "Resource": "*"}]}))
    events = make("events")
    events.put_rule(Name="mallorys", EventPattern=json.dumps({"source": ["mallory"]}))
    events.put_targets(Rule="mallorys", Targets=[{
        "Id": "machine", "Arn": cf.state_machine_arn, "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/mallorys",
        "InputTransformer": {"InputPathsMap": {"detail": "$.detail"}, "InputTemplate":
                             '{"request": <detail>, "principal": {"via": "api", "arn": "' + ALICE + '"}}'}}])
    events.put_events(Entries=[{"Source": "mallory", "DetailType": "x", "Detail": json.dumps(put("t#9", "c1"))}])
    # THEN her rule starts an execution, and the fetch step refuses it by name
    (summary,) = cf.executions()
    execution = cf.wait(summary["executionArn"], 30)
    assert execution.error == "ValidationError" and json.loads(execution.cause)["errorMessage"].startswith("seal: ")
    assert items(cf) == []


def test_only_the_feeds_pipe_may_publish_the_feeds_source_and_it_does_as_its_role(stack, cf):
    # the bus's policy (ChangeBusFeedOnlyFromThePipe, issue 36): a VersionRecorded event with FeedSource is the
    # pipe's, which runs as FeedPipeRole (assumed by Pipes); anyone else's is refused, entry by entry
    make, _ = identity(stack.client, "mallory", "events:PutEvents")
    answer = make("events").put_events(Entries=[{
        "Source": stack.outputs["FeedEventSource"], "DetailType": "VersionRecorded",
        "EventBusName": stack.outputs["ChangeBusName"], "Detail": json.dumps({"entityId": "t#1", "version": 1})}])
    assert answer["Entries"][0]["ErrorCode"] == "NotAuthorizedForSourceException"
    from changeflow.local.moto_patches.pipes import runner

    cf.submit(put("t#feed", "c1"))
    pipe, deadline = f"{stack.template.stack_name}-FeedPipe", time.monotonic() + 30
    while runner.statistics(pipe)["events delivered"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.statistics(pipe)["events delivered"] == 1 and not runner.statistics(pipe)["role refused"]


def test_pass_role_is_asked_for_a_targets_role(stack, cf):
    make, _ = identity(stack.client, "mallory", "events:*")
    events = make("events")
    events.put_rule(Name="mallorys", EventPattern=json.dumps({"source": ["mallory"]}))
    message = denied(lambda: events.put_targets(Rule="mallorys", Targets=[{
        "Id": "m", "Arn": cf.state_machine_arn, "RoleArn": stack.access.role_arn("SubmitChangeFunction")}]))
    assert "iam:PassRole" in message


def test_a_stack_role_passed_to_a_function_of_someone_elses_is_refused_what_the_stack_does(stack, cf):
    """iam:PassRole and lambda:CreateFunction give a function of mallory's the front function's role; Lambda puts
    her function's ARN into its credentials (lambda:SourceFunctionArn), and the role's own denies refuse it."""
    from moto.sts.models import sts_backends

    from changeflow.local.moto_patches.iam import enforcement

    role = stack.access.role_arn("SubmitChangeFunction")

    def function_client(function_arn: str, service: str):  # the credentials Lambda gives that function
        session = sts_backends[ACCOUNT]["aws"].assume_role(region_name="us-east-1", role_session_name="f",
                                                            role_arn=role, policy="", duration=900, external_id="")
        enforcement.credential_context(session.access_key_id, **{"lambda:SourceFunctionArn": function_arn})
        return boto3.client(service, region_name="us-east-1", aws_access_key_id=session.access_key_id,
                            aws_secret_access_key=session.secret_access_key, aws_session_token=session.session_token)

    secret = stack.template.physical["SealKeySecret"]["Ref"]
    theirs = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:mallorys"
    message = denied(lambda: function_client(theirs, "secretsmanager").get_secret_value(SecretId=secret))
    assert "explicit deny in an identity-based policy" in message
    denied(lambda: function_client(theirs, "stepfunctions").start_execution(
        stateMachineArn=cf.state_machine_arn, input=principal.direct_input(put("t#10", "c1"))))
    # the test can fail: the same role in the stack's own function reads the key
    ours = function_client(stack.function("SubmitChangeFunction").arn, "secretsmanager")
    assert ours.get_secret_value(SecretId=secret)["SecretString"]


def test_genuine_changes_through_every_entry_point_pass_verify_principals(server, capsys):
    cf = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=server.url)
    alice_signs(server, cf, put("t#11", "c1"))
    cf.submit_via_events(put("t#11", "c2"), timeout=30)
    cf.submit(put("t#11", "c3"))
    time.sleep(0.1)
    status, out = verify_principals(capsys, "t#11", server.url)
    (report,) = json.loads(out)
    assert status == 0 and report["versions"] == [1, 2, 3], report


# --- the digests' roles (issue 35's function and schedule, under issue 33's IAM) ------------------------------
def role_client(stack, role_arn: str, service: str, function_arn: str | None = None):
    """A client signing with a session of ``role_arn`` (a function's, with Lambda's lambda:SourceFunctionArn)."""
    from moto.sts.models import sts_backends

    from changeflow.local.moto_patches.iam import enforcement

    session = sts_backends[ACCOUNT]["aws"].assume_role(region_name="us-east-1", role_session_name="s",
                                                        role_arn=role_arn, policy="", duration=900, external_id="")
    if function_arn:
        enforcement.credential_context(session.access_key_id, **{"lambda:SourceFunctionArn": function_arn})
    return boto3.client(service, region_name="us-east-1", aws_access_key_id=session.access_key_id,
                        aws_secret_access_key=session.secret_access_key, aws_session_token=session.session_token)


def test_the_digest_functions_role_reads_the_changes_and_puts_new_digests_and_nothing_else(stack, cf):
    digest = stack.function("DigestFunction").arn
    make = lambda service: role_client(stack, stack.access.role_arn("DigestFunction"), service, digest)  # noqa: E731
    dynamodb, s3 = make("dynamodb"), make("s3")
    bucket, prefix = stack.outputs["DigestLocation"][len("s3://"):].split("/", 1)
    # what it does: Query the changes index, list its digests, put a new one and read it back
    dynamodb.query(TableName=cf.table, IndexName="ChangesIndex", KeyConditionExpression="#s = :s",
                   ExpressionAttributeNames={"#s": "digestShard"}, ExpressionAttributeValues={":s": {"N": "0"}})
    s3.list_object_versions(Bucket=bucket, Prefix=prefix)
    version = s3.put_object(Bucket=bucket, Key=f"{prefix}probe.json", Body=b"{}")["VersionId"]
    s3.get_object(Bucket=bucket, Key=f"{prefix}probe.json", VersionId=version)
    # what it may not: write or read items, start a change, read the seal key, touch a digest's lock or delete one
    for call in (lambda: dynamodb.put_item(TableName=cf.table, Item={"pk": {"S": "t#d"}, "sk": {"S": "v0"}}),
                 lambda: dynamodb.get_item(TableName=cf.table, Key={"pk": {"S": "t#d"}, "sk": {"S": "v0"}}),
                 lambda: dynamodb.query(TableName=cf.table, KeyConditionExpression="pk = :e",
                                        ExpressionAttributeValues={":e": {"S": "t#d"}}),
                 lambda: make("stepfunctions").start_execution(stateMachineArn=cf.state_machine_arn, input="{}"),
                 lambda: make("secretsmanager").get_secret_value(SecretId=stack.template.physical["SealKeySecret"]["Ref"]),
                 lambda: s3.delete_object(Bucket=bucket, Key=f"{prefix}probe.json", VersionId=version),
                 lambda: s3.put_object_retention(Bucket=bucket, Key=f"{prefix}probe.json", VersionId=version,
                                                 Retention={"Mode": "GOVERNANCE", "RetainUntilDate": "2030-01-01"}),
                 lambda: s3.put_object(Bucket=bucket, Key="elsewhere/probe.json", Body=b"{}"),
                 lambda: s3.list_object_versions(Bucket=bucket)):
        denied(call)


def test_the_schedules_role_invokes_the_digest_function_only_and_only_for_the_scheduler(stack, cf):
    # GIVEN the role SAM makes for the digest's schedule (DigestFunctionDigestScheduleRole)
    role = stack.template.arn("DigestFunctionDigestScheduleRole")
    lambdas = role_client(stack, role, "lambda")
    # THEN it may invoke the digest function and nothing else: not the front function, not a writer
    for name in ("SubmitChangeFunction", "FetchLatestFunction", "UpdateLatestFunction"):
        denied(lambda: lambdas.invoke(FunctionName=stack.function(name).arn, Payload=b"{}"))
    denied(lambda: role_client(stack, role, "stepfunctions").start_execution(
        stateMachineArn=cf.state_machine_arn, input=principal.direct_input(put("t#s", "c1"))))
    # AND mallory, who may make schedules and pass that role, gets no run of the front function out of it
    from changeflow.local.moto_patches.scheduler.runs import Runs

    make, _ = identity(stack.client, "mallory", ["scheduler:*", "iam:PassRole"])
    submit = stack.function("SubmitChangeFunction")
    before = submit.invocations
    make("scheduler").create_schedule(
        Name="mallorys", ScheduleExpression="rate(1 minute)", FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": submit.arn, "RoleArn": role, "Input": json.dumps({"body": json.dumps(put("t#s", "c1"))})})
    fired = lambda: sum(arn.endswith("/mallorys") for arn, _ in Runs.fired)  # noqa: E731
    deadline = time.monotonic() + 20
    while fired() < 2 and time.monotonic() < deadline:  # one run is over when the next one fires
        time.sleep(0.05)
    assert fired() >= 2
    assert submit.invocations == before and items(cf) == []
    # without iam:PassRole she cannot name the role at all
    other, _ = identity(stack.client, "trudy", "scheduler:*")
    assert "iam:PassRole" in denied(lambda: other("scheduler").create_schedule(
        Name="trudys", ScheduleExpression="rate(1 minute)", FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": submit.arn, "RoleArn": role}))


# --- the API's AWS_IAM: the signer's policies, not only its signature --------------------------------------
def test_a_signer_whose_policy_denies_execute_api_invoke_is_refused_and_nothing_is_written(server):
    from changeflow.checks.reliability import post_json

    cf = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=server.url)
    iam = cf.make("iam")
    iam.create_user(UserName="dave")
    key = iam.create_access_key(UserName="dave")["AccessKey"]
    url = f"{server.url}/{server.routes[0].stage}/changes"

    def signs(change: dict) -> tuple[int, dict]:
        body = json.dumps(change).encode()
        return post_json(url, body, sigv4_headers("POST", url, body, {"Content-Type": "application/json"},
                                                  key["AccessKeyId"], key["SecretAccessKey"], token=None))

    def deny(method_arn: str) -> None:  # dave may invoke the API, but not this method
        iam.put_user_policy(UserName="dave", PolicyName="invoke", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "execute-api:Invoke", "Resource": "*"},
                                                   {"Effect": "Deny", "Action": "execute-api:Invoke",
                                                    "Resource": method_arn}]}))

    # a user no policy allows: refused (AWS_IAM asks for an allow of execute-api:Invoke, not only a signature)
    assert signs(put("t#iam", "c0"))[0] == 403
    # a deny of POST /changes on any API: 403, AccessDenied, no execution, nothing written
    deny("arn:aws:execute-api:*:*:*/*/POST/changes")
    status, answer = signs(put("t#iam", "c1"))
    assert status == 403 and "execute-api:Invoke" in answer["message"], answer
    assert cf.executions() == [] and items(cf) == []
    # the deny on another method only: the same signature gets through (the test can fail)
    deny("arn:aws:execute-api:*:*:*/*/GET/*")
    status, answer = signs(put("t#iam", "c1"))
    assert status == 200 and cf.wait(answer["executionArn"], 30).status == "SUCCEEDED"
