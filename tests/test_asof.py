"""Time travel (issue 22 items 1-3, 5): the entity as in effect at an effective time (``asOf``), as the
table held it at a recorded time (``knownAt``), both, and the versions in effect during an interval; on the
read API's handler (the event a REST API sends), the CLI, and against the reference model, in O(log n)
reads. What is right comes from the design: the ratchet keeps effectiveAt non-decreasing in version order,
so the version in effect at T is the last one whose effectiveAt <= T (equal times: the later applied);
a deletion in effect is a 404 naming it; before the first version a 404; a version TTL took a 410."""

from __future__ import annotations

import copy
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from changeflow.checks.reference_model import Model
from changeflow_core import asof, codec, items, model, store
from changeflow_core.errors import NotFound
from conftest import ROOT, load_event, table_specs

T0 = 1_767_225_600_000
pytestmark = pytest.mark.enable_socket  # the CLI reaches the module's `changeflow serve` on 127.0.0.1


@pytest.fixture(scope="module")
def served():
    """One ``changeflow serve`` for the module (one embedded stack per process): its stack and client, and
    its endpoint for the CLI."""
    from changeflow.client import Changeflow
    from changeflow.local.server import EmbeddedServer
    from conftest import let_executions_end

    with EmbeddedServer(port=0, time_scale=0.0005) as running:
        yield running, Changeflow.for_embedded(running.stack)
        let_executions_end(running.stack)


@pytest.fixture
def shared(served):
    server, cf = served
    return server.stack, cf


def read(stack, entity: str, route: str = "/entities/{id}", **query) -> tuple[int, dict]:
    """GET ``route`` through the read API's handler, with the event a REST API sends."""
    path = route.replace("{id}", quote(entity, safe=""))
    event = load_event("functions/read_api.json")
    params = {k: str(v) for k, v in query.items()} or None
    event.update(resource=route, path=path, pathParameters={"id": entity}, queryStringParameters=params,
                 multiValueQueryStringParameters=None if params is None else {k: [v] for k, v in params.items()})
    event["requestContext"].update(resourcePath=route, path=f"/v1{path}")
    payload, failed = stack.lambdas.invoke(stack.function("ReadApiFunction"), event)
    assert not failed, payload
    return payload["statusCode"], json.loads(payload["body"])


def submit_all(cf, entity: str, requests: list[dict]) -> None:
    for request in requests:
        cf.submit({"entityId": entity, **request})


# --- the basic answers ------------------------------------------------------------------------------------
def test_as_of_answers_the_version_in_effect_with_who_and_which_execution(shared):
    stack, cf = shared
    submit_all(cf, "asof#1", [
        {"operation": "put", "changeId": "a", "effectiveAt": T0, "attributes": {"price": 10}, "actor": "ann"},
        {"operation": "put", "changeId": "b", "effectiveAt": T0 + 1000, "attributes": {"price": 12}, "actor": "bob"},
        {"operation": "put", "changeId": "c", "effectiveAt": T0 + 1000, "attributes": {"price": 13}, "actor": "cat"},
        {"operation": "delete", "changeId": "d", "effectiveAt": T0 + 2000},
        {"operation": "put", "changeId": "e", "effectiveAt": T0 + 3000, "attributes": {"price": 20}},
    ])
    # WHEN asked as of each moment that matters, as epoch ms and as ISO 8601
    status, body = read(stack, "asof#1", asOf=T0 + 999)
    assert status == 200 and body["version"] == 1 and body["attributes"] == {"price": 10} and body["actor"] == "ann"
    assert body["executionArn"].endswith(":" + body["executionArn"].rsplit(":", 1)[1]) and "asof-1--a--" in body["executionArn"]
    status, body = read(stack, "asof#1", asOf="2026-01-01T00:00:01Z")  # T0 + 1000: equal times, the later applied
    assert status == 200 and body["version"] == 3 and body["attributes"] == {"price": 13}
    status, body = read(stack, "asof#1", asOf=T0 + 2500)
    assert status == 404 and "was deleted" in body["message"] and "version 4 is a deletion" in body["message"]
    status, body = read(stack, "asof#1", asOf=T0 - 1)
    assert status == 404 and "did not exist as of 2025-12-31T23:59:59.999Z" in body["message"]
    status, body = read(stack, "asof#1", asOf=T0 + 10**9)
    assert status == 200 and body["version"] == 5


def test_known_at_answers_what_the_table_held_then_and_both_together_what_was_believed_then(shared):
    stack, cf = shared
    submit_all(cf, "known#1", [
        {"operation": "put", "changeId": "a", "effectiveAt": T0, "attributes": {"v": 1}},
        {"operation": "put", "changeId": "b", "effectiveAt": T0 + 5000, "attributes": {"v": 2}},
    ])
    recorded = {int(i["version"]): int(i["recordedAt"]) for i in store.all_history(cf.dynamodb, cf.history_table, "known#1")}
    # a late-arriving correction: effective between the two, recorded after both
    submit_all(cf, "known#1", [{"operation": "put", "changeId": "c", "effectiveAt": T0 + 5000, "attributes": {"v": 3}}])
    status, body = read(stack, "known#1", knownAt=recorded[1])
    assert status == 200 and body["version"] == 1
    status, body = read(stack, "known#1", knownAt=recorded[1] - 1)
    assert status == 404 and "first version was recorded later" in body["message"]
    # as believed at version 2's recording, the state at T0 + 5000 was version 2; today it is version 3
    status, body = read(stack, "known#1", asOf=T0 + 5000, knownAt=recorded[2])
    assert status == 200 and body["version"] == 2
    status, body = read(stack, "known#1", asOf=T0 + 5000)
    assert status == 200 and body["version"] == 3


@pytest.mark.skipif(os.environ.get("CHANGEFLOW_LAMBDA_RUNTIME") == "emulator",
                    reason="sets the write step's clock in-process; the Lambda runtime's handlers run elsewhere")
def test_recorded_time_never_goes_back_in_version_order_when_a_writers_clock_is_behind(shared):
    # GIVEN a write step whose host's clock is 10 s behind the previous writer's
    from changeflow.local.lambdas import fault_hook
    from changeflow_core import steps

    stack, cf = shared
    submit_all(cf, "skew#1", [{"operation": "put", "changeId": "a", "effectiveAt": T0, "attributes": {}}])
    real = steps.now_ms

    def behind(function, event, invoke):
        if function.logical_id != "UpdateLatestFunction":
            return invoke()
        steps.now_ms = lambda: real() - 10_000
        try:
            return invoke()
        finally:
            steps.now_ms = real

    with fault_hook(stack.lambdas, behind):
        submit_all(cf, "skew#1", [{"operation": "put", "changeId": "b", "effectiveAt": T0, "attributes": {}}])
    first, second = store.all_history(cf.dynamodb, cf.history_table, "skew#1")
    # THEN version 2 records its predecessor's time, not its clock's: known-at can search in version order
    assert int(second["recordedAt"]) == int(first["recordedAt"])
    status, body = read(stack, "skew#1", knownAt=int(first["recordedAt"]))
    assert status == 200 and body["version"] == 2


def test_a_version_ttl_took_is_410_naming_it_never_another_version(shared):
    stack, cf = shared
    submit_all(cf, "ttl#1", [{"operation": "put", "changeId": f"c{i}", "effectiveAt": T0 + i * 1000,
                              "attributes": {"i": i}} for i in range(1, 7)])
    # GIVEN versions 1 and 2 expired (as the retention window tags them; TTL deletes lazily): 1 deleted, 2 tagged
    cf.dynamodb.delete_item(TableName=cf.history_table, Key={"pk": {"S": "ttl#1"}, "sk": {"S": model.history_sk(1)}})
    cf.dynamodb.update_item(TableName=cf.history_table, Key={"pk": {"S": "ttl#1"}, "sk": {"S": model.history_sk(2)}},
                            UpdateExpression="SET expiresAt = :past", ExpressionAttributeValues={":past": {"N": "1"}})
    # THEN the version in effect is named, never served: version 2's item (expired, not yet deleted) still says
    # when version 1 took effect, and version 3's when version 2 did
    for instant, gone in ((T0 + 1000, 1), (T0 + 1999, 1), (T0 + 2500, 2)):
        status, body = read(stack, "ttl#1", asOf=instant)
        assert status == 410 and f"is version {gone}, and history no longer holds version {gone}" in body["message"]
    status, body = read(stack, "ttl#1", asOf=T0 + 3000)
    assert status == 200 and body["version"] == 3
    status, body = read(stack, "ttl#1", asOf=T0)  # before version 1 took effect: it did not exist
    assert status == 404 and "did not exist" in body["message"]
    # WHEN TTL deletes version 2 too, nothing held says when version 1 took effect: whether it did by T0, or by
    # T0 + 1000, history can no longer say; version 2's time is still known (version 3 records it)
    cf.dynamodb.delete_item(TableName=cf.history_table, Key={"pk": {"S": "ttl#1"}, "sk": {"S": model.history_sk(2)}})
    for instant in (T0, T0 + 1000):
        status, body = read(stack, "ttl#1", asOf=instant)
        assert status == 410 and "is version 1 or an older one, and history no longer holds version 1" in body["message"]
    status, body = read(stack, "ttl#1", asOf=T0 + 2500)
    assert status == 410 and "is version 2, and history no longer holds version 2" in body["message"]


@pytest.mark.parametrize("query,field", [({"asOf": "yesterday"}, "asOf"), ({"asOf": "2026-13-01T00:00:00Z"}, "asOf"),
                                         ({"knownAt": "-5"}, "knownAt"), ({"asOf": "2026-01-01T00:00:00+02:00"}, "asOf"),
                                         ({"asOf": "1" * 16}, "asOf"), ({"asOf": "١٢"}, "asOf")])
def test_a_time_that_is_not_epoch_ms_or_utc_iso_is_a_400_naming_it(shared, query, field):
    stack, cf = shared
    status, body = read(stack, "asof#1", **query)
    assert status == 400 and body["message"].startswith(field + ":")


# --- ranges -------------------------------------------------------------------------------------------------
def test_a_range_lists_the_versions_in_effect_during_it_including_the_one_at_its_start(shared):
    stack, cf = shared
    submit_all(cf, "range#1", [{"operation": "put", "changeId": f"c{i}", "effectiveAt": T0 + i * 1000,
                                "attributes": {"i": i}} for i in range(1, 9)])
    route = "/entities/{id}/versions"
    status, body = read(stack, "range#1", route, **{"from": T0 + 2500, "to": T0 + 5000})
    assert status == 200 and [v["version"] for v in body["items"]] == [5, 4, 3, 2]
    assert (body["first"], body["last"]) == (2, 5)
    # paged: the cursor goes on within the range, and one from another range is refused
    status, page = read(stack, "range#1", route, **{"from": T0 + 2500, "to": T0 + 5000, "limit": 3})
    assert [v["version"] for v in page["items"]] == [5, 4, 3] and page["nextCursor"]
    status, rest = read(stack, "range#1", route, **{"from": T0 + 2500, "to": T0 + 5000, "cursor": page["nextCursor"]})
    assert [v["version"] for v in rest["items"]] == [2]
    status, refused = read(stack, "range#1", route, **{"from": T0 + 6000, "to": T0 + 7000, "cursor": page["nextCursor"]})
    assert status == 400 and refused["message"].startswith("cursor")
    status, body = read(stack, "range#1", route, **{"from": T0 - 5000, "to": T0 - 1})
    assert status == 200 and body["items"] == []
    status, body = read(stack, "range#1", route, **{"from": T0 + 5000, "to": T0 + 4000})
    assert status == 400 and body["message"].startswith("from")
    status, body = read(stack, "range#1", route, **{"from": T0})
    assert status == 400 and body["message"].startswith("to")


def test_versions_with_equal_times_count_alike_at_either_end_of_a_range(shared):
    """Three versions effective at the same instant, then a later one: a range that starts exactly at that
    instant lists all three, as one that ends there does (it listed only the last, found by the model)."""
    stack, cf = shared
    submit_all(cf, "range#2", [{"operation": "put", "changeId": f"c{i}", "effectiveAt": T0 + (1000 if i == 4 else 0),
                                "attributes": {"i": i}} for i in range(1, 5)])
    route = "/entities/{id}/versions"
    for start, end, listed in ((T0, T0, [3, 2, 1]), (T0 - 1, T0, [3, 2, 1]), (T0, T0 + 1000, [4, 3, 2, 1]),
                               (T0 + 1, T0 + 1000, [4, 3]), (T0 + 1000, T0 + 2000, [4])):
        status, body = read(stack, "range#2", route, **{"from": start, "to": end})
        assert status == 200 and [v["version"] for v in body["items"]] == listed, (start, end, body)


# --- against the reference model -------------------------------------------------------------------------
OPERATIONS = st.one_of(
    st.builds(lambda t, v: {"operation": "put", "effectiveAt": T0 + t * 1000, "attributes": {"v": v}},
              st.integers(0, 4), st.integers(0, 9)),
    st.builds(lambda t, v: {"operation": "patch", "effectiveAt": T0 + t * 1000, "set": {"p": v}},
              st.integers(0, 4), st.integers(0, 9)),
    st.builds(lambda t: {"operation": "delete", "effectiveAt": T0 + t * 1000}, st.integers(0, 4)),
    st.builds(lambda t, k: {"operation": "rollback", "effectiveAt": T0 + t * 1000, "toVersion": k},
              st.integers(0, 4), st.integers(1, 3)),
    st.builds(lambda k: {"operation": "redact", "redactVersion": k, "reason": "erasure request"}, st.integers(1, 4)),
)
COUNTER = iter(range(10**6))


def apply_to_model(reference: Model, request: dict) -> None:
    """The model's step for one change; a redact is a version of its own that changes no content and takes
    effect when the version before it did (changeflow_core.chainwork), which the reference model leaves out."""
    if request["operation"] != "redact":
        reference.apply(request)
        return
    latest, version = reference.latest, len(reference.versions) + 1
    ids = {**latest["changeIds"], request["changeId"]: version}
    reference.latest = {**latest, "version": version, "changeId": request["changeId"],
                        "changeIds": dict(sorted(ids.items(), key=lambda kv: kv[1])[-model.RECENT_CHANGE_IDS:])}
    reference.versions.append({**{k: v for k, v in reference.latest.items() if k != "changeIds"}, "redact": True})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(OPERATIONS, min_size=1, max_size=8), st.integers(0, 3))
@example(requests=[  # known at v4, as of T0+2000: v3 deleted between v2 (expired) and v4; once 5 requests
    {"operation": "delete", "effectiveAt": T0 + 0 * 1000}, {"operation": "delete", "effectiveAt": T0 + 2 * 1000},
    {"operation": "delete", "effectiveAt": T0 + 3 * 1000},
    {"operation": "put", "effectiveAt": T0 + 3 * 1000, "attributes": {"v": 2}},
    {"operation": "patch", "effectiveAt": T0 + 3 * 1000, "set": {"p": 8}},
    {"operation": "patch", "effectiveAt": T0 + 3 * 1000, "set": {"p": 4}}], expired=3)
def test_every_as_of_answer_matches_the_reference_model_at_every_boundary(shared, requests, expired):
    """Random histories (puts, patches, deletes, rollbacks, redactions; equal times and stale changes common)
    run through the workflow, then the oldest ``expired`` versions taken by the retention window (every other
    one deleted by TTL, the rest tagged and not yet deleted): every as-of, known-at and both-together answer
    at every time that matters is the model's, a version no longer held is a 410 naming it (never another
    version), and each read makes at most two requests (one more per redact version it steps back over, and
    one more for both together about versions no longer held)."""
    stack, cf = shared
    entity = f"model#{next(COUNTER)}"
    reference = Model()
    for i, request in enumerate(requests):
        request = {**request, "changeId": f"c{i}"}
        before = copy.deepcopy(reference.__dict__)
        if request["operation"] == "redact" and (not reference.versions or request["redactVersion"] > len(
                reference.versions) or reference.versions[request["redactVersion"] - 1]["deleted"]):
            before = None  # nothing to redact: the workflow refuses it (NotFound)
        else:
            apply_to_model(reference, request)
        execution = cf.submit({"entityId": entity, **request})
        held = len(store.all_history(cf.dynamodb, cf.history_table, entity))
        if before is not None and held == len(reference.versions) - 1:
            # the workflow refused what the model took: a rollback to, or a patch of, content a redaction erased
            assert execution.status == "FAILED", (request, execution.error)
            reference.__dict__.update(before)
    stored = store.all_history(cf.dynamodb, cf.history_table, entity)
    assert [int(i["version"]) for i in stored] == [v["version"] for v in reference.versions]
    redacted = {int(i["version"]) for i in stored if i.get(model.REDACTED) is not None}
    recorded = [int(i["recordedAt"]) for i in stored]
    assert recorded == sorted(recorded)
    gone = min(expired, len(stored) - 1)  # the retention window never takes the newest version
    for version in range(1, gone + 1):
        key = {"pk": {"S": entity}, "sk": {"S": model.history_sk(version)}}
        if version % 2:
            cf.dynamodb.delete_item(TableName=cf.history_table, Key=key)
        else:
            cf.dynamodb.update_item(TableName=cf.history_table, Key=key, UpdateExpression="SET expiresAt = :past",
                                    ExpressionAttributeValues={":past": {"N": "1"}})
    case = Case(stack, entity, reference, gone, redacted)
    times = sorted(set(reference.instants()) | {T0 - 1})
    for instant in times:
        case.check(reference.as_of(instant), instant, asOf=instant)
    # known-at: the table's recorded times (the write step's, not the request's) say how many versions were
    # recorded by then; the model answers from those first versions, alone and with every as-of time
    for instant in sorted({t + d for t in recorded for d in (-1, 0, 1)}):
        known = sum(1 for t in recorded if t <= instant)
        case.check(reference.as_of(None, known), instant, knownAt=instant)
        for as_of in times:
            case.check(reference.as_of(as_of, known), (as_of, instant), asOf=as_of, knownAt=instant)
    # ranges: every pair of the instants that matter (the versions history still holds)
    for start in times:
        for end in (t for t in times if t >= start):
            status, body = read(stack, entity, "/entities/{id}/versions", **{"from": start, "to": end})
            expected = [v for v in reference.during(start, end) if v > gone]
            assert status == 200 and [v["version"] for v in body["items"]][::-1] == expected, (start, end, body)


@dataclass
class Case:
    """One history's expected answers: the model's, with the versions the retention window took
    (``gone``: 1 to gone) and the ones a redaction erased (``redacted``: the table's own record)."""

    stack: Any
    entity: str
    reference: Model
    gone: int = 0
    redacted: set = field(default_factory=set)

    def check(self, expected, when, **query) -> None:
        reads = self.stack.function("ReadApiFunction").api_calls
        reads.clear()
        status, body = read(self.stack, self.entity, **query)
        steps, beyond = 0, 0
        if expected is None:  # did not exist; with version 1 gone, history may no longer be able to say
            never = "does not exist" if not self.reference.versions else "did not exist"
            assert (status == 404 and never in body["message"]) or (
                self.gone and status == 410 and "or an older one" in body["message"]), (when, body)
            beyond = 1 if self.gone else 0
        elif expected["version"] <= self.gone:  # named, never served: exactly, or the newest it may be
            named = int(re.search(r"is version (\d+)", body.get("message", "")).group(1)) if status == 410 else None
            assert status == 410 and expected["version"] <= named <= self.gone, (when, expected, body)
            assert named == expected["version"] or "or an older one" in body["message"], (when, expected, body)
            beyond = 1  # both together, about versions no longer held: the first record may take a third read
        elif expected["deleted"]:
            assert status == 404 and f"version {expected['version']} is a deletion" in body["message"], (when, body)
        else:
            content = expected
            while content.get("redact") and content["version"] > 1:  # not a change of content: the one before
                content, steps = self.reference.versions[content["version"] - 2], steps + 1
            if content["version"] <= self.gone or content["version"] in self.redacted:
                assert status == 410, (when, expected, body)
            else:
                assert status == 200 and (body["version"], body["attributes"]) == (
                    content["version"], content["attributes"]), (when, expected, body)
        if os.environ.get("CHANGEFLOW_LAMBDA_RUNTIME") != "emulator":  # the handler's own calls, in-process
            requests = sum(1 for service, *_ in reads if service == "dynamodb")
            assert requests <= 2 + 2 * steps + (beyond if len(query) == 2 else 0), (
                when, query, requests, [op for _, op, *_ in reads])


# --- cost: two requests at any length; the binary search where the indexes cannot say -----------------------
def write_history(client, table: str, entity: str, n: int, indexed_from: int | None = 1) -> None:
    """n versions straight into the table as the workflow leaves them (times non-decreasing), v0 = n; the
    history items from ``indexed_from`` on carry the time indexes' keys (``None``: none does, as items written
    before the indexes existed)."""
    def item(version: int, sk: str) -> dict:
        return {"pk": entity, "sk": sk, "version": version, "effectiveAt": T0 + version * 10,
                "recordedAt": T0 + version * 10 + 5, "changeId": f"c{version}", "operation": "put", "v": version}

    def history(version: int) -> dict:
        keyed = indexed_from is not None and version >= indexed_from
        before = items.latest_state(item(version - 1, model.LATEST_SK)) if version > 1 else None
        return {**item(version, model.history_sk(version)), **(items.index_keys(version, before) if keyed else {})}

    batch = [codec.serialize_item(history(v)) for v in range(1, n + 1)] + [codec.serialize_item(item(n, model.LATEST_SK))]
    for start in range(0, len(batch), 25):
        client.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": i}} for i in batch[start:start + 25]]})


def reads_of_every_kind(cf, table: str, entity: str, n: int, history_table: str | None = None) -> int:
    """As of, known at and both, at the first, second, a third, the middle, the one before the newest and the
    newest version (and 1 ms before the first: did not exist): each answer checked; the most requests one took."""
    calls = []
    record = lambda model, **kw: calls.append(model.name)  # noqa: E731
    cf.dynamodb.meta.events.register("before-call.dynamodb", record)
    worst = 0
    try:
        for version in (1, 2, n // 3, n // 2, n - 1, n):
            for as_of, known_at in ((T0 + version * 10, None), (None, T0 + version * 10 + 5),
                                    (T0 + version * 10, T0 + n * 10 + 5), (T0 + n * 10, T0 + version * 10 + 5),
                                    (T0 + version * 10, T0 + version * 10 + 5)):
                calls.clear()
                found, history = asof.version_at(cf.dynamodb, table, history_table or table, entity, as_of, known_at)
                assert found["version"] == version and found["attributes"] == {"v": version}, (version, as_of, known_at)
                assert len(calls) == history.requests
                worst = max(worst, len(calls))
        for as_of, known_at in ((T0 + 9, None), (None, T0 + 14), (T0 + 9, T0 + 10**6)):
            calls.clear()
            with pytest.raises(NotFound, match="did not exist"):
                asof.version_at(cf.dynamodb, table, history_table or table, entity, as_of, known_at)
            worst = max(worst, len(calls))
    finally:
        cf.dynamodb.meta.events.unregister("before-call.dynamodb", record)
    return worst


@pytest.mark.parametrize("n", [10, 1000])
def test_as_of_known_at_and_both_take_at_most_two_requests_at_any_length(shared, n):
    stack, cf = shared
    write_history(cf.dynamodb, cf.table, f"long#{n}", n)
    assert reads_of_every_kind(cf, cf.table, f"long#{n}", n) <= 2


def test_with_a_separate_history_table_its_indexes_answer_in_two_requests(shared):
    """SeparateHistoryTable=true: the indexes are the history table's; v0 is read from the other table."""
    from changeflow.local.template import Template

    stack, cf = shared
    template = Template(ROOT / "template.yaml", overrides={"SeparateHistoryTable": "true", "TimeIndexes": "true"})
    names = {logical_id: f"separate-{logical_id}" for logical_id in ("ChangeTable", "HistoryTable")}
    physical = {template.physical_name(logical_id): name for logical_id, name in names.items()}
    for spec in table_specs(template):
        if spec["TableName"] in physical:
            cf.dynamodb.create_table(**{**spec, "TableName": physical[spec["TableName"]]})
    write_history(cf.dynamodb, names["HistoryTable"], "separate#1", 1000)  # v0 too: moved below
    latest = cf.dynamodb.get_item(TableName=names["HistoryTable"],
                                  Key={"pk": {"S": "separate#1"}, "sk": {"S": model.LATEST_SK}})["Item"]
    cf.dynamodb.delete_item(TableName=names["HistoryTable"], Key={"pk": {"S": "separate#1"}, "sk": {"S": model.LATEST_SK}})
    cf.dynamodb.put_item(TableName=names["ChangeTable"], Item=latest)
    assert reads_of_every_kind(cf, names["ChangeTable"], "separate#1", 1000, names["HistoryTable"]) <= 2


@pytest.mark.parametrize("indexed_from", [None, 400])
def test_versions_written_before_the_indexes_are_found_by_the_binary_search(shared, indexed_from):
    """Items that carry no index keys (written before the indexes existed, then copied into a table made with
    them): the binary search finds them, all of them or the oldest 399, in O(log n) requests."""
    stack, cf = shared
    n, entity = 1000, f"legacy#{indexed_from}"
    write_history(cf.dynamodb, cf.table, entity, n, indexed_from)
    assert reads_of_every_kind(cf, cf.table, entity, n) <= 2 * math.log2(n) + 4


def test_a_table_created_without_the_indexes_is_read_by_the_binary_search(shared):
    """TimeIndexes=false (or a stack deployed before it): the first read learns that the index does not
    exist (one refused request, once per client and table), and every read searches."""
    stack, cf = shared
    table = "changeflow-without-indexes"
    cf.dynamodb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                             AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                                   {"AttributeName": "sk", "AttributeType": "S"}],
                             KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                        {"AttributeName": "sk", "KeyType": "RANGE"}])
    write_history(cf.dynamodb, table, "plain#1", 100)
    found, history = asof.version_at(cf.dynamodb, table, table, "plain#1", as_of=T0 + 505)
    assert found["version"] == 50
    refused = history.requests
    found, history = asof.version_at(cf.dynamodb, table, table, "plain#1", as_of=T0 + 505)
    assert found["version"] == 50 and history.requests == refused - 1  # no index query the second time
    assert reads_of_every_kind(cf, table, "plain#1", 100) <= 2 * math.log2(100) + 2


# --- the command line ---------------------------------------------------------------------------------------
def cli_answer(capsys) -> dict:
    """The CLI's one JSON answer on stdout. The stack's background functions (the feed's enrichment, the
    scheduled digest) run in threads of this process; one whose EMF line is printed while pytest swaps
    sys.stdout for a capture writes it to the capture instead of its function's log, so EMF lines are left out."""
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    answers = [json.loads(line) for line in lines if not line.startswith('{"_aws"')]
    assert len(answers) == 1, lines
    return answers[0]


def test_the_cli_answers_as_of_known_at_and_ranges_with_clear_errors(served, capsys):
    from changeflow.cli import main

    server, cf = served
    submit_all(cf, "cli#1", [{"operation": "put", "changeId": f"c{i}", "effectiveAt": T0 + i * 1000,
                              "attributes": {"i": i}} for i in range(1, 4)])
    remote = ["--endpoint-url", server.url]
    assert main(["versions", "cli#1", "--as-of", "2026-01-01T00:00:02.500Z", "--json", *remote]) == 0
    assert cli_answer(capsys)["version"] == 2
    assert main(["versions", "cli#1", "--from", str(T0 + 1500), "--to", str(T0 + 2000), "--json", *remote]) == 0
    listed = cli_answer(capsys)
    assert [v["version"] for v in listed["versions"]] == [1, 2] and (listed["first"], listed["last"]) == (1, 2)
    assert main(["versions", "cli#1", "--as-of", str(T0), *remote]) == 1
    assert "did not exist as of" in capsys.readouterr().err
    for wrong in (["--as-of", "tuesday"], ["--from", "1"], ["--from", "1", "--to", "2", "--as-of", "1"],
                  ["--from", "5", "--to", "1"]):
        assert main(["versions", "cli#1", *wrong, *remote]) == 2, wrong
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err


# --- the console ----------------------------------------------------------------------------------------------
def test_the_console_answers_as_of_on_the_entity_page_and_marks_the_version_in_effect(shared):
    from werkzeug.test import Client

    from changeflow.client import Changeflow
    from changeflow.console import data
    from changeflow.console.app import Console

    stack, cf = shared
    submit_all(cf, "console#1", [{"operation": "put", "changeId": f"c{i}", "effectiveAt": T0 + i * 1000,
                                  "attributes": {"i": i}} for i in range(1, 4)])
    browser = Client(Console(data.Reader(Changeflow.for_embedded(stack))))
    page = browser.get("/console/entity", query_string={"id": "console#1", "asOf": "2026-01-01T00:00:02.5Z"})
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert 'id="as-of-answer" class="ok">as of 2026-01-01T00:00:02.500Z: version 2' in html
    assert 'id="v2" class="version in-effect"' in html and 'id="v3"' not in html  # the page starts there
    page = browser.get("/console/entity", query_string={"id": "console#1", "asOf": str(T0)})
    assert "did not exist as of" in page.get_data(as_text=True)
    assert browser.get("/console/entity", query_string={"id": "console#1", "asOf": "soon"}).status_code == 400
