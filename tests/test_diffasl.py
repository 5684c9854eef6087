"""The differential run's own rules (make diff-asl runs it on python3.13 with LocalStack's interpreter; these
tests run anywhere): it covers every path the design names, it notices every kind of difference, and only
an explained difference is excused."""

from __future__ import annotations

import copy
import json

from changeflow.checks import diffasl
from changeflow.client import named_errors

from conftest import ASL, ROOT


def event(kind: str, **details):
    key = {"TaskStateEntered": "stateEnteredEventDetails", "TaskStateExited": "stateExitedEventDetails",
           "ExecutionFailed": "executionFailedEventDetails"}[kind]
    return {"type": kind, "timestamp": "2026-11-22T00:00:00Z", "id": 1, key: details}


def a_run() -> diffasl.Run:
    events = [
        event("TaskStateEntered", name="Fetch the latest version", input=json.dumps({"request": {"n": 1}})),
        event("TaskStateExited", name="Fetch the latest version",
              output=json.dumps({"fetched": {"version": 1}, "recordedAt": 1763770000000})),
    ]
    execution = {"status": "SUCCEEDED", "output": {"outcome": "applied", "version": 1}, "error": None,
                 "cause": None, "events": events, "invocations": {"FetchLatestFunction": 1}}
    table = [{"pk": "doc#1", "sk": "v0", "version": 1, "recordedAt": 1763770000000, "chainHash": "ab12"}]
    return diffasl.Run([execution], table)


def test_every_named_error_of_the_state_machine_and_every_operation_has_a_path():
    # GIVEN the deployed ASL's named errors and the design's operations and outcomes
    errors = named_errors(json.loads(ASL.read_text(encoding="utf-8")))
    scenarios = {s.name: s for s in diffasl.scenarios()}
    # THEN each is a path of the differential run, expecting exactly that result
    for error in errors:
        assert error in scenarios and scenarios[error].expect == error
    operations = {s.requests[-1]["operation"] for s in scenarios.values()}
    assert operations >= {"put", "delete", "rollback"}
    assert {s.expect for s in scenarios.values()} >= {"applied", "stale", "duplicate"}
    assert any(s.rival_writes for s in scenarios.values()), "a conflict path"
    assert any(f == "PutHistoryFunction" and times == 1 for s in scenarios.values() for f, _, times in s.faults)


def test_identical_runs_show_no_difference_and_volatile_values_are_ignored():
    first, second = a_run(), a_run()
    second.table[0]["recordedAt"] += 5
    second.table[0]["chainHash"] = "cd34"  # the chain covers recordedAt: it differs whenever that does
    second.executions[0]["events"][1]["stateExitedEventDetails"]["output"] = json.dumps(
        {"fetched": {"version": 1}, "recordedAt": 1763770009999})
    assert diffasl.compare(diffasl.scenarios()[0], first, second) == []


def test_a_difference_in_any_compared_part_is_reported():
    scenario = diffasl.scenarios()[0]
    mutations = {
        "status": lambda r: r.executions[0].update(status="FAILED"),
        "output": lambda r: r.executions[0]["output"].update(version=2),
        "states entered": lambda r: r.executions[0]["events"][0]["stateEnteredEventDetails"].update(name="Other"),
        "Lambda invocations": lambda r: r.executions[0]["invocations"].update(FetchLatestFunction=2),
        "event 2 (TaskStateExited)": lambda r: r.executions[0]["events"][1]["stateExitedEventDetails"].update(
            output=json.dumps({"fetched": {"version": 9}})),
        "table afterwards": lambda r: r.table[0].update(version=2),
    }
    for where, mutate in mutations.items():
        other = copy.deepcopy(a_run())
        mutate(other)
        found = diffasl.compare(scenario, a_run(), other)
        assert any(d["where"].endswith(where) for d in found), where


def test_only_a_difference_matching_a_known_entry_is_excused():
    difference = {"scenario": "conflict", "where": "execution 2 of 2: output", "moto": 1, "localstack": 2}
    known = [{"scenario": "conflict", "where": "output", "moto": 1, "localstack": 2, "explanation": "x"}]
    assert diffasl._explained(difference, known) is known[0]
    assert diffasl._explained({**difference, "localstack": 3}, known) is None
    assert diffasl._explained({**difference, "scenario": "create"}, known) is None


def test_the_known_differences_file_explains_each_entry_with_the_aws_documentation():
    data = json.loads((ROOT / diffasl.KNOWN_DIFFERENCES).read_text(encoding="utf-8"))
    for entry in data["differences"]:
        assert entry["explanation"] and entry["aws_docs"] and entry["where"] and entry["scenario"]


def test_a_run_against_the_design_is_caught_even_when_both_interpreters_agree():
    run = a_run()
    stale = next(s for s in diffasl.scenarios() if s.name == "stale")
    assert stale.check(run) == ["expected outcome stale, got SUCCEEDED applied"]
    retried = next(s for s in diffasl.scenarios() if s.name == "history put retried")
    assert any("PutHistoryFunction" in p for p in retried.check(run))
