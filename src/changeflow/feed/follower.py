"""A consumer that loses nothing and takes nothing twice: each entity's versions in version order, each once,
each checked against the hash chain as it is taken.

What it is given may come from history (the snapshot), from the table's stream, or from the feed's events on
the bus, in any order and more than once. For each entity it keeps a ``Head`` (the last version taken and its
chain hash): a version at or below the head is a duplicate (recognised by entity and version) and is dropped; the
next one is checked (``changeflow_core.feed.check_next``, the audit's own link check) and taken; one beyond it
means versions in between have not arrived (the stream orders records per item, not per entity; the bus not
at all; a pipe may have dead-lettered some), so they are read from history first, strongly consistent, and
taken in order. A version history does not have is a break, as is a link that does not hold: ``ChainBreak``
stops the consumer, loudly, with the version ``changeflow verify`` would name.

A history item rewritten after it was taken (a MODIFY in the stream) is checked too: a TTL tag leaves its hash
as it was, a redaction keeps its content's hash; anything else is a break. A history item deleted other than
by TTL (a REMOVE in the stream without DynamoDB's service identity) is a break.
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/time-to-live-ttl-streams.html
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from changeflow_core import chain, feed, model, store
from changeflow_core.feed import ChainBreak, Head

Emit = Callable[[dict[str, Any], str], None]  # (event, origin: "history" | "stream" | "filled")
TTL_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
SEEN_HASHES = 100_000  # (entity, version) -> chain hash of versions taken, kept for rechecks of rewrites


@dataclass
class Tally:
    taken: dict[str, int] = field(default_factory=lambda: {"history": 0, "stream": 0, "filled": 0})
    duplicates: int = 0
    rechecked: int = 0
    notes: list[str] = field(default_factory=list)


class Follower:
    """``heads``: where each entity stands (restored from a checkpoint); ``wanted(entity)`` says which entities
    to follow (one, or all); ``emit`` gets each event taken, in order per entity."""

    def __init__(self, client, emit: Emit, heads: dict[str, Head] | None = None,
                 wanted: Callable[[str], bool] = lambda entity: True, since: int | None = None,
                 anchor_first: bool = False):
        """``anchor_first``: an entity first met past version 1 starts there, anchored on the hash history
        holds for the version before (a view of what is recorded now, such as the console's), instead of
        filling from version 1."""
        self.client, self.emit, self.wanted, self.since = client, emit, wanted, since
        self.anchor_first = anchor_first
        self.heads: dict[str, Head] = dict(heads or {})
        self.tally = Tally()
        self.seen: OrderedDict[tuple[str, int], str | None] = OrderedDict()

    # --- what arrives -------------------------------------------------------------------------------------
    def take_item(self, item: dict[str, dict], origin: str) -> None:
        """A history item (DynamoDB JSON), from history or a stream record's new image."""
        entity, version = item[model.PK]["S"], _version(item)
        if self._due(entity, version):
            self._take(entity, item, origin)

    def take_event(self, event: dict[str, Any], origin: str = "bus") -> None:
        """A ``VersionRecorded`` event as the pipe published it (the bus's ``detail``, a Kinesis record's data):
        checked through its ``chainForm``, taken once, in order; versions it skips are read from history."""
        entity, version = event["entityId"], int(event["version"])
        if not self._due(entity, version):
            return
        before = self.heads.get(entity)
        form = event.get("chainForm")
        head, notes = feed.check_next(entity, before, form, version, event.get("chainHash"))
        if before is not None and before.chain_hash and event.get("prevHash") not in (None, before.chain_hash):
            raise ChainBreak(entity, version, f"version {version}: does not follow version {version - 1} (its "
                                              "prevHash is not that version's hash: a version was removed, "
                                              "swapped or inserted)")
        if form is not None and event.get("content") is not None and chain.content_hash(event["content"]) != \
                event.get("contentHash"):
            raise ChainBreak(entity, version, f"version {version}: its content is not the content the chain holds "
                                              "(contentHash differs)")
        self._accept(entity, head, notes, event, origin)

    def _due(self, entity: str, version: int) -> bool:
        """Whether ``version`` of ``entity`` is to be taken now: an entity followed, not a repeat. Versions before
        it that have not arrived are read from history and taken first."""
        if not self.wanted(entity):
            return False
        head = self.heads.get(entity)
        if head is None:
            head = self._start(entity, version)
            if head is not None:
                self.heads[entity] = head
        if head is not None and version <= head.version:
            self.tally.duplicates += 1
            return False
        following = head.version + 1 if head is not None else 1
        if version > following:
            self._fill(entity, following, version - 1)
        return True

    def take_record(self, record: dict[str, Any]) -> None:
        """A record of the table's stream: history items written, rewritten or deleted (v0 is not the feed)."""
        keys = (record.get("dynamodb") or {}).get("Keys") or {}
        sort_key = (keys.get(model.SK) or {}).get("S", "")
        if not sort_key.startswith(model.HISTORY_PREFIX):
            return
        entity, version = keys[model.PK]["S"], model.version_of_sk(sort_key)
        if not self.wanted(entity):
            return
        kind = record.get("eventName")
        if kind == "REMOVE":
            if record.get("userIdentity") != TTL_IDENTITY and self._taken(entity, version):
                raise ChainBreak(entity, version, f"version {version}: deleted from history (not by TTL's expiry)")
            return
        image = feed.new_image(record)
        if kind == "MODIFY" and self._taken(entity, version):
            self._recheck(entity, version, image)
            return
        self.take_item(image, "stream")

    # --- taking -------------------------------------------------------------------------------------------
    def _take(self, entity: str, item: dict[str, dict], origin: str) -> None:
        before = self.heads.get(entity)
        head, notes = feed.check_next(entity, before, item)
        event = feed.version_event(item, before.chain_hash if before is not None else chain.genesis(entity))
        self._accept(entity, head, notes, event, origin)

    def _accept(self, entity: str, head: Head, notes: list[str], event: dict[str, Any], origin: str) -> None:
        """A version checked: the entity's new head, and the event emitted (unless recorded before ``since``:
        checked, since it anchors what follows, but not asked for)."""
        self.heads[entity] = head
        self.tally.notes.extend(f"{entity}: {note}" for note in notes)
        self._remember(entity, head.version, head.chain_hash)
        if self.since is not None and (event.get("recordedAt") or 0) < self.since:
            return
        self.tally.taken[origin] = self.tally.taken.get(origin, 0) + 1
        self.emit(event, origin)

    def _fill(self, entity: str, first: int, last: int) -> None:
        """Versions ``first..last`` from history (strongly consistent), taken in order."""
        expected, start = first, None
        while expected <= last:
            page, start = store.query_history(self.client.dynamodb, self.client.history_table, entity,
                                              newest_first=False, consistent=True, raw=True,
                                              versions=(expected, last), start_key=start)
            for item in page:
                if _version(item) != expected:
                    break
                self._take(entity, item, "filled")
                expected += 1
            if not start or (page and _version(page[-1]) != expected - 1):
                break
        if expected <= last:
            gap = f"versions {expected}..{last} are" if last > expected else f"version {expected} is"
            raise ChainBreak(entity, expected, f"version {last + 1}: follows version {expected - 1}; {gap} missing "
                                               "from history (deleted, or expired under the retention window)")

    def _start(self, entity: str, version: int) -> Head | None:
        """Where an entity starts when it is first met: None (version 1), or the head just before the first
        version to take, with that version's hash from history: the first version recorded at or after
        ``--since``; the oldest version a retention window kept (its own ``prevHash`` anchors it)."""
        if self.since is not None:
            first = self._first_since(entity)
            return self._anchor_before(entity, first) if first and first > 1 else None
        if self.anchor_first and version > 1:
            return self._anchor_before(entity, version)
        if version == 1 or not self.client.history_expires:
            return None  # from version 1: anything missing before this one is filled, or reported missing
        page, _ = store.query_history(self.client.dynamodb, self.client.history_table, entity, newest_first=False,
                                      consistent=True, raw=True, limit=1)
        oldest = page[0] if page else None
        if oldest is None or _version(oldest) == 1:
            return None
        self.tally.notes.append(f"{entity}: versions 1..{_version(oldest) - 1} expired under the retention window; "
                                f"from version {_version(oldest)}")
        return Head(_version(oldest) - 1, chain.stored_prev(oldest))

    def _anchor_before(self, entity: str, version: int) -> Head:
        """The head just before ``version``: version - 1 and its hash as history holds it (not rechecked here:
        ``changeflow verify`` checks the whole chain)."""
        return Head(version - 1, self._history_hash(entity, version - 1))

    def _first_since(self, entity: str) -> int | None:
        start = None
        while True:
            page, start = store.query_history(self.client.dynamodb, self.client.history_table, entity,
                                              newest_first=False, consistent=True, raw=True, start_key=start)
            for item in page:
                recorded = item.get(model.RECORDED_AT)
                if recorded is not None and int(recorded["N"]) >= self.since:
                    return _version(item)
            if not start:
                return None

    def _history_hash(self, entity: str, version: int) -> str | None:
        key = {model.PK: {"S": entity}, model.SK: {"S": model.history_sk(version)}}
        item = self.client.dynamodb.get_item(TableName=self.client.history_table, Key=key, ConsistentRead=True).get("Item")
        return chain.stored_hash(item) if item else None

    # --- rewrites ----------------------------------------------------------------------------------------
    def _taken(self, entity: str, version: int) -> bool:
        head = self.heads.get(entity)
        return head is not None and version <= head.version

    def _recheck(self, entity: str, version: int, image: dict[str, dict]) -> None:
        """A version taken before, written again: its hash must be the one taken, and its link still hold
        (a TTL tag and a redaction keep both)."""
        self.tally.rechecked += 1
        taken = self.seen.get((entity, version), "unknown")
        stored = chain.stored_hash(image)
        if taken != "unknown" and stored != taken:
            raise ChainBreak(entity, version, f"version {version}: its chain hash changed after it was taken "
                                              "(the history item was rewritten)")
        prev = chain.stored_prev(image) or self.seen.get((entity, version - 1)) or (
            chain.genesis(entity) if version == 1 else self._history_hash(entity, version - 1))
        redacted_v1 = chain.format_of(image) == chain.FORMAT_1 and model.REDACTED in image
        if prev is not None and stored is not None and not redacted_v1 and chain.link(prev, image) != stored:
            raise ChainBreak(entity, version, f"version {version}: its content or metadata changed after it was "
                                              "written (the recomputed hash differs from the stored one)")

    def _remember(self, entity: str, version: int, chain_hash: str | None) -> None:
        self.seen[(entity, version)] = chain_hash
        if len(self.seen) > SEEN_HASHES:
            self.seen.popitem(last=False)


def _version(item: dict[str, dict]) -> int:
    return int(item[model.VERSION]["N"])
