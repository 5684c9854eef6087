"""Time travel: the entity as it was in effect at an effective time (``asOf``), as the table held it at a
recorded time (``knownAt``), both (what was believed at ``knownAt`` about the state at ``asOf``), and the
versions in effect during an interval.

The workflow keeps both clocks in version order: the write condition's ratchet (``effectiveAt <= new``) makes
``effectiveAt`` non-decreasing from version to version, and the write step records ``recordedAt`` as
``max(its clock, the previous version's recordedAt)`` (``steps.write``). So the version in effect at T is the
last version whose time is <= T. Where the table has the time indexes (``TimeIndexes=true``), ``timeindex``
finds it in one or two requests whatever the history's length. Elsewhere (a table created without them) and
for what they cannot settle (items written before them), a binary search over version numbers does: one
read of ``v0`` (the head) and about log2(n) single-item reads (docs/time-travel.md weighs both).

Expired versions (TTL, the retention window) are the oldest: a probe that finds no item counts as "at or
before T", so the search never needs them unless the answer is one of them, and then it says so (``Gone``)
rather than answer with another version. Never a wrong answer: a version is answered only when its own
item says it is at or before T and the next version's says it is after T (or it is the head)."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import Any

from . import items, model, store, timeindex
from .errors import NotFound, ValidationError

ISO_UTC = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?(?:Z|\+00:00)")
MAX_INSTANT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


class Gone(Exception):
    """The answer is a version that is no longer in history (expired by TTL, or missing)."""


def parse_instant(field: str, text: str | None) -> int | None:
    """Epoch milliseconds (as ``effectiveAt`` is) or ISO 8601 in UTC (``2026-01-01T00:00:00Z``, optional
    milliseconds, ``Z`` or ``+00:00``); anything else is a ``ValidationError`` naming ``field``."""
    if text is None:
        return None
    if re.fullmatch(r"[0-9]{1,15}", text):
        value = int(text)
    else:
        match = ISO_UTC.fullmatch(text)
        if not match:
            raise ValidationError(field, "must be epoch milliseconds or ISO 8601 in UTC, e.g. 2026-01-01T00:00:00Z")
        year, month, day, hour, minute, second, millis = match.groups()
        try:
            moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=timezone.utc)
        except ValueError as exc:
            raise ValidationError(field, f"is not a date: {exc}") from None
        value = int(moment.timestamp()) * 1000 + int((millis or "0").ljust(3, "0"))
    if not 0 <= value <= MAX_INSTANT_MS:
        raise ValidationError(field, "must be between 1970 and 9999")
    return value


def utc(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC, e.g. ``2026-01-01T00:00:00.000Z``."""
    moment = datetime.fromtimestamp(ms / 1000, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class History:
    """An entity's versions as the search reads them: the head (``v0``, or the newest history item when
    ``v0`` is gone) once, then single history items by number, each read at most once. History items never
    change once written (but for their expiry tag), so a probe reads eventually consistent (half a read
    unit) and only an item it does not find is read again consistently, in case it was just written."""

    def __init__(self, client, table: str, history_table: str, entity_id: str, now_s: float | None = None):
        self.client, self.table, self.history_table, self.entity_id = client, table, history_table, entity_id
        self.now_s = time.time() if now_s is None else now_s
        self.requests = 0
        self._items: dict[int, dict | None] = {}
        self.head_version: int | None = None

    def head(self) -> int:
        """The newest version's number (0: the entity never had one); its item is remembered."""
        if self.head_version is not None:
            return self.head_version
        self.head_version = 0
        self.requests += 1
        head = store.get_item(self.client, self.table, self.entity_id, model.LATEST_SK)
        if head is None:  # never written, or its tombstone expired: the newest history item
            self.requests += 1
            found, _ = store.query_history(self.client, self.history_table, self.entity_id, newest_first=True,
                                           limit=1, consistent=True)
            head = found[0] if found else None
        if head is not None:  # a tombstone past its expiry is still the head's truth: deleted
            self.head_version = int(head[model.VERSION])
            self._items[self.head_version] = head
        return self.head_version

    def item(self, number: int) -> dict[str, Any] | None:
        """Version ``number``'s item, or ``None`` if history no longer holds it (or its expiry has passed)."""
        if number not in self._items:
            key = {model.PK: {"S": self.entity_id}, model.SK: {"S": model.history_sk(number)}}
            found = None
            for consistent in (False, True):
                self.requests += 1
                raw = self.client.get_item(TableName=self.history_table, Key=key, ConsistentRead=consistent).get("Item")
                if raw is not None:
                    found = store.codec.deserialize_item(raw)
                    break
            self.remember(number, found)
        return self._items[number]

    def remember(self, number: int, item: dict | None) -> None:
        """What a read found of version ``number`` (``None``: not held), for ``item`` to answer."""
        self._items[number] = None if item is None or self.expired(item) else item

    def expired(self, item: dict) -> bool:
        expires = item.get(model.EXPIRES_AT)
        return expires is not None and int(expires) <= self.now_s


def last_at_or_before(history: History, highest: int, clock: str, instant: int) -> tuple[int, dict | None]:
    """The last version in ``1..highest`` whose ``clock`` is at or before ``instant``: ``(number, item)``,
    ``(0, None)`` if version 1 is after it. A version history no longer holds counts as before (the oldest
    expire first), so ``item`` is ``None`` when the answer is such a version."""
    top = history.item(highest)
    if top is None or int(top[clock]) <= instant:  # e.g. as of now: no search
        return highest, top
    low, low_item, high = 0, None, highest  # invariant: low is at or before T (or 0), high is after it
    while high - low > 1:
        middle = (low + high) // 2
        found = history.item(middle)
        if found is None or int(found[clock]) <= instant:
            low, low_item = middle, found
        else:
            high = middle
    return low, low_item


def locate(history: History, bounds: list[tuple[str, int]]) -> timeindex.Located:
    """The last version within ``bounds`` (``[(clock, instant)]``, recorded time first): by the time indexes in
    one or two requests (``timeindex``), or by the binary search where they cannot say (a table created
    without them, items written before them: ``search``)."""
    if bounds:
        try:
            return timeindex.locate(history, bounds)
        except (timeindex.NoIndex, timeindex.Unsettled):
            pass
    return search(history, bounds)


def search(history: History, bounds: list[tuple[str, int]]) -> timeindex.Located:
    """``locate`` by the binary search over version numbers, one bound after the other."""
    highest = history.head()
    if highest == 0:
        return timeindex.Located(0, None, None, exists=False)
    number, item = highest, history.item(highest)
    for clock, instant in bounds:
        number, item = last_at_or_before(history, number, clock, instant)
        if number == 0:
            return timeindex.Located(0, None, clock)
    return timeindex.Located(number, item, exact=item is not None)


def version_at(client, table: str, history_table: str, entity_id: str, as_of: int | None = None,
               known_at: int | None = None, now_s: float | None = None) -> tuple[dict[str, Any], History]:
    """The version in effect at ``as_of`` (effective time), among the versions recorded by ``known_at``
    (recorded time), either or both given. ``NotFound`` when the entity did not exist then or was deleted
    (naming the tombstone's version), ``Gone`` when the answer is a version history no longer holds."""
    history = History(client, table, history_table, entity_id, now_s)
    when = " and ".join(part for part in (as_of is not None and f"as of {utc(as_of)}",
                                          known_at is not None and f"as known at {utc(known_at)}") if part)
    found = locate(history, [(clock, instant) for clock, instant in ((model.RECORDED_AT, known_at),
                                                                     (model.EFFECTIVE_AT, as_of)) if instant is not None])
    number, item = found.number, found.item
    if not found.exists:
        raise NotFound(f"entity {entity_id!r} does not exist")
    if number == 0:
        later = "was recorded later" if found.late == model.RECORDED_AT else "is effective later"
        raise NotFound(f"entity {entity_id!r} did not exist {when}: its first version {later}")
    if item is None:  # the next version (if any) is after T, and this one is gone
        which = f"version {number}" if found.exact else f"version {number} or an older one"
        raise Gone(f"entity {entity_id!r} {when}: the version in effect then is {which}, and history no longer "
                   f"holds version {number} (expired by the retention window or TTL; `changeflow verify` tells "
                   f"if it should be there)")
    if item.get(model.DELETED):
        raise NotFound(f"entity {entity_id!r} was deleted {when}: version {number} is a deletion, effective "
                       f"{utc(int(item[model.EFFECTIVE_AT]))}")
    number, item = content_version(history, number, item)
    if item is None:
        raise Gone(f"entity {entity_id!r} {when}: the content in effect then is version {number}'s, and history no "
                   "longer holds it (expired by the retention window or TTL)")
    if item.get(model.REDACTED) is not None:
        raise Gone(f"entity {entity_id!r} {when}: the content in effect then, version {number}'s, was redacted")
    return items.view(item), history


def content_version(history: History, number: int, item: dict) -> tuple[int, dict | None]:
    """The version whose content ``item`` holds (issue 32.15): a redact or adopt version is not a change of
    content (it takes effect when the version before it did, and carries that version's content, or its
    redacted form), so the answer is the version before it, with its own principal and actor, never the
    redactor's. One more read per such version (they are rare)."""
    while item is not None and item.get(model.OPERATION) in model.CHAIN_OPERATIONS and number > 1:
        number -= 1
        item = history.item(number)
    return number, item


def versions_during(client, table: str, history_table: str, entity_id: str, start: int, end: int,
                    now_s: float | None = None) -> tuple[int, int, History]:
    """The numbers ``(first, last)`` of the versions in effect during ``[start, end]`` (effective time): the
    one in effect at ``start`` (or version 1 if none was) to the one in effect at ``end``; ``(0, 0)`` if the
    entity did not exist by ``end``."""
    if start > end:
        raise ValidationError("from", "must not be after to")
    history = History(client, table, history_table, entity_id, now_s)
    last = locate(history, [(model.EFFECTIVE_AT, end)]).number
    if last == 0:
        return 0, 0, history
    at_start = locate(history, [(model.EFFECTIVE_AT, start)])
    first = at_start.number
    if first > 1 and at_start.item is not None and int(at_start.item[model.EFFECTIVE_AT]) == start:
        # versions effective exactly at `start` and superseded at once (equal times) are in the closed
        # interval too, as they are at its end: the range starts after the one in effect just before it
        first = locate(history, [(model.EFFECTIVE_AT, start - 1)]).number + 1
    return max(first, 1), last, history


def versions_page_during(client, table: str, history_table: str, entity_id: str, start: int, end: int,
                         limit: int, start_key: dict | None = None, now_s: float | None = None) -> dict[str, Any]:
    """One page, newest first, of the versions in effect during ``[start, end]``: ``{"items", "nextCursor"
    (the key to continue from), "first", "last"}`` (the range's version numbers; items history no longer
    holds are left out, so a page may be short and the oldest item may be newer than ``first``)."""
    first, last, history = versions_during(client, table, history_table, entity_id, start, end, now_s)
    if last == 0:
        return {"items": [], "nextCursor": None, "first": None, "last": None}
    if start_key and not model.history_sk(first) <= start_key[model.SK]["S"] <= model.history_sk(last):
        raise ValidationError("cursor", "belongs to another range")
    found, last_key = store.query_history(client, history_table, entity_id, newest_first=True, limit=limit,
                                          start_key=start_key, unexpired_at=int(history.now_s),
                                          versions=(first, last))
    return {"items": [items.view(item) for item in found], "nextCursor": last_key, "first": first, "last": last}
