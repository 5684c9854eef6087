"""``changeflow verify --since-digest``: what a digest committed to is checked, every version of it (issue
26.3), and a digest file is input from outside, refused by name when it is not what ``digest`` writes
(issue 26.5). The versions are written by the workflow on the real ASL; the tampering is an insider's,
with boto3 straight to the table."""

from __future__ import annotations

import json
import time

import pytest

from changeflow import cli
from changeflow.audit import digests
from changeflow.client import Changeflow, targets
from changeflow_core import chain, model
from conftest import LOGGED, ROOT, let_executions_end

T0 = 1_767_225_600_000
DAY = 86_400


def put(entity: str, i: int) -> dict:
    return {"entityId": entity, "operation": "put", "attributes": {"n": i}, "effectiveAt": T0 + i,
            "changeId": f"{entity}-c{i}"}


def delete_history(cf, entity: str, *versions: int) -> None:
    for version in versions:
        cf.dynamodb.delete_item(TableName=cf.history_table,
                                Key={model.PK: {"S": entity}, model.SK: {"S": model.history_sk(version)}})


def written(cf, entity: str = "e", versions: int = 5) -> None:
    for i in range(1, versions + 1):
        cf.submit(put(entity, i))


@pytest.fixture
def on_cli(monkeypatch):
    def use(cf):
        monkeypatch.setattr(targets, "client_for", lambda args: cf)
    return use


# --- 26.3: every version the digest committed to ------------------------------------------------------
def test_versions_deleted_below_the_digests_head_with_v0_left_alone_are_caught(cf, tmp_path, capsys, on_cli):
    # GIVEN a digest of an entity at version 5 (issue 26.3's reproduction)
    written(cf)
    on_cli(cf)
    kept = tmp_path / "digest.json"
    assert cli.main(["digest", "e", "--output", str(kept)]) == 0
    # WHEN versions 3..5 are deleted from history and v0 (version 5) is left alone
    delete_history(cf, "e", 3, 4, 5)
    capsys.readouterr()
    # THEN the proof fails and says which versions the digest committed to are gone
    assert cli.main(["verify", "--all", "--since-digest", str(kept)]) == 1
    out = capsys.readouterr().out
    assert "CHANGED" in out and "e: versions 3..5, recorded in the digest, are gone from history" in out
    assert cli.main(["verify", "e", "--since-digest", str(kept)]) == 1


@pytest.mark.parametrize("deleted, expected", [
    ((1,), "version 1, recorded in the digest, is gone from history"),
    ((5,), "version 5, recorded in the digest, is gone from history"),
    ((2, 4), "versions 2, 4, recorded in the digest, are gone from history"),
])
def test_any_version_up_to_the_head_deleted_is_caught(cf, deleted, expected):
    written(cf)
    taken = digests.digest(cf, ["e"])
    delete_history(cf, "e", *deleted)
    assert expected in digests.verify_since(cf, taken)["e"]


def test_versions_written_after_the_digest_and_deleted_are_caught_too(cf):
    # the chain check cannot see a gap between history's newest version and v0: the proof counts versions
    written(cf, versions=3)
    taken = digests.digest(cf, ["e"])
    for i in range(4, 7):
        cf.submit(put("e", i))
    delete_history(cf, "e", 4, 5, 6)
    assert digests.verify_since(cf, taken)["e"] == ["versions 4..6, written since the digest, are gone from history"]


def test_a_whole_entity_deleted_is_caught(cf):
    written(cf, versions=2)
    taken = digests.digest(cf, ["e"])
    delete_history(cf, "e", 1, 2)
    cf.dynamodb.delete_item(TableName=cf.table, Key={model.PK: {"S": "e"}, model.SK: {"S": model.LATEST_SK}})
    assert digests.verify_since(cf, taken)["e"] == [
        "version 2, recorded in the digest, is gone: nothing of the entity is left"]


@pytest.mark.parametrize("parameters", [{"HistoryRetentionVersions": "3"},
                                        {"HistoryRetentionVersions": "3", "SeparateHistoryTable": "true"},
                                        {"HistoryRetentionVersions": "3", "WorkflowType": "EXPRESS", **LOGGED},
                                        {"HistoryRetentionDays": "1"}],
                         ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_with_a_retention_window_only_what_it_let_go_may_be_missing(make_stack, parameters):
    cf = Changeflow.for_embedded(make_stack(**parameters))
    written(cf, versions=6)
    taken = digests.digest(cf, ["e"])
    assert digests.verify_since(cf, taken) == {}
    assert digests.verify_since(cf, taken, now_s=time.time() + 2 * DAY) == {}
    delete_history(cf, "e", 4, 5)  # inside the window of three, or tagged a moment ago to expire in a day
    assert digests.verify_since(cf, taken)["e"][0] == "versions 4..5, recorded in the digest, are gone from history"


def test_a_head_the_retention_window_let_go_is_reported_as_no_longer_provable(make_stack):
    cf = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="1"))
    written(cf, versions=2)
    taken = digests.digest(cf, ["e"])
    cf.submit(put("e", 3))  # tags version 2, due at once
    assert digests.verify_since(cf, taken)["e"] == [
        "version 2 has expired under the retention window; it can no longer be proven"]


# --- 26.5: a digest file is input from outside ---------------------------------------------------------
def genuine(cf) -> dict:
    written(cf, "e", versions=2)
    written(cf, "f", versions=1)
    return json.loads(json.dumps(digests.digest(cf, ["e", "f"]), default=str))


def entity(i=0, **changes):
    return lambda d: d["entities"][i].update(changes)


def rooted(change):
    """A forgery whose root is recomputed, so that only the field is wrong."""
    def forge(d):
        change(d)
        try:
            d["root"] = chain.merkle_root(d["entities"])
        except Exception:  # noqa: BLE001 - entities the root cannot even be computed over
            pass
    return forge


FORGERIES = {
    "entities as a number": (lambda d: d.update(entities=5), "entities is 5, not a list"),
    "entities as numbers": (lambda d: d.update(entities=[1, 2]), "entities[0] is 1, not"),
    "no root": (lambda d: d.pop("root"), "root is None, not a SHA-256 hash"),
    "root a number": (lambda d: d.update(root=7), "root is 7, not a SHA-256 hash"),
    "no format": (lambda d: d.pop("format"), "not a changeflow digest: format is None"),
    "another format": (lambda d: d.update(format="changeflow-digest/9"), "format is 'changeflow-digest/9'"),
    "a list": (lambda d: None, "not a changeflow digest (`changeflow digest --all` makes one): not a JSON object"),
    "version abc": (rooted(entity(version="abc")), "entities[0].version is 'abc', not a version number"),
    "version 1e400": (rooted(entity(version=1e400)), "entities[0].version is"),
    "version as text": (rooted(entity(version="2")), "entities[0].version is '2', not a version number"),
    "version true": (rooted(entity(version=True)), "entities[0].version is True"),
    "version 0": (rooted(entity(version=0)), "entities[0].version is 0"),
    "version negative": (rooted(entity(version=-3)), "entities[0].version is -3"),
    "version fractional": (rooted(entity(version=2.5)), "entities[0].version is"),
    "version past ten digits": (rooted(entity(version=10**10)), "entities[0].version is 10000000000"),
    "version of 4,001 digits": (rooted(entity(version=10**4000)), "entities[0].version is"),
    "version of 3,000 digits": (rooted(entity(version=10**3000)), "entities[0].version is 1000"),
    "entityId a number": (lambda d: entity(entityId=7)(d), "entities[0].entityId is 7"),
    "entityId empty": (rooted(entity(entityId="")), "entities[0].entityId is ''"),
    "entityId of 2,049 bytes": (rooted(entity(entityId="x" * 2049)), "entities[0].entityId is 'xxx"),
    "entityId missing": (lambda d: d["entities"][0].pop("entityId"), "entities[0] is"),
    "an extra field": (rooted(entity(extra=1)), "entities[0] is"),
    "chainHash short": (rooted(entity(chainHash="abc")), "entities[0].chainHash is 'abc'"),
    "chainHash upper case": (rooted(entity(chainHash="A" * 64)), "entities[0].chainHash is"),
    "chainHash a number": (rooted(entity(chainHash=12)), "entities[0].chainHash is 12"),
    "chainHash empty": (rooted(entity(chainHash="")), "entities[0].chainHash is ''"),
    "an entity twice": (rooted(lambda d: d["entities"].append(dict(d["entities"][0]))),
                        "entities[2].entityId 'e' is in the digest twice"),
    "an entity twice, other hash": (rooted(lambda d: d["entities"].append({**d["entities"][0], "chainHash": "0" * 64})),
                                    "is in the digest twice"),
    "takenAt a number": (lambda d: d.update(takenAt=5), "takenAt is 5, not a time"),
}


@pytest.fixture(scope="module")
def genuine_text() -> str:
    """A genuine digest, taken once for the forgeries on a stack of its own, stopped before a test's stack starts
    (two embedded stacks cannot share a process): each test forges a copy. Each test's own stack holds none of
    its entities, so a forgery the file check let through would be verified against the table and fail
    (exit 1, entities missing), never pass; the workflow writing e and f again for each of the 29 forgeries cost 4 CPU s."""
    from changeflow.local.embedded import EmbeddedStack

    with EmbeddedStack(ROOT, time_scale=0.0005) as stack:
        text = json.dumps(genuine(Changeflow.for_embedded(stack)), default=str)
        let_executions_end(stack)
    return text


@pytest.mark.parametrize("name", FORGERIES)
def test_a_forged_digest_file_is_a_one_line_error_with_exit_status_2(genuine_text, cf, tmp_path, capsys, on_cli, name):
    forge, message = FORGERIES[name]
    taken = json.loads(genuine_text)
    forge(taken)
    path = tmp_path / "forged.json"
    path.write_text(json.dumps([] if name == "a list" else taken), encoding="utf-8")
    on_cli(cf)
    capsys.readouterr()
    for argv in (["verify", "--all", "--since-digest", str(path)], ["verify", "e", "--since-digest", str(path)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and message in err, err
    if name != "a list":  # the library call does not crash either: the digest is the problem
        assert "(digest)" in digests.verify_since(cf, taken)


@pytest.mark.parametrize("text", [b"\xff\xfe not utf-8", b"[" * 100_000, b"{\"format\": ", b""])
def test_a_file_that_is_not_json_is_a_one_line_error(cf, tmp_path, capsys, on_cli, text):
    path = tmp_path / "bad.json"
    path.write_bytes(text)
    on_cli(cf)
    assert cli.main(["verify", "--all", "--since-digest", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "not a JSON digest" in err


def test_an_entity_the_digest_does_not_name_does_not_pass_vacuously(cf, tmp_path, capsys, on_cli):
    path = tmp_path / "digest.json"
    path.write_text(json.dumps(genuine(cf)), encoding="utf-8")
    on_cli(cf)
    capsys.readouterr()
    assert cli.main(["verify", "no-such-entity", "--since-digest", str(path)]) == 1
    err = capsys.readouterr().err
    assert "'no-such-entity' is not in the digest" in err and len(err.strip().splitlines()) == 1


def test_one_entity_checked_against_an_altered_file_still_sees_the_alteration(cf, tmp_path, capsys, on_cli):
    # the file's root covers every entity: checking one entity must not recompute it over that one alone
    taken = genuine(cf)
    taken["entities"][1]["chainHash"] = "0" * 64  # f's head altered; the root left as it was
    path = tmp_path / "digest.json"
    path.write_text(json.dumps(taken), encoding="utf-8")
    on_cli(cf)
    capsys.readouterr()
    assert cli.main(["verify", "e", "--since-digest", str(path)]) == 1
    assert "(digest): the digest's root does not match its entities: the file was altered" in capsys.readouterr().out
    assert cli.main(["verify", "--all", "--since-digest", str(path)]) == 1
    out = capsys.readouterr().out
    assert "the file was altered" in out and "f: version 1 no longer has the hash the digest recorded" in out


# --- the table is input too: an insider can write any type anywhere ------------------------------------
ALTERATIONS = {
    "version removed": ("REMOVE #v", {}),
    "version as text": ("SET #v = :x", {":x": {"S": "abc"}}),
    "effectiveAt as text": ("SET effectiveAt = :x", {":x": {"S": "soon"}}),
    # (recordedHour and digestShard as text: DynamoDB refuses them, the keys of the changes index are numbers
    # in every item: tests/test_digest_chain.py, which also alters them in v0)
    "recordedAt as text": ("SET recordedAt = :x", {":x": {"S": "then"}}),
    "recordedAt removed": ("REMOVE recordedAt", {}),
    "changeId removed": ("REMOVE changeId", {}),
    "expiresAt as text": ("SET expiresAt = :x", {":x": {"S": "never"}}),
    "sourceVersion as text": ("SET sourceVersion = :x", {":x": {"S": "one"}}),
}


@pytest.mark.parametrize("name", ALTERATIONS)
@pytest.mark.parametrize("where", ["history", "v0"])
def test_an_attribute_of_the_wrong_type_is_reported_not_a_crash(cf, tmp_path, capsys, on_cli, name, where):
    written(cf, versions=3)
    taken = digests.digest(cf, ["e"])
    expression, values = ALTERATIONS[name]
    key = {model.PK: {"S": "e"}, model.SK: {"S": model.history_sk(2) if where == "history" else model.LATEST_SK}}
    extra = {"ExpressionAttributeValues": values} if values else {}
    if "#v" in expression:
        extra["ExpressionAttributeNames"] = {"#v": "version"}
    cf.dynamodb.update_item(TableName=cf.history_table if where == "history" else cf.table, Key=key,
                            UpdateExpression=expression, **extra)
    from changeflow.audit.verify import verify

    assert not verify(cf, "e").ok
    recorded = name != "expiresAt as text"  # an expiry is not part of what a version says (nor of its hash)
    assert bool(digests.verify_since(cf, taken).get("e")) is recorded
    kept = tmp_path / "digest.json"
    kept.write_text(json.dumps(taken), encoding="utf-8")
    on_cli(cf)
    assert cli.main(["verify", "e"]) == 1 and cli.main(["verify", "--all"]) == 1
    assert cli.main(["verify", "e", "--since-digest", str(kept)]) == (1 if recorded else 0)
    assert "Traceback" not in capsys.readouterr().err


def test_a_digest_taken_of_an_altered_v0_or_a_version_without_a_chain_is_written_and_proves_nothing(
        cf, tmp_path, capsys, on_cli):
    written(cf, versions=2)
    written(cf, "legacy", versions=1)
    for name in (chain.CHAIN_HASH, chain.PREV_HASH):  # as an item written before the chain looks
        for table, sk in ((cf.history_table, model.history_sk(1)), (cf.table, model.LATEST_SK)):
            cf.dynamodb.update_item(TableName=table, Key={model.PK: {"S": "legacy"}, model.SK: {"S": sk}},
                                    UpdateExpression=f"REMOVE {name}")
    cf.dynamodb.update_item(TableName=cf.table, Key={model.PK: {"S": "e"}, model.SK: {"S": model.LATEST_SK}},
                            UpdateExpression="REMOVE #v", ExpressionAttributeNames={"#v": "version"})
    on_cli(cf)
    kept = tmp_path / "digest.json"
    assert cli.main(["digest", "--all", "--output", str(kept)]) == 0  # it crashed on v0 without a version
    heads = {h["entityId"]: h for h in json.loads(kept.read_text(encoding="utf-8"))["entities"]}
    assert heads["e"]["version"] == 2 and heads["legacy"]["chainHash"] is None
    capsys.readouterr()
    assert cli.main(["verify", "--all", "--since-digest", str(kept)]) == 1  # read back: refused it as malformed
    out = capsys.readouterr().out
    assert "legacy: the digest recorded no chain hash for version 1 (written before the chain): nothing proves it" in out
    assert "e: v0 has no version number: it was altered" in out
