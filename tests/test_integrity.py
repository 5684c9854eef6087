"""changeflow verify and repair: what they detect, what repair can fix and what it says it cannot."""

from __future__ import annotations

import json
import time

import pytest

from changeflow.cli import main
from changeflow.audit.repair import repair
from changeflow.audit.verify import verify
from conftest import LOGGED

T0 = 1_767_225_600_000
DAY = 86_400


def put(at, change, **attributes):
    return {"entityId": "e", "operation": "put", "attributes": attributes or {"at": at}, "effectiveAt": at,
            "changeId": change}


def key(version):
    return {"pk": {"S": "e"}, "sk": {"S": f"v#{version:010d}"}}


def test_a_healthy_entity_verifies(cf):
    for i in range(3):
        cf.submit(put(T0 + i, f"c{i}"))
    cf.submit({"entityId": "e", "operation": "delete", "effectiveAt": T0 + 5})
    cf.submit({"entityId": "e", "operation": "rollback", "toVersion": 2, "effectiveAt": T0 + 6})
    report = verify(cf, "e")
    assert report.ok, report.problems
    assert report.versions == [1, 2, 3, 4, 5]


def test_verify_detects_a_gap_a_mismatch_and_a_live_expiry(cf):
    for i in range(3):
        cf.submit(put(T0 + i, f"c{i}"))
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(2))
    cf.dynamodb.update_item(TableName=cf.table, Key={"pk": {"S": "e"}, "sk": {"S": "v0"}},
                            UpdateExpression="SET expiresAt = :t, #a = :x", ExpressionAttributeNames={"#a": "at"},
                            ExpressionAttributeValues={":t": {"N": "1"}, ":x": {"N": "0"}})
    problems = "\n".join(verify(cf, "e").problems)
    assert "versions missing from history: [2]" in problems
    assert "history item of version 3 differs from v0" in problems
    assert "live v0 (version 3) carries an expiry" in problems


def test_repair_writes_v0s_missing_history_item_and_says_what_it_cannot(cf):
    cf.submit(put(T0, "c0"))
    cf.submit(put(T0 + 1, "c1"))
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(2))
    done, cannot = repair(cf, "e")
    assert done == ["wrote history item of version 2 from v0"] and cannot == []
    assert verify(cf, "e").ok
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(1))
    done, cannot = repair(cf, "e")
    assert done == [] and cannot == ["versions missing from history: [1]",
                                     "version 2: follows version 0; version 1 is missing from the chain"]


def test_with_a_retention_window_the_oldest_versions_may_be_gone(make_stack):
    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="2", HistoryRetentionDays="1"))
    assert cf.history_expires
    for i in range(4):
        cf.submit(put(T0 + i, f"c{i}"))
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(1))  # what TTL does after the expiry
    assert verify(cf, "e", now_s=time.time() + 2 * DAY).ok  # a day after its tag, TTL may have deleted it
    # but version 1 was tagged a moment ago to expire in a day: TTL never deletes before the expiry
    assert verify(cf, "e").problems == ["versions missing from history: [1]"]


RETENTIONS = [{"HistoryRetentionVersions": "3"},
              {"HistoryRetentionVersions": "3", "SeparateHistoryTable": "true"},
              {"HistoryRetentionVersions": "3", "HistoryRetentionDays": "1"},
              {"HistoryRetentionDays": "1", "WorkflowType": "EXPRESS", **LOGGED}]


@pytest.mark.parametrize("parameters", RETENTIONS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_with_a_retention_window_only_versions_past_it_and_due_may_be_absent(make_stack, parameters):
    # issue 26.4: with HistoryRetentionVersions=3, six versions, v#4 and v#5 deleted: verify said ok
    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(make_stack(**parameters))
    for i in range(6):
        cf.submit(put(T0 + i, f"c{i}"))
    later = time.time() + 2 * DAY  # every tag that was set has come due (TTL may delete them)
    assert verify(cf, "e").ok and verify(cf, "e", now_s=later).ok
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(4))
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(5))
    # inside the window, or tagged a moment ago to expire in a day: absent only if someone removed them
    moments = (None, later) if "HistoryRetentionVersions" in parameters else (None,)
    for now_s in moments:
        report = verify(cf, "e", now_s=now_s)
        assert report.missing == [4, 5] and "versions missing from history: [4, 5]" in report.problems
    if "HistoryRetentionVersions" not in parameters:  # days only: a day after they were superseded, TTL may
        assert verify(cf, "e", now_s=later).ok       # have taken them


@pytest.mark.parametrize("parameters", RETENTIONS[:1] + RETENTIONS[2:3])
def test_an_expiry_set_early_by_hand_is_a_removal(make_stack, parameters):
    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(make_stack(**parameters))
    for i in range(6):
        cf.submit(put(T0 + i, f"c{i}"))
    cf.dynamodb.update_item(TableName=cf.history_table, Key=key(5), UpdateExpression="SET expiresAt = :t",
                            ExpressionAttributeValues={":t": {"N": "1"}})
    assert verify(cf, "e").missing == [5]


def test_a_version_deleted_before_its_expiry_came_due_is_caught(make_stack):
    # HistoryRetentionVersions=3, HistoryRetentionDays=1: versions 1..3 are tagged to expire in a day
    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="3", HistoryRetentionDays="1"))
    for i in range(6):
        cf.submit(put(T0 + i, f"c{i}"))
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(3))
    assert verify(cf, "e").missing == [3]
    assert verify(cf, "e", now_s=time.time() + 2 * DAY).ok  # after its expiry, TTL may have taken it


def test_verify_and_repair_on_the_command_line(stack, cf, capsys, monkeypatch):
    # the CLI reaches the embedded stack through the same code path as AWS: DescribeStacks on an endpoint
    from changeflow.client import targets

    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    cf.submit(put(T0, "c0"))
    cf.submit(put(T0 + 1, "c1"))
    assert main(["verify", "--all"]) == 0
    assert "e: ok (versions 1..2)" in capsys.readouterr().out
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(2))
    assert main(["verify", "e", "--json"]) == 1
    [report] = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["versions"] == [1]
    assert main(["repair", "e"]) == 0
    assert "repaired: wrote history item of version 2 from v0" in capsys.readouterr().out
    assert main(["verify", "e"]) == 0


def test_an_entity_with_nothing_stored_is_not_found_and_has_no_problems(cf):
    # verify() is also the invariant check of the reliability campaigns, where an entity whose only change
    # was rejected has nothing stored: that is consistent. The CLI says "no such entity" (exit 1).
    report = verify(cf, "never-written")
    assert report.found is False and report.ok and report.versions == [] and report.missing == []
    cf.submit(put(T0, "c0"))
    assert verify(cf, "e").found is True


def test_forged_versions_that_push_real_ones_past_the_window_are_found_by_their_executions(make_stack):
    # the limit of the retention rule (docs/audit.md): with HistoryRetentionVersions=3, versions 4 and 5
    # deleted and versions 7 and 8 forged with correct hashes, the window lets 4 and 5 go as the workflow's
    # own writes would; verify --executions finds the forgeries
    from changeflow.audit.digests import raw_latest
    from changeflow.audit.executions import check_executions
    from changeflow.client import Changeflow
    from changeflow_core import chain, model

    cf = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="3"))
    for i in range(6):
        cf.submit(put(T0 + i, f"c{i}"))
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(4))
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(5))
    assert verify(cf, "e").missing == [4, 5]
    previous = raw_latest(cf, "e")
    for version in (7, 8):
        body = {k: v for k, v in previous.items() if k not in (chain.PREV_HASH, chain.CHAIN_HASH)}
        forged = chain.seal({**body, model.SK: {"S": model.history_sk(version)}, model.VERSION: {"N": str(version)},
                             model.CHANGE_ID: {"S": f"forged-{version}"}}, chain.stored_hash(previous))
        cf.dynamodb.put_item(TableName=cf.history_table, Item=forged)
        previous = forged
    cf.dynamodb.put_item(TableName=cf.table, Item={**previous, model.SK: {"S": model.LATEST_SK}})
    assert verify(cf, "e").ok  # what the table alone cannot tell apart
    problems = check_executions(cf, "e")
    assert [p.split(":")[0] for p in problems] == ["version 7", "version 8"]


def _absences_by_definition(window, kept, recorded_ms, current, now_s):
    """docs/audit.md's rule read literally: version m may be absent only past the window, once the version
    that tagged it (or the newest stored before that) was recorded HistoryRetentionDays ago."""
    from changeflow.audit.retention import CLOCK_SLACK_S

    keep_versions, keep_days = window
    lag = keep_versions if keep_versions > 0 else (1 if keep_days > 0 else None)
    found = []
    for m in range(1, current + 1):
        if m in kept:
            continue
        if lag is None or m > current - lag:
            found.append(m)
            continue
        tagged = max((at for v, at in recorded_ms.items() if v <= m + lag), default=None)
        if tagged is not None and tagged / 1000 + keep_days * DAY > now_s + CLOCK_SLACK_S:
            found.append(m)
    return found


def test_the_retention_rule_is_what_the_docs_say_for_any_history():
    from hypothesis import given, settings, strategies as st

    from changeflow.audit.retention import unexplained_absences

    now = 1_800_000_000

    @settings(max_examples=300, deadline=None)
    @given(st.integers(1, 40), st.sampled_from([0, 1, 3]), st.sampled_from([0, 1, 30]), st.data())
    def check(current, keep_versions, keep_days, data):
        kept = data.draw(st.sets(st.integers(1, current)))
        ages = data.draw(st.lists(st.sampled_from([0, 3_600, 2 * DAY, 40 * DAY]), min_size=current,
                                  max_size=current))
        recorded = {v: (now - ages[v - 1]) * 1000 for v in sorted(kept)}
        now_s = now + data.draw(st.sampled_from([0, 2 * DAY]))
        window = (keep_versions, keep_days)
        assert unexplained_absences(window, kept, recorded, current, now_s) == \
            _absences_by_definition(window, kept, recorded, current, now_s)

    check()
