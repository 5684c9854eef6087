"""As of T, known at K, or both, in one or two requests at any history length (issue 37): the time indexes.

The table that holds history has a local secondary index per clock (``TimeIndexes=true``). Each history item
n is keyed there by what it records of version n-1: that version's time on the clock and its number
(``model.prior_key``; version 1 records 0). Both clocks are non-decreasing in version order (the ratchet,
``steps.recorded_time``), so each index lists an entity's history items in version order, and one ``Query``
(``ScanIndexForward=False``, ``Limit=2``, ``key <= (T, any number)``) returns the last item a whose
predecessor's time is at or before T, then the item before it in the index:

- a's own time is after T: the answer is version a-1, exactly (a's record says a-1 is at or before T, and a
  is after it). The second item is a-1 itself (its whole item: the index fetches it from the table,
  ``Select=ALL_ATTRIBUTES``), so **one request**; if it is not a-1, a-1 is no longer in history (410), or,
  written before the indexes, it is read by key: two requests.
- a's own time is at or before T: no later history item is (its record of a would have come first), so the
  answer is a, or the head if ``v0`` holds a version whose history item is not written yet: one more read of
  what follows a (``v0`` and any later history item, in one consistent ``Query`` of the partition; with a
  separate history table a ``GetItem`` of ``v0``): **two requests**.

Known at K and as of T together ask for the last version that is both recorded by K and in effect by T; as
both clocks run in version order, those versions are the first m of them. The recorded index answers first;
if the version it finds is also in effect by T, that is the answer (one or two requests, as above). If not,
the answer is earlier than it, and the effective index's query finds it alone: **two requests**. Versions
between the two that history no longer holds (the retention window, TTL) are settled by the record the next
held version keeps: the recorded index's second item when one version is missing, else one more consistent
Query of history for it (three requests, only when the answer is among versions no longer held).

A history item the reads find past its expiry is never answered (410), but what it records is still true.
Whatever these reads cannot settle (an item written before the indexes, which carries no keys; data that
contradicts itself, such as an index key naming a version history does not hold) raises ``Unsettled``: ``asof``'s binary
search answers it, as it answers a table created without the indexes (``NoIndex``, remembered per client).
Every answer rests on the own (hashed) times of the version answered and of the one that follows it, or on
the record of a successor, as the binary search's does.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from . import codec, model, store

INDEXES = {model.EFFECTIVE_AT: (model.EFFECTIVE_INDEX, model.PRIOR_EFFECTIVE),
           model.RECORDED_AT: (model.RECORDED_INDEX, model.PRIOR_RECORDED)}
_WITHOUT: "weakref.WeakKeyDictionary[Any, set[str]]" = weakref.WeakKeyDictionary()  # client -> tables


class NoIndex(Exception):
    """The table was created without the time indexes (``TimeIndexes=false``, or before they existed)."""


class Unsettled(Exception):
    """What the index reads found does not settle the answer: the binary search does."""


@dataclass
class Located:
    """The last version within every bound (0: none), its item if history holds it (``None``: no longer
    held, or expired: a 410), and for ``number`` 0 the clock on which version 1 is past its bound (or
    ``None`` when the entity has no version at all). ``exact`` is false when ``number`` is only the newest
    version that may be the answer (the versions before it that may be are not held either)."""

    number: int
    item: dict[str, Any] | None
    late: str | None = None
    exists: bool = True
    exact: bool = True


def locate(history, bounds: list[tuple[str, int]]) -> Located:
    """The version within ``bounds`` (``[(clock attribute, instant)]``, the first one's index asked first).
    ``history`` is ``asof.History`` (its client, tables, request count and items read)."""
    first_clock, first_instant = bounds[0]
    a, b = _query(history, first_clock, first_instant)
    if a is None:
        return _from_start(history, bounds, first_clock)
    number = _version(a)
    if _within(_own(a), bounds):
        return _after(history, number, a, bounds)
    before = _within(_prior(a), bounds)
    if before is None:
        raise Unsettled(f"version {number} records no time of version {number - 1} on some clock")
    if before:
        return _the_one_before(history, number, a, b, bounds)
    if len(bounds) == 1:  # the index said a-1 is within its one bound, and a-1's record says not
        raise Unsettled(f"version {number}'s index key contradicts its record")
    if number == 2:  # version 1 is past the second bound: the entity did not exist then
        return Located(0, None, _late(_prior(a), bounds))
    # a-1 is within the first bound but past the second: the answer is earlier; the second index finds it
    second_clock, second_instant = bounds[1]
    a2, b2 = _query(history, second_clock, second_instant)
    if a2 is None:
        return _from_start(history, bounds, second_clock)
    second = _version(a2)
    if second >= number:
        raise Unsettled(f"the indexes disagree on the order of versions {second} and {number}")
    if not _within(_own(a2), bounds):
        if _within(_prior(a2), bounds):
            return _the_one_before(history, second, a2, b2, bounds)
        raise Unsettled(f"version {second}'s index key contradicts its record")
    if second == number - 2:  # a2 is within, a-1 is not
        return Located(second, _held(history, a2))
    return _between(history, second, a2, number, b, bounds)


def _between(history, second: int, within: dict, number: int, below: dict | None, bounds) -> Located:
    """Both together: version ``second`` (``within``) is within the bounds, version ``number - 1`` is past
    them, and versions ``second + 1`` to ``number - 2`` are not in the effective index: history no longer
    holds them (the retention window, TTL), or they carry no keys. The record the next held version keeps
    of the one before it settles the answer: ``below`` (the recorded index's second item) when it is the
    version after the one missing (no further request), else one consistent Query of history for the first
    item after ``second`` (a third request, only where versions are no longer held)."""
    held = _held(history, within)
    if below is not None and _version(below) == number - 1 == second + 2:
        after = _within(_prior(below), bounds)
        if after is False:  # version second + 1 is past the bounds: the answer is `second`
            return Located(second, held)
        if after:  # version second + 1 is the answer: read by key (no longer held, or written before the keys)
            return Located(second + 1, _item_of(history, second + 1, None, bounds))
    record = _next_history(history, second)
    if record is None:
        raise Unsettled(f"history holds no version after {second}, but the index holds version {number}")
    following = _version(record)
    if following > number:
        raise Unsettled(f"history holds no version {second + 1} to {number}, but the index holds version {number}")
    if _within(_own(record), bounds) is not False:
        raise Unsettled(f"version {following} is held but not in the index")
    if following == second + 1:
        return Located(second, held)
    return _gap(second, following, record, "history", bounds, held)


def _the_one_before(history, number: int, item: dict, below: dict | None, bounds) -> Located:
    """Version ``number`` (``item``) is past the bounds and its record says the version before it is within:
    that one is the answer (``below``, the index's next item, is it when history holds it), or, before
    version 1, the entity did not exist then."""
    if number == 1:
        return Located(0, None, _late(_own(item), bounds))
    return Located(number - 1, _item_of(history, number - 1, below, bounds))


def _after(history, number: int, item: dict, bounds) -> Located:
    """Version ``number`` (``item``) is within the bounds and no later history item in the index is: the
    answer is it, or a version held by what follows it."""
    kind, record = _next_record(history, number)
    if record is None:  # nothing after it: it is the newest version (v0 gone with its tombstone's expiry)
        return Located(number, _held(history, item))
    following = _version(record)
    if following < number:
        raise Unsettled(f"v0 holds version {following}, older than history's {number}")
    if following == number:  # v0 holds this version
        return Located(number, _held(history, item))
    if _within(_own(record), bounds):
        if kind == "head":
            return Located(following, record)  # the head, whose history item is not written yet
        raise Unsettled(f"version {following} is within the bounds but not in the index")
    if following == number + 1:
        return Located(number, _held(history, item))
    return _gap(number, following, record, kind, bounds, _held(history, item))


def _from_start(history, bounds, clock: str) -> Located:
    """No history item of the index is within the bound of ``clock``: version 1 is not held (or not
    indexed). The first record of the entity says what is known."""
    kind, record = _next_record(history, 0)
    if record is None:
        return Located(0, None, None, exists=False)
    first = _version(record)
    if _within(_own(record), bounds):
        if kind == "head":
            return Located(first, record)
        raise Unsettled(f"version {first} is within the bounds but not in the index")
    if first == 1:
        return Located(0, None, _late(_own(record), bounds))
    return _gap(0, first, record, kind, bounds, None)


def _gap(number: int, following: int, record: dict, kind: str, bounds, held: dict | None) -> Located:
    """Versions ``number + 1`` to ``following - 1`` are not held (``number`` is within the bounds, or 0), and
    ``following`` (``record``) is past them. Its record of the version before it may settle that one."""
    before = _within(_prior(record), bounds) if kind == "history" else None
    if before is False and following - 2 == number:
        if number == 0:
            return Located(0, None, _late(_prior(record), bounds))
        return Located(number, held)
    if before:  # the version just before `following` is the answer, and no longer held
        return Located(following - 1, None)
    # unknown times: the newest version that may be the answer is named
    return Located(following - 2 if before is False else following - 1, None, exact=False)


def _item_of(history, number: int, candidate: dict | None, bounds) -> dict | None:
    """Version ``number``, the answer: ``candidate`` if it is that version, else read by key (consistent).
    ``None`` when history no longer holds it; its own times must agree that it is within the bounds."""
    if number == 0:
        return None
    if candidate is not None and _version(candidate) == number:
        item = candidate
    else:
        history.requests += 1
        raw = history.client.get_item(TableName=history.history_table, ConsistentRead=True, Key={
            model.PK: {"S": history.entity_id}, model.SK: {"S": model.history_sk(number)}}).get("Item")
        item = codec.deserialize_item(raw) if raw is not None else None
        if item is None:
            history.remember(number, None)
            return None
    if _within(_own(item), bounds) is not True:
        raise Unsettled(f"version {number}'s own times contradict its successor's record")
    return _held(history, item)


def _next_record(history, number: int) -> tuple[str, dict | None]:
    """What follows version ``number``: ``("history", item)`` for the next history item, ``("head", v0)``
    when there is none before ``v0``'s version, or ``("none", None)``. One consistent Query of the partition
    (history sort keys sort before ``v0``); with a separate history table, ``v0`` first, then history only if
    ``v0`` is more than one version ahead."""
    start = model.history_sk(number + 1)
    if history.table == history.history_table:
        history.requests += 1
        found = history.client.query(
            TableName=history.table, KeyConditionExpression="#pk = :pk AND #sk BETWEEN :after AND :latest",
            ExpressionAttributeNames={"#pk": model.PK, "#sk": model.SK},
            ExpressionAttributeValues={":pk": {"S": history.entity_id}, ":after": {"S": start},
                                       ":latest": {"S": model.LATEST_SK}},
            ScanIndexForward=True, Limit=1, ConsistentRead=True).get("Items", [])
        if not found:
            return "none", None
        item = codec.deserialize_item(found[0])
        return ("head" if item[model.SK] == model.LATEST_SK else "history"), item
    history.requests += 1
    raw = history.client.get_item(TableName=history.table, ConsistentRead=True, Key={
        model.PK: {"S": history.entity_id}, model.SK: {"S": model.LATEST_SK}}).get("Item")
    head = codec.deserialize_item(raw) if raw is not None else None
    if head is not None and _version(head) <= number + 1:
        return "head", head
    history.requests += 1
    found = history.client.query(
        TableName=history.history_table, KeyConditionExpression="#pk = :pk AND #sk BETWEEN :after AND :last",
        ExpressionAttributeNames={"#pk": model.PK, "#sk": model.SK},
        ExpressionAttributeValues={":pk": {"S": history.entity_id}, ":after": {"S": start},
                                   ":last": {"S": model.history_sk(model.MAX_VERSION)}},
        ScanIndexForward=True, Limit=1, ConsistentRead=True).get("Items", [])
    if found:
        item = codec.deserialize_item(found[0])
        if head is None or _version(item) < _version(head):
            return "history", item
    return ("head", head) if head is not None else ("none", None)


def _next_history(history, number: int) -> dict | None:
    """The first history item after version ``number`` (expired or not): one consistent Query."""
    history.requests += 1
    found, _ = store.query_history(history.client, history.history_table, history.entity_id, newest_first=False,
                                   limit=1, consistent=True, versions=(number + 1, model.MAX_VERSION))
    return found[0] if found else None


def _query(history, clock: str, instant: int) -> tuple[dict | None, dict | None]:
    """The index of ``clock``, newest first from ``(instant, any number)``: its first two whole items (``None``
    where there are fewer)."""
    index, key = INDEXES[clock]
    if history.history_table in _WITHOUT.get(history.client, ()):
        raise NoIndex(history.history_table)
    history.requests += 1
    try:
        response = history.client.query(
            TableName=history.history_table, IndexName=index,
            KeyConditionExpression="#pk = :pk AND #key <= :bound",
            ExpressionAttributeNames={"#pk": model.PK, "#key": key},
            ExpressionAttributeValues={":pk": {"S": history.entity_id},
                                       ":bound": {"N": str(model.prior_key(instant, model.MAX_VERSION))}},
            ScanIndexForward=False, Limit=2, ConsistentRead=True, Select="ALL_ATTRIBUTES")
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") == "ValidationException" and index in str(error.get("Message")):
            _WITHOUT.setdefault(history.client, set()).add(history.history_table)
            raise NoIndex(history.history_table) from None
        raise
    found = [codec.deserialize_item(raw) for raw in response.get("Items", [])]
    for item in found:
        history.remember(_version(item), item)
    first, second, *_ = found + [None, None]
    return first, second


def _held(history, item: dict) -> dict | None:
    """``item`` if history still holds it: ``None`` once its expiry has passed (TTL deletes lazily)."""
    return None if history.expired(item) else item


def _version(item: dict) -> int:
    return int(item[model.VERSION])


def _own(item: dict) -> dict[str, int | None]:
    """An item's own times, by clock (``None`` where it has none: legacy)."""
    return {clock: None if item.get(clock) is None else int(item[clock]) for clock in INDEXES}


def _prior(item: dict) -> dict[str, int | None]:
    """What a history item records of the version before it, by clock (``None`` where it records nothing)."""
    times: dict[str, int | None] = {}
    for clock, (_, key) in INDEXES.items():
        recorded = item.get(key)
        time_ms, version = model.of_prior_key(recorded) if recorded is not None else (None, None)
        times[clock] = time_ms if version == _version(item) - 1 else None
    return times


def _within(times: dict[str, int | None], bounds) -> bool | None:
    """Are ``times`` within every bound? ``None`` if a clock a bound asks about is unknown and none fails."""
    verdicts = [None if times.get(clock) is None else times[clock] <= instant for clock, instant in bounds]
    if False in verdicts:
        return False
    return None if None in verdicts else True


def _late(times: dict[str, int | None], bounds) -> str:
    """The clock on which ``times`` are past their bound (the first bound's, if several are)."""
    return next(clock for clock, instant in bounds if times.get(clock) is not None and times[clock] > instant)
