"""Issue 32 items 8 and 15: a redaction erases the content everywhere it is served, and makes no copy of it.

Before: put ssn-1, put ssn-2, redact v1, redact v2 left `v0` and the newest versions holding ssn-2 (each
redact version carried the content of the version before it), `GET` served it, and verify said "version 2
redacted"; redacting a copy made a new copy. And an as-of read after a redaction answered the redaction
version: the content, with the redactor as its principal.

What holds now (docs/audit.md, Redaction): redacting version n removes its content from n and from every
later version that holds it as a copy (the chain's own redact and adopt versions, which carry the content
before them, and a rollback to n or to such a copy); the redaction version carries none of it. When that
was the current content, the entity has no current content: `GET` answers 410 saying so, a patch is refused,
a put gives it content again. An as-of read answers the version whose content was in effect (a redact or
adopt version is not a change of content), or 410 if that content was redacted. Run on the real ASL.
"""

from __future__ import annotations

import json

import pytest

from changeflow.audit.verify import verify
from changeflow.client import Changeflow
from changeflow_core import asof, reads
from changeflow_core.errors import NotFound

T0 = 1_767_225_600_000
ENTITY = "person#1"
SECRET = ("111-11-1111", "222-22-2222")


def put(at, change, **attributes):
    return {"entityId": ENTITY, "operation": "put", "attributes": attributes, "effectiveAt": at, "changeId": change,
            "actor": "clerk@example.com"}


def redact(version, change=None):
    return {"entityId": ENTITY, "operation": "redact", "redactVersion": version, "reason": "erasure request",
            "actor": "dpo@example.com", **({"changeId": change} if change else {})}


def holding(cf, secret):
    """Every item of either table (v0, history) that holds ``secret`` anywhere, by sort key."""
    found = []
    for table in {cf.table, cf.history_table}:
        for found_item in cf.dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]:
            if secret in json.dumps(found_item, default=str):
                found.append(found_item["sk"]["S"])
    return sorted(found)


def served(cf, **query):
    """What GET /entities/{id} answers (the read function's own code): (status, body)."""
    try:
        return 200, reads.state(cf.dynamodb, cf.table, cf.history_table, ENTITY, **query)
    except asof.Gone as gone:
        return 410, str(gone)
    except NotFound as missing:
        return 404, str(missing)


def assert_ok(cf):
    report = verify(cf, ENTITY)
    assert report.ok, report.problems
    return report


def test_the_issue_redacting_both_versions_erases_the_second_number_everywhere(cf):
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 1, "c2", ssn=SECRET[1]))
    assert cf.submit(redact(1, "r1")).output["version"] == 3  # version 3 carries version 2's content
    assert cf.submit(redact(2, "r2")).output["version"] == 4
    # THEN no item holds either number: not v0, not version 3's copy, not version 4
    assert holding(cf, SECRET[0]) == [] and holding(cf, SECRET[1]) == []
    # AND GET says the current content was redacted (410), never serving it
    status, body = served(cf)
    assert status == 410 and "redacted" in body and SECRET[1] not in body
    report = assert_ok(cf)
    assert any(n.startswith("version 2 redacted at version 4") for n in report.notes), report.notes


def test_redacting_a_copy_makes_no_new_copy(cf):
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 1, "c2", ssn=SECRET[1]))
    cf.submit(redact(1, "r1"))  # version 3: a copy of version 2's content
    assert cf.submit(redact(3, "r3")).output["version"] == 4
    # version 2 (the original) still holds it; version 3 no longer does, and version 4 never did
    assert holding(cf, SECRET[1]) == ["v#0000000002"]
    assert_ok(cf)
    # redacting the original then erases it from every item
    cf.submit(redact(2, "r2"))
    assert holding(cf, SECRET[1]) == [] and served(cf)[0] == 410
    assert_ok(cf)


def test_redacting_a_patch_version_erases_the_value_its_patch_record_set(cf):
    # a patch version holds the value twice: in its content and in its record of the patch (`set`)
    cf.submit(put(T0, "c1", name="Ann"))
    cf.submit({"entityId": ENTITY, "operation": "patch", "set": {"ssn": SECRET[0]}, "effectiveAt": T0 + 1,
               "changeId": "c2"})
    assert holding(cf, SECRET[0]) == ["v#0000000002", "v0"]
    assert cf.submit(redact(2, "r2")).output["version"] == 3
    assert holding(cf, SECRET[0]) == [] and served(cf)[0] == 410
    assert_ok(cf)


def test_a_rollback_copy_goes_with_the_version_it_restored(cf):
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 1, "c2", name="other"))
    cf.submit({"entityId": ENTITY, "operation": "rollback", "toVersion": 1, "effectiveAt": T0 + 2, "changeId": "c3"})
    cf.submit(redact(1, "r1"))
    assert holding(cf, SECRET[0]) == [] and served(cf)[0] == 410
    assert_ok(cf)


def test_after_its_current_content_is_redacted_an_entity_takes_a_put_not_a_patch(cf):
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(redact(1, "r1"))
    patch = cf.submit({"entityId": ENTITY, "operation": "patch", "set": {"n": 1}, "effectiveAt": T0 + 5,
                       "changeId": "c2"})
    assert (patch.status, patch.error) == ("FAILED", "NotFound") and "redacted" in patch.cause
    assert cf.submit(put(T0 + 5, "c3", name="new")).output["outcome"] == "applied"
    status, body = served(cf)
    assert status == 200 and body["attributes"] == {"name": "new"}
    assert_ok(cf)


def test_a_redaction_of_an_older_version_keeps_the_current_content(cf):
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 1, "c2", name="kept"))
    cf.submit(redact(1, "r1"))
    status, body = served(cf)
    assert status == 200 and body["attributes"] == {"name": "kept"}
    assert holding(cf, SECRET[0]) == []


@pytest.mark.parametrize("parameters", [{"SeparateHistoryTable": "true"}, {"HistoryRetentionVersions": "3"}],
                         ids=["separate-history-table", "retention-window"])
def test_every_copy_is_erased_in_every_configuration(make_stack, parameters):
    cf = Changeflow.for_embedded(make_stack(**parameters))
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 1, "c2", ssn=SECRET[1]))
    cf.submit(redact(1, "r1"))
    cf.submit(redact(2, "r2"))
    assert holding(cf, SECRET[1]) == [] and served(cf)[0] == 410
    assert_ok(cf)


def test_an_export_after_the_redaction_holds_none_of_it(cf, tmp_path):
    from changeflow.transfer import exporter

    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 1, "c2", ssn=SECRET[1]))
    cf.submit(redact(1, "r1"))
    cf.submit(redact(2, "r2"))
    exporter.export(cf, [ENTITY], tmp_path / "out.jsonl", tmp_path / "digest.json")
    text = (tmp_path / "out.jsonl").read_text()
    assert SECRET[0] not in text and SECRET[1] not in text
    assert exporter.verify_file(tmp_path / "out.jsonl", tmp_path / "digest.json")[0] == []


# --- item 15: as-of after a redaction ---------------------------------------------------------------------
def test_as_of_after_a_redaction_answers_the_content_s_own_version_and_who_wrote_it(cf):
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 10, "c2", name="Ana"))
    cf.submit(redact(1, "r1"))  # version 3: effective at T0 + 10, the time of the version before it
    status, body = served(cf, as_of=str(T0 + 10))
    # THEN the version in effect is version 2, written by its own change, not the redaction's
    assert status == 200 and (body["version"], body["changeId"], body["actor"]) == (2, "c2", "clerk@example.com")
    assert body["attributes"] == {"name": "Ana"} and body["operation"] == "put"
    # AND before it, the redacted version's content is gone: 410, never shown under anyone's name
    status, body = served(cf, as_of=str(T0 + 5))
    assert status == 410 and "redacted" in body and SECRET[0] not in body
    # AND as known now, the same
    assert served(cf, as_of=str(T0 + 10), known_at=str(4_000_000_000_000))[1]["version"] == 2


def test_as_of_the_moment_current_content_was_redacted_is_410_not_the_redaction(cf):
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(redact(1, "r1"))
    status, body = served(cf, as_of=str(T0))
    assert status == 410 and "redacted" in body and "dpo@example.com" not in body


# --- what an insider with table access tries against it -----------------------------------------------------
def test_an_interrupted_redaction_with_copies_is_reported_and_repair_finishes_it(cf, stack):
    from changeflow.audit.repair import repair
    from changeflow.local.lambdas import LambdaServiceError, fault_hook

    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 1, "c2", ssn=SECRET[1]))
    cf.submit(redact(1, "r1"))

    def history_fails(function, event, invoke):
        if function.logical_id == "PutHistoryFunction" and event["change"]["changeId"] == "r2":
            raise LambdaServiceError()
        return invoke()

    with fault_hook(stack.lambdas, history_fails):
        assert cf.submit(redact(2, "r2")).error == "HistoryWriteFailed"
    assert served(cf)[0] == 410  # v0 never held the copy
    problems = verify(cf, ENTITY).problems
    assert any("version 2: holds content that version 4 redacted" in p for p in problems), problems
    assert any("version 3: holds content that version 4 redacted" in p for p in problems), problems
    repair(cf, ENTITY)
    assert holding(cf, SECRET[1]) == [] and assert_ok(cf)


def strip_content(cf, version):
    """An insider removes a version's content and puts its hash in its place, as a redaction would."""
    from changeflow_core import chain

    key = {"pk": {"S": ENTITY}, "sk": {"S": f"v#{version:010d}"}}
    found = cf.dynamodb.get_item(TableName=cf.history_table, Key=key, ConsistentRead=True)["Item"]
    cf.dynamodb.put_item(TableName=cf.history_table, Item=chain.redacted_form(found))


def test_content_stripped_from_a_copy_without_its_original_is_caught(cf):
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 1, "c2", name="Ana"))
    cf.submit(redact(1, "r1"))  # version 3 carries version 2's content
    cf.submit(put(T0 + 2, "c4", name="Bo"))
    strip_content(cf, 3)  # as if it were born redacted: but version 2 still holds that content
    problems = verify(cf, ENTITY).problems
    assert problems and problems[0].startswith("version 3: its content was removed without a redaction version")


def test_a_copy_passed_off_as_redacted_by_a_later_record_is_caught(cf):
    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit({"entityId": ENTITY, "operation": "rollback", "toVersion": 1, "effectiveAt": T0 + 1, "changeId": "c2"})
    cf.submit(put(T0 + 2, "c3", name="Bo"))
    strip_content(cf, 1)  # the original and its rollback copy emptied with no redaction version at all
    strip_content(cf, 2)
    problems = verify(cf, ENTITY).problems
    assert "version 1: its content was removed without a redaction version" in problems, problems
    assert "version 2: its content was removed without a redaction version" in problems, problems


def test_a_digest_taken_before_a_redaction_with_copies_still_proves_the_stack_and_its_versions(cf):
    from changeflow.audit import digests, proofs

    cf.submit(put(T0, "c1", ssn=SECRET[0]))
    cf.submit(put(T0 + 1, "c2", ssn=SECRET[1]))
    cf.submit(redact(1, "r1"))
    taken = digests.digest(cf, [ENTITY])
    cf.submit(redact(2, "r2"))  # erases version 2 and its copy, version 3, after the digest
    assert digests.verify_since(cf, taken) == {}
    # the copy is proven by its content's hash, which the digest committed to; the proof holds no content
    proof = proofs.prove(cf, ENTITY, 3, taken)
    assert SECRET[1] not in json.dumps(proof) and proofs.verify_proof(proof, taken)["version"] == 3
