"""The cost model (``changeflow.cost``, issue 38.3) bills a change as AWS's pricing pages say: every billed
item, per entry point and workflow type, from what the change was measured to consume on the embedded stack.

The arithmetic is checked against the pages' rules (100 ms steps, 64 KB chunks, the sampling rule's share),
and the measured figures against what each entry point must add (the front function, the bigger principal).
No figure of the report is asserted: those are `make cost`'s, measured."""

from __future__ import annotations

import pytest

from changeflow.cost import bill, prices, units
from changeflow.cost.paths import FRONT, measure_paths
from conftest import ROOT


def test_express_bills_its_duration_in_100_ms_steps_and_at_least_one():
    assert bill.express_billed_seconds(0.127) == pytest.approx(0.2)
    assert bill.express_billed_seconds(0.1) == pytest.approx(0.1)
    assert bill.express_billed_seconds(0.0001) == pytest.approx(0.1)
    assert bill.express_billed_seconds(191.05) == pytest.approx(191.1)  # the worst back-off: Waits are billed


def test_a_lambda_invocation_is_billed_its_handler_and_its_requests_in_1_ms_steps():
    one = {"invocations": 1, "requests": 2, "dynamodb_requests": 1, "log_bytes": 0}  # a Query and a StartExecution
    handler, dynamodb, call = (prices.AWS_LATENCY[k][0] * 1000 for k in ("handler", "dynamodb", "service_call"))
    assert bill.lambda_billed_ms(one) == pytest.approx(handler + dynamodb + call)
    assert bill.lambda_billed_ms({**one, "invocations": 0}) == 0


def test_xrays_default_rule_traces_one_change_a_second_and_5_percent_of_the_rest():
    assert prices.traced_share(0.5) == 1.0 and prices.traced_share(1.0) == 1.0
    assert prices.traced_share(100) == pytest.approx((1 + 0.05 * 99) / 100)
    assert prices.traced_share(1e6) == pytest.approx(0.05, abs=1e-5)


def test_another_sampling_rule_traces_its_reservoir_each_second_and_its_rate_of_the_rest():
    # docs/cost.md prices rules other than the default with this (issue 37.2): at 100 changes/s
    assert prices.traced_share(100, reservoir=1, fixed_rate=0.01) == pytest.approx(0.0199)
    assert prices.traced_share(100, reservoir=1, fixed_rate=0.0) == pytest.approx(0.01)
    assert prices.traced_share(100, reservoir=0, fixed_rate=0.005) == pytest.approx(0.005)
    assert prices.traced_share(100, reservoir=200, fixed_rate=0.0) == 1.0  # every change within the reservoir
    # in dollars per million changes, as the bill prices a trace
    assert prices.traced_share(100, 1, 0.01) * prices.PRICES["xray_per_trace"] * 1e6 == pytest.approx(0.0995)


def a_path(**extra) -> dict:
    """A measured update's figures (the shape measure_paths returns), 1 KB."""
    functions = {name: {"invocations": 1, "requests": n, "dynamodb_requests": n, "log_bytes": 0} for name, n in
                 (("FetchLatestFunction", 1), ("UpdateLatestFunction", 1), ("PutHistoryFunction", 1))}
    return {"read_units": 1.0, "write_units": 4.0, "state_transitions": 3, "states_entered": 3,
            "lambda_invocations": 3, "wait_seconds": 0.0, "function_log_bytes": 536, "execution_log_bytes": 0,
            "functions": functions, "input_bytes": 1500, "stored_bytes": 1200, "entry": "direct", **extra}


def test_every_entry_point_adds_what_it_bills_and_nothing_else():
    direct = bill.bill(a_path(), standard=False)
    front = {"invocations": 1, "requests": 1, "dynamodb_requests": 0, "log_bytes": 300}
    api = bill.bill(a_path(functions={**a_path()["functions"], FRONT: front}), standard=False, entry="api")
    events = bill.bill(a_path(input_bytes=100_500), standard=False, entry="events")
    # POST /changes: API Gateway's request, the front function's invocation, its log and the access log line
    assert api["API Gateway"] == pytest.approx(3.50)
    assert api["Lambda requests"] - direct["Lambda requests"] == pytest.approx(0.20)
    assert api["CloudWatch Logs"] > direct["CloudWatch Logs"] and api["EventBridge"] == 0
    # EventBridge: one event per 64 KB chunk of the payload (100 KB: 2)
    assert events["EventBridge"] == pytest.approx(2.00) and events["API Gateway"] == 0
    # every other line is the workflow's own, the same whatever started it
    for line in ("Step Functions", "DynamoDB", "X-Ray", "KMS"):
        assert direct[line] == api[line] == events[line], line
    assert direct["total"] == pytest.approx(sum(direct[line] for line in bill.LINES))


def test_the_floor_is_the_dynamodb_requests_and_standard_pays_its_transitions_above_it():
    path = a_path()
    assert bill.floor(path) == pytest.approx(1 * 0.125 + 4 * 0.625)
    standard, express = bill.bill(path, standard=True), bill.bill(path, standard=False)
    assert standard["Step Functions"] == pytest.approx(3 * 25.0)  # $0.025 per 1,000 transitions
    # Express: $1 per million requests plus 64 MB for the execution's duration, in 100 ms steps
    seconds = bill.execution_seconds(path)
    assert express["Step Functions"] == pytest.approx(1.00 + 0.0625 * bill.express_billed_seconds(seconds) * 16.67)
    assert standard["DynamoDB"] == express["DynamoDB"] == pytest.approx(bill.floor(path))


def test_kept_versions_cost_storage_and_point_in_time_recovery_every_month():
    kept = bill.storage_per_month(a_path(stored_bytes=1200))
    assert kept["storage"] == pytest.approx(1.2 * 0.25) and kept["pitr"] == pytest.approx(1.2 * 0.20)


@pytest.fixture(scope="module")
def updates():
    """The update path measured through each entry point (1 KB, the embedded stack: a few seconds each)."""
    return {entry: measure_paths(1000, root=ROOT, entry=entry, paths=("update",))["update"]
            for entry in ("direct", "api", "events")}


def test_each_entry_point_is_measured_through_its_own_path(updates):
    direct, api, events = updates["direct"], updates["api"], updates["events"]
    # the front function ran once and started the execution; directly and through EventBridge, nothing did
    assert api["functions"][FRONT]["invocations"] == 1 and "StartExecution" in api["requests"]
    assert FRONT not in direct["functions"] and FRONT not in events["functions"]
    # the same workflow behind each: 3 transitions, 3 invocations, the same requests to the tables
    for path in updates.values():
        assert (path["state_transitions"], path["lambda_invocations"], path["outcome"]) == (3, 3, "applied")
    # the principal each records is in the items: EventBridge's (245 bytes) is the largest (docs/cost.md)
    assert events["stored_bytes"] > api["stored_bytes"] > direct["stored_bytes"]
    assert events["write_units"] >= direct["write_units"]


def test_the_bill_of_a_measured_update_has_every_item_of_its_entry_point(updates):
    for entry, path in updates.items():
        for standard in (True, False):
            lines = bill.bill(path, standard)
            assert lines["Step Functions"] > 0 and lines["Lambda requests"] > 0 and lines["DynamoDB"] > 0
            assert lines["X-Ray"] > 0 and lines["CloudWatch Logs"] > 0, (entry, lines)
            assert (lines["API Gateway"] > 0) == (entry == "api") and (lines["EventBridge"] > 0) == (entry == "events")


def test_the_changes_index_is_written_only_when_a_put_changes_its_keys_or_what_it_projects():
    """GSI.html, "Provisioned throughput considerations for Global Secondary Indexes": no index write when
    the put needs no index update, one for an entry added, deleted or updated in place, two when an indexed
    key changes (the old entry out, the new one in). Keyed by the hour, keys only: a version in the hour of
    the one before it writes nothing; as first built (keyed by recordedAt, version and chainHash projected)
    every version moved its entry."""
    from changeflow_core import model

    def v0(version: int, recorded_at: int, **extra) -> dict:
        return {"pk": {"S": "e"}, "sk": {"S": "v0"}, "version": {"N": str(version)},
                "recordedAt": {"N": str(recorded_at)}, "chainHash": {"B": bytes([version]) * 32}, **extra,
                **{k: {"N": str(v)} for k, v in model.changes_index_keys("e", recorded_at).items()}}

    hour = 500_000 * model.HOUR_MS
    first, same_hour, next_hour = v0(1, hour + 60_000), v0(2, hour + 120_000), v0(3, hour + model.HOUR_MS)
    history = {k: v for k, v in same_hour.items() if k not in model.CHANGES_INDEX_KEYS} | {"sk": {"S": "v#2"}}
    for index, expected in ((units.INDEX, (1, 0, 2, 0, 0)), (units.PREVIOUS_INDEX, (1, 2, 2, 0, 1))):
        assert (units.index_write_units(first, {}, index),  # a new entity: its entry added
                units.index_write_units(same_hour, first, index),
                units.index_write_units(next_hour, same_hour, index),
                units.index_write_units(history, {}, index),  # never in the index
                # the same keys, another projected attribute: nothing projected now, the entry updated before
                units.index_write_units(v0(1, hour + 60_000, chainHash={"B": b"x" * 32}), first, index)) \
            == expected, index
    assert units.index_write_units({k: v for k, v in first.items() if k != "digestShard"}, first) == 1  # leaves it


def test_a_change_is_counted_the_changes_index_writes_its_put_makes():
    put = {"TableName": "t", "Item": {"pk": {"S": "e"}, "sk": {"S": "v0"}, "digestShard": {"N": "3"},
                                      "recordedHour": {"N": "7"}, "recordedAt": {"N": "1"}}}
    key = units.item_key(put)
    same_hour = {key: {"digestShard": {"N": "3"}, "recordedHour": {"N": "7"}}}
    moved = {key: {"digestShard": {"N": "3"}, "recordedHour": {"N": "6"}}}
    table = units.units_of_call("PutItem", put, {}, {key: 200}, index_keys=same_hour)[1]
    assert table == 1
    assert units.units_of_call("PutItem", put, {}, {key: 200}, index_keys=moved)[1] == table + 2
    assert units.units_of_call("PutItem", put, {}, {}, index_keys={})[1] == table + 1
    refused = {"Error": {"Code": "ConditionalCheckFailedException"}}
    assert units.units_of_call("PutItem", put, refused, {key: 200}, index_keys=moved)[1] == table
