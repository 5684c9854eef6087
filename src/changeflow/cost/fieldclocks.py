"""What field clocks cost (issue 34, ``changeflow_core.clocks``): bytes per ``v0`` and history item, the write
units of an applied patch's two puts and the read units of a consistent read of ``v0``, with and without
them, and the bytes a patch carries between states (``v0``'s clocks). Computed from the items the write step
builds (``changeflow_core.items.latest_item``), as every unit figure here is; DynamoDB bills a write per
started 1 KB and a strongly consistent read per started 4 KB of the item."""

from __future__ import annotations

import math

from changeflow.checks.reliability import T0

from .paths import attributes_for

FIELDS = 10  # small named fields beside the body that makes the item's size: f00 .. f09
SCENARIOS = {
    "one field patched, newer than v0": "newer",
    "a field patched late (an hour older than v0)": "late",
    "every field patched at its own time (within a day)": "each",
}
ARN = "arn:aws:states:us-east-1:123456789012:execution:changeflow-ChangeStateMachine:" + "x" * 60


def field_clock_share(sizes=(1000, 4000, 100_000)) -> dict:
    """``{scenario: {size: {item_bytes, item_size, state_bytes, write_units, read_units}}}``: ``item_bytes``
    the bytes the clocks add to each item (``item_size`` without them: the put's ``size`` plus the patch's
    record, principal and remembered ids), ``write_units``/``read_units`` ``{"without", "with"}``."""
    rows: dict = {}
    for label, kind in SCENARIOS.items():
        rows[label] = {size: _measure(size, kind) for size in sizes}
    return rows


def _measure(size: int, kind: str) -> dict:
    from changeflow_core import clocks, codec, items, model, wire
    from changeflow_core.validation import Change

    small = {f"f{i:02d}": f"value {i}" for i in range(FIELDS)}  # the put's item is ``size`` bytes, as elsewhere
    body = {"body": attributes_for(size)["body"][codec.item_size(codec.serialize_item(small)):]}
    put = Change("bench#x", "put", T0, "bench#x-c1", actor="benchmark", principal={"via": "stepfunctions"})
    latest = items.latest_state(items.latest_item(put, {**small, **body}, None, 1, T0, ARN))
    item = None
    patches = {"newer": [("f00", T0 + 60_000)], "late": [("f00", T0 + 7_200_000), ("f01", T0 + 3_600_000)],
               "each": [(name, T0 + 86_400_000 - 7_919_000 * i) for i, name in enumerate(small)]}[kind]
    for version, (name, at) in enumerate(patches, start=2):
        change = Change("bench#x", "patch", at, f"bench#x-c{version}", actor="benchmark",
                        principal={"via": "stepfunctions"}, set=items.to_wire({name: "patched"}), remove=[])
        change = Change(**{**change.to_json(), "superseded": clocks.superseded(change, clocks.of_state(latest), {})})
        values = {**small, **body, name: "patched"}
        item = items.latest_item(change, values, latest, version, T0, ARN)
        latest = items.latest_state(item)
    bare = {k: v for k, v in item.items() if k not in (model.FIELD_CLOCKS, model.FIELD_CLOCK_BASE)}
    with_clocks, without = (codec.item_size(codec.serialize_item(i)) for i in (item, bare))
    carried = {k: latest[k] for k in (model.FIELD_CLOCKS, model.FIELD_CLOCK_BASE) if k in latest}
    return {"item_bytes": with_clocks - without, "item_size": without,
            "state_bytes": len(wire.dumps(carried, compact=True)) - 2 if carried else 0,
            "write_units": {"without": 2 * math.ceil(without / 1024), "with": 2 * math.ceil(with_clocks / 1024)},
            "read_units": {"without": math.ceil(without / 4096), "with": math.ceil(with_clocks / 4096)}}


def report(rows: dict) -> str:
    """The table ``make cost`` prints: per scenario and size, bytes per item, bytes carried, units."""
    sizes = list(next(iter(rows.values())))
    lines = ["Field clocks' share (issue 34): bytes per item, bytes a patch carries between states, write units "
             "of its two puts and read units of v0, without -> with",
             f"{'scenario':<52}" + "".join(f"{f'{s // 1000} KB: bytes, carried, W, R':>34}" for s in sizes)]
    for label, by_size in rows.items():
        cells = "".join(f"{r['item_bytes']:>8} {r['state_bytes']:>6} {r['write_units']['without']:>4}->"
                        f"{r['write_units']['with']:<4}{r['read_units']['without']:>3}->{r['read_units']['with']:<3}"
                        for r in by_size.values())
        lines.append(f"{label:<52}{cells}")
    return "\n".join(lines)
