"""Hostile change requests through the REAL workflow (statemachines/change.asl.json on the embedded stack):
each bad request must end FAILED with ``ValidationError`` naming its field, visibly in the execution
history, and must leave the table byte-for-byte as it was. Requests over the Step Functions payload
limit never reach the workflow: the tooling refuses them.

The parametrized cases share one embedded stack (class scope): starting a stack costs ~0.8 s and an
invalid execution ~20 ms, so ~90 cases take seconds instead of a minute. Isolation does not suffer:
every case snapshots the table immediately before it submits and compares immediately after.
"""

from __future__ import annotations

import json
import math

import pytest

from changeflow_core import model, validation
from changeflow_core.errors import ValidationError
from conftest import ROOT, listed, wrapped

T0 = 1_767_225_600_000
SEED = {"entityId": "doc#1", "operation": "put", "attributes": {"color": "red", "n": 1}, "effectiveAt": T0,
        "changeId": "seed"}
WRITE_STATES = {"Write the new latest version", "Write a tombstone", "Record the version in history"}


def put(**overrides):
    """A put to the seeded entity that would be valid but for ``overrides``."""
    return {"entityId": "doc#1", "operation": "put", "attributes": {"color": "blue"}, "effectiveAt": T0 + 1,
            **overrides}


def without(request, field):
    return {k: v for k, v in request.items() if k != field}


def delete(**overrides):
    return {"entityId": "doc#1", "operation": "delete", "effectiveAt": T0 + 1, **overrides}


def rollback(**overrides):
    return {"entityId": "doc#1", "operation": "rollback", "toVersion": 1, "effectiveAt": T0 + 1, **overrides}


def patch(**overrides):
    """A patch of the seeded entity (it exists, so only validation can stop it)."""
    return {"entityId": "doc#1", "operation": "patch", "set": {"color": "blue"}, "effectiveAt": T0 + 1,
            **overrides}




def snapshot(cf) -> bytes:
    """Every item of the change and history tables, sorted by key, as canonical JSON bytes."""
    items = []
    for table in sorted({cf.table, cf.history_table}):
        kwargs = {"TableName": table, "ConsistentRead": True}
        while True:
            page = cf.dynamodb.scan(**kwargs)
            items.extend((table, item) for item in page["Items"])
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    items.sort(key=lambda pair: (pair[0], pair[1][model.PK]["S"], pair[1][model.SK]["S"]))
    return json.dumps(items, sort_keys=True, ensure_ascii=False, default=bytes.hex).encode("utf-8")



# (request, the field its errorMessage must start with)
HOSTILE = [
    # --- entityId -------------------------------------------------------------------------------
    pytest.param(without(put(), "entityId"), "entityId", id="entityId-missing"),
    pytest.param(put(entityId=""), "entityId", id="entityId-empty"),
    pytest.param(put(entityId="x" * 1025), "entityId", id="entityId-1025-bytes"),
    pytest.param(put(entityId="é" * 513), "entityId", id="entityId-1026-bytes-in-513-chars"),
    pytest.param(put(entityId="doc#1\x00"), "entityId", id="entityId-nul"),
    pytest.param(put(entityId="doc#1\n"), "entityId", id="entityId-newline"),
    pytest.param(put(entityId="\x1b[2Jdoc#1"), "entityId", id="entityId-escape-sequence"),
    pytest.param(put(entityId="doc#1\x7f"), "entityId", id="entityId-del"),
    pytest.param(put(entityId=1), "entityId", id="entityId-number"),
    pytest.param(put(entityId=None), "entityId", id="entityId-null"),
    pytest.param(put(entityId=["doc#1"]), "entityId", id="entityId-list"),
    pytest.param(put(entityId={"id": "doc#1"}), "entityId", id="entityId-object"),
    pytest.param(put(entityId=True), "entityId", id="entityId-bool"),
    pytest.param(put(entityId="doc#1\udc00"), "entityId", id="entityId-lone-surrogate"),
    # --- operation ------------------------------------------------------------------------------
    pytest.param(put(operation="upsert"), "operation", id="operation-unknown"),
    pytest.param(put(operation="PUT"), "operation", id="operation-wrong-case"),
    pytest.param(without(put(), "operation"), "operation", id="operation-missing"),
    pytest.param(put(operation=1), "operation", id="operation-number"),
    pytest.param(put(operation=["put"]), "operation", id="operation-list"),
    pytest.param(put(operation=None), "operation", id="operation-null"),
    pytest.param(put(operation=True), "operation", id="operation-bool"),
    # --- attributes: shape ----------------------------------------------------------------------
    pytest.param(put(attributes=[{"color": "blue"}]), "attributes", id="attributes-list"),
    pytest.param(put(attributes="color=blue"), "attributes", id="attributes-string"),
    pytest.param(put(attributes=7), "attributes", id="attributes-number"),
    pytest.param(put(attributes=None), "attributes", id="attributes-null"),
    pytest.param(without(put(), "attributes"), "attributes", id="attributes-missing-on-put"),
    pytest.param(delete(attributes={"color": "blue"}), "attributes", id="attributes-on-delete"),
    pytest.param(rollback(attributes={"color": "blue"}), "attributes", id="attributes-on-rollback"),
    pytest.param(put(attributes={"": 1}), "attributes", id="attributes-empty-name"),
    # --- attributes: names the item model reserves (every one of them) ----------------------------
    *[
        pytest.param(put(attributes={"color": "blue", name: 99}), f"attributes.{name}", id=f"reserved-{name}")
        for name in sorted(model.RESERVED)
    ],
    # --- attributes: values DynamoDB cannot store -----------------------------------------------
    pytest.param(put(attributes={"deep": wrapped(33)}), "attributes.deep" + ".n" * 32, id="nesting-33-maps"),
    pytest.param(put(attributes={"deep": listed(33)}), "attributes.deep" + "[0]" * 32, id="nesting-33-lists"),
    pytest.param(put(attributes={"deep": wrapped(32)}), "attributes.deep" + ".n" * 32, id="nesting-32-maps-33-levels"),
    pytest.param(put(attributes={"m": {"": 1}}), "attributes.m", id="empty-map-key"),
    pytest.param(put(attributes={"m": {"ok": {"": 1}}}), "attributes.m.ok", id="empty-map-key-nested"),
    # json.dumps emits NaN/Infinity and the Lambda side's json.loads accepts them: the values arrive
    pytest.param(put(attributes={"x": math.nan}), "attributes.x", id="nan"),
    pytest.param(put(attributes={"x": math.inf}), "attributes.x", id="infinity"),
    pytest.param(put(attributes={"x": -math.inf}), "attributes.x", id="minus-infinity"),
    pytest.param(put(attributes={"m": {"l": [1, math.nan]}}), "attributes.m.l[1]", id="nan-nested-in-a-list"),
    pytest.param(put(attributes={"x": 1e126}), "attributes.x", id="number-1e126"),
    pytest.param(put(attributes={"x": -1e126}), "attributes.x", id="number-minus-1e126"),
    pytest.param(put(attributes={"x": 1e-131}), "attributes.x", id="number-1e-131"),
    pytest.param(put(attributes={"x": 10**126}), "attributes.x", id="integer-10^126"),
    pytest.param(put(attributes={"x": 123456789012345678901234567890123456789}), "attributes.x",
                 id="number-39-significant-digits"),
    # --- a patch's set and remove (issue 15) -----------------------------------------------------
    pytest.param(without(patch(), "set"), "set", id="patch-empty-no-set-no-remove"),
    pytest.param(patch(set={}), "set", id="patch-empty-set"),
    pytest.param(patch(set={}, remove=[]), "set", id="patch-empty-set-and-remove"),
    pytest.param(patch(remove=["color"]), "remove[0]", id="patch-field-in-set-and-remove"),
    pytest.param(patch(remove=["n", "shape", "n"]), "remove[2]", id="patch-field-removed-twice"),
    pytest.param(patch(set=[["color", "blue"]]), "set", id="patch-set-list"),
    pytest.param(patch(set=None), "set", id="patch-set-null"),
    pytest.param(patch(remove="n"), "remove", id="patch-remove-string"),
    pytest.param(patch(remove={"n": True}), "remove", id="patch-remove-object"),
    pytest.param(patch(remove=[1]), "remove[0]", id="patch-remove-number"),
    pytest.param(patch(remove=[""]), "remove[0]", id="patch-remove-empty-name"),
    pytest.param(patch(remove=[None]), "remove[0]", id="patch-remove-null-name"),
    pytest.param(patch(set={"": 1}), "set", id="patch-set-empty-name"),
    pytest.param(patch(set={"x": math.nan}), "set.x", id="patch-set-nan"),
    pytest.param(patch(set={"deep": wrapped(33)}), "set.deep" + ".n" * 32, id="patch-set-nesting-33"),
    pytest.param(patch(set={"x": 10**126}), "set.x", id="patch-set-number-10^126"),
    pytest.param(patch(attributes={"color": "blue"}), "attributes", id="attributes-on-patch"),
    pytest.param(patch(toVersion=1), "toVersion", id="toVersion-on-patch"),
    pytest.param(put(set={"color": "blue"}), "set", id="set-on-put"),
    pytest.param(delete(remove=["color"]), "remove", id="remove-on-delete"),
    pytest.param(rollback(set={"color": "blue"}), "set", id="set-on-rollback"),
    *[
        pytest.param(patch(set={"color": "blue", name: 99}), f"set.{name}", id=f"patch-set-reserved-{name}")
        for name in sorted(model.RESERVED)
    ],
    *[
        pytest.param(patch(remove=["n", name]), "remove[1]", id=f"patch-remove-reserved-{name}")
        for name in sorted(model.RESERVED)
    ],
    # --- toVersion ------------------------------------------------------------------------------
    pytest.param(rollback(toVersion=0), "toVersion", id="toVersion-0"),
    pytest.param(rollback(toVersion=-1), "toVersion", id="toVersion-negative"),
    pytest.param(without(rollback(), "toVersion"), "toVersion", id="toVersion-missing"),
    pytest.param(rollback(toVersion=None), "toVersion", id="toVersion-null"),
    pytest.param(rollback(toVersion=1.5), "toVersion", id="toVersion-1.5"),
    pytest.param(rollback(toVersion="1"), "toVersion", id="toVersion-string"),
    pytest.param(rollback(toVersion=True), "toVersion", id="toVersion-bool"),
    pytest.param(rollback(toVersion=math.inf), "toVersion", id="toVersion-infinity"),
    pytest.param(rollback(toVersion=model.MAX_VERSION + 1), "toVersion", id="toVersion-over-max"),
    pytest.param(put(toVersion=1), "toVersion", id="toVersion-on-put"),
    pytest.param(delete(toVersion=1), "toVersion", id="toVersion-on-delete"),
    # --- expectedVersion ------------------------------------------------------------------------
    pytest.param(put(expectedVersion=-1), "expectedVersion", id="expectedVersion-negative"),
    pytest.param(put(expectedVersion="1"), "expectedVersion", id="expectedVersion-string"),
    pytest.param(put(expectedVersion=math.nan), "expectedVersion", id="expectedVersion-nan"),
    # --- effectiveAt ----------------------------------------------------------------------------
    pytest.param(put(effectiveAt=-1), "effectiveAt", id="effectiveAt-negative"),
    pytest.param(put(effectiveAt="2026-01-01T00:00:00Z"), "effectiveAt", id="effectiveAt-string"),
    pytest.param(put(effectiveAt=T0 + 0.5), "effectiveAt", id="effectiveAt-fraction"),
    pytest.param(put(effectiveAt=2**53), "effectiveAt", id="effectiveAt-2^53-too-large"),
    pytest.param(put(effectiveAt=math.nan), "effectiveAt", id="effectiveAt-nan"),
    # --- changeId -------------------------------------------------------------------------------
    pytest.param(put(changeId=""), "changeId", id="changeId-empty"),
    pytest.param(put(changeId="c\r\n1"), "changeId", id="changeId-control-characters"),
    pytest.param(put(changeId="c" * 129), "changeId", id="changeId-129-chars"),
    pytest.param(put(changeId=42), "changeId", id="changeId-number"),
    pytest.param(put(changeId=["c"]), "changeId", id="changeId-list"),
    # --- actor, reason --------------------------------------------------------------------------
    pytest.param(put(actor=42), "actor", id="actor-number"),
    pytest.param(put(actor=["alice"]), "actor", id="actor-list"),
    pytest.param(put(reason={"why": "because"}), "reason", id="reason-object"),
    pytest.param(put(reason=False), "reason", id="reason-bool"),
    # --- unknown top-level fields ---------------------------------------------------------------
    pytest.param(put(attribute={"color": "blue"}), "attribute", id="unknown-field-typo"),
    pytest.param(put(version=7), "version", id="unknown-field-version"),
    pytest.param(put(__proto__={"admin": True}), "__proto__", id="unknown-field-proto"),
    # --- not an object at all -------------------------------------------------------------------
    pytest.param([put()], "request", id="request-list"),
    pytest.param([], "request", id="request-empty-list"),
    pytest.param("put doc#1 color=blue", "request", id="request-string"),
    pytest.param(42, "request", id="request-number"),
    pytest.param(None, "request", id="request-null"),
    pytest.param(True, "request", id="request-bool"),
]


def states_entered(cf, execution):
    return [e["stateEnteredEventDetails"]["name"] for e in cf.history(execution.arn)
            if e["type"].endswith("StateEntered")]


@pytest.fixture(scope="class")
def seeded_cf():
    """One embedded stack for the class (with the conftest's sandbox environment), whose table holds
    ``doc#1`` version 1 from one valid put: something a bad request could corrupt."""
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack

    with pytest.MonkeyPatch.context() as env:
        for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            env.delenv(key, raising=False)
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                           "CHANGEFLOW_ROOT": str(ROOT)}.items():
            env.setenv(key, value)
        with EmbeddedStack(ROOT, time_scale=0.0005) as stack:
            cf = Changeflow.for_embedded(stack)
            seed = cf.submit(SEED)
            assert seed.status == "SUCCEEDED" and seed.output["version"] == 1
            yield cf


class TestHostileRequestsThroughTheWorkflow:
    def test_the_seed_is_there_to_corrupt(self, seeded_cf):
        entity = seeded_cf.entity("doc#1")
        assert entity["latest"]["attributes"] == {"color": "red", "n": 1}
        assert [v["version"] for v in entity["versions"]] == [1]

    @pytest.mark.parametrize("request_, field", HOSTILE)
    def test_is_rejected_with_validation_error_naming_the_field_and_changes_nothing(self, seeded_cf, request_,
                                                                                     field):
        cf = seeded_cf
        # GIVEN a table holding doc#1 version 1
        before = snapshot(cf)
        assert b'"doc#1"' in before
        # WHEN the bad request runs through the workflow
        execution = cf.submit(request_)
        # THEN it fails with ValidationError, and the cause's message starts with the field
        assert (execution.status, execution.error) == ("FAILED", "ValidationError"), execution.cause
        message = json.loads(execution.cause)["errorMessage"]
        assert message.startswith(field + ":"), message
        # AND the history shows the validating task failing with ValidationError, then the Fail state
        failures = [e["taskFailedEventDetails"]["error"] for e in cf.history(execution.arn)
                    if e["type"] == "TaskFailed"]
        assert failures == ["ValidationError"]
        entered = states_entered(cf, execution)
        assert entered[-1] == "Reject the invalid request"
        assert not WRITE_STATES & set(entered)
        # AND the table is byte-for-byte unchanged
        assert snapshot(cf) == before

    def test_the_hostile_cases_are_distinct(self):
        keys = [json.dumps(case.values[0], sort_keys=True) for case in HOSTILE]
        assert len(HOSTILE) >= 30 and len(set(keys)) == len(keys)

    def test_an_integer_literal_with_one_significant_digit_and_many_zeros_is_stored(self, seeded_cf):
        # GIVEN 10**38 written as an integer literal (DynamoDB trims trailing zeros: 1 significant digit)
        # WHEN it is put, THEN it is stored like any other number
        execution = seeded_cf.submit({"entityId": "big#1", "operation": "put", "attributes": {"x": 10**38},
                                      "effectiveAt": T0})
        assert execution.status == "SUCCEEDED", execution.error
        assert seeded_cf.entity("big#1")["latest"]["attributes"] == {"x": 10**38}


# =====================================================================================================
# Over the Step Functions payload limit: refused by the tooling, never started
# =====================================================================================================


def oversized():
    """A put whose compact UTF-8 JSON is just over 256 KiB."""
    request = put(attributes={"blob": ""})
    padding = validation.MAX_REQUEST_BYTES - validation.request_size(request) + 1
    request["attributes"]["blob"] = "x" * padding
    assert validation.request_size(request) == validation.MAX_REQUEST_BYTES + 1
    return request


def test_check_request_size_refuses_one_byte_over_its_224_kib_as_request():
    with pytest.raises(ValidationError) as caught:
        validation.check_request_size(oversized())
    assert caught.value.field == "request" and str(caught.value).startswith("request: ")


def test_check_request_size_accepts_exactly_its_224_kib():
    request = oversized()
    request["attributes"]["blob"] = request["attributes"]["blob"][:-1]
    assert validation.request_size(request) == validation.MAX_REQUEST_BYTES
    validation.check_request_size(request)


def test_check_request_size_counts_utf8_bytes_not_characters():
    # 87,382 three-byte characters: about 85 K characters but over 256 KiB of UTF-8
    request = put(attributes={"blob": "€" * (validation.MAX_REQUEST_BYTES // 3 + 1)})
    assert len(json.dumps(request, ensure_ascii=False)) < validation.MAX_REQUEST_BYTES
    with pytest.raises(ValidationError) as caught:
        validation.check_request_size(request)
    assert caught.value.field == "request"


def test_validate_request_refuses_an_oversized_request_as_request():
    with pytest.raises(ValidationError) as caught:
        validation.validate_request(oversized(), {"name": "exec-1", "startTime": "2026-01-01T00:00:00.000Z"})
    assert caught.value.field == "request"


def test_changeflow_run_reports_an_oversized_request_refused_and_starts_no_execution(tmp_path, capsys, monkeypatch):
    from changeflow import cli
    from changeflow.client import Changeflow

    # GIVEN a file with an oversized request followed by a valid one
    big, small = oversized(), put(entityId="doc#2", changeId="small")
    path = tmp_path / "changes.json"
    path.write_text(json.dumps([big, small]), encoding="utf-8")
    started = []
    original_start = Changeflow.start

    def recording_start(self, request, *args, **kwargs):
        started.append(request)
        return original_start(self, request, *args, **kwargs)

    monkeypatch.setattr(Changeflow, "start", recording_start)
    # WHEN changeflow run processes the file
    status = cli.main(["run", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    # THEN the oversized request is REFUSED with ValidationError naming "request", and never started
    refused, ran = report["executions"]
    assert refused["status"] == "REFUSED" and refused["error"] == "ValidationError"
    assert refused["cause"].startswith("request:")  # the error message (issue 13)
    assert refused["name"] == f"(not started: {path}[0])"
    assert started == [small]
    assert report["entities"]["doc#1"] == {"latest": None, "versions": []}
    # AND the valid one still ran; the run exits 1, as for any change that was rejected (issue 13)
    assert ran["status"] == "SUCCEEDED" and status == 1
    assert [v["version"] for v in report["entities"]["doc#2"]["versions"]] == [1]
