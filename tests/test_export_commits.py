"""Issue 32 item 11: `verify-export` refuses what the digest does not commit to.

Before, `verify-export` accepted an export cut down to its head on a stack with a retention window (each
chain was checked from its oldest line, anchored by its prevHash), a digest whose `historyExpires` was
flipped (a field outside the root), and a line whose top-level `principal`, `actor` or `version` was forged
(only `item` was read).

What holds now (docs/transfer.md, Export): the export digest commits, in `exportRoot` (over the Merkle root
of the heads), to the stack's retention window, `historyExpires`, when it was taken and each entity's
exported versions (the first and how many); `verify-export` recomputes it, checks each entity's lines against
the committed range and the retention rule `verify` uses, and each line's fields against its item.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from changeflow.client import Changeflow
from changeflow.transfer import exporter

T0 = 1_767_225_600_000
ENTITY = "doc#1"


def put(n, **attributes):
    return {"entityId": ENTITY, "operation": "put", "attributes": attributes or {"n": n}, "effectiveAt": T0 + n,
            "changeId": f"c{n}", "actor": "alice"}


def exported(cf, tmp_path, versions=5):
    for n in range(1, versions + 1):
        cf.submit(put(n))
    out, digest = tmp_path / "audit.jsonl", tmp_path / "audit.digest"
    exporter.export(cf, None, out, digest)
    assert exporter.verify_file(out, digest)[0] == []
    return out, digest


def rewrite(path: Path, edit) -> None:
    lines = [json.loads(t) for t in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(line) + "\n" for line in edit(lines)))


def test_an_export_cut_down_to_its_head_under_a_retention_window_is_refused(make_stack, tmp_path):
    cf = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="2"))
    out, digest = exported(cf, tmp_path)
    rewrite(out, lambda lines: lines[-1:])  # only the head: its prevHash anchors a chain of one
    problems, _ = exporter.verify_file(out, digest)
    assert problems and any("exported versions 1..5" in p for p in problems), problems


def test_an_export_missing_its_oldest_versions_is_refused_even_if_the_window_could_explain_it(make_stack, tmp_path):
    cf = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="2"))
    out, digest = exported(cf, tmp_path)
    rewrite(out, lambda lines: lines[2:])  # versions 1 and 2, which the window let go, and version 3 too
    problems, _ = exporter.verify_file(out, digest)
    assert problems and any("exported versions 1..5" in p for p in problems), problems


@pytest.mark.parametrize("field, value", [("historyExpires", True), ("window", {"versions": 1, "days": 0}),
                                          ("takenAt", "2999-01-01T00:00:00+00:00")])
def test_a_digest_whose_commitments_were_edited_is_refused(cf, tmp_path, field, value):
    out, digest = exported(cf, tmp_path)
    taken = json.loads(digest.read_text())
    taken[field] = value
    digest.write_text(json.dumps(taken))
    rewrite(out, lambda lines: lines[3:])  # and the file cut to what the edit would allow
    problems, _ = exporter.verify_file(out, digest)
    assert any("exportRoot" in p for p in problems), problems


@pytest.mark.parametrize("field, value", [
    ("principal", {"via": "api", "arn": "arn:aws:iam::123456789012:user/mallory"}),
    ("actor", "mallory"),
    ("version", 2),
    ("executionArn", "arn:aws:states:us-east-1:123456789012:execution:changeflow-ChangeStateMachine:forged"),
    ("chainHash", "0" * 64),
    ("note", "an added field"),
])
def test_a_forged_field_beside_the_item_is_refused(cf, tmp_path, field, value):
    out, digest = exported(cf, tmp_path, versions=3)

    def forge(lines):
        lines[0][field] = value
        return lines

    rewrite(out, forge)
    problems, _ = exporter.verify_file(out, digest)
    assert any(p.startswith(f"line 1: its {field!r}") for p in problems), problems


def test_an_export_digest_is_still_a_digest_the_live_stack_is_proven_against(cf, tmp_path):
    from changeflow.audit import digests

    out, digest = exported(cf, tmp_path)
    assert digests.verify_since(cf, json.loads(digest.read_text())) == {}


def test_a_digest_stripped_of_its_commitments_trusts_no_window(make_stack, tmp_path):
    # without exportRoot (as digests were written before it) nothing commits to a window: chains from version 1
    cf = Changeflow.for_embedded(make_stack(HistoryRetentionVersions="2"))
    out, digest = exported(cf, tmp_path)
    taken = json.loads(digest.read_text())
    for name in ("exportRoot", "exported", "window"):
        del taken[name]
    digest.write_text(json.dumps({**taken, "historyExpires": True}))
    rewrite(out, lambda lines: lines[-1:])
    problems, _ = exporter.verify_file(out, digest)
    assert problems and "missing from the chain" in problems[0], problems
