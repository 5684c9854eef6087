"""Outages of a part of a step that must never cost a change its report: the history step's expiry tags
(issue 37.2), failing for good while changes go on. A campaign of ``reliability``'s kind (its ``Tally`` and
invariants), kept apart from that module's size."""

from __future__ import annotations

from ..audit.repair import repair
from ..audit.retention import retention_window
from ..audit.verify import verify
from ..client import Changeflow
from .faults import Injector
from .reliability import T0, Tally, check, put


def tag_outage(stack, cf: Changeflow) -> Tally:
    """The history step's expiry tags throttled past their client's tries, on a stack with a retention window
    of K versions: versions K+1 and K+2 are written while every tag fails (they tag 1 and 2, and K+2 heals
    1): each change is still reported applied and its history written, verify reports versions 1 and 2
    untagged, the next change (K+3) tags 3 and heals 2 (O(1): not 1), and repair tags 1."""
    keep = retention_window(cf)[0]
    tally = Tally("2. faults: expiry tag outage, healed and repaired")
    injector, entity = Injector(), "tag-outage"
    function = stack.function("PutHistoryFunction")
    stack.lambdas.load(function)
    if keep < 1:
        tally.violations.append("expiry tag outage: needs a stack with HistoryRetentionVersions")
        return tally
    submitted = []
    for n in range(1, keep + 4):
        request = put(entity, T0 + n, f"{entity}-{n}", v=n)
        if n in (keep + 1, keep + 2):
            with injector.throttle(function, "UpdateItem", 100, client="tagging"):
                submitted.append((request, cf.submit(request)))
        else:
            submitted.append((request, cf.submit(request)))
        if n == keep + 2:
            found = verify(cf, entity).problems
            if "versions outside the retention window without an expiry: [1, 2]" not in found:
                tally.violations.append(f"expiry tag outage: verify did not report versions 1 and 2 untagged: {found}")
    tally.faults.update(injector.injected)
    tally.cases += 1
    said = [(e.output or {}).get("outcome") for _, e in submitted]
    if said != ["applied"] * len(submitted):
        tally.violations.append(f"expiry tag outage: the changes said {said}, not applied")
    found = verify(cf, entity).problems
    if "versions outside the retention window without an expiry: [1]" not in found:
        tally.violations.append(f"expiry tag outage: the next change did not heal version 2: {found}")
    done, cannot = repair(cf, entity)
    if done != ["tagged version 1 for expiry"] or cannot:
        tally.violations.append(f"expiry tag outage: repair did {done}, could not {cannot}")
    check(cf, entity, submitted, tally)  # every invariant, verify included: nothing left after repair
    return tally
