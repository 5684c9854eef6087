"""Digests nobody can rewrite (issue 35): taken on a schedule by the stack's own function, chained, bound to
their metadata, kept in a bucket with S3 Object Lock in compliance mode, and checked by ``changeflow verify
--digests s3://...``. The attacker here has administrator rights: ``s3:*`` and ``dynamodb:*`` (plain boto3
clients of the embedded stack, which evaluates no IAM: every call an administrator could make goes through),
and S3 refuses what AWS documents it refuses to anyone (tests/test_parity.py pins those refusals)."""

from __future__ import annotations

import datetime
import json
import random
import time

import boto3
import pytest
from botocore.exceptions import ClientError

from changeflow import cli
from changeflow.audit import committed, digestchain
from changeflow.client import Changeflow, targets
from changeflow.local.moto_patches.scheduler.runs import Runs
from changeflow_core import chain, digestformat, digesting, model, steps
from changeflow_core.digesttree import HeadTree
from conftest import EVENTS

T0 = 1_767_225_600_000
EVENT = json.loads((EVENTS / "functions" / "take_digest.json").read_text(encoding="utf-8"))
QUIET = {"DigestSchedule": "rate(365 days)"}  # the schedule does not fire during the test: it takes each digest


def put(entity: str, n: int) -> dict:
    return {"entityId": entity, "operation": "put", "attributes": {"n": n}, "effectiveAt": T0 + n,
            "changeId": f"{entity}-{n}"}


class Stack:
    """An embedded stack seen by its auditor (the CLI) and by an administrator (boto3, s3:* and dynamodb:*)."""

    def __init__(self, embedded, monkeypatch):
        self.embedded = embedded
        self.cf = Changeflow.for_embedded(embedded)
        monkeypatch.setattr(targets, "client_for", lambda args: self.cf)
        self.location = embedded.outputs["DigestLocation"]
        self.bucket, self.prefix = digestchain.parse_location(self.location)
        self.s3 = boto3.client("s3", region_name="us-east-1")

    def take(self) -> dict:
        payload, failed = self.embedded.lambdas.invoke(self.embedded.function("DigestFunction"), EVENT)
        assert not failed, payload
        return payload

    def digests(self) -> list[dict]:
        """Every digest object's first version, oldest first: ``{key, versionId, document}``."""
        listed = self.s3.list_object_versions(Bucket=self.bucket, Prefix=self.prefix).get("Versions", [])
        found = {}
        for version in sorted(listed, key=lambda v: v["LastModified"]):
            if digestformat.parse_key(self.prefix, version["Key"]) and version["Key"] not in found:
                body = self.s3.get_object(Bucket=self.bucket, Key=version["Key"], VersionId=version["VersionId"])
                found[version["Key"]] = {"key": version["Key"], "versionId": version["VersionId"],
                                         "document": json.loads(body["Body"].read())}
        return sorted(found.values(), key=lambda d: d["document"]["sequence"])

    def forge(self, document: dict, **changes) -> dict:
        """A digest as the administrator writes it: fields changed, its hash recomputed, at its own key."""
        forged = {k: v for k, v in document.items() if k not in ("hash", "entities")}
        forged.update(changes)
        forged["hash"] = digestformat.digest_hash(forged)
        forged["entities"] = changes.get("entities", document["entities"])
        self.s3.put_object(Bucket=self.bucket, Key=digestformat.key_of(self.prefix, forged),
                           Body=digestformat.dumps(forged), ChecksumAlgorithm="SHA256")
        return forged

    def verify(self, *args: str) -> tuple[int, str]:
        code = cli.main(["verify", "--digests", self.location, *args])
        return code, ""


@pytest.fixture
def quiet(make_stack, monkeypatch):
    return Stack(make_stack(**QUIET), monkeypatch)


def verified(stack: Stack, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["verify", "--digests", stack.location])
    return code, capsys.readouterr().out


def with_three_digests(stack: Stack) -> list[dict]:
    for entity in ("a", "b", "c"):
        stack.cf.submit(put(entity, 1))
    stack.take()
    stack.cf.submit(put("a", 2))
    stack.take()
    stack.cf.submit(put("b", 2))
    stack.take()
    return stack.digests()


# --- a stack left alone ---------------------------------------------------------------------------------------
def test_a_stack_left_alone_writes_chained_digests_into_a_compliance_locked_bucket(make_stack, monkeypatch, capsys):
    # GIVEN the stack as deployed: an hourly schedule, on the stack's time scale (an hour is 1.8 s here)
    stack = Stack(make_stack(), monkeypatch)
    stack.cf.submit(put("a", 1))
    deadline = time.monotonic() + 30
    while len(stack.digests()) < 3 and time.monotonic() < deadline:
        stack.cf.submit(put("b", len(stack.digests()) + 1))
        time.sleep(0.5)
    # THEN its digests form a chain, one scheduled hour apart, each locked in compliance mode for seven years
    found = stack.digests()
    assert len(found) >= 3
    documents = [d["document"] for d in found]
    assert [d["sequence"] for d in documents] == list(range(1, len(documents) + 1))
    assert documents[0]["previous"] is None and documents[0]["kind"] == "full"
    assert all(later["previous"] == earlier["hash"] for earlier, later in zip(documents, documents[1:]))
    fired = [when for arn, when in Runs.fired if "DigestFunction" in arn]
    times = [datetime.datetime.fromisoformat(t.replace("Z", "+00:00")) for t in fired[-3:]]
    assert {b - a for a, b in zip(times, times[1:])} == {datetime.timedelta(hours=1)}
    lock = stack.s3.get_object_lock_configuration(Bucket=stack.bucket)["ObjectLockConfiguration"]
    assert {k: lock["Rule"]["DefaultRetention"][k] for k in ("Mode", "Days")} == {"Mode": "COMPLIANCE", "Days": 2557}
    assert stack.s3.get_bucket_versioning(Bucket=stack.bucket)["Status"] == "Enabled"
    for digest in found:
        head = stack.s3.head_object(Bucket=stack.bucket, Key=digest["key"], VersionId=digest["versionId"])
        assert head["ObjectLockMode"] == "COMPLIANCE"
        assert head["ObjectLockRetainUntilDate"] - head["LastModified"] > datetime.timedelta(days=2556)
    # AND the auditor's check passes
    code, out = verified(stack, capsys)
    assert code == 0, out
    assert "the chain holds and the table matches every head it committed" in out
    assert cli.main(["verify", "--digests", stack.location, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ok"] is True and summary["digests"] >= 3 and summary["entities"] == 2 and summary["findings"] == []


def test_a_bucket_of_another_account_takes_the_digests_and_the_stack_creates_none(make_stack, monkeypatch, capsys):
    # DigestBucketArn: the auditor's bucket (created and locked by its owner); the stack makes no bucket of its own
    stack = Stack(make_stack(DigestBucketArn="arn:aws:s3:::auditor-digests", **QUIET), monkeypatch)
    assert stack.bucket == "auditor-digests" and stack.embedded.outputs["DigestRetentionDays"] == "0"
    assert [b["Name"] for b in stack.s3.list_buckets()["Buckets"]] == []
    stack.s3.create_bucket(Bucket="auditor-digests", ObjectLockEnabledForBucket=True)
    stack.s3.put_object_lock_configuration(Bucket="auditor-digests", ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Years": 10}}})
    statements = stack.embedded.template.function_properties("DigestFunction")["Policies"][0]["Statement"]
    assert {s.get("Sid"): s["Resource"] for s in statements if s.get("Sid")} == {
        "ListTheDigests": "arn:aws:s3:::auditor-digests",
        "ReadAndPutDigests": "arn:aws:s3:::auditor-digests/changeflow/digests/*"}
    stack.cf.submit(put("a", 1))
    stack.take()
    stack.take()
    code, out = verified(stack, capsys)
    assert code == 0 and "2 in the chain" in out, out


def test_a_digest_binds_its_time_table_state_machine_format_and_predecessor(quiet):
    first, second = (d["document"] for d in with_three_digests(quiet)[:2])
    assert second["previous"] == first["hash"] == digestformat.digest_hash(first)
    for field, value in (("takenAt", "2020-01-01T00:00:00.000Z"), ("table", "other"), ("stateMachineArn", "arn:x"),
                         ("format", "changeflow-digest/3"), ("previous", "0" * 64), ("root", "1" * 64),
                         ("sequence", 9), ("count", 1)):
        assert digestformat.digest_hash({**first, field: value}) != first["hash"], field


# --- cost and scale: only what changed is read --------------------------------------------------------------
def test_dynamodb_keeps_the_index_keys_numbers_in_every_item_so_an_insider_cannot_retype_them(quiet):
    # a GSI's key attributes have one type in every item of the table, in the index or not ("Type mismatch
    # for Index Key"): recordedHour and digestShard stay numbers, in v0 and in history alike
    quiet.cf.submit(put("a", 1))
    for sk in (model.LATEST_SK, model.history_sk(1)):
        for name in sorted(model.CHANGES_INDEX_KEYS):
            with pytest.raises(ClientError, match="Type mismatch"):
                quiet.cf.dynamodb.update_item(TableName=quiet.cf.table, Key={"pk": {"S": "a"}, "sk": {"S": sk}},
                                              UpdateExpression="SET #n = :x", ExpressionAttributeNames={"#n": name},
                                              ExpressionAttributeValues={":x": {"S": "then"}})


def test_a_digest_reads_only_the_entities_changed_since_the_last_one(quiet):
    for i in range(5):
        quiet.cf.submit(put(f"e{i}", 1))
    first = quiet.take()
    assert first["kind"] == "full" and first["count"] == 5 and first["requests"]["Scan"] == digesting.SCAN_SEGMENTS
    quiet.cf.submit(put("e3", 2))
    second = quiet.take()
    assert second["kind"] == "changes" and second["changed"] == 1 and second["count"] == 5
    assert second["requests"]["Query"] == model.DIGEST_SHARDS and "Scan" not in second["requests"]
    assert second["requests"]["BatchGetItem"] == 1  # the v0 of each entity the index names (this hour's five)
    assert [(h["entityId"], h["version"]) for h in quiet.digests()[-1]["document"]["entities"]] == [("e3", 2)]
    assert quiet.take()["changed"] == 0  # read again inside the overlap: the same head, not a change


def test_a_version_recorded_in_the_hour_of_the_one_before_leaves_the_index_keys_as_they_were(quiet, monkeypatch):
    # DynamoDB writes nothing to a GSI for a table write that changes no key and nothing it projects (GSI.html,
    # "Provisioned throughput considerations"): the index is KEYS_ONLY (tests/test_template.py), and v0's keys
    # change only with the hour its version was recorded in
    clock = {"ms": T0 + 5 * 60_000}
    monkeypatch.setattr(steps, "now_ms", lambda: clock["ms"])

    def keys() -> dict:
        latest = quiet.cf.dynamodb.get_item(TableName=quiet.cf.table, Key={"pk": {"S": "a"}, "sk": {"S": "v0"}})["Item"]
        return {k: latest[k]["N"] for k in model.CHANGES_INDEX_KEYS}

    quiet.cf.submit(put("a", 1))
    first = keys()
    assert first == {model.DIGEST_SHARD: str(model.digest_shard("a")), model.RECORDED_HOUR: str(T0 // model.HOUR_MS)}
    for n, minutes in ((2, 20), (3, 59)):  # later in the same hour: the same keys
        clock["ms"] = T0 + minutes * 60_000
        quiet.cf.submit(put("a", n))
        assert keys() == first
    clock["ms"] = T0 + model.HOUR_MS  # the next hour: the entry moves
    quiet.cf.submit(put("a", 4))
    assert keys() == {**first, model.RECORDED_HOUR: str(T0 // model.HOUR_MS + 1)}


def test_a_head_read_behind_the_last_digest_is_never_taken_back(quiet, capsys):
    # an eventually consistent index read may be behind what a digest took: the tree never goes back (and an
    # insider who puts an older v0 back is named by the table's check, not by a digest that went back)
    quiet.cf.submit(put("a", 1))
    quiet.cf.submit(put("a", 2))
    quiet.take()
    older = quiet.cf.dynamodb.get_item(TableName=quiet.cf.table, Key={"pk": {"S": "a"}, "sk": {"S": model.history_sk(1)}})
    quiet.cf.dynamodb.put_item(TableName=quiet.cf.table, Item={
        **older["Item"], "sk": {"S": model.LATEST_SK}, **index_keys("a", int(time.time() * 1000))})
    assert quiet.take()["changed"] == 0
    code, out = verified(quiet, capsys)
    assert code == 1 and "HeadWentBack" not in out and "a: " in out, out


def test_two_runs_at_once_write_one_digest(quiet, monkeypatch):
    # a retry while a slow run still works: the second sees the first's digest of its sequence and stops quietly
    quiet.cf.submit(put("a", 1))
    quiet.take()
    real_take = digesting.take

    def slow_take(*args, **kwargs):  # another run writes digest 2 between this run's listing and its put
        real_list = digesting.Bucket.listing

        def listing(self):
            found = real_list(self)
            digesting.Bucket.listing = real_list
            assert real_take(*args, **kwargs).digest["sequence"] == 2
            return found

        digesting.Bucket.listing = listing
        return real_take(*args, **kwargs)

    monkeypatch.setattr(digesting, "take", slow_take)
    payload = quiet.take()
    assert "another run took it" in payload["skipped"]
    assert [d["document"]["sequence"] for d in quiet.digests()] == [1, 2]


def test_the_function_rebuilds_its_heads_from_the_newest_checkpoint(quiet, monkeypatch):
    monkeypatch.setattr(digestformat, "CHECKPOINT_EVERY", 2)
    quiet.cf.submit(put("a", 1))
    quiet.take()
    quiet.cf.submit(put("b", 1))
    assert quiet.take()["checkpoint"].startswith(quiet.prefix + "heads/000000000002-")
    quiet.cf.submit(put("c", 1))
    third = quiet.take()
    assert third["requests"]["GetObject"] == 2  # the head digest and its checkpoint: no walk back to digest 1
    assert third["count"] == 3
    tree = committed.load_location(quiet.cf, quiet.location).tree
    assert tree.root() == third["root"]


def test_a_head_the_function_cannot_rebuild_restarts_from_the_table_and_is_reported(quiet, capsys):
    digests = with_three_digests(quiet)
    newest = digests[-1]["document"]
    quiet.forge(newest, sequence=4, previous=newest["hash"], root="0" * 64, entities=[],
                takenAt=digestformat.taken_at(int(time.time() * 1000)))
    taken = quiet.take()
    assert taken["sequence"] == 5 and taken["kind"] == "full" and "root" in taken["restart"]
    code, out = verified(quiet, capsys)
    assert code == 1
    assert "RootMismatch: digest #4" in out and "DigestRestarted: digest #5" in out


# --- no change falls between two digests ------------------------------------------------------------------------
SKEW_MS = digesting.OVERLAP_MS // 2 - 10_000  # a writer's clock behind, the function's ahead: each up to this
STEP_MS = 5_000  # a version's recordedAt is taken this long before its v0 write lands (the step's timeout: 10 s)


def heads_held(cf) -> tuple[str, int]:
    """The root and count of every head the table holds now (read apart from the function's own reader)."""
    tree = HeadTree()
    for page in cf.dynamodb.get_paginator("scan").paginate(TableName=cf.table, ConsistentRead=True):
        for item in page["Items"]:
            if item["sk"]["S"] == model.LATEST_SK:
                head = chain.head(item["pk"]["S"], item)
                tree.put(head["entityId"], head["version"], head["chainHash"])
    return tree.root(), len(tree)


@pytest.mark.parametrize("seed", range(3))
def test_every_digest_commits_every_head_the_table_held_when_it_read_whatever_the_clocks(quiet, monkeypatch, seed):
    # GIVEN writers whose clocks are behind or ahead of the digest function's (by up to half the overlap each),
    # versions recorded on both sides of hour boundaries, digests that run late by hours, and versions whose
    # v0 write lands just after a digest read the table (their recordedAt taken before its clock)
    rng = random.Random(seed)
    now = {"ms": T0 + rng.randrange(model.HOUR_MS)}  # the true time; each clock is off by its skew
    skew = {"writer": 0, "digest": 0}
    monkeypatch.setattr(steps, "now_ms", lambda: now["ms"] + skew["writer"])
    monkeypatch.setattr(digesting, "clock_ms", lambda: now["ms"] + skew["digest"])
    counter = iter(range(1, 10**6))

    def write(entity: str, behind_ms: int = 0) -> None:
        skew["writer"] = rng.randint(-SKEW_MS, SKEW_MS) - behind_ms
        assert quiet.cf.submit(put(entity, next(counter))).status == "SUCCEEDED"

    held = {}

    def after_reading(read):  # the function's read of the table (the index and v0, or the first digest's Scan)
        def reads(*args, **kwargs):
            found = read(*args, **kwargs)
            held["heads"] = heads_held(quiet.cf)
            return found
        return reads

    monkeypatch.setattr(digesting, "changed_since", after_reading(digesting.changed_since))
    monkeypatch.setattr(digesting, "every_latest", after_reading(digesting.every_latest))
    taken = 0
    for _ in range(14):
        for entity in rng.sample(["e0", "e1", "e2", "e3", "e4"], rng.randint(0, 2)):
            write(entity)
        step = rng.choice(["minutes", "to just before the hour", "to just after the hour", "hours late"])
        to_hour = model.HOUR_MS - now["ms"] % model.HOUR_MS
        now["ms"] += {"minutes": rng.randint(1, 20) * 60_000, "to just before the hour": to_hour - rng.randint(1, 30_000),
                      "to just after the hour": to_hour + rng.randint(1, 60_000),
                      "hours late": rng.randint(2, 5) * model.HOUR_MS}[step]
        for entity in rng.sample(["e0", "e1", "e2", "e3", "e4"], rng.randint(0, 2)):
            write(entity)
        skew["digest"] = rng.randint(-SKEW_MS, SKEW_MS)
        digest = quiet.take()
        taken += 1
        # THEN each digest commits every head the table held when it had read it
        assert (digest["root"], digest["count"]) == held["heads"], (seed, digest["sequence"], step)
        assert digest["kind"] == ("full" if taken == 1 else "changes")
        # AND a version recorded before its clock whose v0 write landed after its reads is in the next one
        for entity in rng.sample(["e0", "e1", "e5"], rng.randint(0, 1)):
            write(entity, behind_ms=STEP_MS)


# --- the attacker: history rewritten, then a digest that matches it -------------------------------------------
def index_keys(entity: str, recorded_at: int) -> dict:
    """What an administrator who knows the changes index puts in a v0 so that the next digest reads it."""
    return {model.RECORDED_AT: {"N": str(recorded_at)},
            **{k: {"N": str(v)} for k, v in model.changes_index_keys(entity, recorded_at).items()}}


def rewrite_history(cf, entity: str, title: str) -> None:
    """The administrator who knows the chain: version 1 rewritten, every later link and v0 resealed, v0 with
    its changes-index keys and a fresh recordedAt so that the next digest reads it."""
    history = sorted(cf.dynamodb.query(TableName=cf.history_table, KeyConditionExpression="pk = :p",
                                       ExpressionAttributeValues={":p": {"S": entity}})["Items"],
                     key=lambda i: i["sk"]["S"])
    history = [i for i in history if i["sk"]["S"].startswith(model.HISTORY_PREFIX)]
    prev = chain.genesis(entity)
    for position, stored in enumerate(history):
        if position == 0:
            stored = {**stored, "n": {"S": title}}
        if position == len(history) - 1:
            stored = {**stored, model.RECORDED_AT: {"N": str(int(time.time() * 1000))}}
        resealed = chain.seal(stored, prev)
        cf.dynamodb.put_item(TableName=cf.history_table, Item=resealed)
        prev = chain.stored_hash(resealed)
    latest = {**resealed, model.SK: {"S": model.LATEST_SK},
              **index_keys(entity, int(resealed[model.RECORDED_AT]["N"]))}
    cf.dynamodb.put_item(TableName=cf.table, Item=latest)


def test_history_rewritten_then_a_matching_digest_breaks_the_chain_of_digests_by_name(quiet, capsys):
    # GIVEN three digests that committed version 2 of "a"
    with_three_digests(quiet)
    assert verified(quiet, capsys)[0] == 0
    # WHEN the administrator rewrites "a" with every hash recomputed, and a new digest commits the rewrite
    rewrite_history(quiet.cf, "a", "rewritten")
    taken = quiet.take()
    assert taken["changed"] == 1
    assert cli.main(["verify", "a"]) == 0  # the table alone is consistent again
    # THEN the chain of digests breaks between the last digest of the original chain and the new one
    code, out = verified(quiet, capsys)
    assert code == 1
    assert ("a: HistoryRewritten: version 1 of 'a', committed by digest #1" in out
            and "digest #4" in out and "breaks between digest #2" in out and "and digest #4" in out), out


def test_a_digest_the_administrator_writes_for_a_rewritten_table_is_caught_the_same_way(quiet, capsys):
    digests = with_three_digests(quiet)
    rewrite_history(quiet.cf, "b", "rewritten")
    newest = digests[-1]["document"]
    rewritten = chain.head("b", quiet.cf.dynamodb.get_item(
        TableName=quiet.cf.table, Key={"pk": {"S": "b"}, "sk": {"S": "v0"}})["Item"])
    tree = committed.load_location(quiet.cf, quiet.location).tree
    tree.put("b", rewritten["version"], rewritten["chainHash"])
    quiet.forge(newest, sequence=4, previous=newest["hash"], root=tree.root(), entities=[rewritten],
                takenAt=digestformat.taken_at(int(time.time() * 1000)), kind="changes")
    code, out = verified(quiet, capsys)
    assert code == 1
    assert "b: HistoryRewritten: version 1 of 'b', committed by digest #1" in out, out
    assert "breaks between digest #3" in out and "and digest #4" in out
    assert "HeadRewritten: digest #4" in out  # version 2 of 'b' committed again, with another hash


def test_an_entity_moved_out_of_the_changes_index_is_named_and_seen_again_at_its_next_version(quiet, capsys):
    # the administrator moves v0's index entry to an hour long past: its direct edits hide from the digests
    quiet.cf.submit(put("a", 1))
    quiet.take()
    key = {"pk": {"S": "a"}, "sk": {"S": model.LATEST_SK}}
    quiet.cf.dynamodb.update_item(TableName=quiet.cf.table, Key=key, UpdateExpression="SET #h = :old",
                                  ExpressionAttributeNames={"#h": model.RECORDED_HOUR},
                                  ExpressionAttributeValues={":old": {"N": "1"}})
    assert quiet.take()["changed"] == 0
    # THEN verify names the v0 whose keys are not its own
    capsys.readouterr()
    assert cli.main(["verify", "a"]) == 1
    assert "v0's keys in the changes index (digestShard" in capsys.readouterr().out
    # AND its next version puts it back where the digests read it
    quiet.cf.submit(put("a", 2))
    taken = quiet.take()
    assert taken["changed"] == 1 and [e["version"] for e in quiet.digests()[-1]["document"]["entities"]] == [2]
    assert cli.main(["verify", "a"]) == 0


# --- the attacker: the bucket ----------------------------------------------------------------------------------
def test_a_locked_digest_cannot_be_deleted_shortened_or_unversioned_even_by_an_administrator(quiet):
    digest = with_three_digests(quiet)[0]
    s3, bucket, key, version = quiet.s3, quiet.bucket, digest["key"], digest["versionId"]
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version)
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version, BypassGovernanceRetention=True)
    refused = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key, "VersionId": version}]})
    assert refused.get("Errors") and not refused.get("Deleted")
    for mode, until in (("COMPLIANCE", datetime.datetime(2020, 1, 1)), ("GOVERNANCE", datetime.datetime(2099, 1, 1))):
        with pytest.raises(ClientError, match="AccessDenied"):
            s3.put_object_retention(Bucket=bucket, Key=key, VersionId=version,
                                    Retention={"Mode": mode, "RetainUntilDate": until})
    with pytest.raises(ClientError, match="InvalidBucketState"):
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    with pytest.raises(ClientError, match="BucketNotEmpty"):
        s3.delete_bucket(Bucket=bucket)
    body = s3.get_object(Bucket=bucket, Key=key, VersionId=version)
    assert json.loads(body["Body"].read()) == digest["document"]


def test_a_digest_written_over_or_hidden_is_named_and_the_locked_one_still_read(quiet, capsys):
    digests = with_three_digests(quiet)
    first, second = digests[0], digests[1]
    altered = {**first["document"], "takenAt": "2020-01-01T00:00:00.000Z"}
    quiet.s3.put_object(Bucket=quiet.bucket, Key=first["key"], Body=digestformat.dumps(altered),
                        ChecksumAlgorithm="SHA256")
    quiet.s3.delete_object(Bucket=quiet.bucket, Key=second["key"])  # a delete marker: S3 allows it
    code, out = verified(quiet, capsys)
    assert code == 1
    assert f"DigestOverwritten: {first['key']}" in out and f"DigestHidden: {second['key']}" in out
    assert "3 in the chain" in out and "ChainBroken" not in out and "HistoryRewritten" not in out


def test_a_default_retention_turned_off_leaves_the_old_digests_locked_and_names_the_new_one(quiet, capsys):
    with_three_digests(quiet)
    quiet.s3.put_object_lock_configuration(Bucket=quiet.bucket, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    quiet.cf.submit(put("c", 2))
    taken = quiet.take()
    code, out = verified(quiet, capsys)
    assert code == 1 and out.count("DigestNotLocked") == 1 and taken["key"] in out


@pytest.mark.parametrize("field, value, named", [
    ("takenAt", "2020-01-01T00:00:00.000Z", "TakenAtAltered"),
    ("table", "someone-elses-table", "OtherStack"),
])
def test_a_digest_with_its_time_or_table_altered_is_named(quiet, capsys, field, value, named):
    newest = with_three_digests(quiet)[-1]["document"]
    quiet.forge(newest, **{field: value})
    code, out = verified(quiet, capsys)
    assert code == 1 and named in out, out
    if named == "TakenAtAltered":
        assert "DigestForked" in out  # a second digest #3: only the first written is in the chain


def test_a_digest_skipped_in_the_chain_is_named(quiet, capsys):
    digests = with_three_digests(quiet)
    second, third = digests[1]["document"], digests[2]["document"]
    now = digestformat.taken_at(int(time.time() * 1000))
    quiet.forge(third, sequence=4, previous=second["hash"], takenAt=now)  # as if #3 had never been
    code, out = verified(quiet, capsys)
    assert code == 1 and "ChainBroken: digest #4" in out and "does not follow digest #3" in out, out
    quiet.forge(third, sequence=6, previous=third["hash"], takenAt=now)
    code, out = verified(quiet, capsys)
    assert "DigestMissing: digest #5 is not in the bucket" in out


def test_an_old_digest_replayed_as_the_newest_is_named_and_does_not_stop_the_function(quiet, capsys):
    digests = with_three_digests(quiet)
    old = digests[0]["document"]
    replay_key = f"{quiet.prefix}{4:012d}-{old['hash'][:16]}.json"
    quiet.s3.put_object(Bucket=quiet.bucket, Key=replay_key, Body=digestformat.dumps(old), ChecksumAlgorithm="SHA256")
    assert quiet.take()["sequence"] == 4  # the function's own #4 is written beside it
    code, out = verified(quiet, capsys)
    assert code == 1
    assert f"DigestMisplaced: {replay_key} holds digest #1" in out
    assert "DigestForked" in out, out  # and TakenAtAltered, when it is replayed later than its run's 20 minutes


def test_digests_that_stopped_are_named(quiet):
    with_three_digests(quiet)
    expected = digestchain.Expected(quiet.cf.table, quiet.cf.history_table, quiet.cf.state_machine_arn,
                                    period=datetime.timedelta(hours=1))
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=3)
    found = digestchain.load(quiet.s3, quiet.bucket, quiet.prefix, expected, now=later)
    assert [f.name for f in found.findings] == ["DigestsStopped"]
    assert digestchain.load(quiet.s3, quiet.bucket, quiet.prefix, expected).ok


# --- since a digest, and proofs, against the bucket ----------------------------------------------------------
def test_since_digest_and_proof_take_a_digest_in_the_bucket(quiet, capsys, tmp_path):
    digests = with_three_digests(quiet)
    second = digests[1]
    address = f"s3://{quiet.bucket}/{second['key']}"
    assert cli.main(["verify", "--all", "--since-digest", address]) == 0
    assert cli.main(["proof", "a", "1", "--digest", address, "--output", str(tmp_path / "proof.json")]) == 0
    kept = tmp_path / "digest.json"
    kept.write_bytes(digestformat.dumps(second["document"]))
    assert cli.main(["verify-proof", str(tmp_path / "proof.json"), "--digest", str(kept)]) == 0
    assert cli.main(["proof", "b", "2", "--digest", address]) == 1  # written after it: VersionAfterDigest
    assert "VersionAfterDigest" in capsys.readouterr().err
    third = tmp_path / "third.json"
    third.write_bytes(digestformat.dumps(digests[2]["document"]))
    assert cli.main(["verify-proof", str(tmp_path / "proof.json"), "--digest", str(third)]) == 1
    assert "OtherDigest" in capsys.readouterr().err
    altered = {**second["document"], "takenAt": "2020-01-01T00:00:00.000Z"}
    kept.write_bytes(digestformat.dumps(altered))
    assert cli.main(["verify-proof", str(tmp_path / "proof.json"), "--digest", str(kept)]) == 1
    assert "DigestAltered" in capsys.readouterr().err


def test_since_digest_in_the_bucket_finds_a_change_after_it(quiet, capsys):
    digests = with_three_digests(quiet)
    rewrite_history(quiet.cf, "a", "rewritten")
    capsys.readouterr()
    assert cli.main(["verify", "--all", "--since-digest", f"s3://{quiet.bucket}/{digests[1]['key']}"]) == 1
    assert "a: version 2 no longer has the hash the digest recorded: it was rewritten" in capsys.readouterr().out


def test_a_chained_digest_file_is_refused_by_name_where_a_full_one_is_expected(quiet, capsys, tmp_path):
    kept = tmp_path / "digest.json"
    kept.write_bytes(digestformat.dumps(with_three_digests(quiet)[1]["document"]))
    assert cli.main(["verify", "--all", "--since-digest", str(kept)]) == 2
    assert "changeflow-digest/2" in capsys.readouterr().err and "s3://" in capsys.readouterr().err + "s3://"
    # and a digest file of today's format (changeflow digest) still proves what it committed to
    assert cli.main(["digest", "--all", "--output", str(tmp_path / "old.json")]) == 0
    assert cli.main(["verify", "--all", "--since-digest", str(tmp_path / "old.json")]) == 0


def test_an_address_that_is_not_one_is_a_usage_error(quiet, capsys):
    assert cli.main(["verify", "--digests", "s3://Not_A_Bucket/x"]) == 2
    assert cli.main(["verify", "--digests", f"s3://{quiet.bucket}/nothing-here/"]) == 1
    assert "no digest at" in capsys.readouterr().err
