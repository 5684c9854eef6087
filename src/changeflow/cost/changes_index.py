"""What the changes index (issue 35) adds to a change, measured on the embedded stack: one entity's changes
through the workflow at set recording times (its write step's clock), and the index write units of each put
the handlers made, counted as DynamoDB counts them (``units.index_write_units``) for the index as it is (keys
only, keyed by the hour a version was recorded in) and as the digests merge first built it (keyed by
``recordedAt``, ``version`` and ``chainHash`` projected: ``units.PREVIOUS_INDEX``), from the same requests."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from changeflow.checks.reliability import T0

from .digests import QUIET
from .prices import PRICES
from .units import INDEX, PREVIOUS_INDEX, index_write_units, item_key, table_index_keys

MINUTE_MS = 60_000
# (label, operation, minutes after the first version's hour began): a new entity, then versions in its hour,
# a delete in it, and the first version of the next hour
PLAN = (
    ("a new entity", "put", 1),
    ("a version in the hour of the one before it", "put", 2),
    ("a version in the hour of the one before it", "put", 30),
    ("a delete in the hour of the version before it", "delete", 40),
    ("the first version of an entity in an hour", "put", 61),
    ("a version in the hour of the one before it", "put", 62),
)
VERSIONS_AN_HOUR = (1, 10, 100)  # the range docs/cost.md shows: an entity's versions in an hour it changes in


@contextlib.contextmanager
def recording_clock(clock):
    """The write step's clock (``steps.now_ms``) is ``clock()`` while inside: versions recorded when it says."""
    from changeflow_core import steps

    real = steps.now_ms
    steps.now_ms = clock
    try:
        yield
    finally:
        steps.now_ms = real


def measure(root: Path | None = None) -> dict:
    """Each change of ``PLAN`` through the workflow on one entity; per change, the index write units of its
    puts now and as first built, and per kind of change their figures (the same for every change of a kind)."""
    from changeflow.client import Changeflow
    from changeflow.common.project import project_root
    from changeflow.local.embedded import EmbeddedStack
    from changeflow_core import model

    hour = (int(time.time() * 1000) // model.HOUR_MS - 3) * model.HOUR_MS  # an hour of the recent past
    at = {"ms": hour}
    changes = []
    with EmbeddedStack(root or project_root(), time_scale=0.001, parameters=QUIET) as stack:
        cf = Changeflow.for_embedded(stack)
        stack.stop_pipes()
        tables = (cf.table, cf.history_table)
        with recording_clock(lambda: at["ms"]):
            for n, (label, operation, minute) in enumerate(PLAN, 1):
                before = {k: v for t in tables for k, v in table_index_keys(cf.dynamodb, t).items()}
                for function in stack.lambdas.functions.values():
                    function.api_calls.clear()
                at["ms"] = hour + minute * MINUTE_MS
                request = {"entityId": "bench#index", "changeId": f"bench-index-c{n}", "effectiveAt": T0 + n,
                           "actor": "benchmark", "operation": operation,
                           **({"attributes": {"body": "x" * 200}} if operation == "put" else {})}
                execution = cf.submit(request)
                assert execution.status == "SUCCEEDED" and execution.output["outcome"] == "applied", (
                    label, execution.error, execution.cause)
                puts = [p for function in stack.lambdas.functions.values()
                        for _, op, p, r in function.api_calls if op == "PutItem" and not (r or {}).get("Error")]
                changes.append({"change": label, "minute": minute, "puts": len(puts), **{
                    name: sum(index_write_units(p["Item"], before.get(item_key(p), {}), index) for p in puts)
                    for name, index in (("before", PREVIOUS_INDEX), ("after", INDEX))}})
    kinds: dict[str, dict] = {}
    for change in changes:
        kind = kinds.setdefault(change["change"], {"before": change["before"], "after": change["after"]})
        assert (kind["before"], kind["after"]) == (change["before"], change["after"]), (change, kind)
    return {"changes": changes, "kinds": kinds, "per_million": per_million(kinds)}


def per_million(kinds: dict) -> dict:
    """USD per million changes the index adds, before and after, for an entity written ``k`` times in each
    hour it is written in (``VERSIONS_AN_HOUR``): its first version of the hour and ``k - 1`` more, each at
    the measured units of its kind."""
    first = kinds["the first version of an entity in an hour"]
    same = kinds["a version in the hour of the one before it"]
    return {str(k): {name: (first[name] + (k - 1) * same[name]) / k * PRICES["dynamodb_per_wru"] * 1e6
                     for name in ("before", "after")} for k in VERSIONS_AN_HOUR}


def report(measured: dict) -> str:
    """The measurement as ``make cost`` prints it."""
    lines = ["The changes index (issue 35): write units it adds per change, as first built (keyed by recordedAt, "
             "version and chainHash projected) -> now (keys only, keyed by the hour)"]
    lines += [f"  {label:<50}{kind['before']:>4g} -> {kind['after']:g}" for label, kind in measured["kinds"].items()]
    lines += [f"  USD per million changes at {k} version{'s' * (k != '1')} of an entity an hour: "
              f"{usd['before']:.4g} -> {usd['after']:.4g}" for k, usd in measured["per_million"].items()]
    return "\n".join(lines)


def within_an_hour():
    """A clock that runs from the first minute of an hour of the recent past, as the real one runs: the
    versions of a measurement shorter than 59 minutes are recorded in one hour, whenever it runs (so each
    version after the first is one in the hour of the one before it, for the index)."""
    from changeflow_core import model

    began = time.time()
    hour = (int(began * 1000) // model.HOUR_MS - 1) * model.HOUR_MS
    return lambda: hour + MINUTE_MS + int((time.time() - began) * 1000)
