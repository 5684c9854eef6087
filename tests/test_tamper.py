"""The tamper suite: an insider with table access (dynamodb:PutItem/UpdateItem/DeleteItem, nothing else)
alters recorded history directly with boto3, in every way an auditor must catch. ``changeflow verify``
names the version; a digest taken before the tampering proves even a tampering that recomputed every hash;
the executionArn check catches a forged version; and ``repair`` never "repairs" a broken chain."""

from __future__ import annotations

import json

import pytest

from changeflow.audit import digests, executions
from changeflow.audit.repair import repair
from changeflow.audit.verify import verify
from changeflow_core import chain, model

T0 = 1_767_225_600_000
ENTITY = "doc#7"
TAMPERINGS: list[str] = []  # docs/audit.md's count: every tampering this suite tries


def put(at: int, change: str, **attributes) -> dict:
    return {"entityId": ENTITY, "operation": "put", "attributes": attributes, "effectiveAt": at,
            "changeId": change, "actor": "ana@example.com", "reason": "edit"}


@pytest.fixture
def recorded(cf):
    """Four versions written by the workflow: three puts and a rollback."""
    cf.submit(put(T0, "c1", title="one", n=1))
    cf.submit(put(T0 + 1, "c2", title="two", n=2))
    cf.submit(put(T0 + 2, "c3", title="three", n=3))
    cf.submit({"entityId": ENTITY, "operation": "rollback", "toVersion": 1, "effectiveAt": T0 + 3, "changeId": "c4"})
    assert verify(cf, ENTITY).ok
    return cf


def key(version: int | None) -> dict:
    sk = model.LATEST_SK if version is None else model.history_sk(version)
    return {model.PK: {"S": ENTITY}, model.SK: {"S": sk}}


def item(cf, version: int | None) -> dict:
    table = cf.table if version is None else cf.history_table
    return cf.dynamodb.get_item(TableName=table, Key=key(version), ConsistentRead=True)["Item"]


def write(cf, version: int | None, new_item: dict) -> None:
    cf.dynamodb.put_item(TableName=cf.table if version is None else cf.history_table, Item=new_item)


def set_attribute(name: str, value: dict, version: int | None = 2):
    def tamper(cf):
        cf.dynamodb.update_item(TableName=cf.table if version is None else cf.history_table, Key=key(version),
                                UpdateExpression="SET #a = :v", ExpressionAttributeNames={"#a": name},
                                ExpressionAttributeValues={":v": value})
    return tamper


def delete_version(version: int):
    def tamper(cf):
        cf.dynamodb.delete_item(TableName=cf.history_table, Key=key(version))
    return tamper


def swap_versions(cf):
    two, three = item(cf, 2), item(cf, 3)
    write(cf, 2, {**three, model.SK: {"S": model.history_sk(2)}, model.VERSION: {"N": "2"}})
    write(cf, 3, {**two, model.SK: {"S": model.history_sk(3)}, model.VERSION: {"N": "3"}})


def rewrite_v0(cf):
    write(cf, None, {**item(cf, None), "title": {"S": "rewritten"}})


def append_naive_forgery(cf):
    """A fifth version made by copying the fourth: the forger does not know the chain."""
    forged = {**item(cf, 4), model.SK: {"S": model.history_sk(5)}, model.VERSION: {"N": "5"},
              "title": {"S": "forged"}, model.CHANGE_ID: {"S": "c-forged"}}
    write(cf, 5, forged)
    write(cf, None, {**forged, model.SK: {"S": model.LATEST_SK}})


def strip_chain(cf):
    cf.dynamodb.update_item(TableName=cf.history_table, Key=key(2), UpdateExpression="REMOVE prevHash, chainHash")


CASES = {
    "content attribute changed": (set_attribute("title", {"S": "altered"}), "version 2:"),
    "number changed in its last digit": (set_attribute("n", {"N": "2.0000000000000000000000000000000000001"}),
                                         "version 2:"),
    "attribute added": (set_attribute("extra", {"BOOL": True}), "version 2:"),
    "actor changed": (set_attribute(model.ACTOR, {"S": "mallory@example.com"}), "version 2:"),
    "reason changed": (set_attribute(model.REASON, {"S": "nothing to see"}), "version 2:"),
    "effectiveAt changed": (set_attribute(model.EFFECTIVE_AT, {"N": str(T0 + 1000)}), "version 2:"),
    "recordedAt changed": (set_attribute(model.RECORDED_AT, {"N": "1"}), "version 2:"),
    "executionArn changed": (set_attribute(model.EXECUTION, {"S": "arn:aws:states:::execution:x:y"}), "version 2:"),
    "operation changed": (set_attribute(model.OPERATION, {"S": "delete"}), "version 2:"),
    "changeId changed": (set_attribute(model.CHANGE_ID, {"S": "other"}), "version 2:"),
    "marked deleted": (set_attribute(model.DELETED, {"BOOL": True}), "version 2:"),
    "rollback source changed": (set_attribute(model.SOURCE_VERSION, {"N": "2"}, version=4), "version 4:"),
    "chain attributes removed": (strip_chain, "version 2:"),
    "a version deleted": (delete_version(2), "version 3:"),
    "the first version deleted": (delete_version(1), "version 2:"),
    "two versions swapped": (swap_versions, "version 2:"),
    "v0 rewritten": (rewrite_v0, "v0 (version 4)"),
    "v0's actor changed": (set_attribute(model.ACTOR, {"S": "mallory@example.com"}, version=None), "v0 (version 4)"),
    # the principal AWS authenticated (issue 21): rewritten, or pinned on someone else
    "principal rewritten": (set_attribute(model.PRINCIPAL, {"M": {
        "via": {"S": "api"}, "arn": {"S": "arn:aws:iam::123456789012:user/cfo"},
        "accountId": {"S": "123456789012"}, "caller": {"S": "AIDACFO"}}}), "version 2:"),
    "principal removed": (lambda cf: cf.dynamodb.update_item(
        TableName=cf.history_table, Key=key(2), UpdateExpression="REMOVE principal"), "version 2:"),
    "v0's principal rewritten": (set_attribute(model.PRINCIPAL, {"M": {"via": {"S": "events"}}}, version=None),
                                 "v0 (version 4)"),
    "a forged version appended": (append_naive_forgery, "version 5:"),
    # the time indexes' keys (issue 37), which the chain does not hash: what a version records of the one before
    "effective index key moved": (set_attribute(model.PRIOR_EFFECTIVE, {"N": str(model.prior_key(T0 + 5, 1))}),
                                  "version 2:"),
    "recorded index key moved": (set_attribute(model.PRIOR_RECORDED, {"N": str(model.prior_key(1, 2))}, version=3),
                                 "version 3:"),
}
TAMPERINGS.extend(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_names_the_version_that_was_tampered_with(recorded, case, capsys):
    tamper, named = CASES[case]
    tamper(recorded)
    report = verify(recorded, ENTITY)
    assert not report.ok
    assert any(p.startswith(named) for p in report.problems), report.problems
    # repair never "repairs" a broken chain: it reports it
    done, cannot = repair(recorded, ENTITY)
    assert any(p.startswith(named) for p in cannot)
    assert verify(recorded, ENTITY).problems == report.problems


def recompute_chain_from(cf, first: int) -> None:
    """The insider who knows the chain: after altering version ``first``, every later link and v0 are
    recomputed, so the chain is consistent again."""
    history = digests.raw_history(cf, ENTITY)
    prev = chain.genesis(ENTITY)
    for stored in history:
        version = int(stored[model.VERSION]["N"])
        if version >= first:
            resealed = chain.seal(stored, prev)
            write(cf, version, resealed)
            stored = resealed
        prev = chain.stored_hash(stored)
    newest = digests.raw_history(cf, ENTITY)[-1]
    write(cf, None, {**newest, model.SK: {"S": model.LATEST_SK}})


def test_a_digest_proves_even_a_tampering_that_recomputed_every_hash(recorded):
    TAMPERINGS.append("history rewritten with every hash recomputed, against a digest")
    taken = digests.digest(recorded, [ENTITY])
    assert digests.verify_since(recorded, taken) == {}
    set_attribute("title", {"S": "altered"})(recorded)
    recompute_chain_from(recorded, 2)
    assert verify(recorded, ENTITY).ok  # the chain alone is consistent again: this is what digests are for
    problems = digests.verify_since(recorded, taken)[ENTITY]
    assert problems == ["version 4 no longer has the hash the digest recorded: it was rewritten"]


def test_the_newest_version_removed_with_v0_put_back_is_caught_only_against_a_digest(recorded):
    """An insider deletes the newest history item and writes `v0` back as the version before it (with its
    changes index keys): no hash is recomputed, and what is left is a chain that holds from version 1 to
    its end. Neither the chain nor each version's execution can tell (docs/audit.md); a digest taken
    before it says which versions were removed."""
    TAMPERINGS.append("the newest version removed and v0 put back to the one before, against a digest")
    taken = digests.digest(recorded, [ENTITY])
    three = item(recorded, 3)
    recorded.dynamodb.delete_item(TableName=recorded.history_table, Key=key(4))
    write(recorded, None, {**three, model.SK: {"S": model.LATEST_SK}, **{k: {"N": str(v)} for k, v in
                           model.changes_index_keys(ENTITY, int(three[model.RECORDED_AT]["N"])).items()}})
    assert verify(recorded, ENTITY).ok and executions.check_executions(recorded, ENTITY) == []
    assert digests.verify_since(recorded, taken) == {ENTITY: [
        "the entity is at version 3, before version 4 the digest recorded: versions were removed"]}


def test_an_altered_digest_file_is_detected(recorded):
    TAMPERINGS.append("the digest file altered")
    taken = digests.digest(recorded, [ENTITY])
    taken["entities"][0]["version"] = 3
    assert "(digest)" in digests.verify_since(recorded, taken)


def test_a_forged_version_with_a_correct_hash_is_caught_by_its_execution(recorded):
    TAMPERINGS.append("a forged version appended with a correct hash")
    latest = item(recorded, None)
    body = {k: v for k, v in latest.items() if k != model.SOURCE_VERSION}
    forged = chain.seal({**body, model.SK: {"S": model.history_sk(5)}, model.VERSION: {"N": "5"},
                         model.OPERATION: {"S": "put"}, "title": {"S": "forged"},
                         model.CHANGE_ID: {"S": "c-forged"}, model.RECORDED_AT: {"N": str(2 * 10**12)}},
                        chain.stored_hash(latest))
    write(recorded, 5, forged)
    write(recorded, None, {**forged, model.SK: {"S": model.LATEST_SK},  # v0 with the changes index's keys of its
                           **{k: {"N": str(v)} for k, v in  # recordedAt: a forger who read the design
                              model.changes_index_keys(ENTITY, 2 * 10**12).items()}})
    assert verify(recorded, ENTITY).ok  # a consistent chain...
    problems = executions.check_executions(recorded, ENTITY)
    assert problems and problems[0].startswith("version 5: its execution reports")  # ...that no execution wrote


def test_every_version_the_workflow_wrote_is_vouched_for_by_its_execution(recorded):
    assert executions.check_executions(recorded, ENTITY) == []


def test_on_the_command_line_a_digest_kept_elsewhere_proves_what_changed_since(recorded, tmp_path, capsys, monkeypatch):
    """What an auditor runs: `changeflow digest --all --output FILE`, the file kept outside the account,
    then `changeflow verify --all --since-digest FILE` (exit 1 and the entity named once anything changed)."""
    from changeflow import cli
    from changeflow.client import targets

    monkeypatch.setattr(targets, "client_for", lambda args: recorded)
    kept = tmp_path / "digest.json"
    assert cli.main(["digest", "--all", "--output", str(kept)]) == 0
    taken = json.loads(kept.read_text(encoding="utf-8"))
    assert taken["format"] == chain.DIGEST_FORMAT and taken["entities"][0]["entityId"] == ENTITY
    assert taken["root"] == chain.merkle_root(taken["entities"]) and taken["takenAt"]
    capsys.readouterr()
    assert cli.main(["verify", "--all", "--since-digest", str(kept)]) == 0
    assert "nothing recorded before it has changed" in capsys.readouterr().out
    # a new change after the digest is not a change to what the digest recorded
    recorded.submit(put(T0 + 10, "c5", title="five", n=5))
    assert cli.main(["verify", "--all", "--since-digest", str(kept)]) == 0
    capsys.readouterr()
    set_attribute("title", {"S": "altered"})(recorded)
    recompute_chain_from(recorded, 2)
    assert cli.main(["verify", ENTITY, "--since-digest", str(kept), "--json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["ok"] is False and answer["problems"][ENTITY][0].startswith("version 4 no longer has the hash")
    assert cli.main(["verify", ENTITY, "--executions"]) == 0  # the chain and executions hold: only the digest knows


def test_on_the_command_line_verify_executions_names_a_forged_version(recorded, capsys, monkeypatch):
    from changeflow import cli
    from changeflow.client import targets

    monkeypatch.setattr(targets, "client_for", lambda args: recorded)
    latest = item(recorded, None)
    body = {k: v for k, v in latest.items() if k != model.SOURCE_VERSION}
    forged = chain.seal({**body, model.SK: {"S": model.history_sk(5)}, model.VERSION: {"N": "5"},
                         model.OPERATION: {"S": "put"}, model.CHANGE_ID: {"S": "c-forged"},
                         model.RECORDED_AT: {"N": str(2 * 10**12)}}, chain.stored_hash(latest))
    write(recorded, 5, forged)
    write(recorded, None, {**forged, model.SK: {"S": model.LATEST_SK},  # and the changes index's keys, as above
                           **{k: {"N": str(v)} for k, v in model.changes_index_keys(ENTITY, 2 * 10**12).items()}})
    assert cli.main(["verify", ENTITY]) == 0
    capsys.readouterr()
    assert cli.main(["verify", ENTITY, "--executions"]) == 1
    assert "version 5: its execution reports" in capsys.readouterr().out


# --- field clocks (issue 34): each field's effective time, sealed in the chain ---------------------------
@pytest.fixture
def merged(cf):
    """Three versions: a put at T0, a patch of n at T0 + 20, and a late patch at T0 + 10 of title and n (n
    superseded): version 2 and 3 carry field clocks."""
    cf.submit(put(T0, "c1", title="one", n=1))
    cf.submit({"entityId": ENTITY, "operation": "patch", "set": {"n": 2}, "effectiveAt": T0 + 20, "changeId": "c2"})
    late = cf.submit({"entityId": ENTITY, "operation": "patch", "set": {"title": "late", "n": 3},
                      "effectiveAt": T0 + 10, "changeId": "c3"})
    assert late.output["superseded"] == ["n"]
    assert model.FIELD_CLOCKS in item(cf, 3) and model.FIELD_CLOCK_BASE in item(cf, 2)
    assert verify(cf, ENTITY).ok
    return cf


CLOCK_CASES = {
    # a field's time moved, so that an older patch would now overwrite it (or a newer one be refused)
    "a field clock changed": (set_attribute(model.FIELD_CLOCKS, {"M": {"title": {"N": "0"}}}, version=3), "version 3:"),
    "a field clock added to a put": (set_attribute(model.FIELD_CLOCKS, {"M": {"n": {"N": "5"}}}, version=1),
                                     "version 1:"),
    "the clock base removed": (lambda cf: cf.dynamodb.update_item(
        TableName=cf.history_table, Key=key(2), UpdateExpression="REMOVE fieldClockBase"), "version 2:"),
    "v0's field clocks changed": (set_attribute(model.FIELD_CLOCKS, {"M": {"title": {"N": "20"}}}, version=None),
                                  "v0 (version 3)"),
    "a superseded field hidden": (set_attribute(model.PATCH_RECORD, {"M": {
        "set": {"M": {"title": {"S": "late"}, "n": {"N": "3"}}}, "remove": {"L": []}}}, version=3), "version 3:"),
}
TAMPERINGS.extend(CLOCK_CASES)


@pytest.mark.parametrize("case", sorted(CLOCK_CASES))
def test_verify_names_the_version_whose_field_clocks_were_tampered_with(merged, case):
    tamper, named = CLOCK_CASES[case]
    tamper(merged)
    report = verify(merged, ENTITY)
    assert any(p.startswith(named) for p in report.problems), report.problems


RESEALED = {
    "a field clock changed, every hash recomputed": (
        {model.FIELD_CLOCKS: {"M": {"title": {"N": "0"}}}}, "version 3: its field clocks are not version 2's"),
    "a superseded field hidden, every hash recomputed": (
        {model.PATCH_RECORD: {"M": {"set": {"M": {"title": {"S": "late"}, "n": {"N": "3"}}}, "remove": {"L": []}}}},
        "version 3: the fields its patch applied do not share one time"),
    "a field's superseded value applied after all, every hash recomputed": (
        {"n": {"N": "3"}, model.FIELD_CLOCKS: {"M": {"title": {"N": "10"}, "n": {"N": "10"}}},
         model.PATCH_RECORD: {"M": {"set": {"M": {"title": {"S": "late"}, "n": {"N": "3"}}}, "remove": {"L": []}}}},
        "version 3: its patch record says it superseded [], but version 2's clocks supersede ['n']"),
}
TAMPERINGS.extend(RESEALED)


@pytest.mark.parametrize("case", sorted(RESEALED))
def test_field_clocks_altered_and_sealed_again_are_still_named(merged, case):
    # the insider who knows the chain recomputes every hash after the change: the chain verifies, but each
    # version's clocks must still be its predecessor's with its change applied
    altered, problem = RESEALED[case]
    write(merged, 3, {**item(merged, 3), **altered})
    recompute_chain_from(merged, 3)
    problems = verify(merged, ENTITY).problems
    assert not any("chain" in p for p in problems), problems
    assert any(p.startswith(problem) for p in problems), problems
