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


# --- the rules, one by one (docs/api.md, "Concurrent changes: merged by field") --------------------------
def put(at, change, entity="doc#1", **attributes):
    return {"entityId": entity, "operation": "put", "attributes": attributes, "effectiveAt": at, "changeId": change}


def patch(at, change, entity="doc#1", set=None, remove=None):
    return {"entityId": entity, "operation": "patch", "effectiveAt": at, "changeId": change,
            **({"set": set} if set is not None else {}), **({"remove": remove} if remove is not None else {})}


def verified(cf, entity="doc#1"):
    from changeflow.audit.verify import verify

    assert verify(cf, entity).problems == []
    return cf.entity(entity)


def test_a_late_patch_applies_the_fields_no_newer_change_wrote_and_names_the_rest(cf):
    # GIVEN a put at T0, then status patched at T0 + 20
    cf.submit(put(T0, "base", status="draft", owner="ana", pages=1))
    cf.submit(patch(T0 + 20, "approve", set={"status": "approved"}))
    # WHEN a patch effective at T0 + 10 arrives late, naming status and owner
    late = cf.submit(patch(T0 + 10, "late", set={"status": "review", "owner": "bob"}))
    # THEN it applies owner (nothing newer wrote it), not status, and says so
    assert late.output == {"entityId": "doc#1", "operation": "patch", "outcome": "applied", "version": 3,
                           "changeId": "late", "effectiveAt": T0 + 10, "superseded": ["status"]}
    entity = verified(cf)
    newest = entity["versions"][-1]
    assert newest["attributes"] == {"status": "approved", "owner": "bob", "pages": 1}
    assert newest["patch"] == {"set": {"status": "review", "owner": "bob"}, "remove": [], "superseded": ["status"]}
    # AND the version is effective at the newest of its fields' times; each other field's time is shown
    assert newest["effectiveAt"] == T0 + 20
    assert newest["fieldTimes"] == {"owner": T0 + 10, "pages": T0}
    assert "fieldTimes" not in entity["versions"][0]  # a put: every field at its effectiveAt


def test_a_patch_is_stale_only_when_a_newer_change_wrote_every_field_it_names(cf):
    cf.submit(put(T0, "base", a=0, b=0))
    cf.submit(patch(T0 + 20, "a", set={"a": 1}))
    cf.submit(patch(T0 + 30, "b", remove=["b"]))
    before = cf.entity("doc#1")
    stale = cf.submit(patch(T0 + 10, "old", set={"b": 2}, remove=["a"]))
    assert stale.output["outcome"] == "stale" and stale.output["superseded"] == ["b", "a"]
    assert stale.output["version"] == 3 and cf.entity("doc#1") == before  # nothing written
    # a removed field keeps its time: an older patch cannot bring it back, a newer one can
    assert cf.submit(patch(T0 + 25, "older-set", set={"b": 3})).output["outcome"] == "stale"
    assert cf.submit(patch(T0 + 35, "newer-set", set={"b": 4})).output["outcome"] == "applied"
    assert verified(cf)["latest"]["attributes"] == {"a": 1, "b": 4}


def test_at_equal_times_a_field_ends_with_the_greater_value_whichever_patch_is_recorded_first(cf):
    # two patches of one field at one time, recorded in either order: the same field value (and a field
    # the put lacked is added at the put's very time: any value beats none)
    for entity, order in (("doc#ab", ("x", "y")), ("doc#ba", ("y", "x"))):
        cf.submit(put(T0, "base", entity, status="draft"))
        for change in order:
            value = {"x": "approved", "y": "rejected"}[change]
            cf.submit(patch(T0, change, entity, set={"status": value, f"by_{change}": True}))
        assert verified(cf, entity)["latest"]["attributes"] == {"status": "rejected", "by_x": True, "by_y": True}
    # a removal never wins a tie
    removal = cf.submit(patch(T0, "remove", "doc#ab", remove=["status"], set={"note": 1}))
    assert removal.output["superseded"] == ["status"]


def test_a_put_is_the_whole_document_at_its_time_stale_if_older_than_any_field(cf):
    cf.submit(put(T0, "base", a=0))
    cf.submit(patch(T0 + 20, "a", set={"a": 1}))
    # older than the newest field's time: stale, though newer than the put before it
    assert cf.submit(put(T0 + 10, "old-put", b=1)).output["outcome"] == "stale"
    assert cf.submit(put(T0 + 30, "new-put", b=2)).output["outcome"] == "applied"
    latest = verified(cf)["latest"]
    assert latest["attributes"] == {"b": 2} and "fieldTimes" not in latest  # every field at its time again
    # so a patch older than the put is stale for every field, those the put did not have included
    late = cf.submit(patch(T0 + 25, "late", set={"a": 9, "c": 1}))
    assert late.output["outcome"] == "stale" and late.output["superseded"] == ["a", "c"]


def test_a_patch_after_a_delete_is_stale_if_older_and_not_found_if_newer(cf):
    cf.submit(put(T0, "base", a=0))
    cf.submit({"entityId": "doc#1", "operation": "delete", "effectiveAt": T0 + 10, "changeId": "d"})
    assert cf.submit(patch(T0 + 5, "older", set={"a": 1})).output["outcome"] == "stale"
    newer = cf.submit(patch(T0 + 15, "newer", set={"a": 1}))
    assert (newer.status, newer.error) == ("FAILED", "NotFound")  # no upsert: a put creates it again


def test_as_of_a_time_between_a_late_patch_and_the_version_it_follows_answers_the_versions_as_recorded(cf):
    from changeflow_core import asof

    cf.submit(put(T0, "base", a=0, b=0))
    cf.submit(patch(T0 + 20, "a", set={"a": 1}))
    cf.submit(patch(T0 + 10, "late-b", set={"b": 1}))  # recorded last, effective before version 2
    versions = cf.entity("doc#1")["versions"]
    assert [v["effectiveAt"] for v in versions] == [T0, T0 + 20, T0 + 20]

    def at(instant, known=None):
        view, _ = asof.version_at(cf.dynamodb, cf.table, cf.history_table, "doc#1", as_of=instant, known_at=known)
        return view["version"], view["attributes"]

    # as of T0 + 15: the version in effect then, as the table recorded versions (b's late value is in
    # version 3, in effect from T0 + 20, the entity's time when it was recorded)
    assert at(T0 + 15) == (1, {"a": 0, "b": 0})
    assert at(T0 + 20) == (3, {"a": 1, "b": 1})
    # known at version 2's recorded time, as of T0 + 20: before the late patch was recorded
    assert at(T0 + 20, versions[1]["recordedAt"]) == (2, {"a": 1, "b": 0})
    # and version 3 tells when b's value took effect
    assert versions[2]["fieldTimes"] == {"b": T0 + 10}


def test_a_resend_after_the_window_is_stale_and_never_reverts_a_field(cf):
    # docs/identity.md: a change sent again after 16 others keeps its first receipt as its effectiveAt.
    # GIVEN p1 sets status with the server's time, p2 sets it again later, then 16 other patches
    cf.submit(put(T0, "base", status="draft"))
    first = {"entityId": "doc#1", "operation": "patch", "set": {"status": "approved", "by": "p1"}, "changeId": "p1"}
    assert cf.submit(first).output["outcome"] == "applied"
    cf.submit({"entityId": "doc#1", "operation": "patch", "set": {"status": "final"}, "changeId": "p2"})
    for i in range(16):
        cf.submit({"entityId": "doc#1", "operation": "patch", "set": {f"n{i}": i}, "changeId": f"other{i}"})
    versions = len(cf.entity("doc#1")["versions"])
    # WHEN p1 is delivered again (a new execution of the same change: v0 no longer remembers its id)
    again = cf.submit(first)
    # THEN it is stale: status keeps p2's value, by keeps p1's own (its time is p1's: equal, so no second write)
    assert again.output["outcome"] == "stale" and again.output["superseded"] == ["status", "by"]
    latest = verified(cf)["latest"]
    assert latest["attributes"]["status"] == "final" and len(cf.entity("doc#1")["versions"]) == versions


def test_versions_on_the_command_line_names_the_superseded_fields(cf, capsys, monkeypatch):
    from changeflow.cli import main
    from changeflow.client import targets

    cf.submit(put(T0, "base", a=0))
    cf.submit(patch(T0 + 20, "a", set={"a": 1}))
    cf.submit(patch(T0 + 10, "late", set={"a": 2, "b": 2}))
    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    assert main(["versions", "doc#1"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("3 "))
    assert 'set {"a":2,"b":2}; superseded a' in row


def test_a_field_clock_costs_a_few_bytes_per_field_and_a_put_none():
    # make cost's "field clocks' share" (docs/cost.md), computed from the items the write step builds
    from changeflow.cost.fieldclocks import field_clock_share

    rows = field_clock_share(sizes=(1000,))
    one = rows["one field patched, newer than v0"][1000]
    each = rows["every field patched at its own time (within a day)"][1000]
    assert 0 < one["item_bytes"] <= 40  # the two attribute names, a base and one field
    assert (each["item_bytes"] - one["item_bytes"]) / 9 <= 10  # each further field: its name and a delta
    assert each["write_units"]["with"] - each["write_units"]["without"] in (0, 2)  # at most a 1 KB boundary


def test_a_redaction_keeps_the_field_clocks_so_an_older_patch_stays_superseded(cf):
    # a redaction changes no content of its own: it takes its predecessor's time and field clocks
    cf.submit(put(T0, "base", a=0, b=0))
    cf.submit(patch(T0 + 20, "a", set={"a": 1}))
    cf.submit(patch(T0 + 10, "late-b", set={"b": "secret"}))
    redaction = cf.submit({"entityId": "doc#1", "operation": "redact", "redactVersion": 3, "reason": "erasure",
                           "changeId": "redact-3"})
    assert redaction.output["outcome"] == "applied", redaction.cause
    versions = verified(cf)["versions"]
    assert versions[3]["fieldTimes"] == versions[2]["fieldTimes"] == {"b": T0 + 10}
    assert cf.submit(patch(T0 + 5, "older-b", set={"b": "old"})).output["outcome"] == "stale"
