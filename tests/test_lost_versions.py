"""Issue 26.2: a lost write response with a concurrent writer must not lose a version.

A's v0 write lands (version n) but its answer is lost, so A backs off. In that window B reads v0 = n and
writes n+1. The rule that keeps every version: whoever moves v0 from n to n+1 first makes sure history has
version n; v0 holds n's whole item at that moment, so the fetch step writes history n from it (a
conditional put) when it is missing. And a change that wrote a version is reported ``applied`` with that
version, even when another execution noticed it first; a redelivery in another execution stays
``duplicate``.

Run on the real state machine (the embedded stack). The interleaving is forced, not hoped for: A's v0
write lands, B's execution starts, A's answer is lost, and A's back-off (its Wait state) lasts until B has
ended.
"""

from __future__ import annotations

import json
import threading

import pytest

from changeflow.local.moto_patches.stepfunctions.clock import Holds
from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
from changeflow.client import Changeflow
from changeflow.checks.faults import InjectedFault, LambdaTimeout
from changeflow.local.lambdas import fault_hook
from conftest import LOGGED

T0 = 1_767_225_600_000
WRITERS = ("UpdateLatestFunction", "DeleteTombstoneFunction")


def request(operation, change, at=T0, entity="doc#1", **fields):
    body = {"entityId": entity, "operation": operation, "effectiveAt": at, "changeId": change}
    if operation == "put":
        body["attributes"] = fields or {"by": change}
    elif operation == "patch":
        body["set"] = fields or {"by": change}
    elif operation == "rollback":
        body["toVersion"] = fields.get("toVersion", 1)
    return body


class Race:
    """A's v0 write lands, its answer is lost (``fault``), and ``others`` run start to end in A's back-off.
    ``before_others`` runs in that window first (e.g. TTL deleting expired items).

    The window is held open by the embedded stack's clock (``Holds``): A's next wait, its back-off ("Back off
    before reading again"), first waits for the others to end. Nothing else changes: the same states run,
    in the same order."""

    def __init__(self, stack, cf, mine, others, fault="timeout", before_others=None):
        self.stack, self.cf, self.mine, self.others, self.fault = stack, cf, mine, others, fault
        self.before_others = before_others
        self.arns: list[str] = []
        self.mine_arn: str | None = None
        self.lock = threading.Lock()

    def hook(self, function, event, invoke):
        result = invoke()
        if function.logical_id in WRITERS and event["change"]["changeId"] == self.mine["changeId"]:
            with self.lock:
                first = self.mine_arn is None
                if first:
                    self.mine_arn = event["execution"]["id"]
            if first:
                if self.before_others:
                    self.before_others()
                for other, name in self.others:
                    self.arns.append(self.cf.start(other, name=name)[1])
                Holds.hold(event["execution"]["name"],
                           lambda: [wait_for_termination(arn, 120) for arn in self.arns])
                if self.fault == "timeout":
                    raise LambdaTimeout("Task timed out after 10.00 seconds")
                raise InjectedFault(f"{function.logical_id} failed after its write")
        return result

    def run(self):
        with fault_hook(self.stack.lambdas, self.hook):
            mine = self.cf.submit(self.mine)
        return mine, [self.cf.wait(arn) for arn in self.arns]


def entered(cf, execution):
    return [e["stateEnteredEventDetails"]["name"] for e in cf.history(execution.arn) if e["type"].endswith("StateEntered")]


def fetch_results(cf, execution):
    """The fetch steps' Lambda results (what the execution history shows of each read)."""
    return [json.loads(e["taskSucceededEventDetails"]["output"])["Payload"] for e in cf.history(execution.arn)
            if e["type"] == "TaskSucceeded" and "change" in json.loads(e["taskSucceededEventDetails"]["output"]).get(
                "Payload", {})]


def assert_every_version_kept(cf, entity="doc#1"):
    from changeflow.audit.verify import verify

    state = cf.entity(entity)
    numbers = [v["version"] for v in state["versions"]]
    assert numbers == list(range(1, state["latest"]["version"] + 1)), numbers
    assert state["versions"][-1] == {**state["latest"], "expiresAt": None}  # a tombstone's expiry is v0's only
    assert verify(cf, entity).problems == []
    return state


SETUPS = {  # what the entity holds before the race, so that every operation has something to act on
    "base": [request("put", "c1", v=1), request("put", "c2", v=2)],
}


@pytest.mark.parametrize("mine_op, other_op", [
    ("put", "patch"),  # the case
    ("patch", "put"),
    ("delete", "put"),  # A's version is a tombstone; B revives the entity
    ("rollback", "delete"),
    ("put", "rollback"),
])
@pytest.mark.parametrize("fault", ["timeout", "lost"])
def test_a_lost_write_response_with_a_concurrent_writer_keeps_every_version_and_reports_applied(
        stack, cf, mine_op, other_op, fault):
    # GIVEN an entity at version 2
    for change in SETUPS["base"]:
        cf.submit(change)
    # WHEN A's write of version 3 lands but its answer is lost, and B changes the entity in A's back-off
    mine = request(mine_op, "mine", at=T0 + 10)
    other = request(other_op, "other", at=T0 + 20, toVersion=2)
    a, (b,) = Race(stack, cf, mine, [(other, None)], fault=fault).run()
    # THEN A is applied with version 3 (its own execution wrote it), B applied with version 4
    assert (a.status, a.output["outcome"], a.output["version"]) == ("SUCCEEDED", "applied", 3), (a.error, a.cause)
    assert (b.status, b.output["outcome"], b.output["version"]) == ("SUCCEEDED", "applied", 4), (b.error, b.cause)
    assert "Draw a back-off" in entered(cf, a)
    # AND history holds version 3 exactly as A wrote it: B's read wrote it from v0 before moving v0 on
    state = assert_every_version_kept(cf)
    assert state["versions"][2]["changeId"] == "mine" and state["versions"][2]["executionArn"] == a.arn
    assert [r.get("historyRepaired") for r in fetch_results(cf, b)] == [3], (entered(cf, a), entered(cf, b), fetch_results(cf, a))


def test_a_redelivery_in_another_execution_during_the_window_is_a_duplicate_and_the_writer_applied(
        stack, cf):
    # GIVEN A's write landed and its answer was lost; the same change arrives again as another execution
    # (Standard answers a second StartExecution of A's running name with A itself: another name, as the
    # API names a new attempt or an at-least-once source redelivers)
    cf.submit(request("put", "c1"))
    mine = request("put", "mine", at=T0 + 1)
    a, (again,) = Race(stack, cf, mine, [(mine, "mine-delivered-again")]).run()
    # THEN the execution that wrote version 2 says applied; the redelivery says duplicate, version 2
    assert a.name != again.name
    assert (a.output["outcome"], a.output["version"]) == ("applied", 2)
    assert (again.output["outcome"], again.output["version"]) == ("duplicate", 2)
    assert assert_every_version_kept(cf)["versions"][1]["executionArn"] == a.arn


def test_several_writers_in_the_window_each_keep_their_version(stack, cf):
    cf.submit(request("put", "c1"))
    others = [(request("patch", f"o{i}", at=T0 + 5, **{f"f{i}": i}), None) for i in range(3)]
    a, rest = Race(stack, cf, request("put", "mine", at=T0 + 1), others).run()
    assert (a.output["outcome"], a.output["version"]) == ("applied", 2)
    assert sorted(r.output["version"] for r in rest) == [3, 4, 5] and {r.output["outcome"] for r in rest} == {"applied"}
    assert_every_version_kept(cf)


@pytest.mark.parametrize("parameters", [
    {"SeparateHistoryTable": "true"},
    {"WorkflowType": "EXPRESS", **LOGGED},
    {"HistoryRetentionVersions": "1"},  # version n-1 expires as soon as n is written
    {"HistoryRetentionVersions": "1", "HistoryRetentionDays": "30"},
], ids=["separate-history-table", "express", "keep-1-version", "keep-1-version-30-days"])
def test_the_rule_holds_in_every_configuration(make_stack, parameters):
    stack = make_stack(**parameters)
    cf = Changeflow.for_embedded(stack)
    for change in SETUPS["base"]:
        cf.submit(change)
    a, (b,) = Race(stack, cf, request("put", "mine", at=T0 + 10),
                   [(request("patch", "other", at=T0 + 20), None)]).run()
    assert (a.output["outcome"], a.output["version"], b.output["outcome"], b.output["version"]) == (
        "applied", 3, "applied", 4)
    state = cf.entity("doc#1")
    by_version = {v["version"]: v for v in state["versions"]}
    assert by_version[3]["changeId"] == "mine" and by_version[4] == state["latest"]
    from changeflow.audit.verify import verify
    assert verify(cf, "doc#1").problems == []


def test_versions_deleted_by_ttl_are_not_mistaken_for_the_missing_one(make_stack):
    # GIVEN a retention of one version (version n-1 expires as n is written) and TTL deleting every
    # expired item in the window: history holds only version 2 when B reads v0 = 3
    stack = make_stack(HistoryRetentionVersions="1")
    cf = Changeflow.for_embedded(stack)
    for change in SETUPS["base"]:
        cf.submit(change)

    def ttl_sweep():
        for table in {cf.table, cf.history_table}:
            for item in cf.dynamodb.scan(TableName=table)["Items"]:
                if "expiresAt" in item:
                    cf.dynamodb.delete_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})

    a, (b,) = Race(stack, cf, request("put", "mine", at=T0 + 10),
                   [(request("patch", "other", at=T0 + 20), None)], before_others=ttl_sweep).run()
    assert (a.output["version"], b.output["version"]) == (3, 4)
    # THEN only version 3, the one v0 held, was written back; the version TTL deleted stays deleted
    assert [r.get("historyRepaired") for r in fetch_results(cf, b)] == [3]
    assert [v["version"] for v in cf.entity("doc#1")["versions"]] == [2, 3, 4]
    from changeflow.audit.verify import verify
    assert verify(cf, "doc#1").problems == []


def test_a_read_after_a_tombstone_expired_and_was_deleted_writes_nothing_back_and_numbering_goes_on(cf):
    # no v0: there is nothing to write back from; the newest history version numbers the next one
    cf.submit(request("put", "c1"))
    cf.submit(request("delete", "c2", at=T0 + 1))
    cf.dynamodb.delete_item(TableName=cf.table, Key={"pk": {"S": "doc#1"}, "sk": {"S": "v0"}})  # TTL
    revived = cf.submit(request("put", "c3", at=T0 + 2))
    assert (revived.output["outcome"], revived.output["version"]) == ("applied", 3)
    assert all("historyRepaired" not in r for r in fetch_results(cf, revived))
    assert [v["version"] for v in cf.entity("doc#1")["versions"]] == [1, 2, 3]


def test_a_version_whose_history_put_failed_is_written_back_by_the_next_change(stack, cf):
    # GIVEN an execution that ended HistoryWriteFailed: v0 is version 1, history has nothing
    def broken(function, event, invoke):
        if function.logical_id == "PutHistoryFunction":
            raise RuntimeError("history table unavailable")
        return invoke()

    with fault_hook(stack.lambdas, broken):
        failed = cf.submit(request("put", "c1"))
    assert failed.error == "HistoryWriteFailed" and cf.entity("doc#1")["versions"] == []
    # WHEN the next change is read: THEN version 1 is written back from v0 before v0 moves on
    nxt = cf.submit(request("patch", "c2", at=T0 + 1))
    assert (nxt.output["outcome"], nxt.output["version"]) == ("applied", 2)
    assert fetch_results(cf, nxt)[0]["historyRepaired"] == 1
    state = assert_every_version_kept(cf)
    assert state["versions"][0]["executionArn"] == failed.arn  # the item its own writer would have put


def test_the_fetch_step_reads_v0_and_the_newest_history_version_in_one_query(stack, cf, monkeypatch):
    # the check costs no extra request on a single table: one consistent Query, Limit 2, newest first.
    # Counted where DynamoDB answers (the handlers may run in or out of this process)
    from moto.dynamodb.responses import DynamoHandler

    reads = []
    for action in ("get_item", "query", "batch_get_item", "scan"):
        original = getattr(DynamoHandler, action)

        def counted(self, _original=original, _action=action):
            reads.append((_action, dict(self.body)))
            return _original(self)

        monkeypatch.setattr(DynamoHandler, action, counted)
    stack.stop_pipes()  # the change feed's enrichment reads history after the change, beside the workflow
    cf.submit(request("put", "c1"))
    reads.clear()
    execution = cf.submit(request("put", "c2", at=T0 + 1))
    assert execution.output["outcome"] == "applied"
    # an applied change reads nothing else: the write, the history put and the expiry tag only write
    assert [action for action, _ in reads] == ["query"], reads
    body = reads[0][1]
    assert body["Limit"] == 2 and body["ScanIndexForward"] is False and body["ConsistentRead"] is True
