"""``changeflow tail``: the feed from a point, for as long as it runs. History first (the snapshot), then the
table's stream, with no gap and no double between them, every version checked against the hash chain.

The hand-over needs no coordination: every version not in the snapshot was recorded after the snapshot
read its entity, so less than 24 hours ago, and is still in the stream, read from its oldest record kept; what
the stream repeats of the snapshot is recognised by entity and version and dropped (``Follower``). A consumer
that resumes from its checkpoint within 24 hours reads the stream from where it stopped; later than that (its
positions trimmed away), it reads history again from each entity's head, then the stream.

The checkpoint (``--checkpoint FILE``) is written after each page of history and each batch of stream records,
atomically (a new file renamed over the old): the heads (each entity's last version and chain hash) and the
stream positions. A consumer killed between printing an event and its next checkpoint prints the events since
that checkpoint again when it resumes: at most one batch, recognised downstream by (entityId, version).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from changeflow_core import model, store
from changeflow_core.feed import Head

from ..common.errors import UsageError
from .follower import Emit, Follower, Tally
from .stream import Positions, StreamReader, stream_arn

FORMAT = "changeflow-tail/1"
POLL_SECONDS = 1.0  # between reads of a stream that had nothing new (GetRecords: 5 calls a second a shard)


@dataclass(frozen=True)
class Scope:
    """What to follow: one entity (``entity``) or all; from a version (one entity) or a time (``since``,
    epoch ms of recordedAt)."""

    entity: str | None = None
    from_version: int | None = None
    since: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"entity": self.entity, "fromVersion": self.from_version, "since": self.since}


class Checkpoint:
    """A consumer's place, in a JSON file: the scope it follows, each entity's head, the stream positions."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def load(self, scope: Scope) -> tuple[dict[str, Head], Positions] | None:
        if not self.path.exists():
            return None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT!r}")
            heads = {entity: Head.from_json(h) for entity, h in data["heads"].items()}
            positions = Positions.from_json(data.get("positions"))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:  # RecursionError: too deep
            raise UsageError(f"--checkpoint {self.path}: not a tail checkpoint ({exc})") from None
        if data.get("scope", {}).get("entity") != scope.entity:
            raise UsageError(f"--checkpoint {self.path}: it follows "
                             f"{data['scope'].get('entity') or 'every entity'}, not {scope.entity or 'every entity'}")
        return heads, positions

    def save(self, scope: Scope, heads: dict[str, Head], positions: Positions) -> None:
        data = {"format": FORMAT, "scope": scope.to_json(), "savedAt": int(time.time() * 1000),
                "positions": positions.to_json(), "heads": {e: h.to_json() for e, h in sorted(heads.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(data, out, separators=(",", ":"))
                out.flush()
                os.fsync(out.fileno())
            os.replace(name, self.path)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise


def entities(client) -> list[str]:
    """Every entity with a version in history (a Scan of the keys only)."""
    found, start = set(), None
    while True:
        kwargs = {"ExclusiveStartKey": start} if start else {}
        page = client.dynamodb.scan(TableName=client.history_table, ProjectionExpression="#pk, #sk",
                                    FilterExpression="begins_with(#sk, :history)",
                                    ExpressionAttributeNames={"#pk": model.PK, "#sk": model.SK},
                                    ExpressionAttributeValues={":history": {"S": model.HISTORY_PREFIX}}, **kwargs)
        found.update(item[model.PK]["S"] for item in page.get("Items", []))
        start = page.get("LastEvaluatedKey")
        if not start:
            return sorted(found)


class Tail:
    """``Tail(client, scope, emit).run(stop)``: the snapshot, then the stream until ``stop`` is set or, with
    ``idle_exit``, until nothing new came for that many seconds. ``ChainBreak`` ends it."""

    def __init__(self, client, scope: Scope, emit: Emit, checkpoint: Checkpoint | None = None,
                 idle_exit: float | None = None, poll: float = POLL_SECONDS):
        self.client, self.scope, self.checkpoint = client, scope, checkpoint
        self.idle_exit, self.poll = idle_exit, poll
        restored = checkpoint.load(scope) if checkpoint else None
        heads, positions = restored if restored else ({}, Positions())
        wanted: Callable[[str], bool] = (lambda e: e == scope.entity) if scope.entity else (lambda e: True)
        self.follower = Follower(client, emit, heads, wanted, since=None if restored else scope.since)
        if scope.entity and scope.from_version and scope.entity not in heads and scope.from_version > 1:
            self.follower.heads[scope.entity] = self.follower._anchor_before(scope.entity, scope.from_version)
        self.reader = StreamReader(client.make("dynamodbstreams"), stream_arn(client), positions)
        self.resumed = bool(restored) and positions.stream == self.reader.arn and bool(positions.shards)

    @property
    def tally(self) -> Tally:
        return self.follower.tally

    def run(self, stop: threading.Event | None = None) -> Tally:
        stop = stop or threading.Event()
        if not self._stream_continues():
            self.snapshot()
        quiet_since = time.monotonic()
        while not stop.is_set():
            took = False
            for _, records in self.reader.batches():
                for record in records:
                    self.follower.take_record(record)
                self._save()
                took = True
                if stop.is_set():
                    break
            if self.reader.positions.lost:  # the stream trimmed what this reader had not read: history again
                self.follower.tally.notes.append("the stream had trimmed records not yet read: history read again")
                self.reader.positions.lost.clear()
                self.snapshot()
            if took:
                quiet_since = time.monotonic()
            elif self.idle_exit is not None and time.monotonic() - quiet_since >= self.idle_exit:
                break
            else:
                stop.wait(self.poll)
        return self.tally

    def _stream_continues(self) -> bool:
        """A checkpoint whose stream positions are all still kept: the stream has everything after them."""
        if not self.resumed:
            return False
        for shard in list(self.reader.positions.shards):
            self.reader.iterators[shard] = self.reader._iterator(shard)
        return not self.reader.positions.lost

    def snapshot(self) -> None:
        """Every version in history after each entity's head, entity by entity, in version order."""
        for entity in [self.scope.entity] if self.scope.entity else entities(self.client):
            head = self.follower.heads.get(entity)
            first, start = (head.version + 1 if head else 1), None
            while True:
                page, start = store.query_history(self.client.dynamodb, self.client.history_table, entity,
                                                  newest_first=False, consistent=True, raw=True, start_key=start,
                                                  versions=(first, model.MAX_VERSION))
                for item in page:
                    self.follower.take_item(item, "history")
                self._save()
                if not start:
                    break

    def _save(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.save(self.scope, self.follower.heads, self.reader.positions)
