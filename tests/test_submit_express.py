"""POST /changes on `changeflow serve` with WorkflowType=EXPRESS (issue 9 item 2): Step Functions neither
dedupes Express execution names nor offers DescribeExecution (developer guide, "Choosing workflow type":
execution guarantees), so the front function must not rely on either. Its own module: one embedded stack
per process at a time."""

from __future__ import annotations

import pytest

from changeflow.local.server import EmbeddedServer
from test_submit import finish, post, stored
from conftest import LOGGED

pytestmark = pytest.mark.enable_socket


def test_express_retries_after_failure_and_answers_an_applied_change_without_describe_execution():
    with EmbeddedServer(port=0, time_scale=0.001, parameters={"WorkflowType": "EXPRESS", **LOGGED}) as express:
        api = f"{express.url}/v1"
        bad = {"entityId": "r2-express", "operation": "put", "changeId": "c1", "attributes": {"v": 1},
               "expectedVersion": 2}
        _, first = post(api, bad)
        finish(first)
        _, again = post(api, {**bad, "expectedVersion": 0})
        finish(again)
        assert stored(express, "r2-express")["v"] == {"N": "1"}
        status, done = post(api, {**bad, "expectedVersion": 0})
        assert status == 200 and done == {"status": "SUCCEEDED", "outcome": "duplicate", "version": 1,
                                          "executionArn": again["executionArn"]}
        front = express.stack.function("SubmitChangeFunction")
        called = {operation for _, operation, _, _ in front.api_calls}
        assert "DescribeExecution" not in called and {"StartExecution", "GetItem"} <= called


def test_the_api_reliability_campaign_finds_no_lost_or_misanswered_change():
    from changeflow.checks import reliability

    with EmbeddedServer(port=0, time_scale=0.001) as server:
        tally = reliability.api_retries(server, seed=1, entities=6)
    # 6 changes, 2 of them refused at once (ValidationError: nothing starts), then each one's corrected retry
    assert tally.cases == 6 and tally.executions == 10 and sum(tally.faults.values()) == 6
    assert tally.violations == [] and tally.outcomes == {"applied": 6}
