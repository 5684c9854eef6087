"""The deployable artefacts checked statically and by real validators: the ASL's placeholders and Retry
placement, least-privilege policies measured against the calls the handlers really make,
asl-validator (catches a Next to a missing state) and sam build (cfn-lint and sam validate --lint: in
tests/test_security.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from changeflow.local import cfn
from changeflow.local.template import Template
from conftest import ASL, ROOT, proven, stack_seal_key

T0 = 1_767_225_600_000
IDEMPOTENT_FUNCTIONS = {"FetchLatestFunction", "PutHistoryFunction"}  # a read; the idempotent history put and its tags


@pytest.fixture(scope="module")
def template():
    return Template(ROOT / "template.yaml")


@pytest.fixture(scope="module")
def definition():
    return json.loads(ASL.read_text())


def task_function(state):
    match = re.fullmatch(r"\$\{(\w+)Arn\}", state.get("Parameters", {}).get("FunctionName", ""))
    return match.group(1) if match else None


def test_every_placeholder_has_a_substitution_and_every_substitution_is_used(template):
    machine = template.resources["ChangeStateMachine"]["Properties"]
    placeholders = set(re.findall(r"\$\{(\w+)\}", ASL.read_text()))
    assert placeholders == set(machine["DefinitionSubstitutions"])
    assert (ROOT / machine["DefinitionUri"]).resolve() == ASL.resolve()


def test_only_idempotent_steps_carry_a_retry(definition):
    tasks = {name: s for name, s in definition["States"].items() if s["Type"] == "Task"}
    with_retry = {task_function(s) for s in tasks.values() if s.get("Retry")}
    assert with_retry == IDEMPOTENT_FUNCTIONS
    for name, state in tasks.items():
        if task_function(state) in ("UpdateLatestFunction", "DeleteTombstoneFunction"):
            assert "Retry" not in state, f"{name} must never be retried blindly"


def test_retries_back_off_with_jitter(definition):
    for state in definition["States"].values():
        for retrier in state.get("Retry", []):
            if retrier.get("MaxAttempts", 3) > 0:
                assert retrier["BackoffRate"] > 1 and retrier["JitterStrategy"] == "FULL" and retrier["MaxDelaySeconds"]


def test_failures_end_in_the_named_fail_states(definition):
    errors = {s["Error"] for s in definition["States"].values() if s["Type"] == "Fail"}
    assert {"ValidationError", "VersionConflict", "NotFound", "HistoryWriteFailed"} <= errors


def test_definition_uses_jsonpath_not_jsonata(definition):
    assert definition.get("QueryLanguage", "JSONPath") == "JSONPath"
    assert all(s.get("QueryLanguage", "JSONPath") == "JSONPath" for s in definition["States"].values())


def test_table_and_state_machine_settings(template):
    table = template.resources["ChangeTable"]["Properties"]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert {a["AttributeName"]: a["AttributeType"] for a in Template(ROOT / "template.yaml", overrides={
        "TimeIndexes": "false"}).resolve(table["AttributeDefinitions"])} == {
        "pk": "S", "sk": "S", "digestShard": "N", "recordedHour": "N"}  # the last two: the changes index
    assert {a["AttributeName"]: a["AttributeType"] for a in Template(ROOT / "template.yaml", overrides={
        "TimeIndexes": "true"}).resolve(table["AttributeDefinitions"])} == {
        "pk": "S", "sk": "S", "digestShard": "N", "recordedHour": "N",
        "priorEffective": "N", "priorRecorded": "N"}  # and the time indexes' keys
    # keys only, keyed by the hour: a v0 write in the hour of the one before it writes nothing to the index
    assert table["GlobalSecondaryIndexes"] == [{
        "IndexName": "ChangesIndex", "Projection": {"ProjectionType": "KEYS_ONLY"},
        "KeySchema": [{"AttributeName": "digestShard", "KeyType": "HASH"},
                      {"AttributeName": "recordedHour", "KeyType": "RANGE"}]}]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expiresAt", "Enabled": True}
    assert table["SSESpecification"]["SSEEnabled"] is True
    assert table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    machine = template.resources["ChangeStateMachine"]["Properties"]
    assert machine["Tracing"] == {"Enabled": True} and machine["Logging"]["Destinations"]
    for logical_id in template.of_type("AWS::Serverless::Function"):
        assert template.function_properties(logical_id)["Tracing"] == "Active"


@pytest.mark.parametrize("separate", ["false", "true"])
def test_the_time_indexes_are_chosen_when_the_tables_are_created(separate):
    # GIVEN the template: TimeIndexes has no default (an LSI can only be created with its table, so a stack
    # deployed before it must say false, and a new one chooses)
    spec = Template(ROOT / "template.yaml").body["Parameters"]["TimeIndexes"]
    assert "Default" not in spec and spec["AllowedValues"] == ["true", "false"]
    for choice in ("true", "false"):
        template = Template(ROOT / "template.yaml", overrides={"TimeIndexes": choice, "SeparateHistoryTable": separate})
        for logical_id, table in template.of_type("AWS::DynamoDB::Table").items():
            if logical_id == "AttemptsTable":
                continue
            props = template.resolve(table["Properties"])
            indexes = {i["IndexName"]: i for i in props.get("LocalSecondaryIndexes") or []}
            types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
            changes_index = {k["AttributeName"] for i in props.get("GlobalSecondaryIndexes") or [] for k in i["KeySchema"]}
            assert changes_index <= {"digestShard", "recordedHour"}  # the changes index's keys (issue 35), aside
            types = {name: kind for name, kind in types.items() if name not in changes_index}
            if choice == "false":
                assert not indexes and types == {"pk": "S", "sk": "S"}
                continue
            # THEN the table that holds history (and ChangeTable in either layout: switching SeparateHistoryTable
            # must not replace it) has one index per clock, on the key each history item records, keys only
            assert types == {"pk": "S", "sk": "S", "priorEffective": "N", "priorRecorded": "N"}
            assert {name: ([k["AttributeName"] for k in i["KeySchema"]], i["Projection"]) for name, i in
                    indexes.items()} == {
                "EffectiveIndex": (["pk", "priorEffective"], {"ProjectionType": "KEYS_ONLY"}),
                "RecordedIndex": (["pk", "priorRecorded"], {"ProjectionType": "KEYS_ONLY"})}
        # and the read function may query them (a table without them answers that the index does not exist)
        reads = template.resolve(template.function_properties("ReadApiFunction")["Policies"])
        resources = [r for policy in reads for st in policy["Statement"] if "dynamodb:Query" in st["Action"]
                     for r in st["Resource"]]
        history = template.physical_name("HistoryTable" if separate == "true" else "ChangeTable")
        assert {f"table/{history}/index/{index}" for index in ("EffectiveIndex", "RecordedIndex")} <= {
            r.split(":", 5)[5] for r in resources}, resources


def test_the_embedded_deploy_refuses_to_change_the_time_indexes_as_cloudformation_would_replace_the_tables():
    # LocalSecondaryIndexes: "Update requires: Replacement" (AWS::DynamoDB::Table): an empty new table
    from changeflow.local.embedded import _refuse_replacements

    made = lambda choice: Template(ROOT / "template.yaml", overrides={"TimeIndexes": choice})  # noqa: E731
    with pytest.raises(RuntimeError, match=r"ChangeTable\.LocalSecondaryIndexes changes, which replaces ChangeTable"):
        _refuse_replacements(made("true"), made("false"))
    _refuse_replacements(made("true"), made("true"))


def test_parameters_and_outputs(template):
    params = template.body["Parameters"]
    assert params["WorkflowType"]["Default"] == "STANDARD" and "EXPRESS" in params["WorkflowType"]["AllowedValues"]
    assert params["TombstoneTtlDays"]["Default"] == 7
    assert params["HistoryRetentionVersions"]["Default"] == 0 and params["HistoryRetentionDays"]["Default"] == 0
    assert params["Runtime"]["Default"] == "python3.13"
    assert {"ChangeStateMachineArn", "ChangeTableName"} <= set(template.body["Outputs"])


def _policy_actions(template, logical_id):
    actions = set()
    for policy in template.function_properties(logical_id).get("Policies", []):
        for statement in policy.get("Statement", []):
            listed = statement["Action"]
            actions.update([listed] if isinstance(listed, str) else listed)
    return actions


@pytest.mark.parametrize("separate", ["false", "true"])
def test_each_function_may_call_exactly_the_dynamodb_actions_it_calls(make_stack, separate):
    """Least privilege, measured: run every path and compare each function's policy with its calls."""
    from changeflow.client import Changeflow

    stack = make_stack(SeparateHistoryTable=separate, HistoryRetentionVersions="1")
    cf = Changeflow.for_embedded(stack)
    put = lambda at, change: {"entityId": "e", "operation": "put", "attributes": {"at": at}, "effectiveAt": at,  # noqa: E731
                              "changeId": change}
    cf.submit(put(T0, "a"))
    cf.submit(put(T0 + 1, "b"))
    cf.submit(put(T0 + 1, "b"))  # duplicate: its history item is there
    cf.dynamodb.delete_item(TableName=cf.history_table, Key={"pk": {"S": "e"}, "sk": {"S": "v#0000000002"}})
    repaired = cf.submit(put(T0 + 1, "b"))  # duplicate whose first delivery lost its history: repaired from v0
    assert repaired.output["outcome"] == "duplicate"
    assert [v["version"] for v in cf.entity("e")["versions"]] == [1, 2]
    # the history step's own repair (a redelivery's history put that has not run yet): from v0 too
    cf.dynamodb.delete_item(TableName=cf.history_table, Key={"pk": {"S": "e"}, "sk": {"S": "v#0000000002"}})
    history_event = json.loads((ROOT / "events" / "functions" / "put_history.json").read_text())
    history_event.update(change={**history_event["change"], "entityId": "e", "changeId": "b"}, latest=None,
                         content=None, written={"outcome": "duplicate", "version": 2, "recordedAt": None})
    history_event = proven(history_event, "put_history", stack_seal_key(stack))  # as the steps before it would
    assert stack.lambdas.invoke(stack.function("PutHistoryFunction"), history_event)[0]["history"] == "repaired"
    cf.submit({"entityId": "e", "operation": "rollback", "toVersion": 2, "effectiveAt": T0 + 2})
    cf.submit({"entityId": "e", "operation": "delete", "effectiveAt": T0 + 3})
    # the retired tag step (issue 37.2), as an execution of an earlier release still invokes it
    retired = {"entityId": "e", "operation": "delete", "version": 4, "changeId": "d", "execution": {"name": "n"}}
    retired = proven(retired, "tag_ttl", stack_seal_key(stack))  # the proof it asks for (no step makes it now)
    assert not stack.lambdas.invoke(stack.function("TagTtlFunction"), retired)[1]
    # an entity written before the chain, adopted: under a retention window the history step anchors each
    # adopted version (chainwork.anchor_adopted: a Query of its history, an UpdateItem per version)
    for n in (1, 2):
        cf.submit({**put(T0 + n, f"old{n}"), "entityId": "old"})
    for sk in ("v#0000000001", "v#0000000002", "v0"):
        cf.dynamodb.update_item(TableName=cf.table if sk == "v0" else cf.history_table,
                                Key={"pk": {"S": "old"}, "sk": {"S": sk}}, UpdateExpression="REMOVE prevHash, chainHash")
    assert cf.submit({"entityId": "old", "operation": "adopt", "changeId": "adopt-1"}).output["outcome"] == "applied"
    read_event = json.loads((ROOT / "events" / "functions" / "read_api.json").read_text())
    for path, resource, query in (("/entities/e", "/entities/{id}", None),
                                  ("/entities/e", "/entities/{id}", {"asOf": str(T0)}),  # the time indexes
                                  ("/entities/e", "/entities/{id}", {"knownAt": str(T0)}),
                                  ("/entities/e/versions", "/entities/{id}/versions", None),
                                  ("/entities/e/versions/1", "/entities/{id}/versions/{version}", None)):
        event = {**read_event, "path": path, "resource": resource, "pathParameters": {"id": "e", "version": "1"},
                 "queryStringParameters": query,
                 "multiValueQueryStringParameters": query and {k: [v] for k, v in query.items()}}
        assert not stack.lambdas.invoke(stack.function("ReadApiFunction"), event)[1]
    for function in stack.lambdas.functions.values():
        if function.logical_id in ("SubmitChangeFunction", "FeedEventsFunction", "DigestFunction"):
            continue  # not on this path (cf.submit), or not in step with it (the feed's pipe, issue 36; the digest's
            # schedule, issue 35): their calls are measured in tests/test_submit.py, tests/test_feed.py and below
        calls = [call for call in function.api_calls if call[0] == "dynamodb"]
        called = {f"{service}:{operation}" for service, operation, _, _ in calls}
        tables = {params["TableName"] + (f"/index/{params['IndexName']}" if params.get("IndexName") else "")
                  for _, _, params, _ in calls}
        policy_actions = {a for a in _policy_actions(stack.template, function.logical_id) if a.startswith("dynamodb:")}
        assert called == policy_actions, function.logical_id
        resources = set()
        for policy in stack.template.function_properties(function.logical_id)["Policies"]:
            for statement in policy["Statement"]:
                if not any(a.startswith("dynamodb:") for a in statement["Action"]):
                    continue  # SubmitChangeFunction's Step Functions statements: tests/test_submit.py
                listed = statement["Resource"]
                resources.update([listed] if isinstance(listed, str) else listed)
        assert {r.split(":table/", 1)[1] for r in resources} == tables, function.logical_id
        assert not any("*" in r for r in resources)


# What each S3 call of the digest function needs (https://docs.aws.amazon.com/AmazonS3/latest/userguide/
# using-with-s3-policy-actions.html): a version read by its id is s3:GetObjectVersion.
S3_ACTION = {"ListObjectVersions": "s3:ListBucketVersions", "PutObject": "s3:PutObject"}
NEVER_FOR_THE_DIGESTS = {"s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectRetention",
                         "s3:BypassGovernanceRetention", "s3:PutBucketObjectLockConfiguration", "s3:PutObjectLegalHold",
                         "s3:PutBucketVersioning", "s3:PutBucketPolicy", "s3:PutLifecycleConfiguration",
                         "s3:DeleteBucket", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}


def test_the_digest_function_may_call_exactly_what_it_calls_and_nothing_that_deletes_or_unlocks(make_stack,
                                                                                                monkeypatch):
    """Issue 35: it reads the table and the bucket and puts new objects; nothing else, measured."""
    from changeflow.client import Changeflow
    from changeflow_core import digestformat

    monkeypatch.setattr(digestformat, "CHECKPOINT_EVERY", 2)  # a checkpoint written, then read back
    stack = make_stack(DigestSchedule="rate(365 days)")
    cf = Changeflow.for_embedded(stack)
    digest = stack.function("DigestFunction")
    event = json.loads((ROOT / "events" / "functions" / "take_digest.json").read_text())
    for n in range(3):  # the first digest (a Scan), then the changes index (Query, then the v0 it names), then
        # from a checkpoint
        cf.submit({"entityId": f"e{n}", "operation": "put", "attributes": {"n": n}, "effectiveAt": T0, "changeId": "c"})
        assert not stack.lambdas.invoke(digest, event)[1]
    called = set()
    for service, operation, params, _ in digest.api_calls:
        if service == "s3" and operation == "GetObject":
            called.add("s3:GetObjectVersion" if params.get("VersionId") else "s3:GetObject")
        else:
            called.add(S3_ACTION.get(operation, f"{service}:{operation}"))
    policy = _policy_actions(stack.template, "DigestFunction")
    assert called == policy == {"dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:Scan", "s3:ListBucketVersions",
                                "s3:GetObjectVersion", "s3:PutObject"}
    assert not policy & NEVER_FOR_THE_DIGESTS
    queried = {(p["TableName"], p.get("IndexName")) for s, o, p, _ in digest.api_calls if o == "Query"}
    assert queried == {(cf.table, "ChangesIndex")}
    batched = {table for s, o, p, _ in digest.api_calls if o == "BatchGetItem" for table in p["RequestItems"]}
    assert batched == {cf.table}
    statements = [st for pol in stack.template.function_properties("DigestFunction")["Policies"] for st in pol["Statement"]]
    resources = {r for st in statements for r in ([st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"])}
    assert resources == {f"arn:aws:dynamodb:us-east-1:123456789012:table/{cf.table}/index/ChangesIndex",
                         f"arn:aws:dynamodb:us-east-1:123456789012:table/{cf.table}",
                         "arn:aws:s3:::changeflow-digestbucket", "arn:aws:s3:::changeflow-digestbucket/changeflow/digests/*"}


def _run(*command, **kwargs):
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": "us-east-1"}
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600, **kwargs)


def _bin(name):
    found = ROOT / ".venv" / "bin" / name
    return str(found) if found.exists() else shutil.which(name)


def _asl_validator():
    found = ROOT / "node_modules" / ".bin" / "asl-validator"
    if not found.exists():
        pytest.fail("asl-validator is not installed: run `make setup` (npm install)")
    return str(found)


def test_asl_validator_accepts_the_definition():
    result = _run(_asl_validator(), "--json-path", str(ASL))
    assert result.returncode == 0, result.stdout + result.stderr


def test_asl_validator_catches_a_next_to_a_missing_state(tmp_path, definition):
    broken = json.loads(json.dumps(definition))
    broken["States"]["Fetch the latest version"]["Next"] = "Write the new lastest version"
    path = tmp_path / "broken.asl.json"
    path.write_text(json.dumps(broken))
    result = _run(_asl_validator(), "--json-path", str(path))
    assert result.returncode != 0 and "MISSING_TRANSITION_TARGET" in result.stdout + result.stderr


# cfn-lint and `sam validate --lint` on template.yaml: tests/test_security.py's first test runs both (security.run,
# make lint's recipe) and fails on any finding of either, none skipped; they ran here a second time (6 CPU s).


@pytest.fixture
def sam_home(tmp_path):
    """A SAM CLI config dir whose last version check is now, so sam does not look for a newer release."""
    (tmp_path / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    return {"__SAM_CLI_APP_DIR": str(tmp_path)}


def test_sam_build_succeeds_with_the_local_runtime(tmp_path, sam_home):
    import sys

    runtime = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    build_dir = tmp_path / "build"
    result = subprocess.run(
        [_bin("sam"), "build", "--parameter-overrides", f"Runtime={runtime}", "--build-dir", str(build_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": "us-east-1", **sam_home,
             "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    layer = build_dir / "CoreLayer" / "python"
    assert (layer / "changeflow_core" / "store.py").is_file()
    assert (layer / "aws_lambda_powertools").is_dir()
    assert not (layer / "changeflow").exists()  # the local toolkit is never deployed
    assert (layer / "aws_xray_sdk").is_dir() and (layer / "wrapt").is_dir()
    assert not (layer / "botocore").exists() and not (layer / "boto3").exists()  # the runtime has them
    for name in ("FetchLatestFunction", "UpdateLatestFunction", "PutHistoryFunction", "DeleteTombstoneFunction",
                 "TagTtlFunction"):
        assert (build_dir / name / "app.py").is_file()
        assert not (build_dir / name / "changeflow").exists()


@pytest.fixture(scope="module")
def cloudformation():
    from changeflow.local.cfn import transform

    return transform(ROOT / "template.yaml")


def test_every_api_method_requires_iam_authorization(cloudformation):
    [api] = [r for r in cloudformation["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    body = api["Properties"]["Body"]
    sigv4 = {name for name, spec in body["securityDefinitions"].items()
             if spec.get("x-amazon-apigateway-authtype") == "awsSigv4"}
    methods = [(path, verb, op) for path, ops in body["paths"].items() for verb, op in ops.items()]
    assert {path for path, _, _ in methods} >= {"/changes", "/entities/{id}", "/entities/{id}/versions"}
    for path, verb, operation in methods:
        assert {name for entry in operation.get("security", []) for name in entry} & sigv4, f"{verb} {path} is open"


def test_post_changes_goes_to_the_front_function_with_a_request_model(cloudformation):
    [api] = [r for r in cloudformation["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    post = api["Properties"]["Body"]["paths"]["/changes"]["post"]
    integration = post["x-amazon-apigateway-integration"]
    assert integration["type"] == "aws_proxy" and "SubmitChangeFunction.Arn" in json.dumps(integration["uri"])
    assert post["x-amazon-apigateway-request-validator"] == "body"
    assert post["parameters"][0]["schema"] == {"$ref": "#/definitions/ChangeRequest"}


def test_the_read_function_can_only_read(template):
    assert _policy_actions(template, "ReadApiFunction") <= {"dynamodb:GetItem", "dynamodb:Query"}


def test_the_rule_targets_the_event_function_with_retries_a_dead_letter_queue_and_a_journal(cloudformation):
    resources = cloudformation["Resources"]
    rule = resources["ChangeRequestedRule"]
    props = rule["Properties"]
    assert props["EventPattern"] == {"source": [{"Ref": "EventSource"}], "detail-type": ["ChangeRequested"]}
    target, journal = props["Targets"]
    # the rule cannot seal an execution input (issue 33): the event function does, and only this rule invokes it
    assert target["Arn"] == {"Fn::GetAtt": ["ReceiveChangeEventFunction", "Arn"]} and "RoleArn" not in target
    permission = resources["ReceiveChangeEventPermission"]["Properties"]
    assert permission["Principal"] == "events.amazonaws.com"
    assert permission["SourceArn"] == {"Fn::GetAtt": ["ChangeRequestedRule", "Arn"]}
    # the detail under "request", beside what EventBridge vouches for (issue 21)
    transformer = target["InputTransformer"]
    assert transformer["InputPathsMap"] == {"detail": "$.detail"}
    for variable in ("<detail>", "<aws.events.rule-arn>", "<aws.events.event>", "<aws.events.event.ingestion-time>"):
        assert variable in transformer["InputTemplate"]
    assert target["RetryPolicy"]["MaximumRetryAttempts"] > 0
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["ChangeEventsDeadLetterQueue", "Arn"]}}
    # a failure inside the function (Step Functions throttling) ends in the same queue after Lambda's retries
    invoke = resources["ReceiveChangeEventFunctionEventInvokeConfig"]["Properties"]
    assert invoke["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["ChangeEventsDeadLetterQueue", "Arn"]}
    # and every matched event as EventBridge wrote it, for verify --principals
    assert journal["Arn"] == {"Fn::GetAtt": ["ChangeEventsJournalLogGroup", "Arn"]} and "InputTransformer" not in journal


def test_the_audit_records_outlive_the_stack(cloudformation):
    """GIVEN the tables and the execution log (the audit trail once Step Functions' 90 days of execution
    history have passed: docs/operations.md) WHEN the stack is deleted, or an update makes CloudFormation
    replace one of them (a new LogGroupName, a new key schema) THEN CloudFormation keeps it: DeletionPolicy
    and UpdateReplacePolicy are both Retain. The function log groups (diagnostics, not audit) may go.
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-updatereplacepolicy.html"""
    resources = cloudformation["Resources"]
    machine = next(r for r in resources.values() if r["Type"] == "AWS::StepFunctions::StateMachine")
    [destination] = machine["Properties"]["LoggingConfiguration"]["Destinations"]
    execution_log = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    audit = {name for name, r in resources.items() if r["Type"] == "AWS::DynamoDB::Table"} | {execution_log}
    assert execution_log == "ChangeStateMachineLogGroup" and len(audit) >= 2
    for name in sorted(audit):
        assert resources[name].get("DeletionPolicy") == "Retain", f"deleting the stack deletes {name}"
        assert resources[name].get("UpdateReplacePolicy") == "Retain", f"a replacement deletes the old {name}"


def _released(tmp_path, old: str, new: str):
    """A copy of the project whose template.yaml has ``old`` replaced by ``new`` (a new release of one part)."""
    for part in ("functions", "layers", "statemachines"):
        (tmp_path / part).symlink_to(ROOT / part)
    text = (ROOT / "template.yaml").read_text()
    assert old in text
    (tmp_path / "template.yaml").write_text(text.replace(old, new))
    return tmp_path / "template.yaml"


def _machine_and_versions(template_path):
    from changeflow.local.cfn import transform

    resources = transform(template_path)["Resources"]
    machine = next(r for r in resources.values() if r["Type"] == "AWS::StepFunctions::StateMachine")
    versions = {r["Properties"]["FunctionName"]["Ref"]: name for name, r in resources.items()
                if r["Type"] == "AWS::Lambda::Version"}
    return machine["Properties"]["DefinitionSubstitutions"], versions, resources


def test_every_function_the_definition_invokes_is_a_version_published_by_the_same_deploy(tmp_path):
    """GIVEN SAM's AutoPublishAlias, WHEN only a writer's code changes (another CodeUri after sam package)
    THEN the definition names the writer's new version (so new executions run it, and running ones keep
    theirs), although the fetch function's version is unchanged: SAM hashes the fetch's environment with
    the !Ref unresolved, so a writer named from that environment would stay the old one.
    https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-resource-function.html"""
    substitutions, versions, resources = _machine_and_versions(ROOT / "template.yaml")
    invoked = {name for name in re.findall(r"\$\{(\w+)FunctionArn\}", ASL.read_text())}
    # the history step tags expiries itself (issue 37.2): TagTtlFunction, retired, is named by no definition now
    assert invoked == {"FetchLatest", "UpdateLatest", "DeleteTombstone", "PutHistory"}
    for name in invoked:
        assert substitutions[f"{name}FunctionArn"] == {"Ref": versions[f"{name}Function"]}
        assert resources[versions[f"{name}Function"]]["DeletionPolicy"] == "Retain"  # old versions stay

    changed, changed_versions, _ = _machine_and_versions(_released(
        tmp_path, "      CodeUri: functions/update_latest/\n", "      CodeUri: s3://packaged-artifacts/update-latest-v2.zip\n"))
    assert changed["UpdateLatestFunctionArn"] != substitutions["UpdateLatestFunctionArn"]
    assert changed_versions["FetchLatestFunction"] == versions["FetchLatestFunction"]


def test_a_new_layer_publishes_a_new_version_of_every_step_function(tmp_path):
    """GIVEN only the layer (changeflow_core: the domain logic) changes, THEN every step function publishes a
    new version, so the definition names versions that run the new layer (SAM: PublishLambdaVersion on the
    layer, with AutoPublishAliasAllProperties on the functions; without it the versions stay on the old one).
    https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-resource-layerversion.html"""
    _, versions, _ = _machine_and_versions(ROOT / "template.yaml")
    _, changed, _ = _machine_and_versions(_released(
        tmp_path, "      ContentUri: layers/core/\n", "      ContentUri: s3://packaged-artifacts/core-v2.zip\n"))
    assert len(versions) == 5 and all(changed[f] != versions[f] for f in versions), (versions, changed)


def test_the_embedded_stack_makes_the_roles_sam_makes(cloudformation):
    """moto_patches.iam evaluates the roles the embedded stack makes (changeflow.local.access); they are
    aws-sam-translator's, statement for statement: trust, inline statements, managed policies (issue 33)."""
    from changeflow.local.access import Access

    for parameters in ({}, {"SeparateHistoryTable": "true"}):
        template = Template(ROOT / "template.yaml", overrides=parameters)
        ours = Access(template, client=None).roles()
        translated = cfn.transform(ROOT / "template.yaml", parameters)["Resources"]
        sams = {name: template.resolve(spec["Properties"]) for name, spec in translated.items()
                if spec["Type"] == "AWS::IAM::Role"}
        assert set(ours) == set(sams)
        for name, props in sams.items():
            statements = [s for p in props.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
            mine = [s for document in ours[name]["inline"].values() for s in document["Statement"]]
            canonical = lambda found: sorted(json.dumps(x, sort_keys=True) for x in found)  # noqa: E731
            assert canonical(mine) == canonical(statements), name
            assert sorted(ours[name]["managed"]) == sorted(props.get("ManagedPolicyArns", [])), name
            assert ours[name]["trust"]["Statement"][0]["Principal"] == props["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
