"""Each path of the workflow measured on the embedded stack (create, update, stale, duplicate, delete,
revive, rollback, patch, write-back): the requests the handlers made and their units, the transitions and
invocations from the execution history, the execution log and the functions' logs in bytes; and what the
principal adds per applied change."""

from __future__ import annotations

import json
import time
from pathlib import Path

from changeflow.checks.reliability import T0  # one fixed start for every measurement

from .changes_index import recording_clock, within_an_hour
from .digests import QUIET
from .prices import DYNAMODB_ITEM_OVERHEAD, LOG_EVENT_OVERHEAD
from .units import (TIME_INDEX_KEYS, billed_transitions, index_entry_size, index_write_units, indexed_tables,
                    item_key, item_size, lambda_invocations, table_index_keys, table_items, table_sizes, units_of_call,
                    wait_seconds)

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


ENTRIES = ("direct", "api", "events")  # how a change starts: StartExecution, POST /changes, PutEvents
FRONT = "SubmitChangeFunction"  # POST /changes' function (API Gateway's Lambda proxy integration)


def measure_paths(item_bytes: int, parameters: dict | None = None, root: Path | None = None,
                  entry: str = "direct", paths: tuple[str, ...] | None = None) -> dict:
    """Each path once, in order, on one entity whose ``v0`` item is ``item_bytes``; ``write-back`` last: an
    update read after the history item of the version ``v0`` holds went missing (its writer's answer was
    lost, or its history put failed), which the fetch step writes back from ``v0`` before going on.

    ``entry``: how each change starts: ``direct`` (StartExecution), ``api`` (POST /changes: the front
    function invoked with API Gateway's proxy event, its execution then awaited) or ``events`` (PutEvents on
    the stack's bus, the rule starting the execution). The principal each records differs in size, and with
    it the items. ``paths``: only these (the plan's order kept; a quick run). The write step's clock runs in
    one hour (``changes_index.within_an_hour``): each version after the first is recorded in the hour of the
    one before it, which the changes index writes nothing for, whenever the measurement runs."""
    from changeflow.client import Changeflow
    from changeflow.common.project import project_root
    from changeflow.local.embedded import EmbeddedStack

    if entry not in ENTRIES:
        raise ValueError(f"entry {entry!r}: one of {', '.join(ENTRIES)}")
    root = root or project_root()
    attrs = attributes_for(item_bytes)
    e = "bench#x"
    change = lambda n, at, **kw: {"entityId": e, "changeId": f"bench-x-c{n}", "effectiveAt": T0 + at,  # noqa: E731
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
    wanted = set(paths or PATHS)
    results = {}
    with (EmbeddedStack(root, time_scale=0.001, parameters={**QUIET, **(parameters or {})}) as stack,
          recording_clock(within_an_hour())):  # every version in one hour, whenever it runs: the same units
        cf = Changeflow.for_embedded(stack)
        stack.warm()
        stack.stop_pipes()  # the workflow alone: the feed is priced apart (changeflow.cost.feed)
        start = _starter(stack, cf, entry, root)
        for path, request in plan:
            if wanted <= set(results):
                break
            if path == "write-back":  # the history item of the version v0 holds is missing
                held = cf.entity(e)["latest"]["version"]
                cf.dynamodb.delete_item(TableName=cf.history_table,
                                        Key={"pk": {"S": e}, "sk": {"S": f"v#{held:010d}"}})
            if path not in wanted:  # run anyway (the next rows read what it wrote), not measured
                assert start(request).status == "SUCCEEDED", path
                continue
            tables = (cf.table, cf.history_table)
            held = {t: table_items(cf.dynamodb, t) for t in tables}  # one Scan of each, read four ways
            old = {k: v for t in tables for k, v in table_sizes(cf.dynamodb, t, items=held[t]).items()}
            old_unchained = {k: v for t in tables for k, v in table_sizes(cf.dynamodb, t, False, held[t]).items()}
            old_format_1 = {k: v for t in tables for k, v in table_sizes(cf.dynamodb, t, "format 1", held[t]).items()}
            index_keys = {k: v for t in tables for k, v in table_index_keys(cf.dynamodb, t, held[t]).items()}
            for function in stack.lambdas.functions.values():
                function.api_calls.clear()
                function.logs.clear()
                function.invocations = 0
            started = time.perf_counter()
            execution = start(request)
            seconds = time.perf_counter() - started
            assert execution.status == "SUCCEEDED", (path, execution.error, execution.cause)
            results[path] = _figures(stack, cf, execution, old, old_unchained, old_format_1, tables, index_keys)
            results[path].update(seconds=seconds, entry=entry)
    return results


def _starter(stack, cf, entry: str, root: Path):
    """The function that starts a change through ``entry`` and returns its ended execution."""
    if entry == "direct":
        return cf.submit
    if entry == "events":
        return cf.submit_via_events
    front = stack.function(FRONT)
    template = json.loads((root / "events" / "functions" / "submit_change.json").read_text(encoding="utf-8"))

    def via_api(request: dict):
        from changeflow_core import wire

        payload, failed = stack.lambdas.invoke(front, {**template, "body": wire.dumps(request)})
        assert not failed and payload["statusCode"] == 200, payload
        return cf.wait(json.loads(payload["body"])["executionArn"], 60)

    return via_api


def _figures(stack, cf, execution, old: dict, old_unchained: dict, old_format_1: dict, tables,
             index_keys: dict | None = None) -> dict:
    """What one change consumed: units (with the chain, without it, with format 1's), requests, transitions,
    invocations, log bytes, wait seconds, the bytes it added to the tables, and each function's share."""
    functions = stack.lambdas.functions.values()
    calls = [(f, op, p, r) for f in functions for _, op, p, r in f.api_calls]
    indexed = indexed_tables(cf.dynamodb, tables)  # the time indexes (issue 37): what they add is shown apart
    units = {"": [0.0, 0.0], "_without_chain": [0.0, 0.0], "_chain_format_1": [0.0, 0.0],
             "_without_indexes": [0.0, 0.0]}
    for _, op, params, response in calls:
        if op not in ("GetItem", "Query", "PutItem", "UpdateItem"):
            continue  # StartExecution, DescribeExecution: not DynamoDB
        for suffix, sizes, chain, tables_indexed in (
                ("", old, True, indexed), ("_without_chain", old_unchained, False, indexed),
                ("_chain_format_1", old_format_1, "format 1", indexed), ("_without_indexes", old, True, frozenset())):
            r, w = units_of_call(op, params, response, sizes, chain, tables_indexed, index_keys=index_keys)
            units[suffix][0] += r
            units[suffix][1] += w
    chain_bytes = max((item_size(p["Item"]) - item_size(p["Item"], chain=False)
                       for _, op, p, _ in calls if op == "PutItem"), default=0)
    events = list(cf.history(execution.arn))
    v0_writes = [c for c in calls if c[0].logical_id in ("UpdateLatestFunction", "DeleteTombstoneFunction")]
    history_writes = [c for c in calls if c[0].logical_id == "PutHistoryFunction" and c[1] == "PutItem"]
    transactional = 2 * sum(units_of_call(op, p, r, old, True, indexed, index_keys=index_keys)[1]
                            for _, op, p, r in v0_writes + history_writes)
    # the changes index's share (issue 35): none for a version recorded in the hour of the one before it
    index_units = sum(index_write_units(p["Item"], (index_keys or {}).get(item_key(p), {}))
                      for _, op, p, r in calls if op == "PutItem" and not (r or {}).get("Error"))
    new = {k: v for t in tables for k, v in table_sizes(cf.dynamodb, t).items()}
    index_bytes = sum(index_entry_size(p["Item"], key) for _, op, p, r in calls if op == "PutItem"
                      and p["TableName"] in indexed and not r.get("Error")
                      for key in TIME_INDEX_KEYS.values() if key in p["Item"])
    key_bytes = max((item_size(p["Item"]) - item_size({k: v for k, v in p["Item"].items() if k not in TIME_INDEX_KEYS.values()})
                     for _, op, p, _ in calls if op == "PutItem"), default=0)
    stored = index_bytes + sum(size + (DYNAMODB_ITEM_OVERHEAD if key not in old else 0) - old.get(key, 0)
                               for key, size in new.items())
    per_function = {}
    for f in functions:
        requests = [op for _, op, _, _ in f.api_calls]
        if f.invocations or requests:
            per_function[f.logical_id] = {
                "invocations": f.invocations, "requests": len(requests),
                "dynamodb_requests": sum(1 for op in requests if op in ("GetItem", "Query", "PutItem", "UpdateItem",
                                                                        "DeleteItem")),
                "log_bytes": sum(len(str(line).encode("utf-8")) + LOG_EVENT_OVERHEAD for line in f.logs)}
    return {
        "outcome": execution.output["outcome"], "read_units": units[""][0], "write_units": units[""][1],
        "read_units_without_chain": units["_without_chain"][0], "write_units_without_chain": units["_without_chain"][1],
        "read_units_chain_format_1": units["_chain_format_1"][0],
        "write_units_chain_format_1": units["_chain_format_1"][1], "index_write_units": index_units,
        "write_units_without_indexes": units["_without_indexes"][1], "index_bytes": index_bytes,
        "index_key_bytes_per_item": key_bytes,
        "chain_bytes_per_item": chain_bytes, "requests": sorted(op for _, op, _, _ in calls),
        "state_transitions": billed_transitions(events), "lambda_invocations": lambda_invocations(events),
        "states_entered": sum(1 for ev in events if ev["type"].endswith("StateEntered")),
        "transactional_write_units": transactional if v0_writes else None,
        "execution_log_bytes": execution_log_bytes(stack, execution.arn),
        "function_log_bytes": sum(v["log_bytes"] for k, v in per_function.items() if k != FRONT),
        "functions": per_function, "stored_bytes": stored,
        "input_bytes": len(json.dumps(execution.input, separators=(",", ":")).encode("utf-8")),
        "history_bytes": len(json.dumps(events, default=str, separators=(",", ":")).encode()),
        "wait_seconds": wait_seconds(events),
    }


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
