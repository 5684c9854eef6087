"""The simulation of the whole system (issue 32, `make simulate`): a bounded number of seeds on the real
stack, a seed replayed exactly, and each checker shown to catch what it must (a checker that cannot fail
checks nothing). The long campaign is `make simulate-long` (or `CHANGEFLOW_LONG=1` here: more seeds)."""

from __future__ import annotations

import os

import pytest

from changeflow.checks.simulation import check_audit, check_redaction, check_writes, runner, shrink
from changeflow.checks.simulation.findings import SEAMS, Violation
from changeflow.checks.simulation.world import Run, World
from changeflow.client import Execution

# The seams of issue 32 still open on this branch: a violation classified into one of them would be expected;
# any other fails the test. Before the fixes this was every seam 1-15 (the simulation finds fourteen of them
# on main before the fixes: docs/guarantees.md); with seams-a and seams-b merged it finds none.
OPEN_SEAMS: set[int] = set()
OPEN_CODES: set[str] = set()
# Seeds that together run every workload, each in a few seconds (`make simulate SEED=N` replays one).
SEEDS = [107, 120, 157]
LONG_SEEDS = range(0, 40)


def unexpected(outcome: runner.Outcome) -> list[str]:
    return [v.line() for v in outcome.violations if v.seam not in OPEN_SEAMS and v.code not in OPEN_CODES]


@pytest.mark.parametrize("seed", list(LONG_SEEDS) if os.environ.get("CHANGEFLOW_LONG") else SEEDS)
def test_a_seed_finds_nothing_but_the_open_seams(seed):
    outcome = runner.run(seed)
    assert outcome.ops and outcome.trace, "the seed ran nothing"
    assert unexpected(outcome) == []


def test_a_seed_replays_exactly():
    """The same seed twice: the same schedule (every choice of which execution goes on next) and the same
    violations, on a seed whose 22 writers contend for one entity."""
    first, second = runner.run(143), runner.run(143)
    assert len(first.trace) > 50
    assert (first.fingerprint, [v.line() for v in first.violations]) == \
        (second.fingerprint, [v.line() for v in second.violations])


def test_make_simulate_and_simulate_long_run_through_make(tmp_path):
    """The targets' recipes, run as a user runs them (tests/make_targets.py: a copy of the project): one
    seed's operations replayed with its report as JSON, and the long mode for one seed."""
    import json

    from make_targets import make, project_copy

    copy = project_copy(tmp_path)
    shown = make(copy, "simulate", extra=["SEED=180", "OPS=0,1", "JSON=1"]).stdout
    report = json.loads(shown[shown.index("\n{") + 1:])  # after the recipe's line that make echoes
    assert [(s["seed"], s["ops"], s["operations"]) for s in report["seeds"]] == [(180, [0, 1], 2)]
    assert report["seams"] == {} and set(report["promises"]) >= {"outcomes", "versions", "principals"}
    long = make(copy, "simulate-long", extra=["HOURS=0.0001", "SEED=180"]).stdout
    assert "seed 180:" in long and "simulate --long: seeds up to 180, 0 failing" in long


# --- each checker catches what it must -------------------------------------------------------------------
class Table:
    """A client whose entity reads answer a fixed state (what the checkers read through ``cf.entity``)."""

    def __init__(self, state):
        self.state = state

    def entity(self, entity_id):
        return self.state


def version(n, change, arn, at=1, **more):
    return {"version": n, "changeId": change, "executionArn": arn, "effectiveAt": at, "deleted": False,
            "operation": more.pop("operation", "put"), "attributes": more.pop("attributes", {"n": n}), **more}


def told(world, arn, status, said, request, output=None):
    run = Run(0, request, arn, arn)
    run.execution = Execution(arn, arn, status, request, output=output, error=None if status == "SUCCEEDED" else said)
    run.told.append((status, said))
    world.runs.append(run)
    return run


@pytest.fixture
def world(tmp_path):
    return World(0, {}, tmp_path)


def put(change, n=1):
    return {"entityId": "e", "operation": "put", "changeId": change, "attributes": {"n": n}}


def test_an_outcome_the_history_contradicts_is_a_violation_and_an_unknown_one_is_not(world):
    world.cf = Table({"latest": version(3, "c", "C"), "versions": [version(1, "a", "A"), version(2, "b", "B")]})
    runs = [told(world, "A", "SUCCEEDED", "stale", put("a")),  # wrote version 1, told stale
            told(world, "B", "FAILED", "LatestReadFailed", put("b")),  # wrote version 2, told nothing written
            told(world, "C", "FAILED", "OutcomeUnknown", put("c")),  # v0 is its: unknown is truthful
            told(world, "D", "SUCCEEDED", "applied", put("d"), output={"version": 2}),  # version 2 is b's
            told(world, "E", "FAILED", "States.Runtime", put("e"))]
    check_writes.check_outcomes(world, "e", runs)
    assert [(v.code, v.seam) for v in world.violations] == [
        ("outcome.stale-but-wrote", 1), ("outcome.nothing-written-but-wrote", 2), ("outcome.applied-but-absent", None),
        ("outcome.unnamed-failure", None)]


def test_a_version_doubled_or_missing_is_a_violation_unless_the_retention_window_let_it_go(world, tmp_path):
    world.cf = Table({"latest": version(4, "a", "A2"), "versions": [version(1, "a", "A"), version(2, "b", "B"),
                                                                      version(4, "a", "A2")]})
    check_writes.check_versions(world, "e")
    assert sorted(v.code for v in world.violations) == ["versions.doubled", "versions.gap"]
    kept = World(0, {"HistoryRetentionVersions": "2"}, tmp_path)
    kept.cf = Table({"latest": version(5, "e", "E"), "versions": [version(3, "c", "C"), version(4, "d", "D"),
                                                                    version(5, "e", "E")]})
    check_writes.check_versions(kept, "e")
    assert kept.violations == []  # versions 1 and 2 are past the window of 2 from version 5


def test_v0_ahead_of_history_is_excused_only_by_what_its_writer_was_told(world):
    world.cf = Table({"latest": version(2, "b", "B"), "versions": [version(1, "a", "A")]})
    told(world, "B", "FAILED", "OutcomeUnknown", put("b"))
    check_writes.check_versions(world, "e")
    assert world.violations == []
    world.runs[-1].told[-1] = ("FAILED", "LatestReadFailed")
    check_writes.check_versions(world, "e")
    assert [(v.code, v.seam) for v in world.violations] == [("versions.v0-ahead-told-nothing", 2)]


def test_redacted_content_served_anywhere_is_a_violation_unless_a_version_that_made_it_holds_it(world):
    world.redacted["e"] = {2}
    world.contents[("e", 2)] = {"ssn": "2"}
    world.cf = Table({"latest": None, "versions": [
        version(1, "a", "A", attributes={"ssn": "1"}), version(2, "b", "B", attributes={}, redacted=True),
        version(3, "r", "R", operation="redact", attributes={"ssn": "2"}),
        version(4, "c", "C", attributes={"ssn": "1"})]})
    served = [("GET /entities/{id}", {"version": 3, "attributes": {"ssn": "2"}}),  # a redaction's copy
              ("GET /entities/{id}/versions/4", {"version": 4, "attributes": {"ssn": "1"}}),  # version 1's too
              ("GET /entities/{id}?asOf=5", {"version": 3, "attributes": {}, "operation": "redact", "asOf": 5})]
    check_redaction.check_redaction(world, "e", served)
    assert [(v.code, v.seam) for v in world.violations] == [("redaction.served", 8), ("redaction.asof-redactor", 15)]


def test_what_verify_names_is_read_from_its_problems():
    assert check_audit.mentioned(["version 3: its content changed", "versions 5..7: no chain hash"]) == {3, 5, 6, 7}
    assert check_audit.mentioned(["v0 (version 9): differs"]) == {9}


def test_every_code_a_checker_uses_is_classified():
    assert all(seam is None or 1 <= seam <= 15 for seam in SEAMS.values())
    assert {s for s in SEAMS.values() if s} == set(range(1, 16))  # every seam has a symptom the checkers know
    with pytest.raises(ValueError):
        Violation("outcomes", "no.such.code", "")


# --- shrinking -----------------------------------------------------------------------------------------------
def test_delta_debugging_finds_a_one_minimal_failing_subset():
    calls = []

    def fails(items):
        calls.append(items)
        return {3, 11, 17} <= set(items)

    assert shrink.ddmin(range(24), fails) == [3, 11, 17]
    assert len(calls) < 100
    assert shrink.ddmin([5], lambda items: True) == [5]
