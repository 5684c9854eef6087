"""The change feed (issue 36), written as a consumer's worst day: what every VersionRecorded event carries and
how a consumer checks it against the hash chain; the pipe publishing each version on the bus or a Kinesis
stream; `changeflow tail` with K writers and injected faults, killed and resumed, started a week late, meeting a
redaction and a tampered history item; and its running check agreeing with `changeflow verify`.

What is correct comes from the issue and AWS's documentation: every recorded version delivered, once, in
version order per entity (DynamoDB Streams keeps a record 24 hours, in order per item; Pipes delivers at least
once, so a consumer recognises a repeat by entity and version)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest

from changeflow.audit.verify import verify
from changeflow.checks.faults import Injector
from changeflow.client import Changeflow
from changeflow.feed.follower import Follower
from changeflow.feed.tail import Checkpoint, Scope, Tail
from changeflow.local.moto_patches.dynamodbstreams.retention import StreamClock
from changeflow.local.moto_patches.pipes import runner
from changeflow_core import chain, feed, model
from changeflow_core.feed import ChainBreak
from conftest import let_executions_end

ENTITY = "doc#1"
T0 = 1_767_225_600_000
WEEK = 7 * 24 * 3600


def put(entity: str, n: int, change: str | None = None, **attributes) -> dict:
    return {"entityId": entity, "operation": "put", "changeId": change or f"{entity.replace('#', '-')}-{n}",
            "attributes": {"n": n, **attributes}}


def versions_of(events, entity=ENTITY) -> list[int]:
    return [e["version"] for e in events if e["entityId"] == entity]


class BusSink:
    """A consumer of the bus: a rule matching the feed's events, into an SQS queue."""

    def __init__(self, stack, name: str = "feed-sink"):
        self.sqs, events = boto3.client("sqs", region_name=stack.region), boto3.client("events", region_name=stack.region)
        self.url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        bus = stack.outputs["ChangeBusName"]
        events.put_rule(Name=name, EventBusName=bus, State="ENABLED", EventPattern=json.dumps(
            {"source": [stack.outputs["FeedEventSource"]], "detail-type": [feed.DETAIL_TYPE]}))
        events.put_targets(Rule=name, EventBusName=bus, Targets=[{"Id": "queue", "Arn": arn}])
        self.received: list[dict] = []

    def drain(self) -> list[dict]:
        while True:
            messages = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                return self.received
            for message in messages:
                self.received.append(json.loads(message["Body"]))
                self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])


def eventually(predicate, timeout: float = 30.0, what: str = "the feed to catch up"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Running:
    """A ``Tail`` on a thread; ``events`` in the order it printed them."""

    def __init__(self, cf, scope: Scope = Scope(), checkpoint=None, crash_after: int | None = None):
        self.events: list[dict] = []
        self.origins: list[str] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.crash_after = crash_after
        self.tail = Tail(cf, scope, self.emit, checkpoint, poll=0.01)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def emit(self, event, origin) -> None:
        if self.crash_after is not None and len(self.events) >= self.crash_after:
            raise Killed()
        self.events.append(event)
        self.origins.append(origin)

    def _run(self) -> None:
        try:
            self.tail.run(self.stop)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc

    def finish(self, timeout: float = 30.0) -> "Running":
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive()
        return self


class Killed(Exception):
    """The consumer process dies between printing an event and its next checkpoint."""


# --- what an event carries, and the running check -------------------------------------------------------
def sealed_history(contents: list[dict], entity: str = ENTITY) -> list[dict]:
    history, prev = [], chain.genesis(entity)
    for n, content in enumerate(contents, start=1):
        item = {model.PK: {"S": entity}, model.SK: {"S": model.history_sk(n)}, model.VERSION: {"N": str(n)},
                model.EFFECTIVE_AT: {"N": str(T0 + n)}, model.CHANGE_ID: {"S": f"c{n}"},
                model.OPERATION: {"S": "put"}, model.ACTOR: {"S": "ana"}, model.RECORDED_AT: {"N": str(T0 + n)},
                model.PRINCIPAL: {"M": {"via": {"S": "api"}, "arn": {"S": "arn:aws:iam::123456789012:user/ana"}}},
                model.EXECUTION: {"S": f"arn:aws:states:us-east-1:123456789012:execution:m:e{n}"},
                **chain.to_wire(content)}
        history.append(chain.seal(item, prev, keep_prev=False))
        prev = chain.stored_hash(history[-1])
    return history


def test_an_event_carries_what_the_issue_lists_and_its_chain_form_recomputes_its_hash():
    history = sealed_history([{"secret": "s3cret", "n": 1}, {"secret": "other", "n": 2}])
    first, second = feed.events(history, {})
    assert {"entityId", "version", "operation", "effectiveAt", "recordedAt", "principal", "actor", "chainHash",
            "prevHash", "executionArn", "contentHash"} <= set(second)
    assert (second["entityId"], second["version"], second["operation"], second["actor"]) == (ENTITY, 2, "put", "ana")
    assert second["principal"]["arn"] == "arn:aws:iam::123456789012:user/ana"
    assert first["prevHash"] == chain.genesis(ENTITY) and second["prevHash"] == first["chainHash"]
    # FeedContent=none (the default): no content anywhere in the event, yet the chain checks
    assert "s3cret" not in json.dumps(first) and "content" not in first
    assert chain.link(second["prevHash"], second["chainForm"]) == second["chainHash"]
    head, _ = feed.check_next(ENTITY, feed.check_next(ENTITY, None, first["chainForm"])[0], second["chainForm"])
    assert head.chain_hash == second["chainHash"]
    # FeedContent=full: the content, whose hash is the one the chain holds
    full = feed.version_event(history[0], chain.genesis(ENTITY), feed.CONTENT_FULL)
    assert chain.content_hash(full["content"]) == full["contentHash"] == first["contentHash"]


def test_content_too_large_for_one_event_is_left_out_and_said_so():
    [item] = sealed_history([{"blob": "x" * 300_000}])
    event = feed.version_event(item, chain.genesis(ENTITY), feed.CONTENT_FULL)
    assert "content" not in event and "read version 1" in event["contentOmitted"]
    assert feed.size_of(event) < feed.MAX_EVENT_BYTES


@pytest.mark.parametrize("tamper", ["content", "metadata", "removed", "swapped"])
def test_the_running_check_breaks_at_the_version_verify_names(tamper):
    history = sealed_history([{"n": n} for n in range(1, 6)])
    if tamper == "content":
        history[2] = {**history[2], "n": {"N": "99"}}
    elif tamper == "metadata":
        history[2] = {**history[2], model.ACTOR: {"S": "mallory"}}
    elif tamper == "removed":
        del history[2]
    else:  # versions 3 and 4 trade places
        history[2], history[3] = ({**history[3], model.VERSION: {"N": "3"}}, {**history[2], model.VERSION: {"N": "4"}})
    audit = chain.audit_chain(ENTITY, history, None)
    head = None
    with pytest.raises(ChainBreak) as broke:
        for item in history:  # in version order, as a consumer takes them
            head, _ = feed.check_next(ENTITY, head, item)
    first_problem = audit.problems[0]
    assert first_problem.split(":")[0] == f"version {broke.value.version}"
    if tamper in ("content", "metadata"):
        assert broke.value.problem == first_problem


# --- the pipe ------------------------------------------------------------------------------------------
def test_the_pipe_publishes_one_version_recorded_event_per_version_on_the_bus(stack, cf):
    sink = BusSink(stack)
    for n in (1, 2, 3):
        cf.submit(put(ENTITY, n))
    cf.submit({"entityId": ENTITY, "operation": "delete", "changeId": "gone"})
    cf.submit(put("doc#2", 1, secret="s3cret"))
    eventually(lambda: len(sink.drain()) >= 5)
    time.sleep(0.2)
    published = sink.drain()
    assert {(e["source"], e["detail-type"]) for e in published} == {("changeflow.feed", "VersionRecorded")}
    details = [e["detail"] for e in published]
    assert versions_of(details) == [1, 2, 3, 4] and versions_of(details, "doc#2") == [1]
    assert details[3]["operation"] == "delete" and details[3]["deleted"] is True
    assert "s3cret" not in json.dumps(published)  # FeedContent defaults to none
    assert [d["prevHash"] for d in details[1:4]] == [d["chainHash"] for d in details[:3]]
    stats = runner.statistics(f"{stack.template.stack_name}-FeedPipe")
    assert stats["records filtered out"] >= 5  # v0's writes are not the feed
    assert stats["enrichment invocations"] <= stats["records read"]


def test_with_kinesis_the_feed_is_in_order_per_entity_in_its_stream(make_stack):
    stack = make_stack(FeedTarget="kinesis")
    cf = Changeflow.for_embedded(stack)
    for n in (1, 2, 3):
        cf.submit(put(ENTITY, n))
        cf.submit(put("doc#2", n))
    kinesis = boto3.client("kinesis", region_name=stack.region)
    name = stack.outputs["FeedStreamName"]

    def read() -> list[dict]:
        found = []
        for shard in kinesis.list_shards(StreamName=name)["Shards"]:
            iterator = kinesis.get_shard_iterator(StreamName=name, ShardId=shard["ShardId"],
                                                  ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
            found += [(r["PartitionKey"], json.loads(r["Data"])) for r in kinesis.get_records(ShardIterator=iterator)["Records"]]
        return found

    eventually(lambda: len(read()) >= 6)
    records = read()
    assert all(key == event["entityId"] for key, event in records)
    for entity in (ENTITY, "doc#2"):
        assert [e["version"] for key, e in records if key == entity] == [1, 2, 3]


# --- a consumer's worst day ---------------------------------------------------------------------------
K = 50


def test_k_writers_with_faults_every_version_reaches_tail_and_the_bus_once_in_order_and_verify_agrees(make_stack):
    stack = make_stack()
    cf = Changeflow.for_embedded(stack)
    sink = BusSink(stack)
    tail = Running(cf)  # from nothing, --all, before the first write
    injector = Injector()
    faults = [("PutHistoryFunction", "lost", 3), ("UpdateLatestFunction", "lost", 2),
              ("FetchLatestFunction", "service", 2), ("FeedEventsFunction", "before", 2)]
    with injector.around(stack.lambdas, faults), injector.feed_target([("throttle", 2), ("lost", 3)]):
        with ThreadPoolExecutor(max_workers=8) as pool:
            # one effective time for all: none is stale, each applies once its optimistic write wins
            arns = list(pool.map(lambda k: cf.start({**put(ENTITY, k, change=f"w{k}"), "effectiveAt": T0})[1],
                                 range(K)))
            ended = list(pool.map(cf.wait, arns))
        head = int(cf.entity(ENTITY)["latest"]["version"])
        eventually(lambda: versions_of(tail.events) == list(range(1, head + 1)), timeout=60)
        eventually(lambda: len({e["detail"]["version"] for e in sink.drain()}) >= head, timeout=60)
    tail.finish()
    assert tail.error is None
    applied = {e.output["version"]: e.input for e in ended if e.status == "SUCCEEDED" and e.output["outcome"] == "applied"}
    # enough versions for the feed to order: how many of the K win against each other within their ten tries
    # depends on the machine's load (the rest end VersionConflict, a named outcome: 30 of 50 did on a fresh
    # clone's make test), which is the workflow's concern, not the feed's
    assert head >= K // 5 and len(applied) >= head - 8, (head, [e.status for e in ended])  # faults lose some answers
    assert versions_of(tail.events) == list(range(1, head + 1))  # every version exactly once, in order
    assert len({e["changeId"] for e in tail.events}) == head  # no change recorded twice
    assert {e["version"]: e["changeId"] for e in tail.events if e["version"] in applied} == {
        v: json.loads(i["request"])["changeId"] for v, i in applied.items()}
    assert injector.injected["feed target answer lost"] == 3 and injector.injected["feed target throttled"] == 2

    # the bus: at least once (a lost answer is sent again), in no order; a consumer's dedupe and order
    bus = [e["detail"] for e in sink.drain()]
    assert len(bus) > head  # the repeats are really there
    taken = []
    consumer = Follower(cf, lambda event, origin: taken.append(event))
    for event in bus:
        consumer.take_event(event)
    assert versions_of(taken) == list(range(1, head + 1)) and consumer.tally.duplicates == len(bus) - head

    # the running chain check agrees with changeflow verify: both ok, and at the same head
    report = verify(cf, ENTITY)
    assert report.ok, report.problems
    assert max(report.versions) == head
    assert tail.tail.follower.heads[ENTITY].chain_hash == history_hash(cf, head) == taken[-1]["chainHash"]
    let_executions_end(stack)


@pytest.mark.parametrize("text", ["not json", '{"format": "other"}', '{"format": 1, "heads": []}',
                                  "[" * 100_000 + "]" * 100_000])  # the last: nested past the JSON parser's depth
def test_a_file_that_is_not_a_tail_checkpoint_is_refused_by_name(tmp_path, text):
    # docs/feed.md: --checkpoint FILE resumes from FILE; one that is not a checkpoint is a usage error naming it
    # (exit 2), never a traceback
    from changeflow.common.errors import UsageError

    path = tmp_path / "tail.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match="not a tail checkpoint"):
        Checkpoint(path).load(Scope())


def test_a_consumer_killed_mid_stream_resumes_from_its_checkpoint_with_nothing_lost(stack, cf, tmp_path):
    checkpoint = Checkpoint(tmp_path / "tail.json")
    for n in (1, 2, 3):
        cf.submit(put(ENTITY, n))
    first = Running(cf, checkpoint=checkpoint, crash_after=5)
    for n in (4, 5, 6, 7):
        cf.submit(put(ENTITY, n))
        cf.submit(put("doc#2", n))
    first.thread.join(30)
    assert isinstance(first.error, Killed) and len(first.events) == 5
    for n in (8, 9):  # written while no consumer runs
        cf.submit(put(ENTITY, n))
    second = Running(cf, checkpoint=checkpoint)
    eventually(lambda: max(versions_of(second.events) or [0]) == 9 and versions_of(second.events, "doc#2")[-1:] == [4])
    second.finish()
    assert second.error is None
    seen = [(e["entityId"], e["version"]) for e in first.events + second.events]
    once = list(dict.fromkeys(seen))  # what a downstream consumer keeps, recognising repeats by entity and version
    assert [v for e, v in once if e == ENTITY] == list(range(1, 10))
    assert [v for e, v in once if e == "doc#2"] == [1, 2, 3, 4]
    assert len(seen) - len(once) <= 10  # at most the batch after the last checkpoint came again
    assert all(versions_of(run.events) == sorted(versions_of(run.events)) for run in (first, second))


def test_a_stopped_tail_resumes_from_the_stream_position_it_saved_after_its_last_batch(stack, cf, tmp_path):
    # GIVEN a tail that read history, then the stream's batch of the same versions, and stopped (--idle-exit)
    checkpoint = Checkpoint(tmp_path / "tail.json")
    for n in (1, 2, 3):
        cf.submit(put(ENTITY, n))
    first = Tail(cf, Scope(), lambda event, origin: None, checkpoint, idle_exit=0.2, poll=0.01)
    first.run()
    # THEN its checkpoint holds the stream position after that batch: the last record it read (docs/feed.md:
    # "it writes its place after each page of history and each batch of stream records")
    saved = json.loads(checkpoint.path.read_text(encoding="utf-8"))["positions"]["shards"]
    assert saved == first.reader.positions.shards and len(saved) == 1
    # WHEN it is started again with that checkpoint and a new version is written
    cf.submit(put(ENTITY, 4))
    resumed_events = []
    resumed = Tail(cf, Scope(), lambda event, origin: resumed_events.append((event["version"], origin)), checkpoint,
                   idle_exit=0.2, poll=0.01)
    tally = resumed.run()
    # THEN it resumes from its stream position: only the new version, from the stream, nothing read again
    assert resumed_events == [(4, "stream")]
    assert tally.duplicates == 0


def test_a_consumer_started_after_a_week_reads_history_then_the_stream(stack, cf, tmp_path):
    old = Checkpoint(tmp_path / "old.json")
    for n in (1, 2):
        cf.submit(put(ENTITY, n))
    early = Running(cf, checkpoint=old)
    eventually(lambda: versions_of(early.events) == [1, 2])
    early.finish()
    for n in (3, 4):
        cf.submit(put(ENTITY, n))
    StreamClock.advance(WEEK)  # the stream keeps 24 hours: versions 1..4 are gone from it
    streams = boto3.client("dynamodbstreams", region_name=stack.region)
    arn = cf.dynamodb.describe_table(TableName=cf.history_table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    oldest = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    assert streams.get_records(ShardIterator=oldest)["Records"] == []
    cf.submit(put(ENTITY, 5))

    late = Running(cf)  # from nothing, a week on: history first
    resumed = Running(cf, checkpoint=old)  # from a checkpoint a week old: its stream positions trimmed away
    eventually(lambda: versions_of(late.events) == [1, 2, 3, 4, 5] and versions_of(resumed.events) == [3, 4, 5])
    cf.submit(put(ENTITY, 6))  # then the stream
    eventually(lambda: versions_of(late.events)[-1:] == [6] and versions_of(resumed.events)[-1:] == [6])
    for run in (late.finish(), resumed.finish()):
        assert run.error is None
        assert run.origins[-1] == "stream" and set(run.origins[:-1]) == {"history"}
    assert versions_of(late.events) == [1, 2, 3, 4, 5, 6] and versions_of(resumed.events) == [3, 4, 5, 6]


def test_a_redaction_reaches_the_consumer_as_an_event_of_its_own(make_stack):
    stack = make_stack(FeedContent="full")
    cf = Changeflow.for_embedded(stack)
    sink = BusSink(stack)
    tail = Running(cf)
    cf.submit(put(ENTITY, 1, ssn="123-45-6789"))
    cf.submit(put(ENTITY, 2))
    assert cf.submit({"entityId": ENTITY, "operation": "redact", "redactVersion": 1, "changeId": "erase-1",
                      "reason": "GDPR art. 17"}).status == "SUCCEEDED"
    eventually(lambda: versions_of(tail.events) == [1, 2, 3])
    eventually(lambda: len(sink.drain()) >= 3)
    tail.finish()
    bus = {e["detail"]["version"]: e["detail"] for e in sink.drain()}
    for events in (bus, {e["version"]: e for e in tail.events}):
        redaction = events[3]
        assert redaction["operation"] == "redact" and redaction["redacts"]["version"] == 1
        assert redaction["redacts"]["contentHash"] == events[1]["contentHash"]  # the very version delivered
    assert bus[1]["content"]["ssn"] == {"S": "123-45-6789"}  # FeedContent=full, before its redaction
    # a consumer starting now meets version 1 already redacted: no content, its chain still whole
    later = Running(cf)
    eventually(lambda: versions_of(later.events) == [1, 2, 3])
    later.finish()
    assert later.error is None and later.events[0]["redacted"] is True
    assert "123-45-6789" not in json.dumps(later.events)


def history_hash(cf, version: int, entity: str = ENTITY) -> str:
    key = {model.PK: {"S": entity}, model.SK: {"S": model.history_sk(version)}}
    return chain.stored_hash(cf.dynamodb.get_item(TableName=cf.history_table, Key=key)["Item"])


def tamper(cf, version: int, **changes) -> None:
    key = {model.PK: {"S": ENTITY}, model.SK: {"S": model.history_sk(version)}}
    item = cf.dynamodb.get_item(TableName=cf.history_table, Key=key)["Item"]
    cf.dynamodb.put_item(TableName=cf.history_table, Item={**item, **changes})


def test_tail_stops_loudly_on_a_tampered_history_item_where_verify_does(stack, cf, monkeypatch, capsys):
    from changeflow import cli
    from changeflow.client import targets

    for n in (1, 2, 3):
        cf.submit(put(ENTITY, n))
    tamper(cf, 2, n={"N": "99"})
    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    assert cli.main(["tail", ENTITY, "--idle-exit", "0.2", "--json"]) == 1
    out, err = capsys.readouterr()
    assert [json.loads(line)["version"] for line in out.splitlines()] == [1]  # nothing past the break
    problem = verify(cf, ENTITY).problems[0]
    assert problem.startswith("version 2:") and problem in err


@pytest.mark.parametrize("how", ["rewritten", "deleted"])
def test_tail_stops_when_a_version_it_took_is_rewritten_or_deleted(stack, cf, how):
    for n in (1, 2):
        cf.submit(put(ENTITY, n))
    tail = Running(cf)
    eventually(lambda: versions_of(tail.events) == [1, 2])
    if how == "rewritten":
        tamper(cf, 1, n={"N": "42"})
    else:
        cf.dynamodb.delete_item(TableName=cf.history_table,
                                Key={model.PK: {"S": ENTITY}, model.SK: {"S": model.history_sk(1)}})
    tail.thread.join(30)
    assert isinstance(tail.error, ChainBreak) and tail.error.version == 1
    assert ("changed after it was written" if how == "rewritten" else "deleted from history") in str(tail.error)


def test_a_ttl_tag_and_a_redaction_rewrite_versions_without_breaking_the_tail(make_stack):
    stack = make_stack(HistoryRetentionVersions="2")
    cf = Changeflow.for_embedded(stack)
    tail = Running(cf)
    for n in (1, 2, 3, 4):
        cf.submit(put(ENTITY, n))
    assert cf.submit({"entityId": ENTITY, "operation": "redact", "redactVersion": 3, "changeId": "r3",
                      "reason": "wrong person"}).status == "SUCCEEDED"
    eventually(lambda: versions_of(tail.events) == [1, 2, 3, 4, 5])
    time.sleep(0.2)
    tail.finish()
    assert tail.error is None and tail.tail.tally.rechecked >= 3  # tags of 1, 2, 3 and the redaction of 3


def test_from_version_and_since_start_where_they_say_and_check_from_there(stack, cf):
    for n in range(1, 6):
        cf.submit(put(ENTITY, n))
    recorded = {v["version"]: v["recordedAt"] for v in cf.entity(ENTITY)["versions"]}
    from_three = Running(cf, Scope(ENTITY, from_version=3))
    since_four = Running(cf, Scope(since=recorded[4]))
    eventually(lambda: versions_of(from_three.events) == [3, 4, 5] and versions_of(since_four.events) == [4, 5])
    cf.submit(put(ENTITY, 6))
    eventually(lambda: versions_of(from_three.events)[-1:] == [6] and versions_of(since_four.events)[-1:] == [6])
    for run in (from_three.finish(), since_four.finish()):
        assert run.error is None
    assert from_three.events[0]["prevHash"] == history_hash(cf, 2)


@pytest.mark.parametrize("separate", ["false", "true"])
def test_the_feed_function_reads_only_its_predecessors_hashes(make_stack, separate):
    """Least privilege, measured (tests/test_template.py does the steps): BatchGetItem on the history table."""
    stack = make_stack(SeparateHistoryTable=separate)
    cf = Changeflow.for_embedded(stack)
    sink = BusSink(stack)
    for n in (1, 2, 3):
        cf.submit(put(ENTITY, n))
        eventually(lambda: len(sink.drain()) >= n)
    calls = [c for c in stack.function("FeedEventsFunction").api_calls if c[0] == "dynamodb"]
    assert {operation for _, operation, _, _ in calls} == {"BatchGetItem"}
    assert {table for _, _, params, _ in calls for table in params["RequestItems"]} == {cf.history_table}
    policy = stack.template.function_properties("FeedEventsFunction")["Policies"][0]["Statement"]
    assert [(s["Action"], s["Resource"].rsplit("/", 1)[1]) for s in policy] == [(["dynamodb:BatchGetItem"],
                                                                                  cf.history_table)]


def test_tail_refuses_what_makes_no_sense(monkeypatch, capsys):
    from changeflow import cli

    assert cli.main(["tail", "--all", "--from-version", "3"]) == 2
    assert "--from-version is for one entity" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["tail", ENTITY, "--from-version", "2", "--since", "2026-01-01T00:00:00Z"])
    assert exited.value.code == 2


@pytest.mark.enable_socket
def test_changeflow_tail_killed_with_sigkill_resumes_from_its_checkpoint(tmp_path):
    """The real command against `changeflow serve`, killed mid-stream (no chance to save anything) and run again."""
    import os
    import signal
    import subprocess
    import sys

    from changeflow.local.server import EmbeddedServer

    checkpoint = tmp_path / "tail.json"
    with EmbeddedServer(port=0, time_scale=0.001) as server:
        cf = Changeflow.for_embedded(server.stack)
        for n in (1, 2, 3):
            cf.submit(put(ENTITY, n))
        env = {**os.environ, "CHANGEFLOW_ENDPOINT_URL": server.url}
        command = [sys.executable, "-m", "changeflow", "tail", "--all", "--json", "--checkpoint", str(checkpoint)]
        first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        printed = [json.loads(first.stdout.readline()) for _ in range(3)]  # history
        for n in (4, 5, 6):
            cf.submit(put(ENTITY, n))
        while printed[-1]["version"] < 5:
            printed.append(json.loads(first.stdout.readline()))
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
        # what it printed (each line flushed) before the kill but after the last line read here is delivered too:
        # it is in the pipe, and its checkpoint may already be past it (a fresh clone's run lost version 6 here)
        printed += [json.loads(line) for line in first.stdout.read().splitlines(keepends=True) if line.endswith("\n")]
        for n in (7, 8):
            cf.submit(put(ENTITY, n))
        second = subprocess.run(command + ["--idle-exit", "1"], capture_output=True, env=env, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    again = [json.loads(line) for line in second.stdout.splitlines()]
    seen = [(e["entityId"], e["version"]) for e in printed + again]
    assert [v for _, v in dict.fromkeys(seen)] == list(range(1, 9))  # each version, in order, once kept
    assert again[-1]["version"] == 8 and len(seen) - len(set(seen)) <= 10
