"""Issue 32 items 1 and 2: a v0 write whose answer was lost is settled from the data, and an outcome the
workflow cannot know is said as unknown.

`v0` remembers 16 change ids. Before, a change whose write landed but whose answer was lost, with more than
16 other writers moving `v0` on in its back-off, was told `stale` (its write had landed), or was written a
second time with equal effective times (v2 and v20, the second reverting the 16 patches between). And a
write that landed with a re-read that kept failing was told `LatestReadFailed`, which the docs say means
nothing was written.

The contract (docs/workflow.md): the read after such a write settles it from the version that write tried,
which history keeps (whoever moves `v0` from n to n+1 makes sure history has n): applied (this execution
wrote it), a duplicate (another execution of the change did), or not landed. Where nothing can tell (that
history item gone under a retention window; the read itself failing) the execution ends `OutcomeUnknown`,
its cause naming the version and saying "send the same change id again". Run on the real ASL.
"""

from __future__ import annotations

import threading

import pytest

from changeflow.checks.faults import InjectedFault, LambdaTimeout
from changeflow.client import Changeflow
from changeflow.local.lambdas import LambdaServiceError, fault_hook
from changeflow.local.moto_patches.stepfunctions.clock import Holds
from conftest import LOGGED
from test_lost_versions import T0, WRITERS  # the same times and writers as issue 26.2's tests
from test_lost_versions import request as change  # (operation, change id, at, entity, **fields)

PAST_THE_WINDOW = 17  # one more writer than the change ids v0 remembers (model.RECENT_CHANGE_IDS)


class LostAnswer:
    """The change ``mine`` writes v0, its answer is lost (a timeout after the write), and ``others`` run one
    after another, each to its end, before its back-off ends (the embedded clock holds the back-off).
    ``between`` runs after the others (e.g. TTL deleting expired items); ``reads_fail``: every read after
    the lost answer fails (the Lambda service), so the workflow cannot look."""

    def __init__(self, stack, cf, mine, others, between=None, reads_fail=False, before_write=False):
        self.stack, self.cf, self.mine, self.others = stack, cf, mine, others
        self.between, self.reads_fail, self.before_write = between, reads_fail, before_write
        self.lost = threading.Event()
        self.results = []

    def _others(self):
        for other in self.others:
            self.results.append(self.cf.submit(other))
        if self.between:
            self.between()

    def hook(self, function, event, invoke):
        mine = isinstance(event, dict) and (event.get("change") or {}).get("changeId") == self.mine["changeId"]
        if mine and function.logical_id == "FetchLatestFunction" and self.lost.is_set() and self.reads_fail:
            raise LambdaServiceError()
        if not (mine and function.logical_id in WRITERS) or self.lost.is_set():
            return invoke()
        self.lost.set()
        if self.before_write:
            raise InjectedFault(f"{function.logical_id} failed before its write")
        invoke()
        thread = threading.Thread(target=self._others)
        thread.start()
        Holds.hold(event["execution"]["name"], thread.join)
        raise LambdaTimeout("Task timed out after 10.00 seconds")

    def run(self):
        with fault_hook(self.stack.lambdas, self.hook):
            return self.cf.submit(self.mine)


def versions(cf, entity="doc#1"):
    return [(v["version"], v["changeId"]) for v in cf.entity(entity)["versions"]]


def patches(n, at):
    return [change("patch", f"p{i}", at, **{f"f{i}": i}) for i in range(n)]


def assert_each_change_once(cf, entity="doc#1"):
    from changeflow.audit.verify import verify

    written = [change_id for _, change_id in versions(cf, entity)]
    assert len(written) == len(set(written)), written
    assert verify(cf, entity).problems == []


# --- item 1: past the 16 ids v0 remembers --------------------------------------------------------------
@pytest.mark.parametrize("operation", ["put", "patch", "delete"])
def test_a_lost_answer_then_more_writers_than_v0_remembers_is_applied_not_stale(stack, cf, operation):
    # GIVEN an entity at version 1
    cf.submit(change("put", "c1", T0))
    # WHEN A's write of version 2 lands, its answer is lost, and 17 newer patches apply in its back-off
    others = patches(PAST_THE_WINDOW, T0 + 20) if operation != "delete" else [
        change("put", f"p{i}", T0 + 20 + i, v=i) for i in range(PAST_THE_WINDOW)]
    a = LostAnswer(stack, cf, change(operation, "mine", T0 + 10), others).run()
    # THEN A is told the truth: applied, version 2 (before: stale, though version 2 is its own)
    assert (a.status, (a.output or {}).get("outcome"), (a.output or {}).get("version")) == (
        "SUCCEEDED", "applied", 2), (a.error, a.cause)
    assert versions(cf)[1] == (2, "mine") and len(versions(cf)) == 2 + PAST_THE_WINDOW
    assert_each_change_once(cf)


def test_with_equal_effective_times_a_lost_answer_is_never_applied_twice(stack, cf):
    # GIVEN the case: every change at one effective time
    cf.submit(change("put", "c1", T0, base=1))
    a = LostAnswer(stack, cf, change("put", "mine", T0, base=2), patches(PAST_THE_WINDOW, T0)).run()
    # THEN A wrote version 2 once (before: versions 2 and 20, the second reverting the 17 patches)
    assert (a.status, a.output["outcome"], a.output["version"]) == ("SUCCEEDED", "applied", 2), (a.error, a.cause)
    assert_each_change_once(cf)
    latest = cf.entity("doc#1")["latest"]
    assert latest["version"] == 2 + PAST_THE_WINDOW
    assert latest["attributes"] == {"base": 2, **{f"f{i}": i for i in range(PAST_THE_WINDOW)}}


@pytest.mark.parametrize("parameters", [
    {"SeparateHistoryTable": "true"},
    {"WorkflowType": "EXPRESS", **LOGGED},
    {"HistoryRetentionVersions": "2"},  # version 2 expires as version 4 is written, TTL has not run
], ids=["separate-history-table", "express", "retention-window"])
def test_the_answer_is_exact_in_every_configuration(make_stack, parameters):
    stack = make_stack(**parameters)
    cf = Changeflow.for_embedded(stack)
    cf.submit(change("put", "c1", T0))
    a = LostAnswer(stack, cf, change("put", "mine", T0), patches(PAST_THE_WINDOW, T0)).run()
    assert (a.status, a.output["outcome"], a.output["version"]) == ("SUCCEEDED", "applied", 2), (a.error, a.cause)
    assert sum(1 for _, c in versions(cf) if c == "mine") <= 1
    assert cf.entity("doc#1")["latest"]["version"] == 2 + PAST_THE_WINDOW


def sweep_expired(cf):
    """DynamoDB TTL deleting every expired item now (it deletes within days; here at once)."""
    for table in {cf.table, cf.history_table}:
        for item in cf.dynamodb.scan(TableName=table)["Items"]:
            if "expiresAt" in item:
                cf.dynamodb.delete_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})


def test_when_history_no_longer_holds_the_version_the_outcome_is_unknown_and_nothing_is_written_twice(make_stack):
    # GIVEN a retention window of two versions, and TTL deleting version 2 before A can look
    stack = make_stack(HistoryRetentionVersions="2")
    cf = Changeflow.for_embedded(stack)
    cf.submit(change("put", "c1", T0))
    a = LostAnswer(stack, cf, change("put", "mine", T0), patches(PAST_THE_WINDOW, T0),
                   between=lambda: sweep_expired(cf)).run()
    # THEN A ends OutcomeUnknown, naming the version, never applied/stale/failed, and writes nothing more
    assert (a.status, a.error) == ("UNKNOWN", "OutcomeUnknown"), (a.status, a.output, a.error)
    assert "version 2" in a.cause and "send the same change id again" in a.cause.lower()
    assert "mine" not in [c for _, c in versions(cf)] and cf.entity("doc#1")["latest"]["version"] == 2 + PAST_THE_WINDOW


# --- item 2: the read that would tell keeps failing ------------------------------------------------------
def test_a_landed_write_whose_re_read_keeps_failing_is_unknown_not_a_read_failure(stack, cf):
    cf.submit(change("put", "c1", T0))
    # WHEN A's write of version 2 lands, its answer is lost, and every read after it fails
    a = LostAnswer(stack, cf, change("put", "mine", T0 + 1), [], reads_fail=True).run()
    # THEN A is OutcomeUnknown (before: LatestReadFailed, "nothing written", with v0 at version 2)
    assert (a.status, a.error) == ("UNKNOWN", "OutcomeUnknown"), (a.status, a.error, a.cause)
    assert "version 2" in a.cause and "send the same change id again" in a.cause.lower()
    assert cf.entity("doc#1")["latest"]["changeId"] == "mine"
    # AND the same change id sent again is told what became of it, and the version reaches history
    again = cf.submit(change("put", "mine", T0 + 1), redeliver=True)
    assert (again.status, again.output["outcome"], again.output["version"]) == ("SUCCEEDED", "duplicate", 2)
    assert_each_change_once(cf)


def test_a_write_that_failed_before_writing_with_reads_failing_is_unknown_too(stack, cf):
    # the workflow cannot tell a failure before the write from a lost answer: it says it does not know
    cf.submit(change("put", "c1", T0))
    a = LostAnswer(stack, cf, change("put", "mine", T0 + 1), [], reads_fail=True, before_write=True).run()
    assert (a.status, a.error) == ("UNKNOWN", "OutcomeUnknown"), (a.status, a.error, a.cause)
    again = cf.submit(change("put", "mine", T0 + 1), redeliver=True)
    assert (again.output["outcome"], again.output["version"]) == ("applied", 2)


def write_rival(cf, change_id):
    """Another change lands between A's read and its write (v0 and history, as the workflow writes them)."""
    from changeflow_core import items, store
    from changeflow_core.validation import Change

    latest = store.fetch_latest_state(cf.dynamodb, cf.table, cf.history_table, "doc#1")
    rival = Change(entityId="doc#1", operation="put", effectiveAt=latest["effectiveAt"], changeId=change_id)
    item = items.build_latest(rival, {"rival": True}, latest, latest["version"] + 1, 1, "arn:rival")
    store.write_latest(cf.dynamodb, cf.table, item, latest)
    store.put_history(cf.dynamodb, cf.history_table, items.history_of(item))


def rival_then(cf, at_the_read_again):
    """A fault hook: change "mine" meets a rival ("other") landed between its read and its write (its condition
    fails), then ``at_the_read_again(event)`` at the fetch step's read after the back-off."""
    rivals = []

    def hook(function, event, invoke):
        mine = isinstance(event, dict) and (event.get("change") or {}).get("changeId") == "mine"
        if mine and function.logical_id == "UpdateLatestFunction" and not rivals:
            rivals.append(write_rival(cf, "other"))
        if mine and function.logical_id == "FetchLatestFunction" and "request" not in event:
            at_the_read_again(event)
        return invoke()

    return hook


class ProofLostInTheBackOff(LostAnswer):
    """The read after the lost answer is handed a proof it cannot check: the payload changed between the
    steps, or the seal key was rotated under the execution (docs/operations.md: the seal)."""

    def hook(self, function, event, invoke):
        mine = isinstance(event, dict) and (event.get("change") or {}).get("changeId") == self.mine["changeId"]
        if mine and function.logical_id == "FetchLatestFunction" and self.lost.is_set():
            event["proof"] = "A" * 43  # a MAC under another key
        return super().hook(function, event, invoke)


def test_a_landed_write_whose_re_read_cannot_check_its_proof_is_unknown_not_unproven(stack, cf):
    cf.submit(change("put", "c1", T0))
    # WHEN A's write of version 2 lands, its answer is lost, and the read after it cannot check the proof
    a = ProofLostInTheBackOff(stack, cf, change("put", "mine", T0 + 1), []).run()
    # THEN A is OutcomeUnknown naming the version (before: Unproven, "nothing written", with v0 at version 2)
    assert (a.status, a.error) == ("UNKNOWN", "OutcomeUnknown"), (a.status, a.error, a.cause)
    assert "version 2" in a.cause and "send the same change id again" in a.cause.lower()
    assert cf.entity("doc#1")["latest"]["changeId"] == "mine"
    again = cf.submit(change("put", "mine", T0 + 1), redeliver=True)
    assert (again.output["outcome"], again.output["version"]) == ("duplicate", 2)
    assert_each_change_once(cf)


def test_a_read_that_cannot_check_its_proof_after_a_failed_condition_is_unproven(stack, cf):
    # after a WriteConflict nothing was written: the step that cannot check its proof says so, Unproven
    cf.submit(change("put", "c1", T0))

    def unprovable(event):
        event["proof"] = "A" * 43

    with fault_hook(stack.lambdas, rival_then(cf, unprovable)):
        a = cf.submit(change("put", "mine", T0 + 2))
    assert (a.status, a.error) == ("FAILED", "Unproven"), (a.status, a.error, a.cause)
    assert versions(cf) == [(1, "c1"), (2, "other")]


def test_a_read_failing_after_a_failed_condition_is_still_a_read_failure(stack, cf):
    # a failed condition wrote nothing, so a read failing after it is LatestReadFailed: nothing was written
    cf.submit(change("put", "c1", T0))

    def failing(event):
        raise LambdaServiceError()

    with fault_hook(stack.lambdas, rival_then(cf, failing)):
        a = cf.submit(change("put", "mine", T0 + 2))
    assert (a.status, a.error) == ("FAILED", "LatestReadFailed"), (a.status, a.error, a.cause)
    assert versions(cf) == [(1, "c1"), (2, "other")]


def test_a_write_that_kept_failing_and_landed_last_time_is_applied_not_latest_write_failed(stack, cf):
    # every write fails; the tenth lands but its answer is lost: the read after it settles it
    cf.submit(change("put", "c1", T0))
    writes = {"n": 0}

    def hook(function, event, invoke):
        if function.logical_id == "UpdateLatestFunction" and event["change"]["changeId"] == "mine":
            writes["n"] += 1
            if writes["n"] < 10:
                raise LambdaServiceError()
            if writes["n"] == 10:  # the last write the attempts allow
                invoke()
                raise LambdaTimeout("Task timed out after 10.00 seconds")
        return invoke()

    with fault_hook(stack.lambdas, hook):
        a = cf.submit(change("put", "mine", T0 + 1))
    assert (a.status, (a.output or {}).get("outcome"), (a.output or {}).get("version")) == ("SUCCEEDED", "applied", 2), (
        a.error, a.cause)
    assert_each_change_once(cf)


# --- told as UNKNOWN: the CLI, the console, import, the API ------------------------------------------------
def unknown_change(stack, cf):
    """A change whose write lands and whose every later read fails: OutcomeUnknown."""
    cf.submit(change("put", "c1", T0))
    return LostAnswer(stack, cf, change("put", "mine", T0 + 1), [], reads_fail=True)


def test_the_cli_shows_an_unknown_outcome_as_unknown_with_what_to_do(stack, cf, tmp_path, monkeypatch, capsys):
    from changeflow.cli import main
    from changeflow.client import targets

    lost = unknown_change(stack, cf)
    path = tmp_path / "mine.json"
    path.write_text(__import__("json").dumps(lost.mine))
    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    with fault_hook(stack.lambdas, lost.hook):
        status = main(["submit", str(path)])
    out, err = capsys.readouterr()
    assert status == 3  # not 0 (applied), not 1 (rejected: nothing written)
    row = next(line for line in out.splitlines() if "mine" in line)
    assert " UNKNOWN " in row and "FAILED" not in row and "OutcomeUnknown" in row
    assert "outcome of execution" in err and "send the same change id again" in err.lower()
    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    capsys.readouterr()
    assert main(["submit", str(path), "--json"]) in (0, 3)  # sent again: a new execution answers it
    assert '"outcome": "duplicate"' in capsys.readouterr().out.replace('":"', '": "')


def test_the_console_lists_and_shows_an_unknown_outcome_as_unknown(stack, cf):
    from werkzeug.test import Client

    from changeflow.console import data
    from changeflow.console.app import Console

    a = unknown_change(stack, cf).run()
    browser = Client(Console(data.Reader(cf)))
    listed = browser.get("/console/executions", query_string={"status": "UNKNOWN"}).get_data(as_text=True)
    assert a.name in listed and ">UNKNOWN<" in listed
    failed = browser.get("/console/executions", query_string={"status": "FAILED"}).get_data(as_text=True)
    assert a.name not in failed
    page = browser.get("/console/execution", query_string={"name": a.name}).get_data(as_text=True)
    assert 'id="execution-status">UNKNOWN<' in page and "OutcomeUnknown" in page


def test_an_import_counts_an_unknown_outcome_apart_and_a_resumed_run_sends_it_again(stack, cf, tmp_path):
    from changeflow.transfer.importer import Checkpoint, Importer, Plan, Rejects, entry_point, to_request

    plan, row = Plan("id", effective_at=T0 + 1), {"id": "doc#1", "v": 2}
    cf.submit(change("put", "c1", T0))
    # the import's one record: its write lands, and every read after it fails
    lost = LostAnswer(stack, cf, to_request(row, plan), [], reads_fail=True)
    start, wait = entry_point(cf, "stepfunctions", 60, describe_after=0.5)  # the data never answers: describe soon
    checkpoint, rejects = tmp_path / "run.checkpoint", tmp_path / "run.rejects.jsonl"
    with fault_hook(stack.lambdas, lost.hook):
        first = Importer(start, wait, plan, Checkpoint(checkpoint, {"source": "s"}), Rejects(rejects),
                         concurrency=1).run(records([row]))
    assert first.counts["unknown"] == 1 and first.counts["failed"] == first.counts["rejected"] == 0, first.to_json()
    assert first.counts["applied"] == 0 and "unknown, not checkpointed" in rejects.read_text()
    # a resumed run sends the same change id again: the data answers it (applied by the first run)
    resumed = Importer(start, wait, plan, Checkpoint(checkpoint, {"source": "s"}), Rejects(None),
                       concurrency=1).run(records([row]))
    assert resumed.skipped == 0 and resumed.counts["duplicate"] == 1, resumed.to_json()
    assert cf.entity("doc#1")["latest"]["version"] == 2  # applied once


def records(rows):
    from changeflow.transfer.sources import Record

    return [Record(str(i + 1), row) for i, row in enumerate(rows)]
