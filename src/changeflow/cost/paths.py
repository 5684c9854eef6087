"""Each path of the workflow measured on the embedded stack (create, update, stale, duplicate, delete,
revive, rollback, patch, write-back): the requests the handlers made and their units, the transitions and
invocations from the execution history, the execution log and the functions' logs in bytes; and what the
principal adds per applied change."""

from __future__ import annotations

import json
import time
from pathlib import Path

from changeflow.checks.reliability import T0  # one fixed start for every measurement

from .prices import LAMBDA_PLATFORM_BYTES, LOG_EVENT_OVERHEAD
from .units import billed_transitions, item_size, lambda_invocations, table_sizes, units_of_call, wait_seconds

PATHS = ["create", "update", "stale", "duplicate", "delete", "revive", "rollback", "patch", "write-back"]


def attributes_for(item_bytes: int) -> dict:
    """Attributes that make the v0 item of a put exactly ``item_bytes`` bytes (model attributes included)."""
    from changeflow_core import codec, items
    from changeflow_core.validation import Change

    change = Change("bench#x", "put", T0, "bench#x-c1", actor="benchmark")
    probe = lambda n: codec.item_size(codec.serialize_item(items.build_latest(  # noqa: E731
        change, {"body": "x" * n}, None, 1, T0, "arn:aws:states:us-east-1:123456789012:execution:"
        "changeflow-ChangeStateMachine:bench-x--bench-x-c1--000000000000")))
    overhead = probe(0)
    return {"body": "x" * max(0, item_bytes - overhead)}


def measure_paths(item_bytes: int, parameters: dict | None = None, root: Path | None = None) -> dict:
    """Each path once, in order, on one entity whose ``v0`` item is ``item_bytes``; ``write-back`` last: an
    update read after the history item of the version ``v0`` holds went missing (its writer's answer was
    lost, or its history put failed), which the fetch step writes back from ``v0`` before going on."""
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack

    attrs = attributes_for(item_bytes)
    e = "bench#x"
    change = lambda n, at, **kw: {"entityId": e, "changeId": f"{e}-c{n}", "effectiveAt": T0 + at,  # noqa: E731
                                  "actor": "benchmark", **kw}
    plan = [
        ("create", change(1, 0, operation="put", attributes=attrs)),
        ("update", change(2, 10, operation="put", attributes=attrs)),
        ("stale", change(3, 5, operation="put", attributes=attrs)),
        ("duplicate", change(2, 10, operation="put", attributes=attrs)),
        ("delete", change(4, 20, operation="delete")),
        ("revive", change(5, 30, operation="put", attributes=attrs)),
        ("rollback", change(6, 40, operation="rollback", toVersion=2)),
        # last, so that the rows above read and write the same items as before: one short field set and one
        # removed, on the content the rollback restored (item_bytes); the item grows by that field and the
        # patch record ({"set": {"status": "approved"}, "remove": ["draftNote"]})
        ("patch", change(7, 50, operation="patch", set={"status": "approved"}, remove=["draftNote"])),
        ("write-back", change(8, 60, operation="put", attributes=attrs)),
    ]
    results = {}
    from changeflow.common.project import project_root

    with EmbeddedStack(root or project_root(), time_scale=0.001, parameters=parameters or {}) as stack:
        cf = Changeflow.for_embedded(stack)
        stack.warm()
        for path, request in plan:
            if path == "write-back":  # the history item of the version v0 holds is missing
                held = cf.entity(e)["latest"]["version"]
                cf.dynamodb.delete_item(TableName=cf.history_table,
                                        Key={"pk": {"S": e}, "sk": {"S": f"v#{held:010d}"}})
            old = {**table_sizes(cf.dynamodb, cf.table), **table_sizes(cf.dynamodb, cf.history_table)}
            old_unchained = {**table_sizes(cf.dynamodb, cf.table, chain=False),
                             **table_sizes(cf.dynamodb, cf.history_table, chain=False)}
            old_format_1 = {**table_sizes(cf.dynamodb, cf.table, chain="format 1"),
                            **table_sizes(cf.dynamodb, cf.history_table, chain="format 1")}
            for function in stack.lambdas.functions.values():
                function.api_calls.clear()
                function.logs.clear()
            started = time.perf_counter()
            execution = cf.submit(request)
            seconds = time.perf_counter() - started
            assert execution.status == "SUCCEEDED", (path, execution.error, execution.cause)
            function_log_bytes = sum(len(str(line).encode("utf-8")) + LOG_EVENT_OVERHEAD
                                     for f in stack.lambdas.functions.values() for line in f.logs)
            reads = writes = reads_unchained = writes_unchained = reads_format_1 = writes_format_1 = 0.0
            chain_bytes = max((item_size(p["Item"]) - item_size(p["Item"], chain=False) for f in
                               stack.lambdas.functions.values() for _, op, p, _ in f.api_calls if op == "PutItem"),
                              default=0)
            calls = []
            for function in stack.lambdas.functions.values():
                for _, operation, params, response in function.api_calls:
                    r, w = units_of_call(operation, params, response, old)
                    reads, writes = reads + r, writes + w
                    r, w = units_of_call(operation, params, response, old_unchained, chain=False)
                    reads_unchained, writes_unchained = reads_unchained + r, writes_unchained + w
                    r, w = units_of_call(operation, params, response, old_format_1, chain="format 1")
                    reads_format_1, writes_format_1 = reads_format_1 + r, writes_format_1 + w
                    calls.append(operation)
            events = list(cf.history(execution.arn))
            entered, invocations = billed_transitions(events), lambda_invocations(events)
            history_bytes = len(json.dumps(events, default=str, separators=(",", ":")).encode())
            v0_writes = [w for f in stack.lambdas.functions.values() if f.logical_id in (
                "UpdateLatestFunction", "DeleteTombstoneFunction") for w in f.api_calls]
            history_writes = [w for w in stack.function("PutHistoryFunction").api_calls if w[1] == "PutItem"]
            transactional_writes = 2 * sum(units_of_call(op, p, r, old)[1] for _, op, p, r in v0_writes + history_writes)
            results[path] = {
                "outcome": execution.output["outcome"], "read_units": reads, "write_units": writes,
                "read_units_without_chain": reads_unchained, "write_units_without_chain": writes_unchained,
                "read_units_chain_format_1": reads_format_1, "write_units_chain_format_1": writes_format_1,
                "chain_bytes_per_item": chain_bytes,
                "requests": sorted(calls), "state_transitions": entered, "lambda_invocations": invocations,
                "seconds": seconds, "transactional_write_units": transactional_writes if v0_writes else None,
                "execution_log_bytes": execution_log_bytes(stack, execution.arn),
                "function_log_bytes": function_log_bytes + invocations * LAMBDA_PLATFORM_BYTES,
                "history_bytes": history_bytes, "wait_seconds": wait_seconds(events),
            }
    return results


def execution_log_bytes(stack, arn: str) -> int:
    """Bytes CloudWatch Logs ingests for one execution's records in the state machine's log group (each
    message plus its 26 bytes), at the stack's LoggingConfiguration."""
    logs = stack.client("logs")
    kwargs, total = {"logGroupName": stack.template.physical_name("ChangeStateMachineLogGroup")}, 0
    while True:
        page = logs.filter_log_events(**kwargs)
        for event in page["events"]:
            if json.loads(event["message"]).get("execution_arn") == arn:
                total += len(event["message"].encode("utf-8")) + LOG_EVENT_OVERHEAD
        if not page.get("nextToken"):
            return total
        kwargs["nextToken"] = page["nextToken"]


PRINCIPALS = {  # what each entry point records (changeflow_core.principal), with typical lengths
    "api: IAM user": {"via": "api", "arn": "arn:aws:iam::123456789012:user/alice", "accountId": "123456789012",
                      "caller": "AIDAJQABLZS4A3QDU576Q"},
    "api: role session": {"via": "api", "arn": "arn:aws:sts::123456789012:assumed-role/changeflow-writer/ci-run-1234",
                          "accountId": "123456789012", "caller": "AROAJQABLZS4A3QDU576Q:ci-run-1234"},
    "events": {"via": "events", "rule": "arn:aws:events:us-east-1:123456789012:rule/changeflow-changes/"
               "changeflow-ChangeStateMachineChangeRequested-1A2B3C4D5E6F", "account": "123456789012",
               "source": "changeflow.client", "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718", "region": "us-east-1"},
    "direct StartExecution": {"via": "stepfunctions"},
}


def principal_share(sizes=(1000, 4000)) -> dict:
    """What the principal adds per applied change (issue 21): bytes on each of the two items an applied change
    writes (v0 and its history item), the write units of those two puts with and without it (DynamoDB bills
    writes per started 1 KB), and the bytes the change carries between states. Computed from item sizes, as
    every unit figure here is: the same items the write step builds (changeflow_core.items.latest_item)."""
    import math

    from changeflow_core import codec, items, wire
    from changeflow_core.validation import Change

    rows = {}
    for label, principal in PRINCIPALS.items():
        row = {"item_bytes": codec.item_size(codec.serialize_item({"principal": principal})),
               "state_bytes": len(wire.dumps({"principal": principal}, compact=True)) - 2}
        for size in sizes:
            change = Change(entityId="bench#x", operation="put", effectiveAt=T0, changeId="bench#x-c1", actor="benchmark")
            values = codec.serialize_item(attributes_for(size))
            arn = "arn:aws:states:us-east-1:123456789012:execution:changeflow-ChangeStateMachine:" + "x" * 60
            units = []
            for who in (None, principal):
                item = items.latest_item(Change(**{**change.to_json(), "principal": who}), items.from_wire(values),
                                         None, 1, T0, arn)
                units.append(2 * math.ceil(codec.item_size(codec.serialize_item(item)) / 1024))
            row[f"write_units_{size}"] = {"without": units[0], "with": units[1]}
        rows[label] = row
    return rows
