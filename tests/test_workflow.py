"""The real state machine (statemachines/change.asl.json with its substitutions) run end to end on the
embedded stack, for every path; assertions are on the execution history as well as on the table."""

from __future__ import annotations

import json

import pytest

from conftest import STATE_LIMIT, largest_state, load_event

T0 = 1_767_225_600_000


def put(entity="doc#1", at=T0, change=None, **attributes):
    request = {"entityId": entity, "operation": "put", "attributes": attributes or {"v": at}, "effectiveAt": at}
    if change:
        request["changeId"] = change
    return request


def states_entered(cf, execution):
    return [e["stateEnteredEventDetails"]["name"] for e in cf.history(execution.arn) if e["type"].endswith("StateEntered")]


def events_of(cf, execution, event_type):
    return [e for e in cf.history(execution.arn) if e["type"] == event_type]


def test_first_put_creates_version_1_and_its_history_item(cf):
    # GIVEN an entity that never existed
    # WHEN a put is processed
    execution = cf.submit(put(color="red", change="c1"))
    # THEN the execution succeeds with version 1, and v0 and history item 1 hold the content
    assert execution.status == "SUCCEEDED"
    assert execution.output == {"entityId": "doc#1", "operation": "put", "outcome": "applied", "version": 1,
                                "changeId": "c1", "effectiveAt": T0, "superseded": []}
    entity = cf.entity("doc#1")
    assert entity["latest"]["version"] == 1 and entity["latest"]["attributes"] == {"color": "red"}
    assert [v["version"] for v in entity["versions"]] == [1]
    # in three state transitions (issue 11; issue 37.2 folded the expiry tags into the history step): one
    # Lambda step each, no Pass or Choice state
    assert states_entered(cf, execution) == [
        "Fetch the latest version", "Write the new latest version", "Record the version in history",
    ]


def test_each_applied_change_adds_exactly_one_contiguous_version(cf):
    for i in range(5):
        assert cf.submit(put(at=T0 + i, n=i)).output["version"] == i + 1
    versions = cf.entity("doc#1")["versions"]
    assert [v["version"] for v in versions] == [1, 2, 3, 4, 5]
    assert [v["attributes"]["n"] for v in versions] == [0, 1, 2, 3, 4]


def test_history_item_n_has_exactly_the_content_v0_had_at_n(cf):
    for i in range(3):
        cf.submit(put(at=T0 + i, n=i, nested={"list": [1, 2.5, None, True], "s": "ü"}))
        entity = cf.entity("doc#1")
        latest, newest = entity["latest"], entity["versions"][-1]
        assert newest == latest  # same attributes, same audit fields (history never carries v0's expiry)


def test_older_change_is_stale_and_writes_nothing(cf):
    cf.submit(put(at=T0 + 100, change="new", v="new"))
    before = cf.entity("doc#1")
    execution = cf.submit(put(at=T0 + 50, change="old", v="old"))
    assert execution.output["outcome"] == "stale" and execution.output["version"] == 1
    assert cf.entity("doc#1") == before
    # in two state transitions: the fetch step decides, the report step answers; no write step runs
    assert states_entered(cf, execution) == ["Fetch the latest version", "Report the stale change"]


def test_equal_timestamps_are_accepted(cf):
    cf.submit(put(at=T0, change="a", v="a"))
    execution = cf.submit(put(at=T0, change="b", v="b"))
    assert execution.output["outcome"] == "applied" and execution.output["version"] == 2


def test_same_change_twice_is_one_version_and_reported_duplicate(cf):
    first = cf.submit(put(change="same", v=1))
    again = cf.submit(put(change="same", v=1))  # a redelivery: a second execution of the same change
    assert first.name != again.name
    assert again.output["outcome"] == "duplicate" and again.output["version"] == 1
    assert [v["version"] for v in cf.entity("doc#1")["versions"]] == [1]


def test_duplicate_after_other_changes_at_the_same_time_adds_no_version(cf):
    cf.submit(put(at=T0, change="a", v="a"))
    cf.submit(put(at=T0, change="b", v="b"))
    again = cf.submit(put(at=T0, change="a", v="a"))
    assert again.output == {**again.output, "outcome": "duplicate", "version": 1}
    assert [v["changeId"] for v in cf.entity("doc#1")["versions"]] == ["a", "b"]


def test_expected_version_not_current_fails_at_once_with_version_conflict(cf):
    cf.submit(put(at=T0, v=1))
    before = cf.entity("doc#1")
    execution = cf.submit({**put(at=T0 + 1, v=2), "expectedVersion": 0})
    assert execution.status == "FAILED" and execution.error == "VersionConflict"
    assert "version 1, not the expected 0" in execution.cause
    assert cf.entity("doc#1") == before
    # at once: no loop through the back-off
    assert states_entered(cf, execution) == ["Fetch the latest version", "Report the version conflict"]


def test_expected_version_that_is_current_applies(cf):
    cf.submit(put(at=T0, v=1))
    assert cf.submit({**put(at=T0 + 1, v=2), "expectedVersion": 1}).output["version"] == 2


def test_delete_writes_a_tombstone_version_that_keeps_the_timestamp_and_expires(cf):
    cf.submit(put(at=T0, color="red"))
    execution = cf.submit({"entityId": "doc#1", "operation": "delete", "effectiveAt": T0 + 10})
    assert execution.output["outcome"] == "applied" and execution.output["version"] == 2
    written = events_of(cf, execution, "TaskScheduled")[1]["taskScheduledEventDetails"]["parameters"]
    assert "DeleteTombstoneFunction" in json.loads(written)["FunctionName"]  # the writer the fetch step chose
    entity = cf.entity("doc#1")
    latest = entity["latest"]
    assert latest["deleted"] is True and latest["attributes"] == {} and latest["effectiveAt"] == T0 + 10
    recorded_s = latest["recordedAt"] // 1000
    assert latest["expiresAt"] == recorded_s + 7 * 86_400  # TombstoneTtlDays default
    assert entity["versions"][-1]["deleted"] is True


def test_delete_of_an_entity_that_never_existed_still_writes_a_tombstone(cf):
    execution = cf.submit({"entityId": "ghost", "operation": "delete", "effectiveAt": T0})
    assert execution.output["version"] == 1
    assert cf.entity("ghost")["latest"]["deleted"] is True
    late = cf.submit(put(entity="ghost", at=T0 - 1))
    assert late.output["outcome"] == "stale"


def test_an_older_put_cannot_resurrect_and_a_newer_put_revives_without_expiry(cf):
    cf.submit(put(at=T0, v="alive"))
    cf.submit({"entityId": "doc#1", "operation": "delete", "effectiveAt": T0 + 10})
    assert cf.submit(put(at=T0 + 5, v="zombie")).output["outcome"] == "stale"
    revived = cf.submit(put(at=T0 + 20, v="revived"))
    assert revived.output["outcome"] == "applied" and revived.output["version"] == 3
    latest = cf.entity("doc#1")["latest"]
    assert latest["deleted"] is False and latest["expiresAt"] is None and latest["attributes"] == {"v": "revived"}


def test_rollback_writes_version_k_content_as_a_new_version(cf):
    cf.submit(put(at=T0, v="one"))
    cf.submit(put(at=T0 + 1, v="two"))
    execution = cf.submit({"entityId": "doc#1", "operation": "rollback", "toVersion": 1, "effectiveAt": T0 + 2})
    assert execution.output["outcome"] == "applied" and execution.output["version"] == 3
    versions = cf.entity("doc#1")["versions"]
    assert versions[-1]["attributes"] == {"v": "one"} and versions[-1]["sourceVersion"] == 1
    assert [v["attributes"]["v"] for v in versions] == ["one", "two", "one"]  # history never rewritten


def test_rollback_to_a_missing_version_is_not_found_and_writes_nothing(cf):
    cf.submit(put(at=T0, v="one"))
    before = cf.entity("doc#1")
    execution = cf.submit({"entityId": "doc#1", "operation": "rollback", "toVersion": 9, "effectiveAt": T0 + 1})
    assert execution.status == "FAILED" and execution.error == "NotFound"
    assert "no version 9" in execution.cause
    assert cf.entity("doc#1") == before


def test_rollback_to_a_tombstone_is_not_found(cf):
    cf.submit({"entityId": "doc#1", "operation": "delete", "effectiveAt": T0})
    execution = cf.submit({"entityId": "doc#1", "operation": "rollback", "toVersion": 1, "effectiveAt": T0 + 1})
    assert execution.error == "NotFound" and "deletion" in execution.cause


def test_retention_of_k_versions_tags_version_n_minus_k(make_stack):
    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="2"))
    for i in range(4):
        execution = cf.submit(put(at=T0 + i, n=i))
    history_step = [e for e in cf.history(execution.arn) if e["type"] == "TaskSucceeded"][-1]
    assert json.loads(history_step["taskSucceededEventDetails"]["output"])["Payload"]["expiry"]["tagged"] == [2]
    raw = {v["version"]: v["expiresAt"] for v in cf.entity("doc#1")["versions"]}
    assert raw[1] is not None and raw[2] is not None  # written at 3 and 4: n-K
    assert raw[3] is None and raw[4] is None


def test_without_retention_nothing_expires(cf):
    for i in range(3):
        cf.submit(put(at=T0 + i))
    assert all(v["expiresAt"] is None for v in cf.entity("doc#1")["versions"])


def test_every_history_item_carries_the_audit_trail(cf):
    execution = cf.submit({**put(at=T0, change="audit-1", v=1), "actor": "alice", "reason": "because"})
    version = cf.entity("doc#1")["versions"][0]
    assert version["changeId"] == "audit-1" and version["operation"] == "put"
    assert version["actor"] == "alice" and version["reason"] == "because"
    assert version["effectiveAt"] == T0 and version["recordedAt"] > 0
    assert version["executionArn"] == execution.arn


def test_effective_at_and_change_id_default_to_the_execution_start_time_and_name(cf):
    execution = cf.submit({"entityId": "doc#1", "operation": "put", "attributes": {"v": 1}})
    started = events_of(cf, execution, "ExecutionStarted")[0]["timestamp"]
    assert execution.output["changeId"] == execution.name
    assert abs(execution.output["effectiveAt"] - started.timestamp() * 1000) < 1000


@pytest.mark.parametrize(
    "request_, field",
    [
        ({"operation": "put", "attributes": {}}, "entityId"),
        ({"entityId": 7, "operation": "put", "attributes": {}}, "entityId"),
        ({"entityId": "e", "operation": "upsert"}, "operation"),
        ({"entityId": "e", "operation": "put", "attributes": [1]}, "attributes"),
        ({"entityId": "e", "operation": "put", "attributes": {"version": 3}}, "attributes.version"),
        ({"entityId": "e", "operation": "rollback"}, "toVersion"),
    ],
)
def test_invalid_request_fails_with_validation_error_naming_the_field_and_writes_nothing(cf, request_, field):
    execution = cf.submit(request_)
    assert execution.status == "FAILED" and execution.error == "ValidationError"
    assert json.loads(execution.cause)["errorMessage"].startswith(field + ":")
    failed = events_of(cf, execution, "TaskFailed")[0]["taskFailedEventDetails"]
    assert failed["error"] == "ValidationError"  # visible in the execution history
    entered = states_entered(cf, execution)
    assert entered == ["Fetch the latest version", "Reject the invalid request"]  # two transitions
    assert cf.dynamodb.scan(TableName=cf.table)["Count"] == 0


def another_writer(cf, change_id, at=T0):
    """A correct concurrent writer: v0 and its history item, through the same domain code."""
    from changeflow_core import items, store
    from changeflow_core.validation import Change

    latest = store.fetch_latest_state(cf.dynamodb, cf.table, cf.history_table, "doc#1")
    change = Change(entityId="doc#1", operation="put", effectiveAt=at, changeId=change_id)
    item = items.build_latest(change, {"v": change_id}, latest, latest["version"] + 1, at, "arn:other")
    store.write_latest(cf.dynamodb, cf.table, item, latest)
    store.put_history(cf.dynamodb, cf.history_table, items.history_of(item))


def interfering(stack, cf, times):
    """A fault hook: before each of this change's v0 writes (up to ``times``), another writer gets in."""
    counter = iter(range(1, times + 1))

    def hook(function, event, invoke):
        if function.logical_id == "UpdateLatestFunction" and event["change"]["changeId"] == "mine":
            n = next(counter, None)
            if n is not None:
                another_writer(cf, f"other-{n}")
        return invoke()

    return hook


def test_conflicting_writer_loops_back_through_a_fresh_read(stack, cf):
    # GIVEN another writer that slips in between this execution's read and its write, three times
    from changeflow.local.lambdas import fault_hook

    cf.submit(put(at=T0, change="base", v=0))
    with fault_hook(stack.lambdas, interfering(stack, cf, 3)):
        execution = cf.submit(put(at=T0, change="mine", v="mine"))
    # THEN it conflicts three times, reads again after a jittered wait each time, and then applies
    entered = states_entered(cf, execution)
    assert entered.count("Draw a back-off") == 3
    assert entered.count("Back off before reading again") == 3
    assert entered.count("Fetch the latest version again") == 3
    conflicts = [e["taskFailedEventDetails"]["error"] for e in events_of(cf, execution, "TaskFailed")]
    assert conflicts == ["WriteConflict"] * 3  # named in the history, routed by a Catch
    assert execution.output["outcome"] == "applied" and execution.output["version"] == 5
    assert [v["version"] for v in cf.entity("doc#1")["versions"]] == [1, 2, 3, 4, 5]


def test_conflicts_beyond_the_bound_fail_with_version_conflict(stack, cf):
    from changeflow.local.lambdas import fault_hook

    cf.submit(put(at=T0, change="base", v=0))
    with fault_hook(stack.lambdas, interfering(stack, cf, 99)):
        execution = cf.submit(put(at=T0, change="mine"))
    assert execution.status == "FAILED" and execution.error == "VersionConflict"
    entered = states_entered(cf, execution)
    # ten conditional writes, nine back-offs between them, then the named failure at once
    assert entered.count("Write the new latest version") == 10 and entered.count("Draw a back-off") == 9
    assert entered[-1] == "Report the version conflict"
    versions = [v["changeId"] for v in cf.entity("doc#1")["versions"]]
    assert "mine" not in versions and versions == ["base"] + [f"other-{i}" for i in range(1, 11)]


def test_history_put_is_retried_with_backoff_and_then_succeeds(stack, cf):
    from changeflow.local.lambdas import fault_hook

    failures = iter([True, True])

    def flaky(function, event, invoke):
        if function.logical_id == "PutHistoryFunction" and next(failures, False):
            raise RuntimeError("transient")
        return invoke()

    with fault_hook(stack.lambdas, flaky):
        execution = cf.submit(put(at=T0, v=1))
    assert execution.output["outcome"] == "applied"
    history_failures = [e for e in events_of(cf, execution, "TaskFailed")]
    assert len(history_failures) == 2 and all(e["taskFailedEventDetails"]["error"] == "RuntimeError" for e in history_failures)
    assert [v["version"] for v in cf.entity("doc#1")["versions"]] == [1]


def test_history_put_that_keeps_failing_ends_in_history_write_failed(stack, cf):
    from changeflow.local.lambdas import fault_hook

    def broken(function, event, invoke):
        if function.logical_id == "PutHistoryFunction":
            raise RuntimeError("history table unavailable")
        return invoke()

    with fault_hook(stack.lambdas, broken):
        execution = cf.submit(put(at=T0, v=1))
    assert execution.status == "FAILED" and execution.error == "HistoryWriteFailed"
    assert len(events_of(cf, execution, "TaskFailed")) == 7  # the first try and six retries
    entity = cf.entity("doc#1")
    assert entity["latest"]["version"] == 1 and entity["versions"] == []  # detectable: v0 ahead of history


def test_history_put_runs_again_safely_after_a_redrive_like_rerun(stack, cf):
    # a redrive runs the failed history step again with the same state data: it must write the same item
    from changeflow.local.lambdas import fault_hook

    def broken(function, event, invoke):
        if function.logical_id == "PutHistoryFunction":
            broken.seen = event
            raise RuntimeError("down")
        return invoke()

    with fault_hook(stack.lambdas, broken):
        cf.submit(put(at=T0, v=1))
    function = stack.function("PutHistoryFunction")
    for _ in range(2):
        payload, failed = stack.lambdas.invoke(function, broken.seen)
        assert not failed
    entity = cf.entity("doc#1")
    assert [v["version"] for v in entity["versions"]] == [1]
    assert entity["versions"][0] == {**entity["latest"]}


def test_lambda_service_exception_on_fetch_is_retried(stack, cf):
    from changeflow.local.lambdas import LambdaServiceError, fault_hook

    failures = iter([True])

    def outage(function, event, invoke):
        if function.logical_id == "FetchLatestFunction" and next(failures, False):
            raise LambdaServiceError()
        return invoke()

    with fault_hook(stack.lambdas, outage):
        execution = cf.submit(put(at=T0, v=1))
    assert execution.output["outcome"] == "applied"
    failed = events_of(cf, execution, "LambdaFunctionFailed") + events_of(cf, execution, "TaskFailed")
    assert [e.get("lambdaFunctionFailedEventDetails", e.get("taskFailedEventDetails"))["error"] for e in failed] == [
        "Lambda.ServiceException"]


def test_lost_response_of_the_v0_write_is_recovered_by_a_fresh_read(stack, cf):
    # the write lands but the Lambda dies before answering: the workflow must not add a version twice
    from changeflow.local.lambdas import fault_hook

    lost = iter([True])

    def lose_response(function, event, invoke):
        result = invoke()
        if function.logical_id == "UpdateLatestFunction" and next(lost, False):
            raise TimeoutError("Task timed out after 10.00 seconds")
        return result

    with fault_hook(stack.lambdas, lose_response):
        execution = cf.submit(put(at=T0, v=1))
    # the fresh read finds the change in v0; the version names this execution: applied (issue 26.2)
    assert execution.output["outcome"] == "applied" and execution.output["version"] == 1
    entered = states_entered(cf, execution)
    assert "Draw a back-off" in entered and "Record the version in history" in entered
    entity = cf.entity("doc#1")
    assert [v["version"] for v in entity["versions"]] == [1] and entity["latest"]["version"] == 1


def test_workflow_inputs_in_events_run_as_documented(cf):
    assert cf.submit(load_event("workflow/put.json")).output["outcome"] == "applied"
    assert cf.submit(load_event("workflow/patch.json")).output["outcome"] == "applied"
    assert cf.entity("user#1001")["latest"]["attributes"] == {"name": "Ada", "email": "ada@lovelace.example",
                                                              "plan": "pro"}
    assert cf.submit(load_event("workflow/stale.json")).output["outcome"] == "stale"
    assert cf.submit(load_event("workflow/delete.json")).output["outcome"] == "applied"
    assert cf.submit(load_event("workflow/rollback.json")).output["outcome"] == "applied"
    invalid = cf.submit(load_event("workflow/invalid.json"))
    assert invalid.error == "ValidationError"
    assert [v["operation"] for v in cf.entity("user#1001")["versions"]] == ["put", "patch", "delete", "rollback"]


# --- issue 9 item 5: one maximum request size; no state ever over Step Functions' 256 KiB --------------


def padded_put(size, entity="big#1", at=T0, change="big-1"):
    """A put whose request (compact UTF-8 JSON, as validation counts it) is exactly ``size`` bytes."""
    from changeflow_core.validation import request_size

    request = {"entityId": entity, "operation": "put", "attributes": {"body": ""}, "effectiveAt": at,
               "changeId": change, "actor": "a" * 256, "reason": "r" * 1024}
    request["attributes"]["body"] = "x" * (size - request_size(request))
    assert request_size(request) == size
    return request


def test_the_largest_allowed_put_and_a_rollback_to_it_apply_with_every_state_under_256_kib(cf):
    from changeflow_core.validation import MAX_REQUEST_BYTES

    # GIVEN a put of exactly the maximum request size, then another version, then a rollback to the first
    largest = cf.submit(padded_put(MAX_REQUEST_BYTES))
    assert largest.output["outcome"] == "applied", (largest.error, largest.cause)
    cf.submit(put(entity="big#1", at=T0 + 1, v="small"))
    rollback = cf.submit({"entityId": "big#1", "operation": "rollback", "toVersion": 1, "effectiveAt": T0 + 2,
                          "changeId": "big-rollback", "actor": "a" * 256, "reason": "r" * 1024})
    assert rollback.output == {**rollback.output, "outcome": "applied", "version": 3}
    # THEN no state input or output, task parameters or task result came near States.DataLimitExceeded
    for execution in (largest, rollback):
        assert MAX_REQUEST_BYTES < largest_state(cf, execution) <= STATE_LIMIT
    assert cf.entity("big#1")["versions"][2]["attributes"] == cf.entity("big#1")["versions"][0]["attributes"]


def test_one_byte_over_the_maximum_request_size_is_a_validation_error_and_writes_nothing(cf):
    from changeflow_core.validation import MAX_REQUEST_BYTES

    execution = cf.submit(padded_put(MAX_REQUEST_BYTES + 1))
    assert execution.status == "FAILED" and execution.error == "ValidationError"
    assert json.loads(execution.cause)["errorMessage"].startswith("request:")
    assert states_entered(cf, execution) == ["Fetch the latest version", "Reject the invalid request"]
    assert cf.dynamodb.scan(TableName=cf.table)["Count"] == 0


def test_attributes_that_grow_past_the_limit_as_dynamodb_json_are_refused_before_anything_is_written(cf):
    # a list of small numbers is 2 bytes an element in the request but ~10 as DynamoDB JSON, the form
    # the workflow carries: refused by name at the fetch step, not States.DataLimitExceeded later
    from changeflow_core.validation import MAX_REQUEST_BYTES, request_size

    request = put(entity="dense#1", at=T0, numbers=[1] * (MAX_REQUEST_BYTES // 8))
    assert request_size(request) < MAX_REQUEST_BYTES
    execution = cf.submit(request)
    assert execution.status == "FAILED" and execution.error == "ValidationError"
    assert "as DynamoDB JSON" in json.loads(execution.cause)["errorMessage"]
    assert largest_state(cf, execution) <= STATE_LIMIT
    assert cf.dynamodb.scan(TableName=cf.table)["Count"] == 0


# --- issue 9 item 6: a change id reused with a newer effectiveAt ------------------------------------------
def test_a_change_id_reused_with_a_newer_effective_at_is_a_duplicate_and_writes_nothing(cf):
    # GIVEN c1@1000 and c2@1500 applied
    cf.submit(put(at=1000, change="c1", v=1))
    cf.submit(put(at=1500, change="c2", v=2))
    before = cf.entity("doc#1")
    # WHEN c1 comes again with a newer effectiveAt (a client retry that took a new default time, a replay)
    again = cf.submit(put(at=2000, change="c1", v=1))
    # THEN it is answered with the version c1 wrote, and nothing is written
    assert again.output == {**again.output, "outcome": "duplicate", "version": 1, "effectiveAt": 2000}
    assert cf.entity("doc#1") == before


def test_a_change_id_reused_after_v0_forgot_it_writes_again_and_verify_reports_it(cf):
    from changeflow.audit import verify
    from changeflow_core.model import RECENT_CHANGE_IDS

    # GIVEN c1, then as many other changes as v0 remembers ids
    cf.submit(put(at=1000, change="c1", v=1))
    for i in range(RECENT_CHANGE_IDS):
        cf.submit(put(at=1001 + i, change=f"other-{i}", v=i))
    assert verify.verify(cf, "doc#1").ok
    # WHEN c1 is reused at a newer time: outside the documented window it is a new change
    again = cf.submit(put(at=5000, change="c1", v="again"))
    assert again.output["outcome"] == "applied" and again.output["version"] == RECENT_CHANGE_IDS + 2
    # THEN verify reports the change that wrote two versions, though they are not neighbours
    problems = verify.verify(cf, "doc#1").problems
    assert f"change 'c1' wrote versions 1 and {RECENT_CHANGE_IDS + 2}" in problems


# --- issue 9 item 4: every execution ends in an outcome or a named error ------------------------------
def always_failing(logical_id):
    def hook(function, event, invoke):
        if function.logical_id == logical_id:
            from changeflow.local.lambdas import LambdaServiceError
            raise LambdaServiceError()
        return invoke()
    return hook


def throttled_tags(stack):
    """Every expiry tag of the history step throttled past its client's tries (DynamoDB does not process a
    throttled request)."""
    from changeflow.checks.faults import Injector

    function = stack.function("PutHistoryFunction")
    stack.lambdas.load(function)
    return Injector().throttle(function, "UpdateItem", 1000, client="tagging")


def test_expiry_tags_that_keep_failing_still_report_the_applied_change_and_repair_tags_them(make_stack):
    from changeflow.audit import repair, verify
    from changeflow.client import Changeflow

    stack = make_stack(HistoryRetentionVersions="1", HistoryRetentionDays="30")
    cf = Changeflow.for_embedded(stack)
    cf.submit(put(at=T0, change="c1", v=1))
    # GIVEN every expiry tag the history step makes fails (DynamoDB throttles it, past the client's tries)
    with throttled_tags(stack):
        execution = cf.submit(put(at=T0 + 1, change="c2", v=2))
    # THEN the change is reported applied (v0 and history are written), in the same three states, not failed
    assert execution.status == "SUCCEEDED"
    assert execution.output == {"entityId": "doc#1", "operation": "put", "outcome": "applied", "version": 2,
                                "changeId": "c2", "effectiveAt": T0 + 1, "superseded": []}
    assert states_entered(cf, execution)[-1] == "Record the version in history"
    # AND the history step's result in the execution history names the tag it missed and why
    result = json.loads(events_of(cf, execution, "TaskSucceeded")[-1]["taskSucceededEventDetails"]["output"])
    assert result["Payload"]["expiry"]["missed"] == [1]
    assert result["Payload"]["expiry"]["error"] == "ProvisionedThroughputExceededException"
    assert events_of(cf, execution, "TaskFailed") == []  # caught in the step: no retry ran the put again
    # AND verify finds version 1 left untagged, and repair tags it
    assert "versions outside the retention window without an expiry: [1]" in verify.verify(cf, "doc#1").problems
    done, cannot = repair.repair(cf, "doc#1")
    assert done == ["tagged version 1 for expiry"] and cannot == []
    assert cf.entity("doc#1")["versions"][0]["expiresAt"] is not None


def test_a_missed_expiry_tag_is_healed_by_the_next_change(make_stack):
    from changeflow.audit import verify
    from changeflow.client import Changeflow

    stack = make_stack(HistoryRetentionVersions="1", HistoryRetentionDays="30")
    cf = Changeflow.for_embedded(stack)
    cf.submit(put(at=T0, change="c1", v=1))
    with throttled_tags(stack):
        cf.submit(put(at=T0 + 1, change="c2", v=2))
    # WHEN the next change runs: it tags version 2 (n-K) and heals version 1 (n-K-1), two updates
    execution = cf.submit(put(at=T0 + 2, change="c3", v=3))
    history_step = [e for e in cf.history(execution.arn) if e["type"] == "TaskSucceeded"][-1]
    assert json.loads(history_step["taskSucceededEventDetails"]["output"])["Payload"]["expiry"]["tagged"] == [2, 1]
    assert verify.verify(cf, "doc#1").ok


def test_a_fetch_step_that_keeps_failing_ends_in_a_named_error_and_writes_nothing(stack, cf):
    from changeflow.local.lambdas import fault_hook

    with fault_hook(stack.lambdas, always_failing("FetchLatestFunction")):
        execution = cf.submit(put(at=T0, v=1))
    assert execution.status == "FAILED" and execution.error == "LatestReadFailed"
    assert len(events_of(cf, execution, "LambdaFunctionFailed") + events_of(cf, execution, "TaskFailed")) == 6
    assert cf.dynamodb.scan(TableName=cf.table)["Count"] == 0


def test_a_stale_report_that_keeps_failing_ends_in_a_named_error(stack, cf):
    from changeflow.local.lambdas import fault_hook

    cf.submit(put(at=T0 + 10, change="new", v=1))
    with fault_hook(stack.lambdas, always_failing("PutHistoryFunction")):  # the report is the history step's
        execution = cf.submit(put(at=T0, change="old", v=0))
    assert execution.status == "FAILED" and execution.error == "ReportFailed"


# --- issue 10 section 3: the state machine resource at deploy time -------------------------------------
def test_every_lambda_task_names_its_integration_through_the_stack_partition():
    # aws-cn and aws-us-gov have other partitions: no hard-coded arn:aws: in the definition
    from changeflow.local.template import Template
    from conftest import ASL, ROOT

    definition = json.loads(ASL.read_text())
    tasks = [s for s in definition["States"].values() if s["Type"] == "Task"]
    assert tasks and all(s["Resource"] == "${LambdaInvoke}" for s in tasks)
    assert "arn:aws:" not in ASL.read_text()
    machine = Template(ROOT / "template.yaml").of_type("AWS::Serverless::StateMachine")["ChangeStateMachine"]
    assert machine["Properties"]["DefinitionSubstitutions"]["LambdaInvoke"] == {
        "Fn::Sub": "arn:${AWS::Partition}:states:::lambda:invoke"}


@pytest.mark.parametrize("metric", ["ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"])
def test_an_alarm_fires_on_every_way_an_execution_can_end_without_an_outcome(metric):
    from changeflow.local.template import Template
    from conftest import ROOT

    template = Template(ROOT / "template.yaml", overrides={"AlarmTopicArn": "none"})  # a deploy says (no default)
    alarms = [template.resolve(spec["Properties"]) for spec in template.of_type("AWS::CloudWatch::Alarm").values()]
    # the metric itself, or a metric of the alarm's math (failed executions less the client's own errors)
    found = [(a, m) for a in alarms for m in [a] + [q["MetricStat"]["Metric"] for q in a.get("Metrics", [])
                                                  if "MetricStat" in q]
             if m.get("Namespace") == "AWS/States" and m.get("MetricName") == metric]
    assert len(found) == 1
    alarm, measured = found[0]
    assert measured["Dimensions"] == [{"Name": "StateMachineArn", "Value": template.arn("ChangeStateMachine")}]
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_the_back_off_fits_express_five_minutes_and_the_parameter_says_what_express_gives_up():
    import re

    from changeflow.local.template import Template
    from changeflow_core.decisions import MAX_ATTEMPTS
    from conftest import ASL, ROOT

    draw = json.loads(ASL.read_text())["States"]["Draw a back-off"]["Parameters"]["waitSeconds.$"]
    ends = [int(n) for n in re.search(r"States\.Array\(([0-9, ]+)\)", draw).group(1).split(",")]
    # indexed by the attempt, 1..MAX_ATTEMPTS + 1: the 11th read settles a write whose answer was lost, and
    # if the step after it fails too, a 12th read gives up (changeflow_core.steps.take)
    assert len(ends) == MAX_ATTEMPTS + 2
    # MathRandom(1, end) draws below end (AWS: the end is exclusive); at most one wait per attempt
    assert sum(end - 1 for end in ends[1:-1]) == 191 and sum(end - 1 for end in ends[1:]) == 223 < 300
    description = Template(ROOT / "template.yaml").body["Parameters"]["WorkflowType"]["Description"]
    assert "safe" not in description and "gives up" in description and "5 minutes" in description


def test_a_v0_write_that_keeps_failing_ends_in_latest_write_failed_after_ten_attempts(stack, cf):
    from changeflow.local.lambdas import fault_hook

    with fault_hook(stack.lambdas, always_failing("UpdateLatestFunction")):
        execution = cf.submit(put(at=T0, v=1))
    assert execution.status == "FAILED" and execution.error == "LatestWriteFailed"
    entered = states_entered(cf, execution)
    # never retried by a Retry: ten writes, each after a fresh read, then the named failure
    assert entered.count("Write the new latest version") == 10 and entered.count("Draw a back-off") == 10
    assert entered[-2:] == ["Fetch the latest version again", "Give up on the failing write"]
    assert cf.dynamodb.scan(TableName=cf.table)["Count"] == 0
