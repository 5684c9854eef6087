"""The table's DynamoDB stream, read as a consumer reads it: every shard, parents before their children, each
in order, from a position (the last sequence number taken) or from the oldest record kept (``TRIM_HORIZON``).

DynamoDB Streams keeps a record 24 hours and gives each shard's records in the order they were written; a
shard closes after a while and its children carry on ("for each item that is modified ... the stream records
appear in the same sequence as the actual modifications to the item",
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html). A position older than the
oldest record kept is gone (``TrimmedDataAccessException``): ``Positions.lost`` says so, and the consumer
reads what it may have missed from the table instead.

At most two readers should read one shard at a time (DynamoDB quotas, "DynamoDB Streams"): the pipe is one,
``changeflow tail`` or the console another. More consumers belong on the bus or the Kinesis stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from botocore.exceptions import ClientError

from ..common.errors import ToolFailure

RECORDS_PER_READ = 1000  # GetRecords: at most 1,000 records a call


def stream_arn(client) -> str:
    """The stream of the table that holds history items (``HistoryTableName``)."""
    table = client.dynamodb.describe_table(TableName=client.history_table)["Table"]
    arn = table.get("LatestStreamArn")
    spec = table.get("StreamSpecification") or {}
    if not arn or not spec.get("StreamEnabled", True):
        raise ToolFailure(f"table {client.history_table} has no stream: the stack was deployed before the feed "
                          "(issue 36); deploy this release (its StreamSpecification) and tail again")
    return arn


@dataclass
class Positions:
    """Where a reader is: the stream, and each shard's last sequence number taken. ``lost``: shards whose
    position was trimmed away (or a stream that is not the one the positions were taken on)."""

    stream: str | None = None
    shards: dict[str, str] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "shards": dict(self.shards)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "Positions":
        data = data or {}
        return cls(data.get("stream"), dict(data.get("shards") or {}))


class StreamReader:
    """Reads every shard of one stream. ``batches()`` yields ``(shard id, records)`` in each shard's order."""

    def __init__(self, streams, arn: str, positions: Positions):
        self.streams, self.arn = streams, arn
        if positions.stream not in (None, arn):  # the stream was disabled and enabled again: a new stream
            positions = Positions(arn, {}, lost=list(positions.shards))
        self.positions = Positions(arn, dict(positions.shards), list(positions.lost))
        self.iterators: dict[str, str | None] = {}
        self.closed: set[str] = set()

    def shards(self) -> list[dict[str, Any]]:
        found, start = [], None
        while True:
            kwargs = {"ExclusiveStartShardId": start} if start else {}
            page = self.streams.describe_stream(StreamArn=self.arn, **kwargs)["StreamDescription"]
            found.extend(page.get("Shards", []))
            start = page.get("LastEvaluatedShardId")
            if not start:
                return _parents_first(found)

    def _iterator(self, shard: str) -> str | None:
        after = self.positions.shards.get(shard)
        try:
            if after:
                return self._get_iterator(shard, "AFTER_SEQUENCE_NUMBER", after)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TrimmedDataAccessException":
                raise
            self.positions.lost.append(shard)
        return self._get_iterator(shard, "TRIM_HORIZON")

    def _get_iterator(self, shard: str, kind: str, sequence: str | None = None) -> str | None:
        kwargs = {"SequenceNumber": sequence} if sequence else {}
        try:
            return self.streams.get_shard_iterator(StreamArn=self.arn, ShardId=shard, ShardIteratorType=kind,
                                                   **kwargs)["ShardIterator"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":  # a shard gone past its 24 hours
                return None
            raise

    def batches(self) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """One pass: each shard's records after its position, parents first; an empty pass yields nothing."""
        for shard in self.shards():
            shard_id = shard["ShardId"]
            if shard_id in self.closed:
                continue
            parent = shard.get("ParentShardId")
            if parent and parent in self.iterators and parent not in self.closed:
                continue  # the parent's records come first: its child waits until it has closed
            if shard_id not in self.iterators:
                self.iterators[shard_id] = self._iterator(shard_id)
            while self.iterators.get(shard_id):
                try:
                    answer = self.streams.get_records(ShardIterator=self.iterators[shard_id], Limit=RECORDS_PER_READ)
                except ClientError as exc:
                    code = exc.response["Error"]["Code"]
                    if code == "ExpiredIteratorException":  # 15 minutes without a read: take up where we were
                        self.iterators[shard_id] = self._iterator(shard_id)
                        continue
                    if code == "TrimmedDataAccessException":
                        self.positions.lost.append(shard_id)
                        self.positions.shards.pop(shard_id, None)
                        self.iterators[shard_id] = self._get_iterator(shard_id, "TRIM_HORIZON")
                        continue
                    raise
                records = answer.get("Records", [])
                self.iterators[shard_id] = answer.get("NextShardIterator")
                if self.iterators[shard_id] is None:
                    self.closed.add(shard_id)  # a closed shard read to its end
                if not records:
                    break
                # the position after the batch, before the consumer sees it: what it saves once it has taken the
                # batch (a consumer that stops mid-batch saves nothing, and reads the batch again)
                self.positions.shards[shard_id] = records[-1]["dynamodb"]["SequenceNumber"]
                yield shard_id, records


def _parents_first(shards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {s["ShardId"]: s for s in shards}
    ordered, seen = [], set()

    def visit(shard: dict[str, Any]) -> None:
        if shard["ShardId"] in seen:
            return
        seen.add(shard["ShardId"])
        parent = by_id.get(shard.get("ParentShardId") or "")
        if parent is not None:
            visit(parent)
        ordered.append(shard)

    for shard in shards:
        visit(shard)
    return ordered
