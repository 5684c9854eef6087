"""Each step handler in-process against moto, loaded the way Lambda loads it, fed the payloads in
events/functions/ (the same files `sam local invoke FUNCTION -e FILE` takes)."""

from __future__ import annotations

import json

import pytest

from conftest import EVENTS, ROOT, load_event, proven

FUNCTION_DIRS = sorted(p.name for p in (ROOT / "functions").iterdir() if (p / "app.py").is_file())


def test_every_function_has_an_event_payload_and_every_payload_a_function():
    payloads = {p.stem for p in (EVENTS / "functions").glob("*.json")}
    assert payloads == set(FUNCTION_DIRS)
    for path in (EVENTS / "functions").glob("*.json"):
        # sam local invoke passes it as the event: an object, or for the feed's enrichment the array of stream
        # records a pipe sends (a batch, even of one)
        assert isinstance(json.loads(path.read_text()), list if path.stem == "feed_events" else dict), path.name


def test_handlers_are_thin():
    for name in FUNCTION_DIRS:
        lines = (ROOT / "functions" / name / "app.py").read_text().splitlines()
        limit = 70 if name == "read_api" else 60  # the read API is a router: four routes and their mapping
        assert len(lines) <= limit, f"{name}/app.py has {len(lines)} lines: move logic to changeflow_core"
        assert not (ROOT / "functions" / name / "__init__.py").exists()


def test_event_payloads_drive_the_steps_in_workflow_order(lambda_module, context, tables):
    # GIVEN the five handlers and the table, WHEN each events/functions payload is fed to its handler
    client, table = tables
    fetched = lambda_module("fetch_latest").lambda_handler(load_event("functions/fetch_latest.json"), context)
    assert fetched["latest"] is None and fetched["change"]["changeId"] == "example-put-1"
    # the writer of a put: its published version (the payload names no writers: the environment's)
    assert fetched["writer"].endswith(":function:changeflow-UpdateLatestFunction:1")
    assert fetched["content"]["logins"] == {"N": "0"} and fetched["attempt"] == 1  # DynamoDB JSON, exact

    written = lambda_module("update_latest").lambda_handler(load_event("functions/update_latest.json"), context)
    assert written["outcome"] == "applied" and written["version"] == 1

    history = lambda_module("put_history").lambda_handler(load_event("functions/put_history.json"), context)
    assert history == {"entityId": "user#1001", "operation": "put", "outcome": "applied", "version": 1,
                       "changeId": "example-put-1", "effectiveAt": 1767225600000, "superseded": [],
                       "history": "written", "expiry": {"tagged": [], "expiresAt": None}}  # no retention window

    tombstone = lambda_module("delete_tombstone").lambda_handler(load_event("functions/delete_tombstone.json"), context)
    assert tombstone["outcome"] == "applied" and tombstone["version"] == 2

    # the retired tag step (kept for earlier releases' executions) still answers its own payload
    tagged = lambda_module("tag_ttl").lambda_handler(load_event("functions/tag_ttl.json"), context)
    assert tagged == {"tagged": [], "expiresAt": None}  # no retention window by default

    # THEN the table holds v0 (a tombstone) and history version 1 with exactly v0's content at 1
    items = {i["sk"]["S"]: i for i in client.scan(TableName=table)["Items"]}
    assert set(items) == {"v0", "v#0000000001"}
    assert items["v0"]["deleted"] == {"BOOL": True} and "expiresAt" in items["v0"]
    assert items["v#0000000001"]["name"] == {"S": "Ada"}
    # a number carried as DynamoDB JSON keeps all 38 digits from the state into the item
    assert items["v#0000000001"]["logins"] == {"N": "0.12345678901234567890123456789012345678"}


def test_fetch_handler_ends_a_stale_change_with_its_outcome(lambda_module, context, tables):
    # GIVEN v0 at a newer effectiveAt
    from changeflow_core.decisions import ChangeIsStale

    lambda_module("update_latest").lambda_handler(load_event("functions/update_latest.json"), context)
    event = load_event("functions/fetch_latest.json")
    event["request"]["request"]["effectiveAt"] -= 1
    event["request"]["request"]["changeId"] = "older"
    # WHEN the fetch step decides THEN it raises the named signal whose message is the execution's output
    with pytest.raises(ChangeIsStale) as raised:
        lambda_module("fetch_latest").lambda_handler(proven(event, "fetch_latest"), context)
    assert json.loads(str(raised.value)) == {"entityId": "user#1001", "operation": "put", "outcome": "stale",
                                             "version": 1, "changeId": "older", "effectiveAt": 1767225599999,
                                             "superseded": []}
    # and the report step (the history step's function) turns it back into the output, as the state machine
    # passes it, writing nothing
    cause = {"errorMessage": str(raised.value), "errorType": "ChangeIsStale"}
    report = {"stale": cause, "execution": {"name": "e-1"}}
    client, table = tables
    before = client.scan(TableName=table)["Items"]
    assert lambda_module("put_history").lambda_handler(report, context) == raised.value.result
    assert client.scan(TableName=table)["Items"] == before
    with pytest.raises(ValueError, match="not a stale change's report"):  # another error is no report
        lambda_module("put_history").lambda_handler(
            {"stale": {"errorMessage": json.dumps({**raised.value.result, "outcome": "applied"})},
             "execution": {"name": "e-1"}}, context)


def test_update_handler_reports_stale_without_writing(lambda_module, context, tables):
    from changeflow_core.decisions import ChangeIsStale

    client, table = tables
    event = load_event("functions/update_latest.json")
    event["latest"] = {"present": True, "version": 4, "effectiveAt": 9_999_999_999_999,
                       "changeIds": {"x": 4}, "deleted": False}
    event = proven(event, "update_latest")  # as the fetch step that read that v0 would have proved it
    with pytest.raises(ChangeIsStale):
        lambda_module("update_latest").lambda_handler(event, context)
    assert client.scan(TableName=table)["Count"] == 0


def test_update_handler_names_a_failed_condition_a_write_conflict(lambda_module, context, tables):
    # GIVEN the state was fetched when v0 did not exist, and another writer created it since
    from changeflow_core.decisions import WriteConflict
    from changeflow_core.errors import VersionConflict

    handler = lambda_module("update_latest").lambda_handler
    handler(load_event("functions/update_latest.json"), context)
    other = load_event("functions/update_latest.json")
    other["change"]["changeId"] = "someone-else"
    other = proven(other, "update_latest")
    # WHEN this change's conditional write runs on that stale read THEN it is a conflict, not a write
    with pytest.raises(WriteConflict):
        handler(other, context)
    # and on the last attempt the conflict is final
    with pytest.raises(VersionConflict):
        handler({**other, "attempt": 10}, context)


def test_fetch_handler_rejects_an_invalid_request(lambda_module, context, tables):
    from changeflow_core.errors import ValidationError

    event = load_event("functions/fetch_latest.json")
    event["request"]["request"]["operation"] = "upsert"
    with pytest.raises(ValidationError, match="^operation:"):
        lambda_module("fetch_latest").lambda_handler(proven(event, "fetch_latest"), context)


def test_history_handler_is_idempotent_and_refuses_another_changes_version(lambda_module, context, tables):
    from changeflow_core.errors import HistoryConflict

    handler = lambda_module("put_history").lambda_handler
    event = load_event("functions/put_history.json")
    assert handler(event, context)["history"] == "written"
    assert handler(event, context)["history"] == "present"  # a retry or a redrive
    other = load_event("functions/put_history.json")
    other["change"]["changeId"] = "not-the-writer"
    other = proven(other, "put_history")
    with pytest.raises(HistoryConflict):
        handler(other, context)


def test_handlers_emit_emf_metrics_by_operation(lambda_module, context, tables, capsys):
    lambda_module("update_latest").lambda_handler(load_event("functions/update_latest.json"), context)
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    applied = [m for m in emf if "ChangesApplied" in m]
    assert applied and applied[0]["operation"] == "put"
    assert applied[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Changeflow"


def _history_events(n: int) -> list[dict]:
    """The history step's payloads of versions 1..n of one entity (each written to v0 first, as the write
    step does), from events/functions/put_history.json."""
    events = []
    for version in range(1, n + 1):
        event = load_event("functions/put_history.json")
        event["change"]["changeId"] = f"example-put-{version}"
        event["written"] = {**event["written"], "version": version, "recordedAt": event["written"]["recordedAt"] + version}
        events.append(proven(event, "put_history"))  # as the steps before it would have proved it
    return events


def test_the_history_step_tags_what_leaves_the_retention_window_and_a_failed_tag_never_fails_it(
        lambda_module, context, tables):
    # issue 37.2: TTL tagging runs in the history step, after the put. GIVEN a window of K = 1 version
    from types import SimpleNamespace

    from changeflow.checks.faults import Injector

    client, table = tables
    module = lambda_module("put_history")
    module.KEEP_VERSIONS, module.KEEP_DAYS = 1, 30  # HistoryRetentionVersions, HistoryRetentionDays
    events = _history_events(4)

    def expiry(version: int):
        item = client.get_item(TableName=table, Key={"pk": {"S": "user#1001"}, "sk": {"S": f"v#{version:010d}"}})
        return item["Item"].get("expiresAt")

    first = module.lambda_handler(events[0], context)
    assert first["expiry"] == {"tagged": [], "expiresAt": None}  # version 1 is inside the window
    # WHEN version 2 is written, version 1 leaves the window: tagged, 30 days out
    second = module.lambda_handler(events[1], context)
    assert second["expiry"]["tagged"] == [1] and expiry(1) == {"N": str(second["expiry"]["expiresAt"])}
    # WHEN every tag of version 3 is throttled past the tagging client's tries
    injector = Injector()
    with injector.throttle(SimpleNamespace(module=module), "UpdateItem", 100, client="tagging"):
        third = module.lambda_handler(events[2], context)
    # THEN the step still succeeds with the put's result, and names the tag it missed and why
    assert (third["outcome"], third["version"], third["history"]) == ("applied", 3, "written")
    assert third["expiry"]["tagged"] == [] and third["expiry"]["missed"] == [2, 1]
    assert third["expiry"]["error"] == "ProvisionedThroughputExceededException"
    assert injector.injected["DynamoDB ProvisionedThroughputExceededException"] == 4  # two tries of each tag
    assert expiry(2) is None and expiry(3) is None  # a throttled request is not processed
    # AND with too little time left for a tag, it is not tried, and reported
    late = SimpleNamespace(**{k: getattr(context, k) for k in ("function_name", "memory_limit_in_mb",
                                                                  "invoked_function_arn", "aws_request_id")},
                           get_remaining_time_in_millis=lambda: 2_000)
    again = module.lambda_handler(events[2], late)  # the step's Retry, or a redrive: the put is done
    assert again["history"] == "present" and again["expiry"]["missed"] == [2, 1]
    assert again["expiry"]["error"] == "NoTimeLeft"
    # AND the next change tags version 3 and heals version 2 (n-K-1): O(1), version 1 was tagged already
    fourth = module.lambda_handler(events[3], context)
    assert fourth["expiry"]["tagged"] == [3, 2] and expiry(2) is not None and expiry(3) is not None
    assert expiry(4) is None


def test_a_tag_error_that_is_not_a_request_failure_is_a_bug_and_fails_the_step(lambda_module, context, tables,
                                                                                monkeypatch):
    # only TAG_ERRORS (botocore's ClientError and BotoCoreError) are caught by name: anything else fails the
    # step, whose Retry runs it again (the put is idempotent), and stays visible
    module = lambda_module("put_history")
    module.KEEP_VERSIONS = 1
    events = _history_events(2)
    module.lambda_handler(events[0], context)
    monkeypatch.setattr("changeflow_core.store.tag_expiry", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        module.lambda_handler(events[1], context)

def test_the_feed_enrichment_turns_its_payload_into_a_version_recorded_event(lambda_module, context):
    # GIVEN the payload a pipe sends (a batch of one stream record: version 1 of user#1001, written to history)
    from changeflow_core import chain

    # WHEN the enrichment handler gets it THEN one event, whose chain form recomputes its chain hash from the
    # entity's genesis value (version 1: nothing to read), and no content (FeedContent defaults to none)
    [event] = lambda_module("feed_events").lambda_handler(load_event("functions/feed_events.json"), context)
    assert (event["entityId"], event["version"], event["operation"], event["actor"]) == (
        "user#1001", 1, "put", "admin@example.com")
    assert event["prevHash"] == chain.genesis("user#1001")
    assert chain.link(event["prevHash"], event["chainForm"]) == event["chainHash"]
    assert "content" not in event and "Ada" not in json.dumps(event)

