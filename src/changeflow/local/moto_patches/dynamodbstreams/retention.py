"""DynamoDB Streams keeps each stream record for 24 hours, then trims it: ``TRIM_HORIZON`` starts at the oldest
record still kept, and a shard iterator at (or a read that reaches) a trimmed record fails with
``TrimmedDataAccessException``. Stock moto 5.2.5 keeps every record for ever, so a reader that starts a week
late still finds the whole week, which no reader on AWS does: a feed consumer must start from the table
(the snapshot) and only then from the stream.
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html ("stores this information in a log
for up to 24 hours"), https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_streams_GetShardIterator.html
and API_streams_GetRecords.html (TrimmedDataAccessException: "You request a shard iterator with a sequence number
older than the trim point (24 hours)", "before you use the iterator in a GetRecords request, a stream record in
the shard exceeds the 24 hour period and is trimmed").

Time is the stream's clock, ``StreamClock``: the real time plus an offset a test moves forward (``advance``),
so that a week passes in no time; each record's ``ApproximateCreationDateTime`` is taken from it too (AWS: the
time the record was created, rounded down to the second).
"""

from __future__ import annotations

import bisect
import datetime
import threading
import time

from ..originals import ORIGINALS

RETENTION_SECONDS = 24 * 60 * 60


class StreamClock:
    """The embedded stack's wall clock for stream records: ``time.time()`` plus ``offset`` seconds."""

    offset: float = 0.0
    lock = threading.Lock()

    @classmethod
    def now(cls) -> float:
        return time.time() + cls.offset

    @classmethod
    def advance(cls, seconds: float) -> None:
        """Let ``seconds`` pass for every stream at once (a week: ``advance(7 * 86400)``)."""
        with cls.lock:
            cls.offset += seconds

    @classmethod
    def reset(cls) -> None:
        with cls.lock:
            cls.offset = 0.0


def _trimmed_error(message: str):
    from moto.core.exceptions import JsonRESTError

    return JsonRESTError("TrimmedDataAccessException", message)


def _trim_point(shard) -> int:
    """The sequence number of the oldest record still kept (one past the newest when all are trimmed)."""
    created = getattr(shard, "created_at", None) or []  # in the order written: the clock only moves forward
    return shard.starting_sequence_number + bisect.bisect_right(created, StreamClock.now() - RETENTION_SECONDS)


def patch_stream_retention() -> None:
    from moto.dynamodb.models.table import StreamRecord, StreamShard
    from moto.dynamodbstreams import models as streams

    add = ORIGINALS.setdefault("stream_shard_add", StreamShard.add)
    get = ORIGINALS.setdefault("stream_shard_get", StreamShard.get)
    record_init = ORIGINALS.setdefault("stream_record_init", StreamRecord.__init__)
    get_iterator = ORIGINALS.setdefault("streams_get_shard_iterator", streams.DynamoDBStreamsBackend.get_shard_iterator)

    def record_created(self, *args, **kwargs):
        record_init(self, *args, **kwargs)
        self.created_at = StreamClock.now()
        self.record["dynamodb"]["ApproximateCreationDateTime"] = datetime.datetime.fromtimestamp(
            int(self.created_at), tz=datetime.timezone.utc)

    def shard_add(self, old, new):
        add(self, old, new)
        if not hasattr(self, "created_at"):
            self.created_at = []
        if len(self.items) > len(self.created_at):  # moto appended one record (and no Lambda trigger took them)
            self.created_at.append(self.items[-1].created_at)

    def shard_get(self, start: int, quantity: int):
        trim = _trim_point(self)
        if start < trim:
            raise _trimmed_error("The data you are trying to access has been trimmed.")
        return get(self, start, quantity)

    def get_shard_iterator(self, arn, shard_id, shard_iterator_type, sequence_number=None):
        shard = self._get_table_from_arn(arn).stream_shard
        if shard_iterator_type in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER") and sequence_number is not None:
            position = int(sequence_number) + (shard_iterator_type == "AFTER_SEQUENCE_NUMBER")
            if position < _trim_point(shard):
                raise _trimmed_error(f"Attempted to access a sequence number ({sequence_number}) older than the "
                                     "trim point (24 hours)")
        iterator = get_iterator(self, arn, shard_id, shard_iterator_type, sequence_number)
        if shard_iterator_type == "TRIM_HORIZON":
            iterator.sequence_number = _trim_point(shard)
        return iterator

    StreamRecord.__init__ = record_created
    StreamShard.add = shard_add
    StreamShard.get = shard_get
    streams.DynamoDBStreamsBackend.get_shard_iterator = get_shard_iterator
