"""Field clocks (issue 34): every top-level field of an entity keeps its own effective time, so that
concurrent patches merge by field, as Cassandra keeps a timestamp per cell.

A version's clocks are three things:

- its ``effectiveAt``, E: the newest of its clocks (the document's time; the ratchet and the as-of search
  keep it non-decreasing from version to version);
- the base, B: the time of every field the map below does not name, i.e. of the last put, rollback or
  delete (the whole document at its time, the fields it did not have included);
- the fields a patch set or removed since then, each at the time of the patch that last wrote it.

Stored compactly in the version item, both omitted when they say nothing (a put, a rollback and a delete
store neither: every field is at E), and sealed in the chain as metadata like every reserved attribute:
``fieldClocks`` = {field: E - its time}, for each field whose time is not B (in milliseconds; 0 for a
field at E), and ``fieldClockBase`` = E - B.

The rules (docs/api.md, "Concurrent changes"): a put, a rollback and a delete set every field's time
(a whole document older than E is stale, as before). A patch at T applies each of its fields (``set`` and
``remove``) whose clock is older than T; at equal times the greater value stays (Cassandra's rule for
cells with one timestamp), any value being greater than none (``rank``): so a patch at the very time of the
put before it still adds its fields, two patches of one field at one time end with the same value in
either order, and a patch sent again is never applied twice nor reverts a field (docs/identity.md, the
resend window). A removal never wins a tie. A patch is ``stale`` only when none of its fields applies; a patch
that applies in part is ``applied`` and names the others (``superseded``). A redact or an adopt keeps its
predecessor's clocks (it changes no content and takes its predecessor's time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from . import chain, codec, model


@dataclass(frozen=True)
class Clocks:
    """One version's field clocks, as absolute epoch milliseconds."""

    effective_at: int
    base: int
    fields: dict[str, int] = field(default_factory=dict)  # the fields whose time is not ``base``

    def of(self, name: str) -> int:
        """The effective time of field ``name`` (present or not)."""
        return self.fields.get(name, self.base)


def whole(at: int) -> Clocks:
    """A whole document written at ``at``: every field at that time."""
    return Clocks(at, at)


def decoded(effective_at: int, fields: dict[str, Any] | None, base: Any = None) -> Clocks:
    """The clocks from their stored form (deltas below ``effective_at``)."""
    return Clocks(int(effective_at), int(effective_at) - int(base or 0),
                  {name: int(effective_at) - int(delta) for name, delta in (fields or {}).items()})


def of_item(item: dict[str, Any]) -> Clocks:
    """A stored item's clocks (plain values: ``codec.deserialize_item``). An item written before field
    clocks has every field at its effectiveAt."""
    return decoded(item[model.EFFECTIVE_AT], item.get(model.FIELD_CLOCKS), item.get(model.FIELD_CLOCK_BASE))


def of_state(latest: dict[str, Any]) -> Clocks:
    """The clocks of the decision's view of ``v0`` (``items.latest_state``), which carries them stored."""
    return decoded(latest["effectiveAt"], latest.get(model.FIELD_CLOCKS), latest.get(model.FIELD_CLOCK_BASE))


def without(latest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The decision's view of ``v0`` without its field clocks (a put, a rollback or a delete needs none)."""
    if latest is None:
        return None
    return {k: v for k, v in latest.items() if k not in (model.FIELD_CLOCKS, model.FIELD_CLOCK_BASE)}


def stored(clocks: Clocks) -> dict[str, Any]:
    """The item attributes that record ``clocks``: none where every field is at the version's time."""
    attributes: dict[str, Any] = {}
    fields = {name: clocks.effective_at - at for name, at in sorted(clocks.fields.items()) if at != clocks.base}
    if fields:
        attributes[model.FIELD_CLOCKS] = fields
    if clocks.base != clocks.effective_at:
        attributes[model.FIELD_CLOCK_BASE] = clocks.effective_at - clocks.base
    return attributes


def named(change) -> list[str]:
    """Every field a patch names, ``set`` then ``remove``."""
    return [*(change.set or {}), *(change.remove or [])]


def rank(wire_value: dict | None) -> tuple:
    """A value's place in the tie order (DynamoDB JSON, ``None`` for no value): no value, then numbers by
    value, then strings by their UTF-8 bytes, then every other value by its canonical encoding (the hash
    chain's, ``chain.encode_value``: booleans, null, lists, maps, sets, binary)."""
    if wire_value is None:
        return (0,)
    (kind, inner), = wire_value.items()
    if kind == "N":
        return (1, Decimal(inner))
    if kind == "S":
        return (2, inner.encode("utf-8", "surrogatepass"))
    return (3, chain.encode_value(wire_value))


def superseded(change, clocks: Clocks, content: dict[str, Any]) -> list[str]:
    """The fields of patch ``change`` that a newer change wrote, against a version with ``clocks`` and
    ``content`` (plain values): those whose clock is newer than the patch, and at an equal time those
    whose stored value is not below the patch's (a removal never wins a tie)."""
    at, lost = change.effectiveAt, []
    for name, value in (change.set or {}).items():
        clock = clocks.of(name)
        current = codec.serialize_item({name: content[name]})[name] if name in content else None
        if clock > at or (clock == at and rank(value) <= rank(current)):
            lost.append(name)
    lost += [name for name in change.remove or [] if clocks.of(name) >= at]
    return lost


def after(change, previous: Clocks | None) -> Clocks:
    """The clocks of the version ``change`` writes after a version with clocks ``previous``."""
    if change.operation == model.PATCH:
        if previous is None:  # no live version: a patch is refused (NotFound) before anything is written
            previous = whole(change.effectiveAt)
        lost = set(change.superseded or [])
        fields = {**previous.fields, **{name: change.effectiveAt for name in named(change) if name not in lost}}
        latest = max(previous.effective_at, change.effectiveAt)
        return Clocks(latest, previous.base, {k: v for k, v in fields.items() if v != previous.base})
    if change.operation in model.CHAIN_OPERATIONS and previous is not None:
        return previous  # no change of content, at its predecessor's time
    return whole(change.effectiveAt)


def times(item: dict[str, Any]) -> dict[str, int]:
    """What a reader is shown: each field's effective time where it is not the version's, for the
    fields the version holds and those a patch removed (epoch ms); empty for most versions."""
    clocks = of_item(item)
    names = set(clocks.fields) | {k for k in item if k not in model.RESERVED}
    return {name: clocks.of(name) for name in sorted(names) if clocks.of(name) != clocks.effective_at}
