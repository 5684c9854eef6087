"""Field-level changes (issue 15): a ``patch`` sets and removes top-level fields of the latest version,
inside the workflow, from the version the fetch step read. The same ratchet, duplicate detection and
optimistic concurrency as a put; a conflict re-applies the patch to the new latest version; a patch of
nothing (or of a tombstone) is ``NotFound``; each version records its patch, and ``verify`` checks it.
Run on the real state machine (the embedded stack)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from changeflow_core import model, validation
from conftest import STATE_LIMIT, http_exchange, largest_state

T0 = 1_767_225_600_000


def put(entity="doc#42", at=T0, change="c-put", **attributes):
    return {"entityId": entity, "operation": "put", "attributes": attributes, "effectiveAt": at, "changeId": change}


def patch(entity="doc#42", at=T0 + 1, change="c-patch", set=None, remove=None, **extra):
    """A patch, by default 1 ms after ``put``'s time (at an equal time a field keeps the greater value:
    tests/test_merge.py)."""
    request = {"entityId": entity, "operation": "patch", "effectiveAt": at, "changeId": change, **extra}
    if set is not None:
        request["set"] = set
    if remove is not None:
        request["remove"] = remove
    return request


def states_entered(cf, execution):
    return [e["stateEnteredEventDetails"]["name"] for e in cf.history(execution.arn) if e["type"].endswith("StateEntered")]


def snapshot(cf):
    return sorted(json.dumps(i, sort_keys=True, default=bytes.hex) for t in {cf.table, cf.history_table}
                  for i in cf.dynamodb.scan(TableName=t, ConsistentRead=True)["Items"])


# --- the contract ---------------------------------------------------------------------------------------
def test_a_patch_sets_and_removes_fields_of_the_latest_version_and_keeps_the_rest(cf):
    # GIVEN doc#42 at version 1
    cf.submit(put(title="Q3", status="draft", draftNote="wip", pages=14))
    # WHEN carol patches two fields in and one out
    execution = cf.submit(patch(set={"status": "approved", "reviewer": "carol"}, remove=["draftNote"],
                                actor="carol@example.com", reason="approve"))
    # THEN version 2 is version 1 with the patch applied, in the same three steps as a put
    assert execution.output == {"entityId": "doc#42", "operation": "patch", "outcome": "applied", "version": 2,
                                "changeId": "c-patch", "effectiveAt": T0 + 1, "superseded": []}
    assert states_entered(cf, execution) == [
        "Fetch the latest version", "Write the new latest version", "Record the version in history"]
    entity = cf.entity("doc#42")
    expected = {"title": "Q3", "status": "approved", "reviewer": "carol", "pages": 14}
    assert entity["latest"]["attributes"] == expected
    newest = entity["versions"][-1]
    assert newest["attributes"] == expected and newest["operation"] == "patch" and newest["actor"] == "carol@example.com"
    # AND the history item records the patch itself beside the full content: who changed which field
    assert newest["patch"] == {"set": {"status": "approved", "reviewer": "carol"}, "remove": ["draftNote"]}
    assert entity["versions"][0]["patch"] is None  # a put records none
    assert entity["latest"] == newest


def test_a_patch_keeps_every_number_exact_and_replaces_nested_values_whole(cf):
    cf.submit(put(address={"city": "Lyon", "zip": "69001"}, price=Decimal("10.10")))
    cf.submit(patch(set={"address": {"city": "Paris"}, "big": Decimal("12345678901234567890.123456789")}))
    attributes = cf.entity("doc#42")["latest"]["attributes"]
    # top-level fields: a nested object is replaced, not merged (docs/api.md: "Field-level changes")
    assert attributes["address"] == {"city": "Paris"}
    assert attributes["price"] == Decimal("10.10") and attributes["big"] == Decimal("12345678901234567890.123456789")


def test_a_dotted_name_is_a_top_level_field_never_a_path(cf):
    cf.submit(put(a={"b": 1}))
    cf.submit(patch(set={"a.b": 2}))
    assert cf.entity("doc#42")["latest"]["attributes"] == {"a": {"b": 1}, "a.b": 2}


def test_removing_a_field_that_is_not_there_still_writes_a_version_that_records_the_patch(cf):
    cf.submit(put(color="red"))
    execution = cf.submit(patch(remove=["shape"]))
    assert execution.output["outcome"] == "applied" and execution.output["version"] == 2
    versions = cf.entity("doc#42")["versions"]
    assert versions[1]["attributes"] == {"color": "red"} and versions[1]["patch"] == {"set": {}, "remove": ["shape"]}


def test_a_patch_older_than_the_stored_version_is_stale_and_writes_nothing(cf):
    cf.submit(put(at=T0 + 100, color="red"))
    before = snapshot(cf)
    execution = cf.submit(patch(at=T0 + 99, set={"color": "blue"}))
    assert execution.output["outcome"] == "stale" and execution.output["version"] == 1
    assert states_entered(cf, execution) == ["Fetch the latest version", "Report the stale change"]
    assert snapshot(cf) == before


def test_a_patch_at_the_stored_effective_at_adds_fields_and_keeps_the_greater_value_of_a_field(cf):
    # equal times (docs/api.md): any value is greater than none, and of two values the greater stays
    cf.submit(put(at=T0, color="red", size=3))
    execution = cf.submit(patch(at=T0, set={"shape": "round", "color": "blue", "size": 4}))
    assert execution.output["outcome"] == "applied" and execution.output["superseded"] == ["color"]
    assert cf.entity("doc#42")["latest"]["attributes"] == {"color": "red", "size": 4, "shape": "round"}


def test_a_patch_delivered_again_is_a_duplicate_even_after_other_patches(cf):
    cf.submit(put(n=0))
    first = patch(change="p1", set={"a": 1})
    assert cf.submit(first).output["version"] == 2
    cf.submit(patch(change="p2", set={"a": 2}))
    again = cf.submit(first)  # redelivered: must not set a back to 1
    assert again.output["outcome"] == "duplicate" and again.output["version"] == 2
    assert cf.entity("doc#42")["latest"]["attributes"] == {"n": 0, "a": 2}


def test_a_patch_with_a_stale_expected_version_is_a_version_conflict(cf):
    cf.submit(put(n=0))
    cf.submit(put(change="c2", n=1))
    execution = cf.submit(patch(set={"a": 1}, expectedVersion=1))
    assert execution.status == "FAILED" and execution.error == "VersionConflict"
    assert cf.submit(patch(change="p2", set={"a": 1}, expectedVersion=2)).output["version"] == 3


@pytest.mark.parametrize("history", [[], ["put", "delete"]], ids=["never-existed", "tombstone"])
def test_a_patch_of_nothing_or_of_a_tombstone_is_not_found_and_writes_nothing(cf, history):
    for i, operation in enumerate(history):
        request = put(change=f"h{i}", color="red") if operation == "put" else {
            "entityId": "doc#42", "operation": "delete", "effectiveAt": T0, "changeId": f"h{i}"}
        cf.submit(request)
    before = snapshot(cf)
    execution = cf.submit(patch(at=T0 + 1, set={"color": "blue"}))
    assert execution.status == "FAILED" and execution.error == "NotFound"
    assert "a patch changes a live entity" in json.loads(execution.cause)["errorMessage"]
    assert states_entered(cf, execution) == ["Fetch the latest version", "Report the missing version"]
    assert snapshot(cf) == before


def test_a_patch_older_than_a_delete_is_stale_not_not_found(cf):
    cf.submit(put(at=T0, color="red"))
    cf.submit({"entityId": "doc#42", "operation": "delete", "effectiveAt": T0 + 10, "changeId": "d"})
    assert cf.submit(patch(at=T0 + 5, set={"color": "blue"})).output["outcome"] == "stale"


def test_a_rollback_to_a_patch_version_restores_its_content_without_its_patch_record(cf):
    cf.submit(put(color="red", n=1))
    cf.submit(patch(set={"color": "blue"}))
    cf.submit(put(at=T0 + 2, change="c3", shape="round"))
    cf.submit({"entityId": "doc#42", "operation": "rollback", "toVersion": 2, "effectiveAt": T0 + 3, "changeId": "r"})
    latest = cf.entity("doc#42")["latest"]
    assert latest["attributes"] == {"color": "blue", "n": 1} and latest["patch"] is None


# --- concurrency: the patch is applied to the version each attempt read ---------------------------------
def test_a_conflict_re_applies_the_patch_to_the_new_latest_version_and_loses_no_field(stack, cf):
    # GIVEN another writer that patches field b between this patch's read and its write
    from changeflow.local.lambdas import fault_hook
    from changeflow_core import items, steps, store
    from changeflow_core.validation import validate_request

    cf.submit(put(a=0, b=0))
    interfered = []

    def hook(function, event, invoke):
        if function.logical_id == "UpdateLatestFunction" and event["change"]["changeId"] == "mine" and not interfered:
            item, latest = store.fetch_latest(cf.dynamodb, cf.table, cf.history_table, "doc#42")
            other = validate_request(patch(change="other", set={"b": "other"}), {"name": "x", "startTime": "2026-01-01T00:00:00Z"})
            new = items.latest_item(other, items.patched(item, other), latest, latest["version"] + 1, steps.now_ms(),
                                     "arn:other")
            store.write_latest(cf.dynamodb, cf.table, new, latest)
            store.put_history(cf.dynamodb, cf.history_table, items.history_of(new))
            interfered.append(True)
        return invoke()

    with fault_hook(stack.lambdas, hook):
        execution = cf.submit(patch(change="mine", set={"a": "mine"}))
    # THEN its first write conflicts, it reads again, and applies its patch to version 2
    entered = states_entered(cf, execution)
    assert entered.count("Fetch the latest version again") == 1
    assert execution.output["outcome"] == "applied" and execution.output["version"] == 3
    # AND both fields landed: the classic lost update does not happen
    assert cf.entity("doc#42")["latest"]["attributes"] == {"a": "mine", "b": "other"}
    from changeflow.audit.verify import verify
    assert verify(cf, "doc#42").problems == []


def test_two_concurrent_patches_to_different_fields_both_land(make_stack):
    # docs/api.md's worked example: started together, same effectiveAt
    from concurrent.futures import ThreadPoolExecutor

    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(make_stack(time_scale=0.05))
    cf.submit(put(title="Q3", status="draft"))
    patches = [patch(change="carol", set={"status": "approved"}, actor="carol"),
               patch(change="dave", set={"title": "Q3 (final)"}, actor="dave")]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(cf.submit, patches))
    assert sorted(r.output["version"] for r in results) == [2, 3]
    assert cf.entity("doc#42")["latest"]["attributes"] == {"title": "Q3 (final)", "status": "approved"}


# --- sizes: the patched content must still fit the state and the item ----------------------------------
def test_a_patch_that_would_grow_the_content_past_the_limit_is_refused_by_name_and_writes_nothing(cf):
    # GIVEN an entity whose content is near the limit (a put of ~200 KiB)
    cf.submit(put(body="x" * 200_000))
    before = snapshot(cf)
    # WHEN a patch (itself small enough) would add 30 KB more
    execution = cf.submit(patch(set={"more": "y" * 30_000}))
    # THEN ValidationError naming set: the whole content would no longer fit the state; nothing is written
    assert execution.status == "FAILED" and execution.error == "ValidationError"
    assert json.loads(execution.cause)["errorMessage"].startswith("set:")
    assert snapshot(cf) == before


def test_the_largest_patch_that_fits_applies_with_every_state_under_256_kib_and_one_byte_more_is_refused(stack, cf):
    # GIVEN an entity of ~100 KB, and patches whose fetch result (the patched content and the patch, both
    # carried between steps as DynamoDB JSON, with the rest of the change and the ids v0 remembers) comes
    # to the bound every state can carry (changeflow_core.carried), and one character more
    from changeflow_core import carried
    from test_state_bounds import carried_size

    cf.submit(put(body="x" * 100_000))
    base = carried_size(stack, patch(change="largest", set={"more": ""}))
    more = (carried.MAX_RESULT_BYTES - base) // 2  # each character of the value is carried twice
    assert carried_size(stack, patch(change="largest", set={"more": "y" * more})) in (
        carried.MAX_RESULT_BYTES - 1, carried.MAX_RESULT_BYTES)
    execution = cf.submit(patch(change="largest", set={"more": "y" * more}))
    # THEN it applies, and no state input, output, task parameters or result exceeds Step Functions' limit
    assert execution.output["outcome"] == "applied", execution.cause
    assert largest_state(cf, execution) <= STATE_LIMIT
    before = snapshot(cf)
    over = cf.submit(patch(change="over", set={"more": "y" * (more + 1)}))
    assert over.error == "ValidationError" and json.loads(over.cause)["errorMessage"].startswith("set:")
    assert snapshot(cf) == before


def test_a_patch_over_the_request_limit_is_a_validation_error_and_writes_nothing(cf):
    cf.submit(put(color="red"))
    before = snapshot(cf)
    request = patch(set={"blob": "x" * validation.MAX_REQUEST_BYTES})
    with pytest.raises(validation.ValidationError) as refused:
        validation.check_request_size(request)
    assert refused.value.field == "request"
    execution = cf.submit(request)
    assert execution.status == "FAILED" and execution.error == "ValidationError"
    assert json.loads(execution.cause)["errorMessage"].startswith("request:")
    assert snapshot(cf) == before


# --- the audit: verify checks each patch version against its predecessor --------------------------------
def tamper(cf, version, **changes):
    """Rewrite history item ``version`` directly (an attacker with table access; chain left as it is)."""
    from changeflow_core import codec, store

    item = store.get_item(cf.dynamodb, cf.history_table, "doc#42", model.history_sk(version))
    item.update(changes)
    cf.dynamodb.put_item(TableName=cf.history_table, Item=codec.serialize_item(item))


def test_verify_reports_a_patch_version_that_is_not_its_predecessor_with_the_patch_applied(cf):
    from changeflow.audit.verify import verify

    cf.submit(put(a=1, b=2))
    cf.submit(patch(set={"a": 5}))
    assert verify(cf, "doc#42").problems == []
    # a field the patch never named, changed in the patch version: the patch check names it
    tamper(cf, 2, b=3)
    problems = verify(cf, "doc#42").problems
    assert "patch version 2 is not version 1 with its patch applied" in problems


def test_verify_reports_a_patch_record_altered_to_hide_a_change(cf):
    from changeflow.audit.verify import verify

    cf.submit(put(a=1, b=2))
    cf.submit(patch(set={"a": 5, "b": 7}))
    tamper(cf, 2, patch={"set": {"a": 5}, "remove": []})  # "b was never changed by this patch"
    assert "patch version 2 is not version 1 with its patch applied" in verify(cf, "doc#42").problems


def test_the_patch_check_refuses_a_patch_with_nothing_live_before_it_and_skips_what_expired():
    # the check itself, on items: a patch after a deletion or as version 1 cannot be right
    from changeflow.audit.verify import patch_problems

    def item(n, operation, **content):
        return {model.VERSION: n, model.OPERATION: operation, **content}

    record = {"set": {"a": 1}, "remove": []}
    assert patch_problems([item(1, "patch", a=1, patch=record)], {}) == [
        "patch version 1 has no live version before it to patch"]
    deleted = {**item(1, "delete"), model.DELETED: True}
    assert patch_problems([deleted, item(2, "patch", a=1, patch=record)], {1: deleted}) == [
        "patch version 2 has no live version before it to patch"]
    assert patch_problems([item(2, "patch", a=1)], {}) == ["patch version 2 does not record its patch"]
    # a predecessor that has expired cannot be checked, and is not reported
    assert patch_problems([item(5, "patch", a=1, patch=record)], {}) == []


# --- every entry point: POST /changes, EventBridge, the CLI ---------------------------------------------
def http(method, url, body=None):
    status, _, raw = http_exchange(method, url, json.dumps(body) if body is not None else None)
    return status, json.loads(raw)


def test_a_patch_posted_to_the_api_applies_and_the_read_api_shows_what_it_changed(server):
    from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination

    status, answer = http("POST", f"{server.url}/v1/changes", put(change="c1", title="Q3", status="draft"))
    assert status == 200 and wait_for_termination(answer["executionArn"], 60)
    # WHEN a patch is posted (the API's request model knows set and remove)
    status, answer = http("POST", f"{server.url}/v1/changes",
                          patch(change="c2", set={"status": "approved"}, remove=["title"], actor="carol"))
    assert status == 200, answer
    assert wait_for_termination(answer["executionArn"], 60)
    # THEN the read API's latest, version list and version show the patch
    _, latest = http("GET", f"{server.url}/v1/entities/doc%2342")
    assert latest["attributes"] == {"status": "approved"} and latest["patch"] == {
        "set": {"status": "approved"}, "remove": ["title"]}
    _, page = http("GET", f"{server.url}/v1/entities/doc%2342/versions")
    assert [v["patch"] for v in page["items"]] == [{"set": {"status": "approved"}, "remove": ["title"]}, None]


@pytest.mark.parametrize("body", [
    patch(change="c1", set={"a": 1}, remove="a"),
    patch(change="c1", set=["a"]),
    patch(change="c1", remove=[1]),
    patch(change="c1", remove=["a", "a"]),
], ids=["remove-a-string", "set-a-list", "remove-a-number", "remove-twice"])
def test_the_api_request_model_refuses_a_malformed_patch_with_400_and_starts_nothing(server, body):
    status, answer = http("POST", f"{server.url}/v1/changes", body)
    assert (status, answer) == (400, {"message": "Invalid request body"})
    sfn = boto3_client(server, "stepfunctions")
    assert sfn.list_executions(stateMachineArn=server.stack.outputs["ChangeStateMachineArn"])["executions"] == []


def test_a_put_with_a_patch_field_passes_the_model_and_the_front_function_names_the_field(server):
    # the front function runs the workflow's validation (issue 27.7): refused at once, nothing started
    status, answer = http("POST", f"{server.url}/v1/changes", put(change="c1", a=1) | {"set": {"a": 2}})
    assert status == 400 and answer["field"] == "set"
    assert answer["message"].startswith("Invalid request: set: is only for a patch")


def boto3_client(server, service):
    import boto3

    return boto3.client(service, endpoint_url=server.url, region_name="us-east-1")


def test_a_patch_sent_as_an_eventbridge_event_applies(server):
    from changeflow.client import Changeflow

    cf = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=server.url)
    assert cf.submit(put(change="c1", a=1, b=2)).status == "SUCCEEDED"
    execution = cf.submit_via_events(json.dumps(patch(change="c2", set={"b": 3}, remove=["a"])), timeout=60)
    assert execution.status == "SUCCEEDED", execution.cause
    assert cf.entity("doc#42")["latest"]["attributes"] == {"b": 3}


def test_the_cli_submits_a_patch_file_and_versions_shows_what_each_patch_changed(server, tmp_path, capsys):
    from changeflow.cli import main

    first, second = tmp_path / "put.json", tmp_path / "patch.json"
    first.write_text(json.dumps(put(change="c1", title="Q3", status="draft")))
    second.write_text(json.dumps(patch(change="c2", set={"status": "approved"}, remove=["title"])))
    assert main(["submit", str(first), str(second), "--endpoint-url", server.url]) == 0
    capsys.readouterr()
    assert main(["versions", "doc#42", "--endpoint-url", server.url]) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("2 "))
    assert "patch" in row and 'set {"status":"approved"}; remove title' in row
