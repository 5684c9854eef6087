"""``changeflow serve`` over real HTTP on 127.0.0.1: boto3 and the CLI commands against the endpoint,
through the same code path that talks to a stack on AWS."""

from __future__ import annotations

import json

import boto3
import pytest

from changeflow.cli import main
from changeflow_core import principal
from conftest import EVENTS

pytestmark = pytest.mark.enable_socket


def test_boto3_starts_an_execution_and_reads_the_result_through_the_endpoint(server):
    sfn = boto3.client("stepfunctions", endpoint_url=server.url, region_name="us-east-1")
    dynamodb = boto3.client("dynamodb", endpoint_url=server.url, region_name="us-east-1")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in boto3.client(
        "cloudformation", endpoint_url=server.url, region_name="us-east-1").describe_stacks(
        StackName="changeflow")["Stacks"][0]["Outputs"]}
    arn = sfn.start_execution(stateMachineArn=outputs["ChangeStateMachineArn"], name="over-http",
                              input=principal.direct_input({"entityId": "e", "operation": "put", "attributes": {"a": 1}}))["executionArn"]
    from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination

    assert wait_for_termination(arn, 30)
    assert json.loads(sfn.describe_execution(executionArn=arn)["output"])["outcome"] == "applied"
    items = dynamodb.query(TableName=outputs["ChangeTableName"], KeyConditionExpression="pk = :e",
                           ExpressionAttributeValues={":e": {"S": "e"}})["Items"]
    assert {i["sk"]["S"] for i in items} == {"v0", "v#0000000001"}
    page = sfn.get_execution_history(executionArn=arn, maxResults=4)
    assert len(page["events"]) == 4 and page["nextToken"]


def test_cli_commands_work_against_the_endpoint(server, capsys):
    url = ["--endpoint-url", server.url]
    assert main(["submit", str(EVENTS / "workflow" / "put.json"), "--json", *url]) == 0
    submitted = json.loads(capsys.readouterr().out)
    assert submitted["status"] == "SUCCEEDED" and submitted["output"]["outcome"] == "applied"

    assert main(["versions", "user#1001", *url]) == 0
    table = capsys.readouterr().out
    assert "v0 = version 1" in table and "example-put-1" in table

    assert main(["history", submitted["name"], *url]) == 0
    history = capsys.readouterr().out
    assert "ExecutionStarted" in history and "Record the version in history" in history

    assert main(["executions", *url]) == 0
    assert submitted["name"] in capsys.readouterr().out
