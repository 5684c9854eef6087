"""Issue 26.1: everything a state will carry is bounded before the first write.

Step Functions fails a state over 256 KiB with ``States.DataLimitExceeded``, which no Catch handles. If
that happens after the v0 write has landed, the version never reaches history. So the fetch step bounds
what every state of the attempt will carry (``changeflow_core.carried``): the whole change (a patch's
``set`` and ``remove``, actor, reason, ...), the ids ``v0`` remembers, the content as DynamoDB JSON, the
Lambda integration's envelope and an error on the back-off path. A request that cannot fit is a
``ValidationError`` naming the field, and nothing is written.

Run on the real state machine (the embedded stack, whose moto refuses a state of 256 KiB or more as AWS
does); sizes are measured from the execution history, and a request is sized by asking the fetch function
itself what it would carry (a direct invocation: it reads, and writes nothing here).
"""

from __future__ import annotations

import json
import re

import pytest

from changeflow_core import carried, items, model, principal
from conftest import ASL, LOGGED, STATE_LIMIT, largest_state

T0 = 1_767_225_600_000
PROBE_EXECUTION = {"id": "arn:aws:states:us-east-1:123456789012:execution:ChangeStateMachine:probe",
                   "name": "probe", "startTime": "2026-01-01T00:00:00.000Z"}


def fetch_result(stack, request) -> dict:
    """What the fetch step would return for ``request`` now (the Lambda itself, invoked directly)."""
    payload, failed = stack.lambdas.invoke(stack.function("FetchLatestFunction"),
                                           {"request": json.loads(principal.direct_input(request)),
                                            "execution": PROBE_EXECUTION})
    assert not failed, payload
    return payload


def carried_size(stack, request) -> int:
    return items.wire_size(fetch_result(stack, request))


def sized(stack, build, target: int) -> dict:
    """``build(n)`` is a request that carries ``n`` more ASCII characters than ``build(1)`` (in one string
    of the request): the one whose fetch result is ``target`` bytes."""
    request = build(1 + target - carried_size(stack, build(1)))
    if target <= carried.MAX_RESULT_BYTES:
        assert carried_size(stack, request) == target
    return request


def snapshot(cf):
    return sorted(json.dumps(i, sort_keys=True, default=bytes.hex) for t in {cf.table, cf.history_table}
                  for i in cf.dynamodb.scan(TableName=t, ConsistentRead=True)["Items"])


def fetch_output_size(cf, execution) -> int:
    """The fetch step's state output (R) as Step Functions' quota counts it."""
    exited = [e for e in cf.history(execution.arn) if e["type"] == "TaskStateExited"
              and e["stateExitedEventDetails"]["name"] == "Fetch the latest version"]
    return items.wire_size(json.loads(exited[0]["stateExitedEventDetails"]["output"]))


def versions(cf, entity):
    return [v["version"] for v in cf.entity(entity)["versions"]]


def assert_refused(cf, execution, field, before):
    assert execution.status == "FAILED" and execution.error == "ValidationError", (execution.error, execution.cause)
    message = json.loads(execution.cause)["errorMessage"]
    assert message.startswith(field + ":") and "as DynamoDB JSON" in message, message
    assert largest_state(cf, execution) <= STATE_LIMIT
    assert snapshot(cf) == before  # nothing written


def patch_removing(names: int, change: str):
    """The issue's patch: set one field and remove ``names`` short names and one of ``n`` characters."""
    def build(n):
        return {"entityId": "blob#1", "operation": "patch", "effectiveAt": T0 + 1, "changeId": change,
                "set": {"x": 1}, "remove": [f"f{i:05d}" for i in range(names)] + ["p" * n]}
    return build


# --- the issue, as reported: a patch that fits the request limit but not the states -------------------
@pytest.mark.parametrize("window, margin, fault", [
    # the fetch result fits, the write step's output (R + written) does not: v0 written, history never
    ("write step output", 70, None),
    # the fetch step's own task result (R + the integration's envelope) does not fit: LatestReadFailed
    ("fetch task result", 50, None),
    # the write lands, its answer is lost: the error beside R on the back-off path does not fit
    ("lost write response", 200, "timeout"),
])
def test_a_patch_that_fits_the_request_limit_but_not_a_state_is_refused_by_name_and_writes_nothing(
        stack, cf, window, margin, fault):
    from changeflow.checks.faults import Injector
    from changeflow_core.validation import MAX_REQUEST_BYTES, request_size

    # GIVEN {"blob": 150,000 x} at version 1
    cf.submit({"entityId": "blob#1", "operation": "put", "attributes": {"blob": "x" * 150_000},
               "effectiveAt": T0, "changeId": "c1"})
    before = snapshot(cf)
    # WHEN a patch of ~10,000 removed names (a ~110 KB request, under the request limit) would carry
    # within ``margin`` bytes of 256 KiB
    build = patch_removing(10_000, "c2")
    probe = carried_size(stack, build(1))
    request = build(1 + STATE_LIMIT - margin - probe)
    assert request_size(request) < MAX_REQUEST_BYTES
    if fault:
        with Injector().around(stack.lambdas, [("UpdateLatestFunction", fault, 1)]):
            execution = cf.submit(request)
    else:
        execution = cf.submit(request)
    # THEN it is refused naming remove, before anything is written: no version 2 without its history,
    # no LatestReadFailed (a false read failure), no States.DataLimitExceeded
    assert_refused(cf, execution, "remove", before)


# --- every operation at the bound, -1 / 0 / +1 byte ----------------------------------------------------
def put_of(entity, change):
    """A put that can reach the bound under the request limit (224 KiB): 40,000 "é" are 80 KB of request
    (UTF-8) but 240 KB in a state as moto counts it (``\\u00e9``: the larger count is the bound's)."""
    def build(n):
        return {"entityId": entity, "operation": "put", "effectiveAt": T0, "changeId": change,
                "attributes": {"text": "\u00e9" * 40_000, "body": "x" * n}, "actor": "a" * 256}
    return build


def rollback_of(entity, change, to_version):
    def build(n):  # the rollback's own reason carries the last bytes; the content is version k's
        return {"entityId": entity, "operation": "rollback", "toVersion": to_version, "effectiveAt": T0,
                "changeId": change, "reason": "r" * n}
    return build


def patch_of(entity, change):
    # each patch later than the one before: at an equal time the fields "under" removed would be superseded
    # (issue 34), and their names carried twice
    at = T0 + {"exact": 3}.get(change, 1)

    def build(n):
        return {"entityId": entity, "operation": "patch", "effectiveAt": at, "changeId": change,
                "set": {"note": "n"}, "remove": [f"gone{i:05d}" for i in range(2_000)] + ["p" * n]}
    return build


def prepare(stack, cf, operation):
    """An entity to change, and ``builder(change id)``: requests of ``operation`` that can reach the bound."""
    if operation == "put":
        return "put#1", lambda change: put_of("put#1", change)
    if operation == "patch":
        cf.submit({"entityId": "patch#1", "operation": "put", "effectiveAt": T0, "changeId": "c0",
                   "attributes": {"blob": "x" * 200_000}})
        return "patch#1", lambda change: patch_of("patch#1", change)
    # rollback: version 1's content sized on a twin so that a rollback to it carries ~500 bytes under the
    # bound; the rollback's reason then reaches the bound exactly
    for entity in ("rbk#0", "rbk#1"):
        cf.submit(put_of(entity, "c0")(1))
        cf.submit({"entityId": entity, "operation": "put", "effectiveAt": T0, "changeId": "c1",
                   "attributes": {"small": 1}})
    base = carried_size(stack, rollback_of("rbk#0", "rb-x", 1)(1)) - 1
    for entity in ("rbk#2",):
        cf.submit(put_of(entity, "c0")(carried.MAX_RESULT_BYTES - base - 500))
        cf.submit({"entityId": entity, "operation": "put", "effectiveAt": T0, "changeId": "c1",
                   "attributes": {"small": 1}})
    return "rbk#2", lambda change: rollback_of("rbk#2", change, 1)


FIELD = {"put": "attributes", "patch": "remove", "rollback": "toVersion"}


@pytest.mark.parametrize("operation", ["put", "patch", "rollback"])
def test_every_operation_at_the_bound_applies_with_every_state_under_256_kib_and_one_byte_more_is_refused(
        stack, cf, operation):
    bound = carried.MAX_RESULT_BYTES
    entity, builder = prepare(stack, cf, operation)
    # one byte over: refused by name, nothing written
    before = snapshot(cf)
    over = sized(stack, builder("over"), bound + 1)
    refused = cf.submit(over)
    assert_refused(cf, refused, FIELD[operation], before)
    assert f"would carry {bound + 1} bytes" in refused.cause
    # one byte under, then exactly at the bound (sized again: the entity moved on): applied, and no
    # state input, output, task parameters or result reached the limit
    for change, target in (("under", bound - 1), ("exact", bound)):
        if operation == "patch" and change == "exact":  # the names "under" removed keep their clocks in v0,
            cf.submit({"entityId": entity, "operation": "put", "effectiveAt": T0 + 2, "changeId": "reset",
                       "attributes": {"blob": "x" * 200_000}})  # carried by the next patch: a put clears them
        request = sized(stack, builder(change), target)
        execution = cf.submit(request)
        assert execution.output["outcome"] == "applied", (execution.error, execution.cause)
        assert fetch_output_size(cf, execution) == target
        assert largest_state(cf, execution) <= STATE_LIMIT
    history = cf.entity(entity)["versions"]
    assert [v["changeId"] for v in history if v["changeId"] != "reset"][-2:] == ["under", "exact"]
    assert history[-1] == cf.entity(entity)["latest"]


@pytest.mark.parametrize("fault, workflow", [("timeout", "STANDARD"), ("lost", "STANDARD"), ("timeout", "EXPRESS")])
def test_at_the_bound_a_lost_write_response_still_ends_applied_with_its_history(make_stack, fault, workflow):
    # the back-off path carries the error beside the content: the write step's output is R + error
    from changeflow.client import Changeflow
    from changeflow.checks.faults import Injector

    stack = make_stack(WorkflowType=workflow, **LOGGED)
    cf = Changeflow.for_embedded(stack)

    request = sized(stack, put_of("lost#1", "c1"), carried.MAX_RESULT_BYTES)
    with Injector().around(stack.lambdas, [("UpdateLatestFunction", fault, 1)]):
        execution = cf.submit(request)
    assert execution.output["outcome"] == "applied" and execution.output["version"] == 1, execution.cause
    assert "Draw a back-off" in [e["stateEnteredEventDetails"]["name"] for e in cf.history(execution.arn)
                                 if e["type"].endswith("StateEntered")]
    assert largest_state(cf, execution) <= STATE_LIMIT
    assert versions(cf, "lost#1") == [1]


@pytest.mark.slow  # the SDK's own retries sleep for real (~25 s) before the write step fails
def test_at_the_bound_a_write_throttled_past_the_sdk_retries_backs_off_and_applies(stack, cf):
    # the largest error measured on the write step: a DynamoDB ThrottlingException with its stack trace
    from changeflow.checks.faults import Injector

    request = sized(stack, put_of("thr#1", "c1"), carried.MAX_RESULT_BYTES)
    function = stack.function("UpdateLatestFunction")
    stack.lambdas.load(function)
    injector = Injector()
    with injector.throttle(function, "PutItem", 12, "ThrottlingException"):
        execution = cf.submit(request)
    assert execution.output["outcome"] == "applied", execution.cause
    errors = [e["taskFailedEventDetails"] for e in cf.history(execution.arn) if e["type"] == "TaskFailed"]
    assert errors and {e["error"] for e in errors} == {"ThrottlingException"}
    assert max(len(e["cause"]) for e in errors) < carried.ERROR_BYTES // 2  # the allowance's margin
    assert largest_state(cf, execution) <= STATE_LIMIT


def test_a_delete_cannot_come_near_the_bound_whatever_its_fields_and_the_ids_v0_remembers(stack, cf):
    # the largest a delete can carry: every text field at its limit in 4-byte characters (12 bytes each
    # once JSON escapes them), and v0 remembering 16 such change ids
    wide = "\U0001F600"
    entity = wide * 256  # 1,024 UTF-8 bytes: the entityId limit
    for i in range(model.RECENT_CHANGE_IDS):
        cf.submit({"entityId": entity, "operation": "put", "effectiveAt": T0, "attributes": {"n": i},
                   "changeId": wide * 127 + chr(0x1F300 + i)})
    request = {"entityId": entity, "operation": "delete", "effectiveAt": T0, "changeId": wide * 128,
               "actor": wide * 256, "reason": wide * 1024}
    size = carried_size(stack, request)
    assert size < carried.MAX_RESULT_BYTES // 3
    execution = cf.submit(request)
    assert execution.output["outcome"] == "applied" and largest_state(cf, execution) <= STATE_LIMIT


def test_a_put_that_fit_at_its_first_attempt_is_refused_by_name_at_a_later_one_if_it_no_longer_fits(stack, cf):
    # another writer in between fills the ids v0 remembers with long ones: the same put, read again,
    # would carry more than every state can. Refused by name at that attempt; nothing of it was written.
    from changeflow.local.lambdas import fault_hook
    from changeflow_core import seal, steps
    from changeflow_core.validation import validate_request

    wide = "\U0001F600"
    cf.submit({"entityId": "grow#1", "operation": "put", "effectiveAt": T0, "changeId": "c0", "attributes": {}})
    request = sized(stack, put_of("grow#1", "mine"), carried.MAX_RESULT_BYTES - 1_000)
    fired = []

    def other_writers(function, event, invoke):
        if function.logical_id == "UpdateLatestFunction" and event["change"]["changeId"] == "mine" and not fired:
            fired.append(True)
            for i in range(model.RECENT_CHANGE_IDS):
                other = validate_request({"entityId": "grow#1", "operation": "put", "effectiveAt": T0,
                                          "changeId": wide * 127 + chr(0x1F300 + i), "attributes": {"n": i}},
                                         PROBE_EXECUTION)
                key = seal.Key(b"another writer's steps, with a key of their own")  # the domain, called directly
                state = steps.fetch(cf.dynamodb, cf.table, cf.history_table, other, items.to_wire({"n": i}), 1,
                                    {"put": "writer"}, key=key, execution_name=PROBE_EXECUTION["name"])
                written = steps.write(cf.dynamodb, cf.table, {**state, "execution": PROBE_EXECUTION}, key=key)
                steps.record_history(cf.dynamodb, cf.table, cf.history_table,
                                     {**state, "written": written, "execution": PROBE_EXECUTION}, key=key)
        return invoke()

    with fault_hook(stack.lambdas, other_writers):
        execution = cf.submit(request)
    assert execution.status == "FAILED" and execution.error == "ValidationError", execution.cause
    assert json.loads(execution.cause)["errorMessage"].startswith("attributes:")
    assert largest_state(cf, execution) <= STATE_LIMIT
    assert "mine" not in [v["changeId"] for v in cf.entity("grow#1")["versions"]]
    assert versions(cf, "grow#1") == list(range(1, model.RECENT_CHANGE_IDS + 2))


# --- the account in carried.py is the definition's ---------------------------------------------------
def references(value, found=None):
    """Every JSONPath a Parameters/ResultSelector block reads (``"x.$": "$.a.b"`` and inside intrinsics)."""
    found = set() if found is None else found
    if isinstance(value, dict):
        for key, inner in value.items():
            if key.endswith(".$") and isinstance(inner, str):
                found.update(re.findall(r"\$\$?(?:\.[A-Za-z]+)+", inner))
            else:
                references(inner, found)
    return found


def keys(block: dict) -> set[str]:
    return {key.removesuffix(".$") for key in block}


def test_the_states_carry_what_the_bound_accounts_for_and_nothing_else():
    states = json.loads(ASL.read_text())["States"]
    result_fields = {"change", "latest", "content", "writer", "attempt", "tries", "proof"}  # proof: changeflow_core.seal
    # R: what both fetch states return (their ResultSelector, the whole state)
    for name in ("Fetch the latest version", "Fetch the latest version again"):
        assert keys(states[name]["ResultSelector"]) == result_fields and states[name]["ResultPath"] == "$"
    # the states that hold the content read only R, the error, written, waitSeconds and the context
    holding = ["Write the new latest version", "Draw a back-off", "Back off before reading again",
               "Fetch the latest version again", "Record the version in history"]
    allowed = {f"$.{f}" for f in result_fields | {"error", "written", "waitSeconds", "tried", "error.Error"}} | {
        "$$.Execution.Id", "$$.Execution.Name", "$$.State.RetryCount"}
    for name in holding:
        read = references(states[name].get("Parameters", {}))
        assert read <= allowed, (name, read - allowed)
    # what is merged beside R: the write's result ($.written, three small fields) or a caught error ($.error)
    write = states["Write the new latest version"]
    assert write["ResultPath"] == "$.written" and keys(write["ResultSelector"]) == {"outcome", "version", "recordedAt",
                                                                                   "proof"}
    for name in holding:
        for catch in states[name].get("Catch", []):
            assert catch["ResultPath"] in ("$", "$.error"), (name, catch)
    # the back-off carries no writer (latest stays: the proof covers it), and what tells the next read whether
    # the write landed (the version tried and the error's name: carried.LOST_WRITE_BYTES)
    assert keys(states["Draw a back-off"]["Parameters"]) == {"change", "content", "latest", "error", "attempt",
                                                             "waitSeconds", "tried", "lastWrite", "proof"}
    # the history step's result drops the content: every later state is small
    assert not {"change", "latest", "content"} & keys(states["Record the version in history"]["ResultSelector"])
    # and the allowance covers the largest of what is added
    assert carried.ADDED_BYTES >= max(carried.ERROR_BYTES, carried.ENVELOPE_BYTES)
    assert carried.MAX_RESULT_BYTES + carried.ADDED_BYTES < STATE_LIMIT
