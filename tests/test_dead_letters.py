"""`changeflow dead-letters`: the events the bus's rule could not start an execution for, listed and replayed
(issue 33.6), on the embedded stack.

An event EventBridge gives up on waits in the rule's dead-letter queue with the rule's ARN and the error
(https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html). A replay must start the change
as the rule would have: recorded under the event's principal (its account and source, its id, the rule),
not the operator's, and first received when the event was, not when it is replayed, so that a late
replay of an old change cannot overwrite what was written after it (the timestamp ratchet decides by
``effectiveAt``, which defaults to the first receipt).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from changeflow.cli import main
from changeflow.client import Changeflow, targets
from changeflow.client.deadletters import DeadLetters
from changeflow_core import model, principal, store
from changeflow_core.names import event_execution_name

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
T0_MS = int(T0.timestamp() * 1000)
SOURCE = "changeflow.client"


@pytest.fixture
def dead_lettered(stack, monkeypatch):
    """Two events put while the rule's target names no state machine (EventBridge's StartExecution fails),
    sent at T0; then the target is put right again. ``(client, {entity: event id})``."""
    cf = Changeflow.for_embedded(stack)
    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    events = stack.client("events")
    bus = stack.outputs["ChangeBusName"]
    [rule] = events.list_rules(EventBusName=bus)["Rules"]
    # the target that starts changes (the event function: issue 33); the journal's target stays as it is
    [target] = [t for t in events.list_targets_by_rule(Rule=rule["Name"], EventBusName=bus)["Targets"]
                if ":function:" in t["Arn"]]
    events.put_targets(Rule=rule["Name"], EventBusName=bus, Targets=[{**target, "Arn": target["Arn"] + "-gone"}])
    sent = events.put_events(Entries=[
        {"Source": SOURCE, "DetailType": "ChangeRequested", "EventBusName": bus, "Time": T0,
         "Detail": json.dumps({"entityId": entity, "operation": "put", "attributes": {"from": "event"}})}
        for entity in ("late", "fresh")])
    assert sent["FailedEntryCount"] == 0
    events.put_targets(Rule=rule["Name"], EventBusName=bus, Targets=[target])
    return cf, rule["Arn"], {entity: entry["EventId"] for entity, entry in zip(("late", "fresh"), sent["Entries"])}


def test_dead_letters_are_listed_with_their_event_receipt_and_error(dead_lettered, capsys):
    cf, rule, ids = dead_lettered
    # WHEN the queue is listed (twice: listing takes nothing out of it)
    for _ in range(2):
        assert main(["dead-letters", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert sorted(d["entityId"] for d in listed) == ["fresh", "late"]
    # THEN each names its event, the rule, when it was received and why EventBridge gave up
    for letter in listed:
        assert letter["eventId"] == ids[letter["entityId"]] and letter["rule"] == rule
        assert letter["source"] == SOURCE and letter["receivedAt"] == T0_MS
        assert letter["error"].startswith(("StateMachineDoesNotExist", "ResourceNotFound")), letter["error"]
    assert main(["dead-letters"]) == 0 and "fresh" in capsys.readouterr().out
    # (the message is the event as EventBridge shapes it: time in ISO 8601, nothing of moto's own)
    body = DeadLetters(cf).list()[0].event
    assert body["time"] == "2026-01-01T00:00:00Z" and "ingestion-time" not in body and body["detail"]["operation"] == "put"


def test_a_replay_keeps_the_events_principal_and_first_receipt(dead_lettered, capsys):
    cf, rule, ids = dead_lettered
    # GIVEN a change to "late" written since, effective after the event was received
    newer = cf.submit({"entityId": "late", "operation": "put", "attributes": {"from": "since"},
                       "effectiveAt": T0_MS + 60_000, "changeId": "since"})
    assert newer.output["outcome"] == "applied"
    letters = {d.event["detail"]["entityId"]: d for d in DeadLetters(cf).list()}

    # WHEN one message is replayed, then the rest
    assert main(["dead-letters", "--replay", letters["fresh"].message_id, "--json"]) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert main(["dead-letters", "--replay", "--all", "--json"]) == 0
    late = json.loads(capsys.readouterr().out)

    # THEN each ran as the rule would have run it: the event's change, applied under the event's principal,
    # effective when it was first received
    assert (fresh["status"], fresh["output"]["outcome"], fresh["name"]) == (
        "SUCCEEDED", "applied", event_execution_name(ids["fresh"]))  # as the rule's function names it
    version = store.get_item(cf.dynamodb, cf.table, "fresh", model.LATEST_SK)
    assert version[model.PRINCIPAL] == {"via": "events", "rule": rule, "account": "123456789012",
                                        "source": SOURCE, "id": ids["fresh"], "region": "us-east-1"}
    assert version[model.EFFECTIVE_AT] == T0_MS and version["from"] == "event"
    # AND the old event is stale against the change written since: it does not overwrite it
    assert (late["status"], late["output"]["outcome"]) == ("SUCCEEDED", "stale")
    assert store.get_item(cf.dynamodb, cf.table, "late", model.LATEST_SK)["from"] == "since"
    # AND the queue is empty; replaying a message again is refused by name
    assert DeadLetters(cf).list() == []
    assert main(["dead-letters", "--replay", letters["fresh"].message_id]) == 1
    assert "not in the dead-letter queue" in capsys.readouterr().err


def test_a_first_receipt_is_never_later_than_when_the_event_was_dead_lettered(dead_lettered):
    """A PutEvents caller may set ``time``: one in the future would let a replayed change win the ratchet
    against what was written before the replay. SQS's SentTimestamp (AWS's own) bounds it."""
    cf, _, _ = dead_lettered
    [letter, *_] = DeadLetters(cf).list()
    future = type(letter)(**{**letter.__dict__, "event": {**letter.event, "time": "2999-01-01T00:00:00Z"}})
    assert future.received_at_ms == letter.sent_at_ms
    assert future.delivered()["receivedAt"] == letter.sent_at_ms


def test_the_command_line_is_checked_before_the_queue_is_touched(capsys):
    for argv, message in ((["dead-letters", "m-1"], "choose what --replay replays"),
                          (["dead-letters", "--replay"], "needs the MESSAGE_IDs"),
                          (["dead-letters", "--replay", "--all", "m-1"], "not both")):
        assert main([*argv, "--endpoint-url", "http://127.0.0.1:9"]) == 2
        assert message in capsys.readouterr().err


def test_a_change_the_event_function_could_not_start_is_listed_and_replayed(stack, monkeypatch, capsys):
    """The rule's target is the event function (issue 33). When it cannot start the change (here it fails
    every time), Lambda tries it three times and sends its invocation record to the same queue with the
    function's role, which the queue's policy lets through: listed and replayed like the rule's own."""
    from changeflow.local.lambdas import fault_hook

    cf = Changeflow.for_embedded(stack)
    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    tries = []

    def unable(function, event, invoke):
        if function.logical_id == "ReceiveChangeEventFunction":
            tries.append(event)
            raise RuntimeError("Step Functions is throttling")
        return invoke()

    with fault_hook(stack.lambdas, unable):
        sent = stack.client("events").put_events(Entries=[{
            "Source": SOURCE, "DetailType": "ChangeRequested", "EventBusName": stack.outputs["ChangeBusName"],
            "Detail": json.dumps({"entityId": "held", "operation": "put", "attributes": {"n": 1}})}])
        stack.lambdas.drain(30)
    event_id = sent["Entries"][0]["EventId"]
    assert len(tries) == 3
    [letter] = DeadLetters(cf).list()
    assert (letter.event["id"], letter.event["detail"]["entityId"]) == (event_id, "held")
    assert letter.error == "RuntimeError: Step Functions is throttling"
    # first received when EventBridge ingested the event (the record keeps what the rule handed the function)
    assert letter.received_at_ms == min(principal.received_ms(tries[0]["receivedAt"]), letter.sent_at_ms)
    # WHEN it is replayed, THEN the change runs under the event's principal, named as the rule's function names it
    assert main(["dead-letters", "--replay", "--all", "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert (replayed["status"], replayed["output"]["outcome"], replayed["name"]) == (
        "SUCCEEDED", "applied", event_execution_name(event_id))
    version = store.get_item(cf.dynamodb, cf.table, "held", model.LATEST_SK)
    assert version[model.PRINCIPAL]["id"] == event_id and version[model.PRINCIPAL]["account"] == "123456789012"
    assert DeadLetters(cf).list() == []
