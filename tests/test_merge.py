"""Concurrent patches merge by field (issue 34): each top-level field keeps its own effective time (its
clock), so a patch is stale only where a newer change wrote the same field. Tried as a user would: signed
``POST /changes`` patches with no ``effectiveAt`` (the time of receipt), sent at once, on ``changeflow
serve``; then the rules one by one on the real state machine (the embedded stack)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import http_exchange

pytestmark = pytest.mark.enable_socket

T0 = 1_767_225_600_000


def post(server, request):
    status, _, raw = http_exchange("POST", f"{server.url}/v1/changes", json.dumps(request))
    return status, json.loads(raw)


def outcome_of(server, arn):
    from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination

    import boto3

    assert wait_for_termination(arn, 120)
    sfn = boto3.client("stepfunctions", endpoint_url=server.url, region_name="us-east-1")
    description = sfn.describe_execution(executionArn=arn)
    return description["status"], json.loads(description.get("output") or "{}")


# --- the issue, as a user met it ------------------------------------------------------------------------
def test_signed_patches_of_different_fields_sent_at_once_with_server_given_times_all_land(server):
    # GIVEN an entity, and ten clients that each set a field of their own, at once, with no effectiveAt:
    # each patch takes the moment POST /changes received it
    status, answer = post(server, {"entityId": "doc#34", "operation": "put", "attributes": {"title": "Q3"},
                                   "changeId": "base"})
    assert status == 200 and outcome_of(server, answer["executionArn"])[1]["outcome"] == "applied"
    patches = [{"entityId": "doc#34", "operation": "patch", "set": {f"f{i}": i}, "changeId": f"p{i}"}
               for i in range(10)]
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda request: post(server, request), patches))
    assert all(status == 200 for status, _ in answers), answers
    outcomes = [outcome_of(server, answer["executionArn"]) for _, answer in answers]
    # THEN every one is applied, whatever order the writes won the race in, and no field is lost
    assert [(status, output.get("outcome")) for status, output in outcomes] == [("SUCCEEDED", "applied")] * 10
    _, _, raw = http_exchange("GET", f"{server.url}/v1/entities/doc%2334")
    assert json.loads(raw)["attributes"] == {"title": "Q3", **{f"f{i}": i for i in range(10)}}
