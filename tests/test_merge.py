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


@pytest.fixture
def served():
    """``changeflow serve`` with back-offs longer than the queue of embedded steps (ten writers at once)."""
    from changeflow.local.server import EmbeddedServer
    from conftest import let_executions_end

    with EmbeddedServer(port=0, time_scale=0.05) as running:
        yield running
        let_executions_end(running.stack)


# --- the issue, as a user met it ------------------------------------------------------------------------
def test_signed_patches_of_different_fields_sent_at_once_with_server_given_times_all_land(served):
    server = served
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


# --- K writers at once, server-given times, every entry point: the campaign's cases, small -----------------
def merged(cf, entity, k, mode, seed, **options):
    from changeflow.checks import merging

    tally = merging.merge_case(cf, entity, k, mode, seed, **options)
    assert tally.violations == [], "\n".join(tally.violations)
    return tally


def test_k_direct_starts_patching_different_fields_all_land_and_match_the_model(make_stack):
    # GIVEN ten StartExecution calls at once, each patching a field of its own, no effectiveAt (the start
    # is the receipt): on main, those received first but written later were stale
    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(make_stack(time_scale=0.05))
    tally = merged(cf, "direct#1", 10, "different", seed=1)
    # THEN all apply, in whatever order they won, and each outcome is the reference model's
    assert tally.outcomes == {"applied": 11}


@pytest.mark.parametrize("mode", ["overlapping", "mixed"])
def test_k_direct_starts_with_faults_match_the_model_field_by_field(make_stack, mode):
    # overlapping fields (each ends with the newest effective value), or patches among puts and deletes,
    # while three executions suffer a recoverable fault (lost answers, timeouts, Lambda errors)
    from changeflow.client import Changeflow

    stack = make_stack(time_scale=0.05)
    tally = merged(Changeflow.for_embedded(stack), f"{mode}#1", 10, mode, seed=3, stack=stack, faults=3)
    assert sum(tally.faults.values()) >= 1


def test_k_patches_through_eventbridge_on_express_all_land(make_stack):
    from functools import partial

    from changeflow.checks import merging
    from changeflow.client import Changeflow
    from conftest import LOGGED

    cf = Changeflow.for_embedded(make_stack(time_scale=0.05, WorkflowType="EXPRESS", **LOGGED))
    tally = merged(cf, "events#1", 10, "different", seed=2, submit=partial(merging.submit_events))
    assert tally.outcomes == {"applied": 11}


def test_k_patches_through_the_api_on_express_all_land():
    from functools import partial

    from changeflow.checks import merging
    from changeflow.client import Changeflow
    from changeflow.local.server import EmbeddedServer
    from conftest import LOGGED, let_executions_end

    with EmbeddedServer(port=0, time_scale=0.05, parameters={"WorkflowType": "EXPRESS", **LOGGED}) as server:
        cf = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=server.url)
        api = f"{server.url}/{server.routes[0].stage}"
        tally = merged(cf, "api#1", 10, "overlapping", seed=4, submit=partial(merging.submit_api, api=api))
        let_executions_end(server.stack)
    assert set(tally.outcomes) <= {"applied", "stale"}
