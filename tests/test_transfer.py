"""Import and export (issue 24), as a team adopting changeflow meets them: a data set (JSON Lines, a DynamoDB
export to S3, a live table) imported through the real workflow, once, whatever happens to the run (twice,
killed and resumed, bad records mixed in, throttled); the audit exported with the digest that proves it.

One embedded stack serves the in-process tests (each uses its own entity ids); one ``changeflow serve``
process serves the tests of the command as a user runs it (Ctrl-C, a real terminal)."""

from __future__ import annotations

import gzip
import base64
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from changeflow.cli import main
from changeflow.client import Changeflow, Execution
from changeflow.transfer import sources
from changeflow.transfer.importer import Checkpoint, Importer, Plan, Rejects, entry_point, to_request
from changeflow.transfer.progress import Progress
from changeflow.transfer.rate import AdaptiveRate, TokenBucket
from changeflow_core import chain, model
from conftest import ROOT, let_executions_end, without_emf

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def shared():
    """One embedded stack for the in-process tests of this file (they do not share entity ids)."""
    from changeflow.local.embedded import EmbeddedStack

    with pytest.MonkeyPatch.context() as env:
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_DEFAULT_REGION": "us-east-1", "CHANGEFLOW_ROOT": str(ROOT)}.items():
            env.setenv(key, value)
        with EmbeddedStack(ROOT, time_scale=0.0005) as stack:
            yield stack, Changeflow.for_embedded(stack)
            let_executions_end(stack)


@pytest.fixture
def cf(shared, monkeypatch, tmp_path):
    """The commands pointed at the shared stack, run in a fresh working directory."""
    from changeflow.client import targets

    _, client = shared
    monkeypatch.setattr(targets, "client_for", lambda args: client)
    monkeypatch.chdir(tmp_path)
    return client


def cli(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, without_emf(out), err


def jsonl(path: Path, rows, gzipped: bool = False) -> Path:
    text = "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows)
    if gzipped:
        with gzip.open(path, "wt", encoding="utf-8") as out:
            out.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def versions_of(client: Changeflow, entity_id: str) -> list[int]:
    return [v["version"] for v in client.entity(entity_id)["versions"]]


def started(client: Changeflow) -> int:
    return len(client.executions(limit=100_000))


# --- the three sources, each record once at version 1 ------------------------------------------------
def test_a_jsonl_import_lands_each_record_once_and_a_second_run_starts_nothing(cf, capsys, tmp_path):
    # GIVEN a dump with good records, and bad ones mixed in: not JSON, no id, a field the workflow reserves
    good = [{"id": f"jl#{i}", "at": T0 + i, "name": f"n{i}"} for i in range(8)]
    text = [json.dumps(g)[:-1] + ', "price": "1.50", "qty": 1.50}' for g in good]  # a number exactly as written
    rows = [*text[:3], "{not json", {"at": T0, "name": "no id"}, *text[3:6], {"id": "jl#bad", "at": T0, "version": 7},
            [1, 2], *text[6:]]
    source = jsonl(tmp_path / "dump.jsonl", rows)
    before = started(cf)

    # WHEN it is imported
    status, out, _ = cli(capsys, "import", source, "--id-field", "id", "--effective-at-field", "at", "--json",
                         "--actor", "migration")
    summary = json.loads(out)

    # THEN each good record is version 1 of its entity, with its content (numbers exact) and its claims
    assert status == 1 and summary["applied"] == 8 and summary["rejected"] == 4 and summary["failed"] == 0
    for record in good:
        entity = cf.entity(record["id"])
        assert [v["version"] for v in entity["versions"]] == [1]
        version = entity["versions"][0]
        assert version["attributes"] == {"at": record["at"], "name": record["name"], "price": "1.50",
                                         "qty": Decimal("1.50")}
        assert version["effectiveAt"] == record["at"] and version["actor"] == "migration"
        assert version["changeId"].startswith("import-")
    # the rejects file names each bad record, where it was and why; nothing of them was written
    rejects = [json.loads(line) for line in (tmp_path / "dump.jsonl.rejects.jsonl").read_text().splitlines()]
    assert [r["position"] for r in rejects] == ["line 4", "line 5", "line 9", "line 10"]
    reasons = " | ".join(r["reason"] for r in rejects)
    assert "not JSON" in reasons and "id: is missing" in reasons and "attributes.version" in reasons
    assert "JSON object" in reasons
    assert cf.entity("jl#bad")["versions"] == []
    assert started(cf) - before == 8  # rejected records never started an execution

    # WHEN it runs again: the checkpoint skips every done record without starting anything
    status, out, _ = cli(capsys, "import", source, "--id-field", "id", "--effective-at-field", "at", "--json",
                         "--actor", "migration")
    again = json.loads(out)
    assert (again["applied"], again["skipped"], again["rejected"]) == (0, 8, 4) and started(cf) - before == 8
    assert (tmp_path / "dump.jsonl.rejects.jsonl").read_text().count("\n") == 4  # the same rejects, not doubled

    # WHEN it runs a third time with the checkpoint gone: v0 remembers the change ids, nothing starts
    (tmp_path / "dump.jsonl.checkpoint").unlink()
    status, out, _ = cli(capsys, "import", source, "--id-field", "id", "--effective-at-field", "at", "--json",
                         "--actor", "migration")
    third = json.loads(out)
    assert (third["applied"], third["duplicate"]) == (0, 8) and started(cf) - before == 8
    assert all(versions_of(cf, r["id"]) == [1] for r in good)


def test_a_dynamodb_export_gzipped_imports_with_exact_numbers_and_refuses_binary(cf, capsys, tmp_path):
    # GIVEN an export-to-S3 data file as DynamoDB writes it: gzip, one {"Item": ...} per line, DynamoDB JSON
    items = [{"Item": {"pk": {"S": f"ddb#{i}"}, "amount": {"N": "12345678901234567890.123"},
                       "tags": {"SS": ["b", "a"]}, "nested": {"M": {"ok": {"BOOL": True}, "l": {"L": [{"N": "1"}]}}}}}
             for i in range(4)]
    items.append({"Item": {"pk": {"S": "ddb#bin"}, "blob": {"B": "AAEC"}}})
    items.append({"NotItem": {}})
    source = jsonl(tmp_path / "export.json.gz", items, gzipped=True)
    assert sources.describe(str(source)) == "dynamodb-export"

    status, out, _ = cli(capsys, "import", source, "--id-field", "pk", "--effective-at", "2024-01-01T00:00:00Z",
                         "--json")
    summary = json.loads(out)
    assert summary["applied"] == 4 and summary["rejected"] == 2 and status == 1
    version = cf.entity("ddb#2")["versions"][0]
    assert version["version"] == 1 and version["effectiveAt"] == 1_704_067_200_000
    assert version["attributes"] == {"amount": Decimal("12345678901234567890.123"), "tags": ["a", "b"],
                                     "nested": {"ok": True, "l": [1]}}
    reasons = (tmp_path / "export.json.gz.rejects.jsonl").read_text()
    assert "binary" in reasons and "DynamoDB export line" in reasons
    assert cf.entity("ddb#bin")["versions"] == []


def test_a_live_table_imports_by_parallel_scan_once_per_item(cf, capsys, tmp_path):
    # GIVEN an existing table with more items than one Scan page of a segment holds
    cf.dynamodb.create_table(TableName="legacy-orders", KeySchema=[{"AttributeName": "orderId", "KeyType": "HASH"}],
                             AttributeDefinitions=[{"AttributeName": "orderId", "AttributeType": "S"}],
                             BillingMode="PAY_PER_REQUEST")
    for i in range(30):
        cf.dynamodb.put_item(TableName="legacy-orders", Item={"orderId": {"S": f"tbl#{i}"}, "n": {"N": str(i)},
                                                              "updated": {"N": str(T0 + i)}})
    status, out, _ = cli(capsys, "import", "dynamodb://legacy-orders", "--id-field", "orderId",
                         "--effective-at-field", "updated", "--segments", "3", "--json")
    summary = json.loads(out)
    assert status == 0 and summary["applied"] == 30 and summary["records"] == 30
    assert all(versions_of(cf, f"tbl#{i}") == [1] for i in range(30))
    assert cf.entity("tbl#7")["versions"][0]["attributes"] == {"n": 7, "updated": T0 + 7}


@pytest.mark.parametrize("source", ["dynamodb://no-such-table", "dynamodb://"])
def test_a_table_that_is_not_there_is_refused_by_name_and_nothing_is_written(cf, capsys, tmp_path, source):
    # GIVEN a table source that names no table of the stack's account and Region (a typo, or nothing)
    # WHEN it is imported
    status, out, err = cli(capsys, "import", source, "--id-field", "orderId", "--effective-at-field", "updated")
    # THEN it is refused as a missing file is (exit 2, one line naming the source), before anything is written:
    # no checkpoint, no rejects file
    assert status == 2 and out == "", err
    assert err.startswith(f"changeflow: {source}: ") and "no such table" in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["--rejects", "--checkpoint"])
def test_a_rejects_or_checkpoint_file_that_cannot_be_written_is_refused_before_anything_is_written(cf, capsys, tmp_path,
                                                                                                  option):
    # GIVEN a source, and a rejects file or checkpoint in a directory that does not exist (a typo)
    source = jsonl(tmp_path / "dump.jsonl", [{"id": "unwritable#1", "n": 1}])
    # WHEN it is imported
    status, out, err = cli(capsys, "import", source.name, "--id-field", "id", "--effective-at", T0,
                           option, "no-such-dir/file")
    # THEN one line names the file (exit 2), and nothing is written: no checkpoint, no rejects file, no change
    assert status == 2 and out == "", err
    assert err.startswith("changeflow: no-such-dir/file: ") and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump.jsonl"]
    assert versions_of(cf, "unwritable#1") == []


def test_an_older_record_for_an_imported_entity_is_stale_and_settings_must_match_to_resume(cf, capsys, tmp_path):
    first = jsonl(tmp_path / "a.jsonl", [{"id": "st#1", "at": T0 + 10, "v": "new"}])
    older = jsonl(tmp_path / "b.jsonl", [{"id": "st#1", "at": T0, "v": "old"}])
    assert cli(capsys, "import", first, "--id-field", "id", "--effective-at-field", "at", "--quiet")[0] == 0
    status, out, _ = cli(capsys, "import", older, "--id-field", "id", "--effective-at-field", "at", "--json")
    assert json.loads(out)["stale"] == 1 and status == 0
    assert cf.entity("st#1")["versions"][-1]["attributes"]["v"] == "new" and versions_of(cf, "st#1") == [1]
    # the checkpoint of one import is not resumed with other settings
    status, _, err = cli(capsys, "import", older, "--id-field", "id", "--effective-at-field", "at",
                         "--actor", "someone-else", "--checkpoint", "b.jsonl.checkpoint")
    assert status == 2 and "checkpoint of another import" in err and "actor" in err
    # and an import needs an effective time, once
    assert cli(capsys, "import", older, "--id-field", "id")[0] == 2
    assert cli(capsys, "import", tmp_path / "missing.jsonl", "--id-field", "id", "--effective-at", "0")[0] == 2


# --- resumable: killed and resumed, the same outcome ----------------------------------------------------
def test_an_import_stopped_midway_resumes_without_starting_what_is_done(shared, tmp_path):
    _, client = shared
    records = [sources.Record(f"line {i + 1}", {"id": f"rs#{i}", "at": T0 + i, "x": i}) for i in range(24)]
    plan = Plan("id", "at")
    calls = []
    start, wait = entry_point(client, "stepfunctions", 60)

    def counting_start(request):
        calls.append(request["changeId"])
        return start(request)

    def interrupted_after(n):
        for i, record in enumerate(records):
            if i == n:
                raise KeyboardInterrupt  # Ctrl-C, as the main thread receives it
            yield record

    checkpoint = tmp_path / "rs.checkpoint"
    importer = Importer(counting_start, wait, plan, Checkpoint(checkpoint, {"source": "rs"}), Rejects(None),
                        concurrency=4)
    first = importer.run(interrupted_after(10))
    assert first.stopped and first.counts["applied"] == 10 and len(calls) == 10

    resumed = Importer(counting_start, wait, plan, Checkpoint(checkpoint, {"source": "rs"}), Rejects(None),
                       concurrency=4).run(iter(records))
    assert not resumed.stopped and resumed.skipped == 10 and resumed.counts["applied"] == 14
    assert len(calls) == 24 and len(set(calls)) == 24  # no record started twice
    assert all(versions_of(client, f"rs#{i}") == [1] for i in range(24))


def test_a_checkpoint_torn_by_a_kill_loses_nothing_after_it(tmp_path):
    path = tmp_path / "torn.checkpoint"
    Checkpoint(path, {"source": "s"}).close()
    with path.open("a") as torn:
        torn.write('{"changeId": "import-to')  # killed while writing this line
    first = Checkpoint(path, {"source": "s"})
    first.record("import-next", "e#1", "applied", 1)
    first.close()
    assert Checkpoint(path, {"source": "s"}).done.keys() == {("e#1", "import-next")}
    with pytest.raises(Exception, match="checkpoint of another import"):
        Checkpoint(path, {"source": "other"})


# --- outcomes from the data: no DescribeExecution per record -----------------------------------------
def test_outcomes_are_read_from_the_table_and_only_a_failure_is_described(shared, monkeypatch):
    from changeflow.transfer import outcomes

    _, client = shared
    described, waited = [], []  # DescribeExecution requests; executions waited on (on the embedded stack,
    describe, wait_for = client.sfn.describe_execution, client.wait  # their ending read without a request)
    monkeypatch.setattr(client.sfn, "describe_execution", lambda **kw: described.append(kw) or describe(**kw))
    monkeypatch.setattr(client, "wait", lambda arn, *a, **kw: waited.append(arn) or wait_for(arn, *a, **kw))
    start, wait = entry_point(client, "stepfunctions", 60)
    records = [sources.Record(str(i), {"id": f"oc#{i}", "x": i}) for i in range(5)]
    summary = Importer(start, wait, Plan("id", effective_at=T0), Checkpoint(None, {}), Rejects(None),
                       concurrency=5).run(iter(records))
    assert summary.counts["applied"] == 5 and described == [] == waited  # the data answered every one
    # a change the workflow refuses never shows in the data: its execution is described, once it is late
    request = {"entityId": "oc#0", "operation": "rollback", "toVersion": 9, "changeId": "oc-rollback",
               "effectiveAt": T0 + 1}
    _, arn = client.start(request)
    execution = outcomes.settle(client, request, arn, timeout=60, describe_after=0.3)
    assert execution.status == "FAILED" and execution.error == "NotFound" and waited == [arn]


def test_a_change_applied_then_pushed_past_the_ids_v0_remembers_is_told_applied_never_stale(shared, monkeypatch):
    """GIVEN a record's change applied as version 1, WHEN more newer changes than `v0` remembers land before
    its outcome is read, THEN the data still answers what its execution did (applied, version 1), not
    `stale` because `v0` is newer; the same change sent again by another execution is a duplicate."""
    from changeflow.transfer import outcomes

    _, client = shared
    request = {"entityId": "ow#1", "operation": "put", "attributes": {"x": 0}, "changeId": "rec-1",
               "effectiveAt": T0}
    _, arn = client.start(request)
    assert client.wait(arn, 60).output["outcome"] == "applied"
    for i in range(model.RECENT_CHANGE_IDS + 1):
        assert client.submit({**request, "attributes": {"x": i + 1}, "changeId": f"newer-{i}",
                              "effectiveAt": T0 + 1 + i}).output["outcome"] == "applied"
    told = outcomes.settle(client, request, arn, timeout=60, describe_after=0.3)
    assert (told.status, told.output["outcome"], told.output["version"]) == ("SUCCEEDED", "applied", 1)
    _, again = client.start(request, redeliver=True)
    assert client.wait(again, 60).output["outcome"] == "stale"  # past the window the workflow cannot tell
    told = outcomes.settle(client, request, again, timeout=60, describe_after=0.3)
    assert (told.output["outcome"], told.output["version"]) == ("duplicate", 1)
    # where the history cannot tell (a retention window expired the oldest), the execution is described at once
    monkeypatch.setattr(outcomes.Applied, "version_of", lambda *args: outcomes.Applied.UNKNOWABLE)
    began = time.monotonic()
    told = outcomes.settle(client, request, arn, timeout=60, describe_after=60)
    assert (told.output["outcome"], told.output["version"]) == ("applied", 1) and time.monotonic() - began < 10
    monkeypatch.undo()
    # a change that never applied is stale, as before
    older = {**request, "changeId": "rec-older", "effectiveAt": T0 + 3}
    _, arn = client.start(older)
    told = outcomes.settle(client, older, arn, timeout=60, describe_after=0.3)
    assert (told.output["outcome"], told.output["version"]) == ("stale", model.RECENT_CHANGE_IDS + 2)


# --- quotas: throttled, slowed down, never dropped -----------------------------------------------------
def test_a_throttled_start_is_retried_until_it_goes_through_and_the_rate_drops(shared, tmp_path):
    _, client = shared
    start, wait = entry_point(client, "stepfunctions", 60)
    refusals = {}

    def throttling_start(request):  # every change is refused twice: a 400 ThrottlingException, then an API 429
        seen = refusals.setdefault(request["changeId"], 0)
        refusals[request["changeId"]] += 1
        if seen == 0:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "StartExecution")
        if seen == 1:
            return Execution("(not started)", "", "REJECTED", request, error="HTTP 429", cause="Too Many Requests")
        return start(request)

    records = [sources.Record(str(i), {"id": f"th#{i}", "x": i}) for i in range(6)]
    importer = Importer(throttling_start, wait, Plan("id", effective_at=T0), Checkpoint(None, {}), Rejects(None),
                        rate=50, concurrency=3, backoff_cap=0.2)
    summary = importer.run(iter(records))
    assert summary.counts["applied"] == 6 and summary.throttled == 12 and summary.counts["failed"] == 0
    assert importer.bucket.rate < 50  # the start rate came down, as adaptive retry's does
    assert all(versions_of(client, f"th#{i}") == [1] for i in range(6))


def test_the_token_bucket_keeps_the_rate_and_adapts_like_cubic():
    now = [0.0]
    bucket = TokenBucket(10, burst=1, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    for _ in range(21):
        bucket.take()
    assert now[0] == pytest.approx(2.0)  # 1 saved up, then 10 a second
    adaptive = AdaptiveRate(bucket, ceiling=10, clock=lambda: now[0])
    adaptive.throttled()
    assert bucket.rate == pytest.approx(7.0)
    adaptive.throttled()
    assert bucket.rate == pytest.approx(4.9)
    now[0] += 0.1
    adaptive.succeeded()
    assert 4.0 < bucket.rate < 7.0  # CUBIC climbs back slowly at first ...
    now[0] += 30
    adaptive.succeeded()
    assert bucket.rate == 10  # ... and never above the ceiling


# --- progress ----------------------------------------------------------------------------------------
def test_progress_is_plain_periodic_lines_when_not_a_terminal():
    import io

    from changeflow.transfer.importer import Summary

    stream = io.StringIO()
    progress = Progress(100, stream=stream, every=0.0)
    summary = Summary()
    summary.counts["applied"] = 40
    summary.skipped = 10
    progress.update(summary)
    progress.close(summary)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in stream.getvalue()
    assert lines[0].startswith("import: 50/100 records") and "records/s" in lines[0] and "s left" in lines[0]
    assert "applied 40" in lines[0] and "skipped 10" in lines[0]
    quiet = io.StringIO()
    Progress(100, stream=quiet, every=0.0, enabled=False).update(summary)
    assert quiet.getvalue() == ""


# --- export -----------------------------------------------------------------------------------------
def test_export_writes_every_version_with_every_attribute_and_its_digest_proves_the_file(cf, capsys, tmp_path):
    # GIVEN an entity with several versions, and one whose history carries an attribute this module does not
    # know (another change adds `principal`): the export must carry it, whatever it is
    for n in range(3):
        cf.submit({"entityId": "ex#1", "operation": "put", "attributes": {"n": n}, "actor": "alice"})
    item = chain.seal({model.PK: {"S": "ex#2"}, model.SK: {"S": model.history_sk(1)}, model.VERSION: {"N": "1"},
                       model.EFFECTIVE_AT: {"N": "1"}, model.CHANGE_ID: {"S": "c1"}, model.OPERATION: {"S": "put"},
                       "principal": {"M": {"arn": {"S": "arn:aws:iam::123456789012:role/importer"}}}},
                      chain.genesis("ex#2"))
    cf.dynamodb.put_item(TableName=cf.history_table, Item=item)

    status, out, _ = cli(capsys, "export", "ex#1", "--output", "one.jsonl", "--json")
    assert status == 0 and json.loads(out)["versions"] == 3
    lines = [json.loads(line) for line in Path("one.jsonl").read_text().splitlines()]
    assert [line["version"] for line in lines] == [1, 2, 3] and {line["actor"] for line in lines} == {"alice"}
    from changeflow.audit.digests import raw_history

    stored = raw_history(cf, "ex#1")
    as_json = json.loads(json.dumps(stored, default=lambda b: base64.b64encode(b).decode("ascii")))
    assert [line["item"] for line in lines] == as_json  # every attribute, exactly as stored (binary in base64)
    assert all(line["chainHash"] == chain.stored_hash(s) and line["executionArn"] == s["executionArn"]["S"]
               for line, s in zip(lines, stored))

    status, _, _ = cli(capsys, "export", "--all", "--output", "all.jsonl", "--digest", "all.digest")
    assert status == 0
    by_entity = {}
    for line in map(json.loads, Path("all.jsonl").read_text().splitlines()):
        by_entity.setdefault(line["entityId"], []).append(line)
    assert by_entity["ex#2"][0]["principal"] == {"arn": "arn:aws:iam::123456789012:role/importer"}
    assert cli(capsys, "verify-export", "all.jsonl", "--digest", "all.digest")[0] == 0
    # the digest is `changeflow digest`'s: the live stack can be proven against it too
    assert cli(capsys, "verify", "--all", "--since-digest", "all.digest")[0] == 0

    # WHEN the file is altered, a version dropped, or an entity dropped: each is found
    text = Path("all.jsonl").read_text().splitlines()
    first_ex1 = next(i for i, line in enumerate(text) if '"ex#1"' in line)
    for name, altered in {
        "content": [t.replace('"n":{"N":"1"}', '"n":{"N":"9"}') for t in text],
        "first version": text[:first_ex1] + text[first_ex1 + 1:],
        "last entity": [t for t in text if '"ex#2"' not in t],
        "a line nested past the parser's depth": text + ["[" * 5000 + "]" * 5000],
    }.items():
        Path(f"{name}.jsonl").write_text("\n".join(altered) + "\n")
        status, out, _ = cli(capsys, "verify-export", f"{name}.jsonl", "--digest", "all.digest")
        assert status == 1 and "PROBLEMS" in out, name
    Path("nested.digest").write_text("[" * 5000 + "]" * 5000)  # a digest file nested past the parser's depth
    status, _, err = cli(capsys, "verify-export", "all.jsonl", "--digest", "nested.digest")
    assert status == 2 and "nested.digest: not a JSON digest" in err and err.count("\n") == 1, err
    assert cli(capsys, "export", "no#such", "--output", "x.jsonl")[0] == 1


@pytest.mark.parametrize("args, status, says", [
    (["ex#nobody", "--output", "out.jsonl"], 1, "no such entity: 'ex#nobody'"),
    (["--all", "--output", "out.jsonl", "--digest", "no-such-dir/audit.digest"], 2, "no-such-dir/audit.digest: "),
])
def test_an_export_that_cannot_be_done_says_why_in_one_line_and_writes_no_file(cf, capsys, tmp_path, args, status,
                                                                                says):
    cf.submit({"entityId": "ex#there", "operation": "put", "attributes": {"n": 1}})
    # GIVEN an entity with no version, or a digest file that cannot be written
    # WHEN it is exported
    got, out, err = cli(capsys, "export", *args)
    # THEN one line says why, with its exit status, and no file is left behind (an empty export, or a whole one
    # without the digest that was asked for)
    assert got == status and out == "", err
    assert err.startswith("changeflow: ") and says in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_request_rules_are_the_workflows():
    plan = Plan("id", effective_at=T0, change_id_field="cid", actor_field="who")
    request = to_request({"id": 7, "cid": "c-1", "who": "bob", "x": 1}, plan)
    assert request["entityId"] == "7" and request["changeId"] == "c-1" and request["actor"] == "bob"
    a = to_request({"id": "e", "x": 1}, Plan("id", effective_at=T0))
    b = to_request({"id": "e", "x": 1}, Plan("id", effective_at=T0 + 1))
    c = to_request({"id": "e", "x": 2}, Plan("id", effective_at=T0))
    assert len({a["changeId"], b["changeId"], c["changeId"]}) == 3  # entity, time and content decide it
    assert a["changeId"] == to_request({"x": 1, "id": "e"}, Plan("id", effective_at=T0))["changeId"]


# --- the command as a user runs it: against `changeflow serve`, Ctrl-C, a real terminal ----------------
@pytest.fixture(scope="module")
def served():
    process = subprocess.Popen([sys.executable, "-m", "changeflow", "serve", "--port", "0", "--time-scale", "0.001"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        first = process.stdout.readline()
        assert first.startswith("changeflow serve: http://127.0.0.1:"), first
        yield first.split()[2]
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def _environment() -> dict[str, str]:
    return {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "PYTHONUNBUFFERED": "1"}


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"waited {timeout} s for {what}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux draws the terminal")
def test_ctrl_c_or_a_kill_stops_and_the_resumed_import_is_the_same(served, tmp_path, sigint_reaches_children):
    total = 150
    source = jsonl(tmp_path / "big.jsonl", [{"id": f"sv#{i}", "at": T0 + i, "i": i} for i in range(total)])
    command = [sys.executable, "-m", "changeflow", "import", str(source), "--id-field", "id", "--effective-at-field",
               "at", "--endpoint-url", served, "--rate", "15", "--concurrency", "4", "--progress-every", "0.2"]
    checkpoint = tmp_path / "big.jsonl.checkpoint"
    done = lambda: max(0, len(checkpoint.read_text().splitlines()) - 1) if checkpoint.exists() else 0  # noqa: E731

    # WHEN a run with stderr not a terminal gets SIGINT: plain progress lines, a clean stop, how to resume
    run = subprocess.Popen(command, cwd=tmp_path, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    _wait_for(lambda: done() >= 5, 60, "the first changes")
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert "Traceback" not in err and "import: " in err and "records/s" in err and "\r" not in err
    assert "stopped" in err and "Resume with the same command" in err and str(checkpoint.name) in err
    after_sigint = done()
    assert 5 <= after_sigint < total

    # WHEN a run is killed outright (SIGKILL: no chance to finish anything), mid-way through a checkpoint line
    killed = subprocess.Popen(command, cwd=tmp_path, env=_environment(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    _wait_for(lambda: done() >= after_sigint + 3, 60, "more changes")
    killed.kill()
    killed.wait(timeout=30)
    with checkpoint.open("a") as torn:
        torn.write('{"changeId": "import-torn')  # what a kill while writing leaves
    after_kill = done()

    # WHEN it is resumed on a real terminal (tmux), the bar shows; Ctrl-C typed there stops it again
    socket_name = f"changeflow-test-{os.getpid()}"
    tmux = ["tmux", "-L", socket_name]
    exported = " ".join(f"{k}={shlex.quote(v)}" for k, v in _environment().items()
                        if k.startswith(("AWS_", "PYTHON", "CHANGEFLOW")) or k == "PATH")
    shell = f"cd {shlex.quote(str(tmp_path))} && env {exported} {shlex.join(command)}; echo EXIT=$?; sleep 30"
    subprocess.run([*tmux, "new-session", "-d", "-x", "160", "-y", "20", "-s", "import", shell], check=True)
    try:
        def showing(*texts):
            """What the terminal shows, once it shows every one of ``texts`` (else None)."""
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "import"], capture_output=True,
                                    text=True).stdout
            return screen if all(t in screen for t in texts) else None

        bar = _wait_for(lambda: showing("rec/s", f"/{total}", "applied"), 60, "the bar")
        assert "skipped" in bar and "%|" in bar and "<" in bar  # done/total, records/s, ETA, outcome counts
        _wait_for(lambda: done() >= after_kill + 3, 60, "more changes")
        subprocess.run([*tmux, "send-keys", "-t", "import", "C-c"], check=True)
        shown = _wait_for(lambda: showing("EXIT="), 60, "the stop")
        assert "EXIT=130" in shown and "Resume with the same command" in shown and "Traceback" not in shown
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)

    # THEN resumed to the end: every record once, at version 1, no execution started for what was done
    final = subprocess.run([*command, "--json", "--rate", "200"], cwd=tmp_path, env=_environment(), capture_output=True,
                           text=True, timeout=120)
    summary = json.loads(final.stdout)
    assert final.returncode == 0, final.stderr
    assert summary["applied"] + summary["skipped"] + summary["duplicate"] == total
    assert summary["skipped"] >= after_kill + 2 and summary["failed"] == summary["rejected"] == 0
    client = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=served)
    assert all(versions_of(client, f"sv#{i}") == [1] for i in range(total))
    names = [e["name"] for e in client.executions(limit=10_000) if e["name"].startswith("sv-")]
    assert len(names) == total  # one execution per record, whatever the interruptions


def test_an_import_through_the_rest_api_of_serve_lands_once_too(served, tmp_path):
    source = jsonl(tmp_path / "api.jsonl", [{"id": f"api#{i}", "at": T0 + i, "i": i} for i in range(3)]
                   + [{"id": "api#bad", "at": T0, "sk": "x"}])
    command = [sys.executable, "-m", "changeflow", "import", str(source), "--id-field", "id", "--effective-at-field",
               "at", "--endpoint-url", served, "--via", "api", "--json"]
    first = subprocess.run(command, cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=120)
    summary = json.loads(first.stdout)
    assert (summary["applied"], summary["rejected"]) == (3, 1) and first.returncode == 1, first.stderr
    client = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=served)
    executions = len([e for e in client.executions(limit=10_000) if e["name"].startswith("api-")])
    assert executions == 3
    # run again without the checkpoint: the importer finds each change in the table before it posts anything,
    # through the API as through Step Functions: nothing new starts, nothing is written twice
    (tmp_path / "api.jsonl.checkpoint").unlink()
    again = json.loads(subprocess.run(command, cwd=tmp_path, env=_environment(), capture_output=True, text=True,
                                      timeout=120).stdout)
    assert (again["duplicate"], again["applied"], again["rejected"]) == (3, 0, 1)
    assert len([e for e in client.executions(limit=10_000) if e["name"].startswith("api-")]) == executions
    assert all(versions_of(client, f"api#{i}") == [1] for i in range(3))


def test_a_child_the_suite_signals_gets_sigint_however_the_suite_was_started(sigint_reaches_children):
    # GIVEN the suite started as a background job of a script (SIGINT ignored, inherited across exec)
    probe = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"]
    ignoring = subprocess.run(["bash", "-c", 'trap "" INT; exec "$@"', "probe", *probe], capture_output=True,
                              text=True, check=True)
    assert ignoring.stdout.strip() == "False"  # the trap is what a background job starts with: no handler
    # WHEN the test starts its child with the fixture in place, THEN the child handles SIGINT as in a terminal
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip() == "True"
