"""Import, record by record, as a user meets it with awkward data (issue 32, seams 3 to 7): each record applied
exactly once and an entity's last record last, at any concurrency, resumed or run again without its
checkpoint; per-entity change ids that repeat across entities; a hostile line (nested thousands deep, not
UTF-8, a byte order mark, a repeated key, a line too long, a truncated gzip) refused by name while the import
goes on; a checkpoint that is not one refused with one line naming the file and the line.

Every test runs `changeflow import` as a user does, against one embedded stack (each test its own entity
ids: test_transfer.py's fixtures), in its own working directory."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from changeflow.cli import main
from changeflow.client import Changeflow
from conftest import without_emf
from test_transfer import cf, shared, started  # noqa: F401 - the fixtures: one embedded stack for this module too

T0 = 1_700_000_000_000


def run(capsys, *args) -> tuple[int, dict | str, str]:
    """``changeflow import ...``: (exit status, the --json summary or stdout, stderr)."""
    status = main(["import", *map(str, args)])
    out, err = capsys.readouterr()
    out = without_emf(out)
    try:
        return status, json.loads(out), err
    except ValueError:
        return status, out, err


def write_lines(path: Path, lines: list[bytes | str | dict]) -> Path:
    raw = b"".join((line if isinstance(line, bytes) else (line if isinstance(line, str) else json.dumps(line))
                    .encode("utf-8")) + b"\n" for line in lines)
    path.write_bytes(gzip.compress(raw) if path.name.endswith(".gz") else raw)
    return path


def versions(client: Changeflow, entity_id: str) -> list[dict]:
    return client.entity(entity_id)["versions"]


def rejects(path: Path) -> dict[str, str]:
    """The rejects file: position -> reason."""
    return {r["position"]: r["reason"] for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


# --- 3: per-entity change ids do not collide in the checkpoint -----------------------------------------------
def test_a_resume_with_per_entity_change_ids_skips_only_what_that_entity_did(cf, capsys, tmp_path):
    # GIVEN records whose own change ids are per-entity sequence numbers: a's 1 and 2 are imported
    source = write_lines(tmp_path / "seq.jsonl", [{"id": "seq#a", "seq": "1", "n": 1}, {"id": "seq#a", "seq": "2", "n": 2}])
    options = ["--id-field", "id", "--effective-at", T0, "--change-id-field", "seq", "--drop-field", "seq", "--json"]
    status, first, _ = run(capsys, source, *options)
    assert status == 0 and first["applied"] == 2
    # WHEN the source grows by b's 1 and 2 and the import is resumed from its checkpoint
    write_lines(source, [{"id": "seq#a", "seq": "1", "n": 1}, {"id": "seq#a", "seq": "2", "n": 2},
                         {"id": "seq#b", "seq": "1", "n": 3}, {"id": "seq#b", "seq": "2", "n": 4}])
    status, resumed, _ = run(capsys, source, *options)
    # THEN a's are skipped, b's are applied: change id 1 of b is not change id 1 of a
    assert (status, resumed["skipped"], resumed["applied"]) == (0, 2, 2), resumed
    assert [v["attributes"]["n"] for v in versions(cf, "seq#b")] == [3, 4]


# --- 4: each record once, the last one last, with or without the checkpoint ------------------------------
def test_eighteen_records_of_one_entity_land_once_in_file_order_and_a_rerun_applies_none(cf, capsys, tmp_path):
    # GIVEN 18 records of one entity under one --effective-at: more than the 16 change ids v0 remembers
    source = write_lines(tmp_path / "one.jsonl", [{"id": "one#1", "step": k} for k in range(1, 19)])
    options = ["--id-field", "id", "--effective-at", T0, "--json"]
    # WHEN it is imported at the default concurrency
    status, first, _ = run(capsys, source, *options)
    # THEN each record is a version, in the file's order: the entity ends at the file's last record
    assert status == 0 and first["applied"] == 18, first
    assert [v["attributes"]["step"] for v in versions(cf, "one#1")] == list(range(1, 19))
    before = started(cf)
    # WHEN it is run again without its checkpoint (records 1 and 2 are no longer among v0's 16 ids)
    Path("one.jsonl.checkpoint").unlink()
    status, again, _ = run(capsys, source, *options)
    # THEN nothing is applied again and nothing starts: the entity still ends at record 18, version 18
    assert status == 0 and again["applied"] == 0 and again["duplicate"] == 18, again
    assert len(versions(cf, "one#1")) == 18 and versions(cf, "one#1")[-1]["attributes"]["step"] == 18
    assert started(cf) == before
    # AND with its checkpoint: every record skipped
    status, third, _ = run(capsys, source, *options)
    assert status == 0 and third["skipped"] == 18 and len(versions(cf, "one#1")) == 18


def test_interleaved_entities_at_any_concurrency_each_end_at_their_last_record(cf, capsys, tmp_path):
    # GIVEN three entities' records interleaved, one effective time, imported with 1 and with 32 in flight
    for concurrency in (1, 32):
        rows = [{"id": f"mix{concurrency}#{e}", "k": k} for k in range(1, 8) for e in range(3)]
        source = write_lines(tmp_path / f"mix{concurrency}.jsonl", rows)
        status, summary, _ = run(capsys, source, "--id-field", "id", "--effective-at", T0, "--concurrency",
                                 concurrency, "--json")
        assert status == 0 and summary["applied"] == 21, summary
        for e in range(3):
            assert [v["attributes"]["k"] for v in versions(cf, f"mix{concurrency}#{e}")] == list(range(1, 8))


# --- 5, 6 and their kin: a hostile line is refused by name, the import goes on ----------------------------
def test_a_line_nested_five_thousand_deep_is_rejected_by_name_and_a_resume_goes_past_it(cf, capsys, tmp_path):
    deep = '{"id": "deep#x", "v": ' + "[" * 5000 + "]" * 5000 + "}"
    source = write_lines(tmp_path / "deep.jsonl", [{"id": "deep#1", "n": 1}, deep, {"id": "deep#2", "n": 2}])
    status, summary, err = run(capsys, source, "--id-field", "id", "--effective-at", T0, "--json")
    assert status == 1 and (summary["applied"], summary["rejected"]) == (2, 1), (summary, err)
    assert "nested" in rejects(Path("deep.jsonl.rejects.jsonl"))["line 2"]
    # a resume does not stop on it either
    status, resumed, _ = run(capsys, source, "--id-field", "id", "--effective-at", T0, "--json")
    assert status == 1 and (resumed["skipped"], resumed["rejected"]) == (2, 1)


def test_a_line_that_is_not_utf8_is_rejected_by_name_not_imported_with_replacement_characters(cf, capsys, tmp_path):
    latin1 = '{"id": "enc#1", "name": "Café Müller"}'.encode("latin-1")
    source = write_lines(tmp_path / "enc.jsonl", [latin1, {"id": "enc#2", "name": "Café Müller"}])
    status, summary, _ = run(capsys, source, "--id-field", "id", "--effective-at", T0, "--json")
    assert status == 1 and (summary["applied"], summary["rejected"]) == (1, 1)
    assert "not UTF-8" in rejects(Path("enc.jsonl.rejects.jsonl"))["line 1"]
    assert versions(cf, "enc#1") == [] and versions(cf, "enc#2")[0]["attributes"]["name"] == "Café Müller"


def test_other_hostile_lines_are_each_refused_by_name_and_the_rest_imports(cf, capsys, tmp_path):
    from changeflow.transfer import sources

    # GIVEN a file that starts with a byte order mark (as some editors save UTF-8), then one bad line of each kind
    lines = [b"\xef\xbb\xbf" + json.dumps({"id": "bad#bom", "n": 1}).encode(),  # line 1: the file's BOM, allowed
             b"\xef\xbb\xbf" + json.dumps({"id": "bad#midbom", "n": 1}).encode(),  # line 2: a BOM mid-file
             b'{"id": "bad#dup", "n": 1, "n": 2}',  # line 3: a key twice
             b'{"id": "bad#a", "id": "bad#b", "n": 1}',  # line 4: the id twice
             b'{"id": "bad#nul", "n": "a\x00b"}',  # line 5: a raw NUL byte (not JSON)
             b'{"id": "bad#sur", "n": "\\ud800"}',  # line 6: a lone surrogate escape
             b'{"id": "bad#nan", "n": NaN}',  # line 7: NaN
             b'{"id": "bad#inf", "n": -Infinity}',  # line 8: -Infinity
             b'{"id": true, "n": 1}',  # line 9: an id that is a boolean
             b'{"id": "bad#long", "n": "' + b"x" * (sources.MAX_LINE_BYTES + 1) + b'"}',  # line 10: too long
             json.dumps({"id": "bad#ok", "n": 1}).encode()]  # line 11: fine
    source = write_lines(tmp_path / "bad.jsonl", lines)
    status, summary, err = run(capsys, source, "--id-field", "id", "--effective-at", T0, "--json")
    assert status == 1 and (summary["applied"], summary["rejected"]) == (2, 9), (summary, err)
    reasons = rejects(Path("bad.jsonl.rejects.jsonl"))
    assert "byte order mark" in reasons["line 2"]
    assert "repeats the key 'n'" in reasons["line 3"] and "repeats the key 'id'" in reasons["line 4"]
    assert "not JSON" in reasons["line 5"] and "lone surrogate" in reasons["line 6"]
    assert "NaN" in reasons["line 7"] and "Infinity" in reasons["line 8"]
    assert "id: must be a string or an integer, not bool" in reasons["line 9"]
    assert f"longer than {sources.MAX_LINE_BYTES:,} bytes" in reasons["line 10"]
    assert len(Path("bad.jsonl.rejects.jsonl").read_bytes()) < 100_000  # the long line is not copied whole
    assert [v["attributes"] for v in versions(cf, "bad#bom")] == [{"n": 1}]
    assert [v["attributes"] for v in versions(cf, "bad#ok")] == [{"n": 1}]
    for entity in ("bad#midbom", "bad#dup", "bad#a", "bad#b", "bad#nul", "bad#sur", "bad#nan", "bad#inf", "True"):
        assert versions(cf, entity) == [], entity


def test_the_rejects_file_is_json_lines_even_for_a_record_with_nan_or_infinity(cf, capsys, tmp_path):
    # GIVEN records with numbers JSON has no form for, which Python's parser reads and the workflow refuses
    source = write_lines(tmp_path / "nan.jsonl", [b'{"id": "nan#1", "n": NaN}', b'{"id": "nan#2", "n": -Infinity}',
                                                   {"id": "nan#3", "n": 1}])
    # WHEN they are imported
    status, summary, err = run(capsys, source, "--id-field", "id", "--effective-at", T0, "--json")
    assert status == 1 and (summary["applied"], summary["rejected"]) == (1, 2), (summary, err)

    # THEN every line of the rejects file is JSON to a strict parser (jq's, RFC 8259: no NaN, no Infinity), and
    # such a record is kept as its text, as a line that is not JSON is
    def not_json(constant):
        raise ValueError(f"{constant} is not JSON")

    lines = [json.loads(line, parse_constant=not_json)
             for line in Path("nan.jsonl.rejects.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(line["position"], line["record"]) for line in lines] == [
        ("line 1", '{"id":"nan#1","n":NaN}'), ("line 2", '{"id":"nan#2","n":-Infinity}')]
    assert "NaN" in lines[0]["reason"] and "Infinity" in lines[1]["reason"]


def test_a_truncated_gzip_imports_what_it_holds_and_names_where_it_breaks(cf, capsys, tmp_path):
    noise = [os.urandom(300).hex() for _ in range(40)]  # incompressible: the cut falls about half way
    whole = gzip.compress(b"".join(json.dumps({"id": f"gz#{i}", "n": i, "x": noise[i]}).encode() + b"\n"
                                   for i in range(40)))
    source = tmp_path / "cut.jsonl.gz"
    source.write_bytes(whole[: len(whole) // 2])
    status, summary, err = run(capsys, source, "--id-field", "id", "--effective-at", T0, "--json", "--quiet")
    assert status == 1 and summary["rejected"] == 1 and summary["applied"] > 0, (summary, err)
    (position, reason), = rejects(Path("cut.jsonl.gz.rejects.jsonl")).items()
    assert position == f"line {summary['applied'] + 1}" and "gzip" in reason and "cannot be read" in reason
    assert all(versions(cf, f"gz#{i}")[0]["attributes"]["n"] == i for i in range(summary["applied"]))


# --- 7: a checkpoint that is not one -------------------------------------------------------------------------
@pytest.mark.parametrize("bad, line", [("{}", 2), ("[1, 2]", 2), ('"text"', 3), ("not json", 2), ("[1, 2]", 1)])
def test_a_checkpoint_with_a_line_that_is_not_an_entry_is_refused_naming_the_file_and_line(cf, capsys, tmp_path,
                                                                                         bad, line):
    source = write_lines(tmp_path / "cp.jsonl", [{"id": "cp#1", "n": 1}])
    assert run(capsys, source, "--id-field", "id", "--effective-at", T0, "--quiet")[0] == 0
    checkpoint = Path("cp.jsonl.checkpoint")
    kept = checkpoint.read_text().splitlines()
    kept.insert(line - 1, bad)
    if line == 1:
        kept = kept[:1]  # a file whose header is not one
    checkpoint.write_text("\n".join(kept) + "\n")
    status, out, err = run(capsys, source, "--id-field", "id", "--effective-at", T0)
    assert status == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and f"cp.jsonl.checkpoint line {line}: " in err, err


# --- an outcome not known: never overtaken by the entity's later records --------------------------------------
def test_a_record_with_no_known_outcome_holds_back_its_entitys_later_records_until_a_resume(shared, tmp_path):
    from changeflow.transfer import sources
    from changeflow.transfer.importer import Checkpoint, Importer, Plan, Rejects, entry_point

    _, client = shared
    start, wait = entry_point(client, "stepfunctions", 60)
    records = [sources.Record(f"line {k}", {"id": "hold#1", "k": k}) for k in (1, 2, 3)] + \
        [sources.Record("line 4", {"id": "hold#2", "k": 1})]

    def silent_on_the_second(request):  # the second record's answer never comes (a timeout: the outcome is unknown)
        if request["attributes"]["k"] == 2 and request["entityId"] == "hold#1":
            raise TimeoutError("no answer in 60 s")
        return start(request)

    checkpoint, rejected = tmp_path / "hold.checkpoint", tmp_path / "hold.rejects.jsonl"
    first = Importer(silent_on_the_second, wait, Plan("id", effective_at=T0), Checkpoint(checkpoint, {"source": "h"}),
                     Rejects(rejected), concurrency=4).run(iter(records))
    # THEN record 2 is unknown, record 3 is not started (it would overtake 2), the other entity goes on
    assert (first.counts["applied"], first.counts["unknown"], first.counts["failed"]) == (2, 1, 1)
    assert [v["attributes"]["k"] for v in versions(client, "hold#1")] == [1]
    reasons = rejects(rejected)
    assert reasons["line 2"].startswith("unknown, not checkpointed") and "line 2 is not known" in reasons["line 3"]
    # WHEN resumed: 2 then 3, in order
    resumed = Importer(start, wait, Plan("id", effective_at=T0), Checkpoint(checkpoint, {"source": "h"}),
                       Rejects(None), concurrency=4).run(iter(records))
    assert (resumed.skipped, resumed.counts["applied"]) == (2, 2)
    assert [v["attributes"]["k"] for v in versions(client, "hold#1")] == [1, 2, 3]


def test_a_rerun_after_a_retention_window_expired_the_oldest_versions_says_unknown_and_reverts_nothing(
        cf, capsys, tmp_path):
    # GIVEN 18 records of one entity imported under one time, then versions 1 and 2 removed from the history
    # as DynamoDB's TTL does once a retention window has expired them
    source = write_lines(tmp_path / "ttl.jsonl", [{"id": "ttl#1", "step": k} for k in range(1, 19)])
    options = ["--id-field", "id", "--effective-at", T0, "--json"]
    assert run(capsys, source, *options)[1]["applied"] == 18
    from changeflow_core import model

    for version in (1, 2):
        cf.dynamodb.delete_item(TableName=cf.history_table, Key={model.PK: {"S": "ttl#1"},
                                                                  model.SK: {"S": model.history_sk(version)}})
    # WHEN it is run again without its checkpoint: records 1 and 2 are in neither v0's 16 ids nor the history
    Path("ttl.jsonl.checkpoint").unlink()
    before = started(cf)
    status, again, _ = run(capsys, source, *options)
    # THEN they are told unknown (never applied again: that would revert the entity), the rest duplicate
    assert status == 1 and (again["unknown"], again["duplicate"], again["applied"]) == (2, 16, 0), again
    assert started(cf) == before and versions(cf, "ttl#1")[-1]["attributes"]["step"] == 18
    assert "cannot be known" in rejects(Path("ttl.jsonl.rejects.jsonl"))["line 1"]


def test_past_v0s_ids_the_importer_sees_versions_another_writer_wrote_since_it_last_looked(shared):
    # two runs of one source at once: what the other wrote, and v0 no longer remembers, still counts as done
    from changeflow.transfer import outcomes

    _, client = shared
    applied = outcomes.Applied(client)
    put = lambda cid: {"entityId": "other#1", "operation": "put", "changeId": cid, "attributes": {"c": cid},  # noqa: E731
                       "effectiveAt": T0}
    assert client.submit(put("first")).status == "SUCCEEDED"
    assert applied.version_of("other#1", "late") is None  # read once: version 1 only
    for cid in ["late", *(f"more-{i}" for i in range(16))]:  # another writer: "late", then 16 that push it out of v0
        assert client.submit(put(cid)).status == "SUCCEEDED"
    assert applied.version_of("other#1", "late") == 2 and applied.version_of("other#1", "never") is None


@pytest.mark.parametrize("option", ["--rejects", "--checkpoint"])
def test_a_checkpoint_or_rejects_file_that_is_the_source_is_refused_before_anything_is_touched(cf, capsys, tmp_path,
                                                                                             option):
    source = write_lines(tmp_path / "same.jsonl", [{"id": "same#1", "n": 1}])
    before = source.read_bytes()
    status, _, err = run(capsys, source, "--id-field", "id", "--effective-at", T0, option, "./same.jsonl")
    assert status == 2 and "are the same file" in err and source.read_bytes() == before
    assert versions(cf, "same#1") == []
