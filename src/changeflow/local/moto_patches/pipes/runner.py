"""EventBridge Pipes that run. Stock moto 5.2.5 keeps a pipe's configuration (CreatePipe, DescribePipe,
StartPipe, StopPipe) and never moves a record. This patch runs each pipe whose source is a DynamoDB stream as
Pipes documents it:

- it reads every shard of the stream from ``StartingPosition`` (``TRIM_HORIZON`` or ``LATEST``), in order: a
  shard's next batch only once the one before was delivered or given up ("EventBridge Pipes maintains the order
  of records from the data stream when sending that data to the destination",
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-dynamodb.html);
- it drops the records no ``FilterCriteria`` pattern matches (EventBridge's pattern language: moto's own
  matcher) before they take a place in a batch
  (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-event-filtering.html);
- it batches up to ``BatchSize`` records, waiting up to ``MaximumBatchingWindowInSeconds`` for a fuller batch,
  and hands a batch to the enrichment as one JSON array, synchronously; what the enrichment answers goes to
  the target, an empty answer to nothing, more events than the target takes in a batch (an event bus: 10) to a
  failure (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-batching-concurrency.html,
  https://docs.aws.amazon.com/eventbridge/latest/userguide/pipes-enrichment.html);
- the target is an event bus (PutEvents, ``Source`` and ``DetailType`` from ``EventBridgeEventBusParameters``)
  or a Kinesis stream (PutRecords, ``PartitionKey`` a JSON path into each event: a dynamic path parameter);
- a batch that fails is retried whole; where the target failed only some entries, only their records go round
  again, enrichment included ("this retry goes through the entire pipe, including re-invoking any configured
  enrichment"); ``OnPartialBatchItemFailure: AUTOMATIC_BISECT`` halves a failing batch; after
  ``MaximumRetryAttempts`` retries (-1: until the records leave the stream) the batch's place in the stream goes
  to ``DeadLetterConfig`` and the shard moves on. So delivery is at least once: an answer lost after the target
  took a batch makes the target see it again (PipeSourceDynamoDBStreamParameters,
  https://docs.aws.amazon.com/eventbridge/latest/pipes-reference/API_PipeSourceDynamoDBStreamParameters.html).

Records trimmed from the stream (24 hours, ``dynamodbstreams.retention``) before the pipe read them are lost to
it, as on AWS: it goes on from the oldest record kept. Waits (the batching window, the back-off between
retries, which AWS does not document: 1 s doubling to 32 s here) run on the stack's time scale
(``stepfunctions.clock``). ``TargetParameters.InputTemplate``, other sources and other targets are not run.

The pipe calls its enrichment, its target and its dead-letter queue with a session of its role, assumed as Pipes
assumes it (IAM evaluated on the embedded stack, ``moto_patches.iam``); the enrichment's ``Invoke`` is answered
in-process without an IAM check.

``Deliveries.hook`` lets a fault campaign stand between a pipe and its target (never an AWS behaviour).
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
import time
from collections import Counter
from typing import Any, Callable

from moto.core.exceptions import JsonRESTError

from ..core.locking import API_LOCK
from ..originals import ORIGINALS
from ..stepfunctions.clock import Clock

IDLE_POLL_SECONDS = 0.25  # between empty reads when no write wakes it first: 4 a second, as Lambda polls a shard
TARGET_BATCH = {"events": 10, "kinesis": 500, "sqs": 10}  # the batching page's "Maximum batch size"
NEW_RECORDS = threading.Condition()  # notified on every stream record written
STATE_CHANGED = threading.Condition()  # notified when StartPipe, StopPipe or UpdatePipe sets a desired state


class Deliveries:
    """``hook(pipe_name, events, put)``: called instead of ``put(events)`` (the target's request), for faults."""

    hook: Callable[[str, list, Callable[[list], list[bool]]], list[bool]] | None = None


class TargetFailed(Exception):
    pass


class PipeRunner:
    """One pipe's polling thread."""

    def __init__(self, pipe) -> None:
        self.pipe = pipe
        self.stopping = threading.Event()
        self.stats: Counter = Counter()
        self.patterns: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, name=f"pipe {pipe.name}", daemon=True)
        self.credentials: dict[str, str] = {}  # its role's session (``_role_session``)
        self.clients: dict[str, Any] = {}  # service -> its client with those credentials

    # --- the loop -------------------------------------------------------------------------------------
    def start(self) -> "PipeRunner":
        self.thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        for condition in (NEW_RECORDS, STATE_CHANGED):
            with condition:
                condition.notify_all()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    def _run(self) -> None:
        from moto.dynamodbstreams.models import dynamodbstreams_backends

        region = self.pipe.region_name
        # the source is read from moto's streams backend under the request lock: what GetRecords answers, without
        # a client's serialization (the pipe reads on every write; the targets are called as clients call them)
        self.streams = dynamodbstreams_backends[self.pipe.account_id][region]
        try:  # the pipe calls its targets as its role (IAM evaluated: moto_patches.iam)
            self.credentials = _role_session(self.pipe)
        except Exception as refused:  # noqa: BLE001 - a role Pipes may not assume: the pipe moves nothing
            self.stats["role refused"] += 1
            self.refused = str(refused)
            return
        for service in self._services():  # now, in this thread; one its configuration adds later at first use
            self._client(service)
        try:
            with API_LOCK:
                shards = self.streams.describe_stream(self.pipe.source)["Shards"]
        except Exception:  # noqa: BLE001 - a source that is gone: the pipe has nothing to read
            return
        cursors = {s["ShardId"]: self._iterator(s["ShardId"], self._source().get("StartingPosition", "LATEST"))
                   for s in shards}
        pending: dict[str, list] = {shard: [] for shard in cursors}
        since: dict[str, float] = {}
        while not self.stopping.is_set():
            if self.pipe.desired_state != "RUNNING":
                self._wait_for_start()
                continue
            try:
                read_any = self._poll(cursors, pending, since)
            except Exception:  # noqa: BLE001 - a read that failed (throttled, the stack stopping) is read again
                if self.stopping.is_set():
                    return
                self.stats["source reads failed"] += 1
                read_any = False
            if not read_any:
                waits = [self._window() - (time.monotonic() - t) for t in since.values()]
                self._wait(max(0.0, min(waits + [IDLE_POLL_SECONDS])))

    def _poll(self, cursors: dict[str, str], pending: dict[str, list], since: dict[str, float]) -> bool:
        read_any = False
        for shard in list(cursors):
            read_any = self._read(shard, cursors, pending[shard]) or read_any
            if pending[shard] and shard not in since:
                since[shard] = time.monotonic()
            if pending[shard] and self._batch_ready(pending[shard], since[shard]):
                self._deliver(shard, pending[shard])
                pending[shard], read_any = [], True
                since.pop(shard, None)
        return read_any

    def _services(self) -> list[str]:
        """The services the pipe's configuration calls: its enrichment's, its target's, its dead-letter queue's
        (a client is about 4 ms of CPU, and most pipes call two of the four)."""
        return ((["lambda"] if self.pipe.enrichment else [])
                + ["events" if _target_kind(self.pipe.target) == "events" else "kinesis"]  # as ``_send`` puts
                + (["sqs"] if (self._source().get("DeadLetterConfig") or {}).get("Arn") else []))

    def _client(self, service: str):
        """The pipe's client of ``service``, with its role's credentials; its Lambda client's ``Invoke`` is
        answered in-process."""
        if service not in self.clients:
            import boto3

            client = boto3.client(service, region_name=self.pipe.region_name, **self.credentials)
            if service == "lambda":
                client.meta.events.register_first("before-call.lambda.Invoke",
                                                   lambda **kwargs: ORIGINALS["invoke"][0](**kwargs))
            self.clients[service] = client
        return self.clients[service]

    def _wait(self, seconds: float) -> None:
        with NEW_RECORDS:
            if not self.stopping.is_set():
                NEW_RECORDS.wait(seconds)

    def _wait_for_start(self) -> None:
        """A stopped pipe waits for a new desired state, not for records: it reads none until StartPipe, and
        woken by every write it would cost the writers a switch of the GIL each (the poll bounds a state set
        without the API)."""
        self.stats["waits while stopped"] += 1
        with STATE_CHANGED:
            if not self.stopping.is_set() and self.pipe.desired_state != "RUNNING":
                STATE_CHANGED.wait(IDLE_POLL_SECONDS)

    # --- the source -----------------------------------------------------------------------------------
    def _source(self) -> dict[str, Any]:
        return (self.pipe.source_parameters or {}).get("DynamoDBStreamParameters") or {}

    def _iterator(self, shard: str, kind: str, sequence: str | None = None) -> str:
        with API_LOCK:
            return self.streams.get_shard_iterator(self.pipe.source, shard, kind,
                                                   int(sequence) if sequence else None).arn

    def _batch_size(self) -> int:
        return int(self._source().get("BatchSize", 100))

    def _window(self) -> float:
        return float(self._source().get("MaximumBatchingWindowInSeconds", 0)) * Clock.scale

    def _batch_ready(self, pending: list, since: float) -> bool:
        return len(pending) >= self._batch_size() or time.monotonic() - since >= self._window()

    def _read(self, shard: str, cursors: dict[str, str], pending: list) -> bool:
        """Read up to the batch's free places; keep the records a filter matches. True if anything was read."""
        room = self._batch_size() - len(pending)
        if room <= 0:
            return False
        try:
            with API_LOCK:
                answer = self.streams.get_records(cursors[shard], min(room, 1000))
        except JsonRESTError as exc:
            if exc.error_type != "TrimmedDataAccessException":
                raise
            self.stats["records trimmed before they were read"] += 1
            cursors[shard] = self._iterator(shard, "TRIM_HORIZON")
            return True
        cursors[shard] = answer["NextShardIterator"]
        records = [_as_json(r) for r in answer.get("Records", [])]
        self.stats["stream reads"] += 1
        self.stats["stream reads with records"] += bool(records)
        self.stats["records read"] += len(records)
        kept = [r for r in records if self._matches(r)]
        self.stats["records filtered out"] += len(records) - len(kept)
        pending.extend(kept)
        return bool(records)

    def _matches(self, record: dict[str, Any]) -> bool:
        from moto.events.models import EventPattern

        filters = ((self.pipe.source_parameters or {}).get("FilterCriteria") or {}).get("Filters") or []
        for f in filters:
            if f["Pattern"] not in self.patterns:
                self.patterns[f["Pattern"]] = EventPattern.load(f["Pattern"])
        return not filters or any(self.patterns[f["Pattern"]].matches_event(record) for f in filters)

    # --- delivery -------------------------------------------------------------------------------------
    def _deliver(self, shard: str, records: list[dict[str, Any]]) -> None:
        params = self._source()
        retries_allowed = int(params.get("MaximumRetryAttempts", -1))
        bisect = params.get("OnPartialBatchItemFailure") == "AUTOMATIC_BISECT"
        queue, retries, error = [records], 0, None
        self.stats["batches"] += 1
        while queue and not self.stopping.is_set():
            part = queue[0]
            try:
                failed = self._send(part)
            except Exception as exc:  # noqa: BLE001 - any failure of the enrichment or target fails the batch
                failed, error = part, exc
            if not failed:
                queue.pop(0)
                continue
            retries += 1
            self.stats["retries"] += 1
            if 0 <= retries_allowed < retries:
                self._dead_letter(shard, failed, error)
                queue.pop(0)
                continue
            if bisect and failed is part and len(part) > 1:
                half = len(part) // 2
                queue[0:1] = [part[:half], part[half:]]
            else:
                queue[0] = failed
            self.stopping.wait(min(32.0, 2.0 ** (retries - 1)) * Clock.scale)

    def _send(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Enrich and deliver ``records``; the records whose events the target did not take."""
        events: Any = records
        if self.pipe.enrichment:
            events = self._enrich(records)
        if events in ("", {}, [], None):
            return []
        events = events if isinstance(events, list) else [events]
        kind = _target_kind(self.pipe.target)
        if len(events) > TARGET_BATCH.get(kind, 10):
            raise TargetFailed(f"{len(events)} events for a target that takes {TARGET_BATCH.get(kind, 10)} a batch")
        put = self._put_events if kind == "events" else self._put_records
        taken = Deliveries.hook(self.pipe.name, events, put) if Deliveries.hook else put(events)
        if all(taken):
            return []
        if len(taken) == len(records):
            return [r for r, ok in zip(records, taken) if not ok]
        return records

    def _enrich(self, records: list[dict[str, Any]]) -> Any:
        self.stats["enrichment invocations"] += 1
        answer = self._client("lambda").invoke(FunctionName=self.pipe.enrichment, InvocationType="RequestResponse",
                                               Payload=json.dumps(records).encode("utf-8"))
        payload = answer["Payload"].read()
        if answer.get("FunctionError"):
            raise TargetFailed(f"the enrichment failed: {payload[:500]!r}")
        return json.loads(payload) if payload else None

    def _put_events(self, events: list) -> list[bool]:
        params = (self.pipe.target_parameters or {}).get("EventBridgeEventBusParameters") or {}
        entries = [{"Source": _resolve(params.get("Source"), e), "DetailType": _resolve(params.get("DetailType"), e),
                    "Detail": json.dumps(e), "EventBusName": self.pipe.target,
                    **({"Resources": params["Resources"]} if params.get("Resources") else {})} for e in events]
        self.stats["target requests"] += 1
        answer = self._client("events").put_events(Entries=entries)
        return self._taken([not entry.get("ErrorCode") for entry in answer["Entries"]])

    def _put_records(self, events: list) -> list[bool]:
        params = (self.pipe.target_parameters or {}).get("KinesisStreamParameters") or {}
        records = [{"Data": json.dumps(e).encode("utf-8"), "PartitionKey": str(_resolve(params["PartitionKey"], e))}
                   for e in events]
        self.stats["target requests"] += 1
        answer = self._client("kinesis").put_records(StreamARN=self.pipe.target, Records=records)
        return self._taken([not record.get("ErrorCode") for record in answer["Records"]])

    def _taken(self, taken: list[bool]) -> list[bool]:
        self.stats["events delivered"] += sum(taken)  # what the target took, whether or not its answer arrives
        return taken

    def _dead_letter(self, shard: str, records: list[dict[str, Any]], error: BaseException | None) -> None:
        """The batch's place in the stream (not its records), as a stream source's failure record describes it."""
        self.stats["records dead-lettered"] += len(records)
        queue = (self._source().get("DeadLetterConfig") or {}).get("Arn")
        if not queue:
            return
        sequences = [r["dynamodb"]["SequenceNumber"] for r in records]
        body = {"context": {"pipeArn": self.pipe.arn, "condition": "RetryAttemptsExhausted",
                            "errorMessage": str(error)[:1000] if error else "the target did not take the events"},
                "DDBStreamBatchInfo": {"shardId": shard, "startSequenceNumber": sequences[0],
                                       "endSequenceNumber": sequences[-1], "batchSize": len(records),
                                       "streamArn": self.pipe.source}}
        _, _, _, region, account, name = queue.split(":", 5)  # by its ARN, as Pipes sends (no GetQueueUrl of the role's)
        self._client("sqs").send_message(QueueUrl=f"https://sqs.{region}.amazonaws.com/{account}/{name}", MessageBody=json.dumps(body))


def _role_session(pipe) -> dict[str, str]:
    """A session of the pipe's execution role, as Pipes assumes it (``pipes.amazonaws.com``, the pipe's ARN as
    ``aws:SourceArn``, under the role's trust policy): the pipe reads, enriches and delivers with it
    (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-permissions.html)."""
    import uuid

    from moto.sts.models import sts_backends

    from ..iam import enforcement

    with enforcement.acting_as("pipes.amazonaws.com", pipe.arn, pipe.account_id):
        enforcement.assume_role_as_service("pipes.amazonaws.com", pipe.account_id, pipe.role_arn)
    session = sts_backends[pipe.account_id]["aws"].assume_role(
        region_name=pipe.region_name, role_session_name=str(uuid.uuid4()), role_arn=pipe.role_arn, policy="",
        duration=12 * 3600, external_id="")
    return {"aws_access_key_id": session.access_key_id, "aws_secret_access_key": session.secret_access_key,
            "aws_session_token": session.session_token}


def _target_kind(arn: str) -> str:
    return arn.split(":")[2]


def _resolve(value: Any, event: Any) -> Any:
    """A dynamic path parameter (``$.a.b``) read from the event; any other value as it is."""
    if not isinstance(value, str) or not value.startswith("$."):
        return value
    for key in value[2:].split("."):
        event = event[key]
    return event


def _as_json(value: Any) -> Any:
    """A record as a pipe passes it on: JSON, binary as base64, the creation time as epoch seconds."""
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return value


# --- the patch ------------------------------------------------------------------------------------------
RUNNERS: dict[str, PipeRunner] = {}
_LOCK = threading.Lock()


def _start(pipe) -> None:
    if ":dynamodb:" not in pipe.source or "/stream/" not in pipe.source:
        return  # only a DynamoDB stream source is run
    with _LOCK:
        previous = RUNNERS.pop(pipe.arn, None)
        if previous is not None:
            previous.stop()
        RUNNERS[pipe.arn] = PipeRunner(pipe).start()


def stop_all() -> None:
    """Stop every pipe's thread (the embedded stack does, before moto's mock stops)."""
    with _LOCK:
        runners = list(RUNNERS.values())
        RUNNERS.clear()
    for runner in runners:
        runner.stop()


def statistics(pipe_name: str) -> Counter:
    """What a pipe's runner did (records read and filtered out, batches, enrichment invocations, target
    requests, events delivered, retries, records dead-lettered)."""
    with _LOCK:
        runner = next((r for r in RUNNERS.values() if r.pipe.name == pipe_name), None)
    for _ in range(5):  # the runner's thread may be counting: copy again
        try:
            return Counter(dict(runner.stats)) if runner else Counter()
        except RuntimeError:
            continue
    return Counter()


def patch_pipes_run() -> None:
    from moto.dynamodb.models.table import StreamShard
    from moto.pipes.models import EventBridgePipesBackend

    create = ORIGINALS.setdefault("pipes_create_pipe", EventBridgePipesBackend.create_pipe)
    delete = ORIGINALS.setdefault("pipes_delete_pipe", EventBridgePipesBackend.delete_pipe)
    add = ORIGINALS.setdefault("pipes_stream_shard_add", StreamShard.add)

    def create_pipe(self, *args, **kwargs):
        pipe = create(self, *args, **kwargs)
        _start(pipe)
        return pipe

    def delete_pipe(self, name: str):
        pipe = delete(self, name)
        with _LOCK:
            runner = RUNNERS.pop(pipe.arn, None)
        if runner is not None:
            runner.stop()
        return pipe

    def shard_add(self, old, new):
        add(self, old, new)
        with NEW_RECORDS:
            NEW_RECORDS.notify_all()

    def setting_state(original):
        def set_state(self, *args, **kwargs):
            pipe = original(self, *args, **kwargs)
            with STATE_CHANGED:
                STATE_CHANGED.notify_all()
            return pipe
        return set_state

    for name in ("start_pipe", "stop_pipe", "update_pipe"):
        setattr(EventBridgePipesBackend, name,
                setting_state(ORIGINALS.setdefault(f"pipes_{name}", getattr(EventBridgePipesBackend, name))))
    EventBridgePipesBackend.create_pipe = create_pipe
    EventBridgePipesBackend.delete_pipe = delete_pipe
    StreamShard.add = shard_add
