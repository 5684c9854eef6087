"""Who made each change, as AWS authenticated it (issue 21): every version records ``principal`` (what AWS
established: the API's SigV4 signer, the event's account and source and the rule) beside ``actor`` (the
client's claim), through every entry point, sealed in the hash chain. Written as an attacker: claim another
actor, forge a principal in the body, in an event's detail and in a direct StartExecution input; resend a
change after v0 has forgotten its id (issue 26.7)."""

from __future__ import annotations

import json
import time

import pytest

from changeflow.audit.verify import verify
from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
from changeflow_core import model, principal
from changeflow_core.names import execution_name
from conftest import INVOKE_API, load_event

T0 = 1_767_225_600_000
ALICE = "arn:aws:iam::123456789012:user/alice"
REQUEST_ID = load_event("functions/submit_change.json")["requestContext"]["requestId"]  # API Gateway's request id
ROLE_SESSION = "arn:aws:sts::123456789012:assumed-role/deployer/ci-run-7"


def api_event(body: dict, user_arn: str | None = ALICE, caller: str = "AIDAALICE", **context) -> dict:
    """A REST proxy event as API Gateway (AWS_IAM) delivers it to the front function."""
    event = load_event("functions/submit_change.json")
    event["body"] = json.dumps(body)
    identity = {"sourceIp": "203.0.113.10", "accountId": "123456789012", "caller": caller, "user": caller,
                "userArn": user_arn, "accessKey": "AKIAALICE"}
    event["requestContext"].update(identity=identity, requestTimeEpoch=int(time.time() * 1000), **context)
    return event


def post(stack, event: dict) -> dict:
    payload, failed = stack.lambdas.invoke(stack.function("SubmitChangeFunction"), event)
    assert not failed, payload
    answer = json.loads(payload["body"])
    if "executionArn" in answer and answer.get("status") == "RUNNING":
        assert wait_for_termination(answer["executionArn"], 30)
    return {**answer, "httpStatus": payload["statusCode"]}


def versions(cf, entity: str) -> list[dict]:
    return cf.entity(entity)["versions"]


def put(entity: str, change: str, **extra) -> dict:
    return {"entityId": entity, "operation": "put", "changeId": change, "attributes": {"n": 1}, **extra}


# --- every entry point records who AWS authenticated --------------------------------------------------------
def test_the_api_records_the_signer_as_principal_and_the_actor_as_a_claim(stack, cf):
    # GIVEN alice signs a request that claims to act for the CFO
    answer = post(stack, api_event(put("p#1", "c1", actor="cfo@example.com")))
    assert answer["httpStatus"] == 200
    # THEN the version records alice as the principal, and the CFO only as the claim
    (version,) = versions(cf, "p#1")
    assert version["principal"] == {"via": "api", "arn": ALICE, "accountId": "123456789012", "caller": "AIDAALICE",
                                    "requestId": REQUEST_ID}  # API Gateway's id: its access log names the signer too
    assert version["actor"] == "cfo@example.com"
    assert verify(cf, "p#1").ok


def test_an_assumed_role_is_recorded_as_its_session(stack, cf):
    post(stack, api_event(put("p#2", "c1"), user_arn=ROLE_SESSION, caller="AROADEPLOYER:ci-run-7"))
    assert versions(cf, "p#2")[0]["principal"]["arn"] == ROLE_SESSION


def test_an_authorizer_principal_wins_over_the_identity(stack, cf):
    post(stack, api_event(put("p#3", "c1"), authorizer={"principalId": "user-42"}))
    assert versions(cf, "p#3")[0]["principal"] == {"via": "api", "authorizer": "lambda", "id": "user-42",
                                                   "requestId": REQUEST_ID}
    post(stack, api_event(put("p#3", "c2"), authorizer={"claims": {"sub": "abc-123", "iss": "https://idp"}}))
    assert versions(cf, "p#3")[1]["principal"] == {"via": "api", "authorizer": "cognito", "id": "abc-123",
                                                   "issuer": "https://idp", "requestId": REQUEST_ID}


def test_a_principal_in_the_request_body_is_refused_by_the_api(stack, cf):
    forged = put("p#4", "c1", principal={"via": "api", "arn": "arn:aws:iam::123456789012:user/cfo"})
    answer = post(stack, api_event(forged))
    # the front function validates as the fetch step does (issue 27.7): a 400 naming the field, nothing started
    assert answer["httpStatus"] == 400 and answer["field"] == "principal", answer
    assert "executionArn" not in answer
    assert cf.sfn.list_executions(stateMachineArn=cf.state_machine_arn)["executions"] == []
    assert versions(cf, "p#4") == []


def test_the_event_bus_records_account_source_and_rule(stack, cf):
    execution = cf.submit_via_events(put("p#5", "c1", actor="cfo@example.com"), timeout=30)
    assert execution.status == "SUCCEEDED"
    (version,) = versions(cf, "p#5")
    rule = stack.client("events").list_rules(EventBusName=stack.outputs["ChangeBusName"])["Rules"][0]["Arn"]
    assert version["principal"]["via"] == "events"
    assert version["principal"]["account"] == "123456789012"
    assert version["principal"]["source"] == stack.outputs["ChangeEventSource"]
    assert version["principal"]["rule"] == rule
    assert version["actor"] == "cfo@example.com"


@pytest.mark.parametrize("detail", [
    put("p#6", "c1", principal={"via": "api", "arn": "arn:aws:iam::123456789012:user/cfo"}),
    {"request": json.dumps(put("p#6", "c1")), "principal": {"via": "api", "arn": "arn:aws:iam::1:user/cfo"}},
])
def test_a_principal_forged_in_an_event_detail_is_refused_and_nothing_is_written(stack, cf, detail):
    execution = cf.submit_via_events(json.dumps(detail), timeout=30)
    assert execution.status == "FAILED" and execution.error == "ValidationError"
    assert versions(cf, "p#6") == []


def test_a_direct_start_records_that_its_caller_is_not_known(cf):
    cf.submit(put("p#7", "c1", actor="ana"))
    assert versions(cf, "p#7")[0]["principal"] == {"via": "stepfunctions"}


@pytest.mark.parametrize("execution_input", [
    {"request": json.dumps(put("p#8", "c1"))},  # the input before issue 21: no envelope
    put("p#8", "c1"),  # a bare change request
    {"request": json.dumps(put("p#8", "c1")), "principal": {"via": "stepfunctions", "arn": ALICE}},
    {"request": json.dumps(put("p#8", "c1")), "principal": {"via": "root"}},
    {"request": json.dumps(put("p#8", "c1")), "principal": {"via": "events", "rule": "r", "event": {}}},  # unsealed
    {"request": json.dumps(put("p#8", "c1")), "principal": {"via": "stepfunctions"}, "actorArn": ALICE},
])
def test_a_start_execution_input_without_an_entry_points_envelope_is_refused_by_name(cf, execution_input):
    arn = cf.sfn.start_execution(stateMachineArn=cf.state_machine_arn, name="forged",
                                 input=json.dumps(execution_input))["executionArn"]
    execution = cf.wait(arn, 30)
    assert execution.status == "FAILED" and execution.error == "ValidationError"
    message = json.loads(execution.cause)["errorMessage"]
    assert message.split(":")[0] in ("principal", "principal.via", "principal.arn", "seal", "actorArn"), message
    assert versions(cf, "p#8") == []
    rejected = [e for e in cf.history(arn) if e["type"] == "TaskStateExited"]
    assert all("Write the new latest version" not in e.get("stateExitedEventDetails", {}).get("name", "")
               for e in rejected)


def test_only_the_entry_points_roles_are_granted_start_execution():
    # GIVEN the template: which policies grant states:StartExecution (tests/test_trust.py tries the others)
    from changeflow.local.template import Template
    from conftest import ROOT

    template = Template(ROOT / "template.yaml")
    granted = set()
    for logical_id, spec in template.resources.items():
        for policy in spec.get("Properties", {}).get("Policies", []) or []:
            for statement in policy.get("Statement", []) if isinstance(policy, dict) else []:
                actions = statement.get("Action", [])
                if statement.get("Effect") == "Allow" and "states:StartExecution" in (
                        actions if isinstance(actions, list) else [actions]):
                    granted.add(logical_id)
    # THEN only the two entry points hold it; no rule starts executions itself (it cannot seal)
    assert granted == {"SubmitChangeFunction", "ReceiveChangeEventFunction"}
    assert not [e for e in template.resources["ChangeStateMachine"]["Properties"].get("Events", {}).values()]


def test_a_rewritten_principal_breaks_the_chain(cf):
    cf.submit(put("p#9", "c1"))
    cf.dynamodb.update_item(TableName=cf.history_table, Key={"pk": {"S": "p#9"}, "sk": {"S": model.history_sk(1)}},
                            UpdateExpression="SET principal = :p",
                            ExpressionAttributeValues={":p": {"M": {"via": {"S": "api"}, "arn": {"S": ALICE}}}})
    assert not verify(cf, "p#9").ok


def test_principal_is_described_for_people():
    assert principal.describe({"via": "api", "arn": ALICE}) == ALICE
    assert principal.describe({"via": "events", "account": "1", "source": "crm"}) == "events:1/crm"
    assert "StartExecution" in principal.describe({"via": "stepfunctions"})


# --- a resend after v0 forgot the change id never reverts newer data (issue 26.7) -------------------------------
def forget_first_change(cf, entity: str) -> None:
    """The first change, then RECENT_CHANGE_IDS newer ones: v0 no longer remembers the first id."""
    for n in range(model.RECENT_CHANGE_IDS):
        cf.submit({"entityId": entity, "operation": "put", "changeId": f"later-{n}", "attributes": {"n": n + 2}})
    assert "c1" not in cf.dynamodb.get_item(TableName=cf.table, Key={"pk": {"S": entity}, "sk": {"S": "v0"}},
                                            ConsistentRead=True)["Item"][model.CHANGE_IDS]["M"]


def latest_n(cf, entity: str) -> str:
    return cf.entity(entity)["latest"]["attributes"]["n"]


def test_a_change_redelivered_through_the_cli_after_the_window_is_stale_not_a_revert(cf):
    cf.submit({"entityId": "r#1", "operation": "put", "changeId": "c1", "attributes": {"n": 1}})
    forget_first_change(cf, "r#1")
    again = cf.submit({"entityId": "r#1", "operation": "put", "changeId": "c1", "attributes": {"n": 1}})
    assert again.status == "SUCCEEDED" and again.output["outcome"] == "stale"
    assert latest_n(cf, "r#1") == model.RECENT_CHANGE_IDS + 1
    assert len(versions(cf, "r#1")) == model.RECENT_CHANGE_IDS + 1


@pytest.mark.parametrize("workflow", ["STANDARD", "EXPRESS"])
def test_an_event_redelivered_after_the_window_is_no_revert(make_stack, workflow):
    """EventBridge delivers at least once. The rule's function names the execution after the event's id
    (issue 33): on a Standard workflow a redelivery starts nothing (the name exists); on an Express one, which
    does not dedupe names, it runs again with the first ingestion time, so it is stale."""
    from moto.events.models import events_backends

    from changeflow.client import Changeflow
    from conftest import LOGGED

    stack = make_stack(WorkflowType=workflow, **(LOGGED if workflow == "EXPRESS" else {}))
    cf = Changeflow.for_embedded(stack)
    delivered = []
    backend = events_backends["123456789012"][stack.region]
    bus = backend.event_buses[stack.outputs["ChangeBusName"]]
    (rule,) = bus.rules.values()
    original = rule.send_to_targets

    def keep(event, *args, **kwargs):
        delivered.append(event)
        return original(event, *args, **kwargs)

    rule.send_to_targets = keep
    try:
        first = cf.submit_via_events({"entityId": "r#2", "operation": "put", "changeId": "c1", "attributes": {"n": 1}},
                                     timeout=30)
    finally:
        rule.send_to_targets = original
    assert first.status == "SUCCEEDED"
    forget_first_change(cf, "r#2")
    # WHEN the very same event is delivered again, after v0 has forgotten its id
    before = {e["executionArn"] for e in cf.executions(limit=100)}
    rule.send_to_targets(delivered[0])
    stack.lambdas.drain(30)  # the rule's function runs asynchronously
    started = {e["executionArn"] for e in cf.executions(limit=100)} - before
    if workflow == "STANDARD":  # THEN nothing starts: the first delivery's execution is the answer
        assert started == set()
        assert any('"message":"redelivered"' in line for line in stack.function("ReceiveChangeEventFunction").logs)
    else:  # THEN it is stale: it keeps the time EventBridge first received it
        deadline = time.monotonic() + 30
        while not started and time.monotonic() < deadline:  # listed from its log, which its first state writes:
            time.sleep(0.1)  # under load that can come after the rule's function has returned (make test twice)
            started = {e["executionArn"] for e in cf.executions(limit=100)} - before
        (arn,) = started
        assert cf.wait(arn, 30).output["outcome"] == "stale"
    assert latest_n(cf, "r#2") == model.RECENT_CHANGE_IDS + 1  # and reverts nothing


def test_the_api_keeps_the_first_receipt_across_attempts(stack, cf, monkeypatch):
    # GIVEN an attempt that failed (a Lambda outage), then the same change sent again much later
    event = api_event(put("r#3", "c1"))
    first_receipt = event["requestContext"]["requestTimeEpoch"] - 60_000
    event["requestContext"]["requestTimeEpoch"] = first_receipt
    sfn = cf.sfn
    name = execution_name("r#3", "c1", 1)
    failed = sfn.start_execution(stateMachineArn=cf.state_machine_arn, name=name, input=json.dumps(
        {"request": json.dumps(put("r#3", "c1", operation="upsert")), "principal": {"via": "api", "arn": ALICE},
         "receivedAt": first_receipt}))
    assert cf.wait(failed["executionArn"], 30).status == "FAILED"
    later = api_event(put("r#3", "c1"))
    # WHEN it is sent again THEN the new attempt's default effectiveAt is the first receipt
    answer = post(stack, later)
    assert answer["executionArn"].endswith(":" + execution_name("r#3", "c1", 2))
    assert versions(cf, "r#3")[0]["effectiveAt"] == first_receipt


# --- authorization (optional, off by default) ------------------------------------------------------------------
POLICY = [{"principals": [ALICE], "entities": ["doc#"], "operations": ["put", "patch", "delete", "rollback", "read"]},
          {"principals": ["events:123456789012/changeflow.client"], "entities": ["evt#"], "operations": ["put"]}]


@pytest.fixture
def guarded(make_stack):
    from changeflow.client import Changeflow

    stack = make_stack(AuthorizationPolicy=json.dumps(POLICY))
    return stack, Changeflow.for_embedded(stack)


def read(stack, entity: str, user_arn: str) -> tuple[int, dict]:
    event = load_event("functions/read_api.json")
    event.update(resource="/entities/{id}", path=f"/entities/{entity.replace('#', '%23')}",
                 pathParameters={"id": entity})
    event["requestContext"].update(resourcePath="/entities/{id}", identity={
        "userArn": user_arn, "accountId": "123456789012", "caller": "AIDA", "sourceIp": "203.0.113.10"})
    payload, failed = stack.lambdas.invoke(stack.function("ReadApiFunction"), event)
    assert not failed, payload
    return payload["statusCode"], json.loads(payload["body"])


def test_authorization_lets_the_policys_principals_change_and_read_their_entities(guarded):
    stack, cf = guarded
    assert post(stack, api_event(put("doc#1", "c1")))["httpStatus"] == 200
    assert len(versions(cf, "doc#1")) == 1
    assert read(stack, "doc#1", ALICE)[0] == 200
    assert cf.submit_via_events(put("evt#1", "c1"), timeout=30).status == "SUCCEEDED"
    assert len(versions(cf, "evt#1")) == 1


def test_authorization_refuses_the_api_with_403_and_starts_nothing(guarded):
    stack, cf = guarded
    answer = post(stack, api_event(put("other#1", "c1")))  # alice, outside her prefix
    assert answer["httpStatus"] == 403 and answer["message"].startswith("Forbidden: ")
    answer = post(stack, api_event(put("doc#2", "c1"), user_arn="arn:aws:iam::123456789012:user/bob"))
    assert answer["httpStatus"] == 403
    assert cf.sfn.list_executions(stateMachineArn=cf.state_machine_arn)["executions"] == []
    assert versions(cf, "other#1") == [] and versions(cf, "doc#2") == []


def test_authorization_fails_an_execution_forbidden_and_writes_nothing(guarded):
    stack, cf = guarded
    # the bus's principal may put evt#... only: a delete, or another entity, is Forbidden in the workflow
    refused = cf.submit_via_events(put("doc#3", "c1"), timeout=30)
    assert refused.status == "FAILED" and refused.error == "Forbidden"
    assert "events:123456789012/changeflow.client may not put entity 'doc#3'" in refused.cause
    assert versions(cf, "doc#3") == []
    # a direct StartExecution names no principal: no rule can allow it
    direct = cf.submit(put("doc#4", "c1"))
    assert direct.status == "FAILED" and direct.error == "Forbidden" and versions(cf, "doc#4") == []


def test_authorization_governs_the_read_routes(guarded):
    stack, cf = guarded
    post(stack, api_event(put("doc#5", "c1")))
    assert read(stack, "doc#5", "arn:aws:iam::123456789012:user/bob") == (403, {
        "statusCode": 403, "message": "arn:aws:iam::123456789012:user/bob may not read entity 'doc#5' under the "
                                      "stack's AuthorizationPolicy"})
    assert read(stack, "doc#5", ALICE)[0] == 200


def test_authorization_covers_the_chains_own_operations_too(guarded):
    # a principal allowed to put and read doc#... may not redact or adopt it unless a rule names those
    from changeflow_core import authorization

    stack, cf = guarded
    post(stack, api_event(put("doc#6", "c1")))
    for operation, extra in (("redact", {"redactVersion": 1, "reason": "erasure"}), ("adopt", {})):
        answer = post(stack, api_event({"entityId": "doc#6", "operation": operation, "changeId": f"c-{operation}",
                                        **extra}))
        assert answer["httpStatus"] == 403 and f"may not {operation} entity 'doc#6'" in answer["message"], answer
    assert len(versions(cf, "doc#6")) == 1
    granted = [{"principals": [ALICE], "entities": ["doc#"], "operations": ["redact"]}]
    assert authorization.parse(json.dumps(granted)) == granted  # an operator can grant them


def test_an_authorization_policy_that_does_not_parse_fails_closed():
    from changeflow_core import authorization

    assert authorization.parse("") is None
    for bad in ('{"principals": []}', '[{"principals": ["*"], "entities": [""]}]',
                '[{"principals": ["*"], "entities": [""], "operations": ["write"]}]'):
        with pytest.raises(ValueError):
            authorization.parse(bad)


def documented_policy() -> tuple[list[dict], list[tuple[str, bool, bool]]]:
    """docs/identity.md's example AuthorizationPolicy, and its table: (principal, example allows, ops-* allows)."""
    from conftest import ROOT

    page = (ROOT / "docs" / "identity.md").read_text()
    section = page[page.index("## Authorization"):]
    policy = json.loads(section[section.index("```json") + 7:section.index("```", section.index("```json") + 7)])
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`arn:"):
            rows.append((cells[0].split("`")[1], cells[1] == "allowed", cells[2] == "allowed"))
    return policy, rows


def test_the_documented_policy_admits_exactly_whom_its_table_says_pathed_users_too():
    from changeflow_core import authorization

    policy, rows = documented_policy()
    policy = authorization.parse(json.dumps(policy))
    name_prefix = [{"principals": ["arn:aws:iam::123456789012:user/ops-*"], "entities": [""], "operations": ["put"]}]
    assert len(rows) >= 5 and any("/ops-team/" in who for who, _, _ in rows)
    for who, example_allows, prefix_allows in rows:
        as_signed = {"via": "api", "arn": who}
        assert authorization.allowed(policy, as_signed, "doc#1", "put") is example_allows, who
        assert authorization.allowed(name_prefix, as_signed, "doc#1", "put") is prefix_allows, who
    # the user the issue names: path /ops-team/, not an ops user, refused by the documented policy
    assert not authorization.allowed(policy, {"via": "api", "arn": "arn:aws:iam::123456789012:user/ops-team/mallory"},
                                     "doc#1", "put")


@pytest.mark.enable_socket
def test_through_serve_the_documented_policy_refuses_a_user_whose_path_only_looks_like_ops():
    import boto3

    from changeflow.local.server import EmbeddedServer
    from conftest import http_exchange, let_executions_end, sigv4_headers

    policy, _ = documented_policy()
    with EmbeddedServer(port=0, time_scale=0.001, parameters={"AuthorizationPolicy": json.dumps(policy)}) as running:
        iam = boto3.client("iam", endpoint_url=running.url, region_name="us-east-1")
        keys = {}
        for name, path in (("alice", "/ops/"), ("mallory", "/ops-team/")):
            iam.create_user(UserName=name, Path=path)
            iam.put_user_policy(UserName=name, PolicyName="invoke", PolicyDocument=INVOKE_API)  # AWS_IAM asks it
            key = iam.create_access_key(UserName=name)["AccessKey"]
            keys[name] = {"key": key["AccessKeyId"], "secret": key["SecretAccessKey"], "token": None}
        url = f"{running.url}/v1/changes"
        answers = {}
        for name in keys:
            body = json.dumps({"entityId": f"doc#{name}", "operation": "put", "changeId": "c1",
                               "attributes": {"by": name}}).encode()
            headers = sigv4_headers("POST", url, body, {"Content-Type": "application/json"}, **keys[name])
            import urllib.error
            import urllib.request

            try:
                with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST", headers=headers),
                                            timeout=30) as response:
                    answers[name] = (response.status, json.loads(response.read()))
            except urllib.error.HTTPError as exc:
                answers[name] = (exc.code, json.loads(exc.read()))
        assert answers["alice"][0] == 200, answers
        assert answers["mallory"][0] == 403 and answers["mallory"][1]["message"].startswith(
            "Forbidden: arn:aws:iam::123456789012:user/ops-team/mallory may not put"), answers
        assert wait_for_termination(answers["alice"][1]["executionArn"], 30)
        status, _, raw = http_exchange("GET", f"{running.url}/v1/entities/doc%23alice")
        assert status == 403  # the default signer is not in the policy: it may not read either
        sfn = boto3.client("stepfunctions", endpoint_url=running.url, region_name="us-east-1")
        names = [e["name"] for e in sfn.list_executions(
            stateMachineArn=running.stack.outputs["ChangeStateMachineArn"])["executions"]]
        assert len(names) == 1 and "mallory" not in " ".join(names)
        let_executions_end(running.stack)


def test_principal_patterns_are_matched_as_iams_arnlike_and_a_vague_one_is_refused():
    from changeflow_core import authorization

    def allows(pattern: str, who: str) -> bool:
        rule = [{"principals": [pattern], "entities": [""], "operations": ["put"]}]
        return authorization.allowed(authorization.parse(json.dumps(rule)), {"via": "api", "arn": who}, "e", "put")

    alice = "arn:aws:iam::123456789012:user/alice"
    assert allows("arn:aws:iam::*:user/*", "arn:aws:iam::123456789012:user/a/b/c")  # * crosses /
    assert not allows("arn:aws:iam::*:user/[a-z]*", alice)  # [ is a character, not fnmatch's set
    assert allows("arn:aws:iam::123456789012:user/?lice", alice) and not allows("arn:aws:iam::*:user/Alice", alice)
    assert not allows("arn:aws:iam::*:*", "arn:aws:sts::123456789012:assumed-role/writer/s")  # iam is not sts
    assert allows("arn:*", alice) and allows("arn:aws:*:*:*:*", alice)
    events = [{"principals": ["arn:*"], "entities": [""], "operations": ["put"]}]
    assert not authorization.allowed(events, {"via": "events", "account": "1", "source": "arn:x"}, "e", "put")
    assert not authorization.allowed(events, {"via": "stepfunctions"}, "e", "put")
    for vague in ("*", "arn:aws:*:user/alice", "arn:aws:iam::*", "?rn:aws:iam::*:user/alice", "user/alice"):
        with pytest.raises(ValueError, match="AuthorizationPolicy principal"):
            authorization.parse(json.dumps([{"principals": [vague], "entities": [""], "operations": ["put"]}]))


def test_history_shows_the_principal_beside_the_claimed_actor(stack, cf):
    from changeflow import report

    answer = post(stack, api_event(put("h#1", "c1", actor="cfo@example.com")))
    shown = report.history(list(cf.history(answer["executionArn"])))
    assert shown.splitlines()[0] == f"principal: {ALICE}   actor (claimed): cfo@example.com"
