"""Issue 32 items 9 and 10: an adoption cannot be undone or rewritten unseen.

9. `adopt --close` could be undone: an insider rewrites version 1, strips every chain attribute, deletes the
   close marker and adopts again; `verify` and `verify --executions` then said ok.
10. An adopted version written before the chain, inside a retention window whose oldest versions expired,
   could be rewritten: `verify` passed with a note ("no longer recomputed"), and `verify --since-digest`
   said nothing recorded before the digest had changed.

What holds now (docs/audit.md, adoption): a version of the chain's own operations (adopt, redact) is never
written without the chain, so one without chain attributes was stripped: verify says so and adopt refuses to
bind it; `verify --executions` compares each version's operation with its execution's; a stack deployed with
`ChainAdoptionClosed=true` refuses every adoption and reports every unchained version as stripped, whatever
the table says. Under a retention window the adoption anchors each adopted version (the recomputed chain's
hash before it), as `prevHash` anchors a chained one, so the versions kept are recomputed after the oldest
expire. Run on the real ASL.
"""

from __future__ import annotations

import json

import pytest

from changeflow.audit import executions
from changeflow.audit.verify import verify
from changeflow.client import Changeflow
from changeflow_core import model

T0 = 1_767_225_600_000
ENTITY = "customer#9"
CHAIN = ("prevHash", "chainHash", "chainAdopts", "chainAdoptedPrev")


def put(at, change, **attributes):
    return {"entityId": ENTITY, "operation": "put", "attributes": attributes, "effectiveAt": at, "changeId": change}


def key(version):
    return {"pk": {"S": ENTITY}, "sk": {"S": "v0" if version is None else f"v#{version:010d}"}}


def table_of(cf, version):
    return cf.table if version is None else cf.history_table


def strip(cf, version, *names):
    cf.dynamodb.update_item(TableName=table_of(cf, version), Key=key(version),
                            UpdateExpression="REMOVE " + ", ".join(f"#{i}" for i, _ in enumerate(names or CHAIN)),
                            ExpressionAttributeNames={f"#{i}": n for i, n in enumerate(names or CHAIN)})


def set_attribute(cf, version, name, value):
    cf.dynamodb.update_item(TableName=table_of(cf, version), Key=key(version), UpdateExpression="SET #n = :v",
                            ExpressionAttributeNames={"#n": name}, ExpressionAttributeValues={":v": value})


def legacy_entity(cf, versions=3):
    """``versions`` versions as a table written before the chain holds them (no chain attributes)."""
    for n in range(1, versions + 1):
        cf.submit(put(T0 + n, f"c{n}", name="Ana", n=n, **({"ssn": "123-45-6789"} if n == 2 else {})))
    for version in [*range(1, versions + 1), None]:
        strip(cf, version, "prevHash", "chainHash")


def cli(cf, monkeypatch, *args):
    from changeflow import cli as command_line
    from changeflow.client import targets

    monkeypatch.setattr(targets, "client_for", lambda parsed: cf)
    return command_line.main(list(args))


def undo_the_close(cf, relabel=False):
    """The insider: version 1 rewritten, every chain attribute stripped, the close marker deleted."""
    set_attribute(cf, 1, "name", {"S": "Mallory"})
    versions = [int(i["version"]["N"]) for i in cf.dynamodb.scan(TableName=cf.history_table)["Items"]
                if i["pk"]["S"] == ENTITY]
    for version in [*versions, None]:
        strip(cf, version)
        if relabel:  # the adopt version passed off as a put
            found = cf.dynamodb.get_item(TableName=table_of(cf, version), Key=key(version))["Item"]
            if found["operation"]["S"] == "adopt":
                set_attribute(cf, version, "operation", {"S": "put"})
    cf.dynamodb.delete_item(TableName=cf.table, Key={"pk": {"S": model.TABLE_PK},
                                                     "sk": {"S": model.ADOPTION_CLOSED_SK}})


# --- item 9 -----------------------------------------------------------------------------------------------
def test_an_undone_close_is_caught_by_verify_and_the_re_adoption_is_refused(cf, monkeypatch, capsys):
    legacy_entity(cf)
    assert cli(cf, monkeypatch, "adopt", "--all", "--close") == 0
    cf.submit(put(T0 + 9, "c5", name="Bo"))
    undo_the_close(cf)
    # THEN verify names the stripped adopt version (before: it passed once re-adopted)
    problems = verify(cf, ENTITY).problems
    assert any("version 4: an adopt version without chain attributes" in p for p in problems), problems
    # AND adopting again is refused by name: the entity was adopted, its chain stripped
    again = cf.submit({"entityId": ENTITY, "operation": "adopt", "changeId": "launder"})
    assert (again.status, again.error) == ("FAILED", "ValidationError") and "version 4" in again.cause
    assert cli(cf, monkeypatch, "verify", ENTITY) == 1 and cli(cf, monkeypatch, "verify", ENTITY, "--executions") == 1
    assert "version 4: an adopt version without chain attributes" in capsys.readouterr().out


def test_an_adopt_version_relabelled_before_the_re_adoption_is_caught_by_its_execution(cf, monkeypatch, capsys):
    legacy_entity(cf)
    assert cli(cf, monkeypatch, "adopt", "--all", "--close") == 0
    cf.submit(put(T0 + 9, "c5", name="Bo"))
    undo_the_close(cf, relabel=True)
    assert cf.submit({"entityId": ENTITY, "operation": "adopt", "changeId": "launder"}).status == "SUCCEEDED"
    # the table alone is consistent again; the execution that wrote version 4 says it was an adopt
    problems = executions.check_executions(cf, ENTITY)
    assert any(p.startswith("version 4: its execution reports") and "adopt" in p for p in problems), problems
    assert cli(cf, monkeypatch, "verify", ENTITY, "--executions") == 1


def test_a_stack_deployed_with_adoption_closed_refuses_it_and_reports_any_unchained_version(make_stack,
                                                                                                monkeypatch):
    # GIVEN the upgrade done (adopted), then the stack deployed with ChainAdoptionClosed=true
    stack = make_stack(ChainAdoptionClosed="true")
    cf = Changeflow.for_embedded(stack)
    cf.submit(put(T0, "c1", name="Ana"))
    cf.submit(put(T0 + 1, "c2", name="Ana", ssn="123-45-6789"))
    # WHEN an insider strips the whole entity, rewrites it and tries to adopt it (no marker to delete)
    set_attribute(cf, 1, "name", {"S": "Mallory"})
    for version in (1, 2, None):
        strip(cf, version)
    again = cf.submit({"entityId": ENTITY, "operation": "adopt", "changeId": "launder"})
    assert (again.status, again.error) == ("FAILED", "ValidationError") and "ChainAdoptionClosed" in again.cause
    problems = verify(cf, ENTITY).problems
    assert problems and "chain attributes removed: adoption is closed for this stack" in problems[0], problems
    assert cli(cf, monkeypatch, "adopt", ENTITY) == 1


def test_verify_executions_compares_the_operation(cf):
    cf.submit(put(T0, "c1", name="Ana"))
    cf.submit({"entityId": ENTITY, "operation": "delete", "effectiveAt": T0 + 1, "changeId": "c2"})
    set_attribute(cf, 2, "operation", {"S": "put"})  # the chain catches this too; the execution says it alone
    problems = executions.check_executions(cf, ENTITY)
    assert problems == [f"version 2: its execution reports ({ENTITY!r}, 2, 'c2', 'delete'), not "
                        f"({ENTITY!r}, 2, 'c2', 'put')"], problems


# --- item 10 ----------------------------------------------------------------------------------------------
@pytest.fixture
def windowed(make_stack):
    """Three legacy versions adopted at version 4, on a stack that keeps three versions: version 1 expired
    as version 4 was written, and TTL deleted it; version 2 is the oldest kept."""
    cf = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="3"))
    legacy_entity(cf)
    assert cf.submit({"entityId": ENTITY, "operation": "adopt"}).output["version"] == 4
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(1))  # TTL deleted the expired version 1
    return cf


def test_an_adopted_version_kept_after_the_oldest_expired_is_still_recomputed(windowed):
    cf = windowed
    report = verify(cf, ENTITY)
    assert report.ok, report.problems
    # WHEN an insider rewrites version 2 (adopted, inside the window)
    set_attribute(cf, 2, "ssn", {"S": "000-00-0000"})
    # THEN verify names it (before: it passed, noting the adopted versions were no longer recomputed)
    problems = verify(cf, ENTITY).problems
    assert problems and problems[0].startswith("version 2:") and "adopted at version 4, changed since" in problems[0]


def test_verify_since_digest_catches_the_rewrite_too(windowed, tmp_path):
    from changeflow.audit import digests

    cf = windowed
    taken = digests.digest(cf, [ENTITY])
    (tmp_path / "d.json").write_text(json.dumps(taken))
    set_attribute(cf, 3, "name", {"S": "Mallory"})
    problems = digests.verify_since(cf, json.loads((tmp_path / "d.json").read_text())).get(ENTITY, [])
    assert any("versions 2..3" in p and "changed since" in p for p in problems), problems
