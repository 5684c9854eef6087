"""Redaction and adoption, on the real ASL (issues 27.5 and 27.3): a redact is a change like any other (its
execution, actor and reason in a new version) that removes one version's content and keeps its hash, so
the chain still verifies and says who redacted what; an adopt binds versions written before the chain,
once, so that stripping the chain is caught afterwards. And what an insider with table access tries
against both: content removed without a redaction, a redaction restored, the chain stripped after an
adoption, a stripped entity passed off as legacy."""

from __future__ import annotations

import json

import pytest

from changeflow.audit import executions
from changeflow.audit.repair import repair
from changeflow.audit.verify import verify
from changeflow_core import chain, model

T0 = 1_767_225_600_000
ENTITY = "customer#9"


def put(at: int, change: str, **attributes) -> dict:
    return {"entityId": ENTITY, "operation": "put", "attributes": attributes, "effectiveAt": at,
            "changeId": change, "actor": "ana@example.com", "reason": "edit"}


def redact(version: int, reason: str | None = "GDPR erasure request #12", **extra) -> dict:
    request = {"entityId": ENTITY, "operation": "redact", "redactVersion": version, "actor": "dpo@example.com",
               **extra}
    return {**request, "reason": reason} if reason is not None else request


def key(version: int | None) -> dict:
    sk = model.LATEST_SK if version is None else model.history_sk(version)
    return {model.PK: {"S": ENTITY}, model.SK: {"S": sk}}


def item(cf, version: int | None) -> dict:
    table = cf.table if version is None else cf.history_table
    return cf.dynamodb.get_item(TableName=table, Key=key(version), ConsistentRead=True).get("Item")


def write(cf, version: int | None, new_item: dict) -> None:
    cf.dynamodb.put_item(TableName=cf.table if version is None else cf.history_table, Item=new_item)


@pytest.fixture
def recorded(cf):
    """Three versions, the second holding data that must be erased."""
    cf.submit(put(T0, "c1", name="Ana", email="ana@example.com"))
    cf.submit(put(T0 + 1, "c2", name="Ana", email="ana@example.com", ssn="123-45-6789"))
    cf.submit(put(T0 + 2, "c3", name="Ana", email="ana@example.com"))
    assert verify(cf, ENTITY).ok
    return cf


# --- redaction --------------------------------------------------------------------------------------------
def test_a_redaction_removes_the_content_keeps_the_chain_and_is_audited_like_any_change(recorded):
    cf = recorded
    execution = cf.submit(redact(2))
    assert execution.status == "SUCCEEDED", execution.cause
    assert execution.output["operation"] == "redact" and execution.output["version"] == 4
    two = item(cf, 2)
    assert not {"name", "email", "ssn"} & set(two) and model.REDACTED in two
    assert chain.hash_text(two[model.REDACTED]["B"]) == chain.redaction_record(
        {**two, **{k: {"S": v} for k, v in {"name": "Ana", "email": "ana@example.com", "ssn": "123-45-6789"}.items()}}
    )["contentHash"]  # the hash kept is the hash of exactly what was removed
    four = item(cf, 4)
    assert four[model.OPERATION] == {"S": "redact"} and four[model.REASON] == {"S": "GDPR erasure request #12"}
    assert four[model.ACTOR] == {"S": "dpo@example.com"} and four[model.EXECUTION] == {"S": execution.arn}
    assert {k: four[k] for k in ("name", "email")} == {"name": {"S": "Ana"}, "email": {"S": "ana@example.com"}}
    assert "ssn" not in json.dumps(str(item(cf, None)))  # v0: the content of version 3, never the redacted one
    report = verify(cf, ENTITY)
    assert report.ok, report.problems
    assert ("version 2 redacted at version 4 by (StartExecution: caller unknown), actor dpo@example.com (claimed): "
            "GDPR erasure request #12") in report.notes
    assert executions.check_executions(cf, ENTITY) == []


def test_redacting_the_current_version_removes_it_from_v0_too(recorded):
    cf = recorded
    cf.submit(put(T0 + 3, "c4", name="Ana", ssn="999-99-9999"))
    assert cf.submit(redact(4)).output["version"] == 5
    latest = item(cf, None)
    assert chain.content_names(latest) == [] and "ssn" not in item(cf, 4)
    assert verify(cf, ENTITY).ok
    seen = cf.entity(ENTITY)
    assert seen["latest"]["attributes"] == {} and seen["versions"][3]["attributes"] == {}
    assert seen["versions"][3]["redacted"] is True and seen["latest"]["redacts"] == 4
    assert "redacted" not in seen["versions"][2] and "redacts" not in seen["versions"][2]


def test_a_redaction_of_a_deleted_entity_keeps_it_deleted(recorded):
    cf = recorded
    cf.submit({"entityId": ENTITY, "operation": "delete", "effectiveAt": T0 + 3, "changeId": "c4"})
    assert cf.submit(redact(2)).output["version"] == 5
    latest = item(cf, None)
    assert latest[model.DELETED] == {"BOOL": True} and model.EXPIRES_AT in latest
    assert verify(cf, ENTITY).ok


def test_a_redaction_is_never_stale(recorded):
    """v0 took effect in the future: a redaction with the default effectiveAt (now) still applies."""
    cf = recorded
    cf.submit(put(4_000_000_000_000, "c4", name="Ana"))
    execution = cf.submit(redact(2))
    assert execution.output["outcome"] == "applied" and item(cf, 5)[model.EFFECTIVE_AT] == {"N": "4000000000000"}


@pytest.mark.parametrize("request_, error, says", [
    (redact(2, reason=None), "ValidationError", "reason"),
    (redact(9), "NotFound", "has no version 9"),
    ({**redact(2), "attributes": {"a": 1}}, "ValidationError", "attributes"),
    ({"entityId": ENTITY, "operation": "put", "attributes": {}, "redactVersion": 2}, "ValidationError",
     "redactVersion"),
])
def test_a_redaction_it_cannot_do_is_refused_by_name_and_writes_nothing(recorded, request_, error, says):
    execution = recorded.submit(request_)
    assert execution.status == "FAILED" and execution.error == error and says in execution.cause
    assert item(recorded, None)[model.VERSION] == {"N": "3"} and item(recorded, 4) is None


def test_a_deletion_or_a_redacted_version_cannot_be_redacted_and_a_redacted_one_not_restored(recorded):
    cf = recorded
    cf.submit(redact(2))
    again = cf.submit(redact(2, changeId="again"))
    assert again.error == "ValidationError" and "redacted already" in again.cause
    back = cf.submit({"entityId": ENTITY, "operation": "rollback", "toVersion": 2, "effectiveAt": T0 + 9})
    assert back.error == "NotFound" and "was redacted" in back.cause
    cf.submit({"entityId": ENTITY, "operation": "delete", "effectiveAt": T0 + 10, "changeId": "del"})
    tomb = cf.submit(redact(5, changeId="tomb"))
    assert tomb.error == "ValidationError" and "is a deletion" in tomb.cause
    assert verify(cf, ENTITY).ok


def test_an_interrupted_redaction_is_reported_and_repair_finishes_it(recorded):
    """Version m written, the history step never removed version n's content (a failed execution): verify
    says so, and repair removes it, as the chain authorises."""
    cf = recorded
    before = item(cf, 2)
    cf.submit(redact(2))
    write(cf, 2, before)
    report = verify(cf, ENTITY)
    assert report.problems == ["version 2: holds content that version 4 redacted (the redaction did not finish: "
                               "`changeflow repair` finishes it; or the content was restored)"]
    done, cannot = repair(cf, ENTITY)
    assert done == ["removed the content of version 2, as version 4 redacted it"] and cannot == []
    assert "ssn" not in item(cf, 2) and verify(cf, ENTITY).ok


# --- what an insider tries ----------------------------------------------------------------------------------
def test_content_removed_without_a_redaction_is_caught(recorded):
    write(recorded, 2, chain.redacted_form(item(recorded, 2)))
    assert verify(recorded, ENTITY).problems == ["version 2: its content was removed without a redaction version"]


def test_a_redaction_pointed_at_another_version_is_caught(recorded):
    cf = recorded
    cf.submit(redact(2))
    four = item(cf, 4)
    record = dict(four[model.REDACTION]["M"], version={"N": "1"})
    write(cf, 4, {**four, model.REDACTION: {"M": record}})
    problems = verify(cf, ENTITY).problems
    assert problems and problems[0].startswith("version 4:")


def test_redact_then_restore_is_caught(recorded):
    cf = recorded
    original = item(cf, 2)
    cf.submit(redact(2))
    write(cf, 2, {**original})
    assert verify(cf, ENTITY).problems[0].startswith("version 2: holds content that version 4 redacted")


# --- adoption of versions written before the chain --------------------------------------------------------
def unchain(cf, version: int | None) -> None:
    """Make an item look as changeflow wrote it before the chain: no chain attributes."""
    cf.dynamodb.update_item(TableName=cf.table if version is None else cf.history_table, Key=key(version),
                            UpdateExpression="REMOVE prevHash, chainHash")


@pytest.fixture
def legacy(recorded):
    """The same three versions, as a table written before the chain holds them."""
    for version in (1, 2, 3, None):
        unchain(recorded, version)
    return recorded


def test_legacy_versions_fail_verify_until_adopted_once_then_stripping_is_caught(legacy):
    cf = legacy
    report = verify(cf, ENTITY)
    assert report.problems == ["versions 1..3: no chain hash (written before the chain, or chain attributes "
                               "removed); `changeflow adopt` binds versions written before the chain, once"]
    execution = cf.submit({"entityId": ENTITY, "operation": "adopt", "actor": "ops@example.com",
                           "reason": "upgrade to the chain"})
    assert execution.status == "SUCCEEDED" and execution.output["version"] == 4
    four = item(cf, 4)
    assert four[model.ADOPTION]["M"]["versions"] == {"N": "3"} and four[model.OPERATION] == {"S": "adopt"}
    report = verify(cf, ENTITY)
    assert report.ok and "versions 1..3 (written before the chain) adopted at version 4" in report.notes
    again = cf.submit({"entityId": ENTITY, "operation": "adopt", "changeId": "again"})
    assert again.error == "ValidationError" and "adopted at version 4 already" in again.cause
    cf.submit(put(T0 + 5, "c5", name="Bo"))
    assert verify(cf, ENTITY).ok
    # after the adoption: a legacy version altered, then the chain stripped from a later version
    cf.dynamodb.update_item(TableName=cf.history_table, Key=key(2), UpdateExpression="SET ssn = :x",
                            ExpressionAttributeValues={":x": {"S": "000"}})
    assert verify(cf, ENTITY).problems[0].startswith("version 1: versions 1..3, adopted at version 4, changed")
    cf.dynamodb.update_item(TableName=cf.history_table, Key=key(2), UpdateExpression="SET ssn = :x",
                            ExpressionAttributeValues={":x": {"S": "123-45-6789"}})
    unchain(cf, 5)
    assert verify(cf, ENTITY).problems[0].startswith("version 5: has no chain hash")


def test_a_stripped_entity_cannot_be_passed_off_as_legacy(recorded):
    """The chain stripped from version 2 only: adopt refuses (unchained versions after chained ones)."""
    cf = recorded
    unchain(cf, 2)
    execution = cf.submit({"entityId": ENTITY, "operation": "adopt"})
    assert execution.error == "ValidationError" and "chain attributes were removed" in execution.cause
    assert not verify(cf, ENTITY).ok


def test_legacy_versions_with_one_missing_cannot_be_adopted(legacy):
    """An insider deletes legacy version 1 before the adoption: adopt refuses to bind 2..3 as if they were the
    whole history, writes nothing, and verify still reports the entity."""
    cf = legacy
    cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(1))
    before = cf.dynamodb.scan(TableName=cf.history_table)["Items"]
    execution = cf.submit({"entityId": ENTITY, "operation": "adopt", "changeId": "adopt-2-3"})
    assert execution.error == "ValidationError" and "are not 1..3 (some are missing or expired)" in execution.cause
    assert cf.dynamodb.scan(TableName=cf.history_table)["Items"] == before
    assert item(cf, None)[model.VERSION] == {"N": "3"}
    assert not verify(cf, ENTITY).ok


def test_legacy_versions_can_be_redacted_once_adopted(legacy):
    cf = legacy
    cf.submit({"entityId": ENTITY, "operation": "adopt"})
    cf.submit(redact(2))
    report = verify(cf, ENTITY)
    assert report.ok, report.problems
    assert any(n.startswith("version 2 redacted at version 5") for n in report.notes)


def test_an_upgrade_with_traffic_before_the_adoption(legacy):
    """Deployed, written to, then adopted: the legacy prefix and the chained versions both verify."""
    cf = legacy
    cf.submit(put(T0 + 5, "c4", name="Bo"))
    assert verify(cf, ENTITY).problems[0].startswith("versions 1..3: no chain hash")
    cf.submit({"entityId": ENTITY, "operation": "adopt"})
    assert verify(cf, ENTITY).ok


# --- the command line -------------------------------------------------------------------------------------
def test_on_the_command_line(legacy, capsys, monkeypatch):
    from changeflow import cli
    from changeflow.client import targets

    monkeypatch.setattr(targets, "client_for", lambda args: legacy)
    assert cli.main(["verify", ENTITY]) == 1
    assert cli.main(["adopt", "--all", "--reason", "upgrade"]) == 0
    assert cli.main(["adopt", "--all"]) == 0
    assert "nothing to adopt" in capsys.readouterr().out
    assert cli.main(["redact", ENTITY, "2", "--reason", "erasure", "--actor", "dpo@example.com"]) == 0
    capsys.readouterr()
    # the same command again is the same change (one change id per redaction): a duplicate, no second version
    assert cli.main(["redact", ENTITY, "2", "--reason", "erasure", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["output"]["outcome"] == "duplicate"
    assert cli.main(["verify", ENTITY]) == 0
    out = capsys.readouterr().out
    assert "version 2 redacted at version 5 by (StartExecution: caller unknown), actor dpo@example.com (claimed)" in out
    assert "versions 1..3 (written before the chain) adopted at version 4" in out
    assert cli.main(["versions", ENTITY]) == 0 and cli.main(["versions", ENTITY, "--json"]) == 0
    shown = capsys.readouterr().out
    assert '"redacted": true' in shown and '"redacts": 2' in shown and "123-45-6789" not in shown


# --- the formats on the stack (issue 22.6) ------------------------------------------------------------------
def chain_bytes(found: dict) -> int:
    from changeflow_core import codec

    return codec.item_size(found) - codec.item_size({k: v for k, v in found.items()
                                                     if k not in (model.PREV_HASH, model.CHAIN_HASH)})


def test_the_writers_store_41_chain_bytes_without_a_retention_window(cf):
    cf.submit(put(T0, "c1", name="Ana"))
    one, latest = item(cf, 1), item(cf, None)
    assert "B" in one[model.CHAIN_HASH] and model.PREV_HASH not in one
    assert chain_bytes(one) == chain_bytes(latest) == 41


def test_under_a_retention_window_they_keep_prevhash_too_81_bytes(make_stack):
    from changeflow.client import Changeflow

    kept = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="2"))
    kept.submit(put(T0, "c1", name="Ana"))
    kept.submit(put(T0 + 1, "c2", name="Bo"))
    two = item(kept, 2)
    assert chain_bytes(two) == 81 and chain.stored_prev(two) == chain.stored_hash(item(kept, 1))
    assert verify(kept, ENTITY).ok
    for n in range(3, 6):  # versions 1..3 leave the window and expire: version 4's prevHash anchors the chain
        kept.submit(put(T0 + n, f"c{n}", name=f"v{n}"))
    report = verify(kept, ENTITY, now_s=2**40)
    assert report.ok and report.versions[0] == 4, (report.versions, report.problems)
    kept.dynamodb.update_item(TableName=kept.history_table, Key=key(4), UpdateExpression="SET #n = :x",
                              ExpressionAttributeNames={"#n": "name"}, ExpressionAttributeValues={":x": {"S": "x"}})
    assert verify(kept, ENTITY, now_s=2**40).problems[0].startswith("version 4:")  # the oldest kept is checked too


def test_an_entity_written_in_format_1_goes_on_in_format_2_and_verifies(cf):
    """Items as changeflow wrote them before format 2 (hex prevHash and chainHash), then a change through
    today's workflow: the new version chains from the old hex hash, and every version verifies."""
    cf.submit(put(T0, "c1", name="Ana"))
    cf.submit(put(T0 + 1, "c2", name="Ana", ssn="1"))
    prev = chain.genesis(ENTITY)
    for version in (1, 2):
        old = chain.seal_v1(item(cf, version), prev)
        write(cf, version, old)
        prev = chain.stored_hash(old)
    write(cf, None, {**old, model.SK: {"S": model.LATEST_SK}})
    assert verify(cf, ENTITY).ok
    cf.submit(put(T0 + 2, "c3", name="Bo"))
    assert chain.format_of(item(cf, 3)) == chain.FORMAT_2 and chain.format_of(item(cf, 2)) == chain.FORMAT_1
    assert verify(cf, ENTITY).ok
    cf.submit(redact(2))  # a format-1 version redacted: checked through its redaction record
    assert "ssn" not in item(cf, 2)
    report = verify(cf, ENTITY)
    assert report.ok and any(n.startswith("version 2 redacted at version 4") for n in report.notes)
    cf.dynamodb.update_item(TableName=cf.history_table, Key=key(2), UpdateExpression="SET actor = :x",
                            ExpressionAttributeValues={":x": {"S": "mallory"}})
    assert verify(cf, ENTITY).problems[0].startswith("version 2: is not the version that version 4 redacted")


def test_once_adoption_is_closed_an_entity_stripped_whole_cannot_be_laundered(legacy, capsys, monkeypatch):
    """`adopt --all --close` records in the table that every entity is adopted: an entity stripped whole
    afterwards is reported as stripped, and adopt refuses to bind it again."""
    from changeflow import cli
    from changeflow.client import targets

    cf = legacy
    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    assert cli.main(["adopt", ENTITY, "--close"]) == 2  # the whole table or nothing
    assert cli.main(["adopt", "--all", "--close"]) == 0
    assert "adoption closed at" in capsys.readouterr().out
    assert verify(cf, ENTITY).ok
    from changeflow.audit.verify import entities
    assert entities(cf) == [ENTITY]  # the table's record is not an entity
    for version in (1, 2, 3, 4, None):
        unchain(cf, version)
    problems = verify(cf, ENTITY).problems
    assert problems and "(chain attributes removed: adoption was closed at" in problems[0]
    again = cf.submit({"entityId": ENTITY, "operation": "adopt", "changeId": "launder"})
    assert again.error == "ValidationError" and "adoption was closed" in again.cause
    capsys.readouterr()
    assert cli.main(["adopt", ENTITY]) == 1
    assert "adoption was closed at" in capsys.readouterr().out


def test_a_digest_taken_before_a_redaction_still_proves_everything_after_it(recorded):
    """The redaction keeps each hash, so what a digest recorded before it is still proven; altering the
    redacted item afterwards is not."""
    from changeflow.audit import digests

    cf = recorded
    taken = digests.digest(cf, [ENTITY])
    cf.submit(redact(3))  # the head the digest recorded
    assert digests.verify_since(cf, taken) == {}
    cf.dynamodb.update_item(TableName=cf.history_table, Key=key(3), UpdateExpression="SET actor = :x",
                            ExpressionAttributeValues={":x": {"S": "mallory"}})
    assert digests.verify_since(cf, taken)[ENTITY][0].startswith("version 3:")
