"""``verify``'s check of the field clocks (issue 34, ``changeflow_core.clocks``): each version's clocks are
the ones its change leaves after its predecessor's, so a clock altered and sealed again (the chain recomputed)
is still named, as is a patch record that hides which fields it superseded.

- A put, a rollback or a delete: every field at the version's effectiveAt (no clock attributes).
- A redact or an adopt: its predecessor's clocks.
- A patch: its applied fields (those it names, but for ``superseded``) all at one time T, the patch's own;
  the version is its predecessor's clocks with those fields at T, and the fields it says were superseded
  are exactly those a newer change had written (the merge rule, with its predecessor's values for equal
  times). A patch version without clock attributes was written before field clocks: its content is checked
  (``verify.patch_problems``), its clocks are not.

A version whose predecessor has expired, or either of them redacted, is checked only as far as it can be."""

from __future__ import annotations

from typing import Any

from changeflow_core import clocks, items, model
from changeflow_core.validation import Change


def clock_problems(history: list[dict[str, Any]], by_version: dict[int, dict[str, Any]]) -> list[str]:
    problems = []
    for h in history:
        n, operation = int(h[model.VERSION]), h.get(model.OPERATION)
        stored = clocks.of_item(h)
        if operation in (model.PUT, model.ROLLBACK, model.DELETE):
            if stored != clocks.whole(stored.effective_at):
                problems.append(f"version {n}: a {operation} sets every field's time to its effectiveAt, "
                                f"but its field clocks say otherwise")
            continue
        before = by_version.get(n - 1)
        if before is None or _redacted(h, before):
            continue
        if operation in model.CHAIN_OPERATIONS:
            if stored != clocks.of_item(before):
                problems.append(f"version {n}: a {operation} keeps the field clocks of version {n - 1}, "
                                f"but its own differ")
        elif operation == model.PATCH and isinstance(h.get(model.PATCH_RECORD), dict) and _has_clocks(h):
            problems.extend(_patch_clock_problems(n, h, before, stored))
    return problems


def _patch_clock_problems(n: int, h: dict[str, Any], before: dict[str, Any], stored: clocks.Clocks) -> list[str]:
    record = h[model.PATCH_RECORD]
    superseded = list(record.get("superseded") or [])
    change = Change(entityId=h[model.PK], operation=model.PATCH, effectiveAt=0, changeId=str(h.get(model.CHANGE_ID)),
                    set=items.to_wire(record.get("set") or {}), remove=list(record.get("remove") or []),
                    superseded=superseded)
    applied = {stored.of(name) for name in clocks.named(change) if name not in superseded}
    if len(applied) != 1:
        return [f"version {n}: the fields its patch applied do not share one time ({len(applied)} times)"]
    at = applied.pop()
    change = Change(**{**change.to_json(), "effectiveAt": at})
    problems = []
    if clocks.after(change, clocks.of_item(before)) != stored:
        problems.append(f"version {n}: its field clocks are not version {n - 1}'s with its patch applied")
    decided = clocks.superseded(change, clocks.of_item(before), items.content_of(before))
    if sorted(decided) != sorted(superseded):
        problems.append(f"version {n}: its patch record says it superseded {sorted(superseded)}, but version "
                        f"{n - 1}'s clocks supersede {sorted(decided)}")
    return problems


def _has_clocks(item: dict[str, Any]) -> bool:
    return item.get(model.FIELD_CLOCKS) is not None or item.get(model.FIELD_CLOCK_BASE) is not None


def _redacted(*found: dict[str, Any]) -> bool:
    return any(item.get(model.REDACTED) is not None for item in found)
