"""Operations that reach someone (issue 33.6): who the alarms page is a choice every deploy makes, throttling
is alarmed wherever AWS can throttle the stack, a client's mistake (a denied change included) pages no one
(tests/test_observability.py), and an optional customer-managed key encrypts the tables, the dead-letter
queue and the log groups. Read from the template as CloudFormation resolves it."""

from __future__ import annotations

import json
import re

import pytest

from changeflow.local.embedded import EmbeddedStack
from changeflow.local.template import Template, TemplateError
from conftest import ROOT
from test_observability import json_pattern_matches

TOPIC = "arn:aws:sns:us-east-1:123456789012:on-call"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
FUNCTIONS = {"FetchLatestFunction", "UpdateLatestFunction", "PutHistoryFunction", "DeleteTombstoneFunction",
             "TagTtlFunction", "SubmitChangeFunction", "ReadApiFunction", "ReceiveChangeEventFunction",
             "FeedEventsFunction", "DigestFunction"}


def template(**parameters) -> Template:
    return Template(ROOT / "template.yaml", overrides={"AlarmTopicArn": "none", "TimeIndexes": "true", **parameters})


def alarms(t: Template) -> dict[str, dict]:
    return {name: t.resolve(spec["Properties"]) for name, spec in t.of_type("AWS::CloudWatch::Alarm").items()}


def metrics_of(alarm: dict) -> list[dict]:
    """The metrics an alarm reads: its own, or those of its metric math."""
    if "MetricName" in alarm:
        return [{"Namespace": alarm["Namespace"], "MetricName": alarm["MetricName"],
                 "Dimensions": alarm.get("Dimensions", [])}]
    return [q["MetricStat"]["Metric"] for q in alarm["Metrics"] if "MetricStat" in q]


def the_alarm_on(t: Template, namespace: str, metric: str) -> dict:
    found = [a for a in alarms(t).values()
             if any((m["Namespace"], m["MetricName"]) == (namespace, metric) for m in metrics_of(a))]
    assert len(found) == 1, f"expected one alarm reading {namespace} {metric}, found {len(found)}"
    return found[0]


def sums_every_metric_and_pages_on_the_first(alarm: dict) -> bool:
    if "Metrics" in alarm:
        returned = [q for q in alarm["Metrics"] if q.get("ReturnData")]
        assert [q["Expression"] for q in returned] == ["SUM(METRICS())"], returned
        assert all(q["MetricStat"]["Stat"] == "Sum" for q in alarm["Metrics"] if "MetricStat" in q)
    else:
        assert alarm["Statistic"] == "Sum"
    return ((alarm["Threshold"], alarm["EvaluationPeriods"], alarm["ComparisonOperator"], alarm["TreatMissingData"])
            == (1, 1, "GreaterThanOrEqualToThreshold", "notBreaching"))


def test_who_the_alarms_page_is_a_choice_every_deploy_makes():
    # GIVEN the template: AlarmTopicArn has no default; it takes a topic's ARN or "none", and nothing else
    spec = Template(ROOT / "template.yaml").body["Parameters"]["AlarmTopicArn"]
    assert "Default" not in spec
    allowed = re.compile(spec["AllowedPattern"])
    assert allowed.fullmatch("none") and allowed.fullmatch(TOPIC)
    assert not any(allowed.fullmatch(v) for v in ("", " ", "None", "arn:aws:sqs:us-east-1:123456789012:q", TOPIC + "\n"))
    # WHEN it is not given THEN nothing that depends on it can be resolved (CloudFormation refuses the deploy)
    unset = Template(ROOT / "template.yaml")
    with pytest.raises(TemplateError, match="AlarmTopicArn"):
        alarms(unset)
    # WHEN it names a topic THEN every alarm notifies it; "none": no alarm notifies anyone
    assert {name: a.get("AlarmActions") for name, a in alarms(template(AlarmTopicArn=TOPIC)).items()} == {
        name: [TOPIC] for name in alarms(template())}
    assert [name for name, a in alarms(template()).items() if "AlarmActions" in a] == []


@pytest.mark.parametrize("separate", ["false", "true"])
def test_throttling_is_alarmed_wherever_aws_can_throttle_the_stack(separate):
    t = template(SeparateHistoryTable=separate)
    machine = t.arn("ChangeStateMachine")
    # Step Functions: ExecutionThrottled of this machine
    throttled = the_alarm_on(t, "AWS/States", "ExecutionThrottled")
    assert metrics_of(throttled)[0]["Dimensions"] == [{"Name": "StateMachineArn", "Value": machine}]
    # Lambda: Throttles of every function; Errors of the API's functions (the steps' named errors are outcomes)
    lambda_throttles = the_alarm_on(t, "AWS/Lambda", "Throttles")
    names = {t.physical_name(f): f for f in t.of_type("AWS::Serverless::Function")}
    assert set(names.values()) == FUNCTIONS
    assert {names[m["Dimensions"][0]["Value"]] for m in metrics_of(lambda_throttles)} == FUNCTIONS
    # Errors: the API's functions in one alarm (the steps' named errors are outcomes), a failed digest in its own
    by_errors = {frozenset(names[m["Dimensions"][0]["Value"]] for m in metrics_of(a)): a for a in alarms(t).values()
                 if any((m["Namespace"], m["MetricName"]) == ("AWS/Lambda", "Errors") for m in metrics_of(a))}
    assert set(by_errors) == {frozenset({"SubmitChangeFunction", "ReadApiFunction"}), frozenset({"DigestFunction"})}
    errors = by_errors[frozenset({"SubmitChangeFunction", "ReadApiFunction"})]
    assert sums_every_metric_and_pages_on_the_first(by_errors[frozenset({"DigestFunction"})])
    # DynamoDB: read and write throttle events of every table the stack has
    tables = the_alarm_on(t, "AWS/DynamoDB", "WriteThrottleEvents")
    assert tables is the_alarm_on(t, "AWS/DynamoDB", "ReadThrottleEvents") or tables == the_alarm_on(
        t, "AWS/DynamoDB", "ReadThrottleEvents")
    read = {(m["MetricName"], m["Dimensions"][0]["Value"]) for m in metrics_of(tables)}
    assert read == {(kind, t.physical_name(table)) for table in t.of_type("AWS::DynamoDB::Table")
                    for kind in ("ReadThrottleEvents", "WriteThrottleEvents")}
    assert ("HistoryTable" in t.of_type("AWS::DynamoDB::Table")) == (separate == "true")
    # API Gateway: 5XX of this API's stage
    api = t.resolve(t.resources["ChangeApi"]["Properties"])
    server = the_alarm_on(t, "AWS/ApiGateway", "5XXError")
    assert metrics_of(server)[0]["Dimensions"] == [{"Name": "ApiName", "Value": api["DefinitionBody"]["info"]["title"]},
                                                   {"Name": "Stage", "Value": api["StageName"]}]
    # and 429 (API Gateway has no metric for it): the access log's status, counted by a metric filter
    assert '"status":"$context.status"' in api["AccessLogSetting"]["Format"]
    group = t.physical_name("ChangeApiAccessLogGroup")
    [counted] = [t.resolve(s["Properties"]) for s in t.of_type("AWS::Logs::MetricFilter").values()
                 if t.resolve(s["Properties"])["LogGroupName"] == group]
    line = {"requestId": "r", "caller": "c", "method": "POST", "path": "/changes", "latency": "3"}
    assert json_pattern_matches(counted["FilterPattern"], {**line, "status": "429"})
    assert not any(json_pattern_matches(counted["FilterPattern"], {**line, "status": s}) for s in ("200", "403", "503"))
    transformation, = counted["MetricTransformations"]
    too_many = the_alarm_on(t, transformation["MetricNamespace"], transformation["MetricName"])
    for alarm in (throttled, lambda_throttles, errors, tables, server, too_many):
        assert sums_every_metric_and_pages_on_the_first(alarm), alarm["AlarmDescription"]


@pytest.mark.parametrize("key", ["", KEY], ids=["service-keys", "customer-managed"])
def test_an_optional_customer_managed_key_encrypts_the_tables_the_queue_and_the_logs(key):
    t = template(KmsKeyArn=key, SeparateHistoryTable="true")
    tables = {name: t.resolve(s["Properties"])["SSESpecification"] for name, s in t.of_type("AWS::DynamoDB::Table").items()}
    assert len(tables) == 3
    for sse in tables.values():
        assert sse == ({"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": key} if key else {"SSEEnabled": True})
    queues = [t.resolve(s["Properties"]) for s in t.of_type("AWS::SQS::Queue").values()]
    assert len(queues) == 2  # the rule's dead letters, and the feed's pipe's (issue 36)
    for queue in queues:
        assert (queue["SqsManagedSseEnabled"], queue.get("KmsMasterKeyId")) == ((False, key) if key else (True, None))
    groups = [t.resolve(s["Properties"]) for s in t.of_type("AWS::Logs::LogGroup").values()]
    assert len(groups) >= 9 and [g.get("KmsKeyId") for g in groups] == [key or None] * len(groups)
    allowed = re.compile(t.body["Parameters"]["KmsKeyArn"]["AllowedPattern"])
    assert allowed.fullmatch(key) and not allowed.fullmatch("alias/aws/dynamodb")


def test_the_embedded_stack_creates_its_tables_with_the_customer_managed_key():
    with EmbeddedStack(parameters={"KmsKeyArn": KEY}) as stack:
        dynamodb = stack.client("dynamodb")
        for name in (stack.outputs["ChangeTableName"], stack.template.physical_name("AttemptsTable")):
            sse = dynamodb.describe_table(TableName=name)["Table"]["SSEDescription"]
            assert (sse["SSEType"], sse["KMSMasterKeyArn"]) == ("KMS", KEY), json.dumps(sse)
