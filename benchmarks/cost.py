"""Cost and speed, measured: per path (create, update, delete, revive, rollback, stale, duplicate),
the DynamoDB read and write units computed with DynamoDB's own rounding from the item sizes of the
requests actually made, the state transitions (as Standard bills them: states entered plus retries) and
Lambda invocations from the execution history, the cost per million changes on Standard and Express
workflows, cold starts against a bare boto3 client, the deployment package sizes, and contention: K
concurrent writers to one entity (K = 1, 10, 50, 200) at real back-off timing.

    .venv/bin/python benchmarks/cost.py [--json] [--no-build] [--contention 1,10,50,200] [--time-scale 1]
                                        [--compare-today] [--contention-only]

``--compare-today`` runs the contention table also with the back-off ceilings of main (up to 60 s) and
with main's whole design (``git archive main``, in a child interpreter), side by side.

Prices: us-east-1 public list prices as published on aws.amazon.com on 2026-11-21 (see PRICES).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from changeflow.checks.reliability import T0  # noqa: E402 - one fixed start for every measurement
PRICES = {  # USD, us-east-1, list prices on 2026-11-21
    "standard_per_transition": 0.025 / 1000,
    "express_per_request": 1.00 / 1e6,
    "express_per_gb_second": 0.00001667,  # first tier; memory billed in 64 MB chunks, time in 100 ms
    "lambda_per_request": 0.20 / 1e6,
    "lambda_per_gb_second": 0.0000166667,  # x86
    "dynamodb_per_wru": 0.625 / 1e6,  # on-demand write request unit (1 KB)
    "dynamodb_per_rru": 0.125 / 1e6,  # on-demand read request unit (4 KB strongly consistent read)
    # CloudWatch Logs ingestion, first tier: the execution log is billed as vended logs, the functions' logs
    # as standard logs; both $0.50 per GB in us-east-1
    "logs_ingest_per_gb": 0.50,
}
# Each log event counts its UTF-8 message plus 26 bytes (CloudWatch Logs quotas: PutLogEvents batch size,
# "the sum of all event messages in UTF-8, plus 26 bytes for each log event").
LOG_EVENT_OVERHEAD = 26
# What Lambda itself writes to a function's log per invocation (its text format; the embedded stack's
# handlers run without it): START, END and a REPORT line with the X-Ray trace, each one event.
LAMBDA_PLATFORM_LINES = (
    "START RequestId: 6f5e1c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6 Version: $LATEST\n",
    "END RequestId: 6f5e1c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6\n",
    "REPORT RequestId: 6f5e1c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6\tDuration: 5.00 ms\tBilled Duration: 5 ms\t"
    "Memory Size: 256 MB\tMax Memory Used: 90 MB\t\nXRAY TraceId: 1-6751c1e3-2f3e1e6c1c2d1d8a3b4c5d6e\t"
    "SegmentId: 5d2a6b8c9e0f1a2b\tSampled: true\t\n",
)
LAMBDA_PLATFORM_BYTES = sum(len(line.encode()) + LOG_EVENT_OVERHEAD for line in LAMBDA_PLATFORM_LINES)
# The execution log's settings measured: the default (failures only, no data), every state without data,
# every state with data (docs/privacy.md)
LOG_SETTINGS = {"ERROR": {"StateMachineLogLevel": "ERROR", "StateMachineIncludeExecutionData": "false"},
                "ALL": {"StateMachineLogLevel": "ALL", "StateMachineIncludeExecutionData": "false"},
                "ALL + data": {"StateMachineLogLevel": "ALL", "StateMachineIncludeExecutionData": "true"}}
LAMBDA_MEMORY_GB = 0.25  # MemorySize 256 in the template's Globals
PATHS = ["create", "update", "stale", "duplicate", "delete", "revive", "rollback", "patch", "write-back"]
HANDLER_MS = 5.0  # assumed per Lambda invocation in the dollar figures


CHAIN = ("prevHash", "chainHash")  # the hash chain's attributes (changeflow_core.chain)
FORMAT_1_BYTES = len("prevHash") + 64 + len("chainHash") + 64  # the chain as format 1 stored it: hex strings


def item_size(item: dict, chain: bool | str = True) -> int:
    """DynamoDB's size of an item; ``chain=False``: as if it carried no hash chain (its cost, shown apart);
    ``chain="format 1"``: as if it carried the chain as format 1 stored it (145 bytes, the figure before)."""
    from changeflow_core.codec import item_size as size

    if chain is True:
        return size(item)
    bare = size({k: v for k, v in item.items() if k not in CHAIN})
    return bare + (FORMAT_1_BYTES if chain == "format 1" and any(k in item for k in CHAIN) else 0)


def units_of_call(operation: str, params: dict, response: dict, old_sizes: dict,
                  chain: bool | str = True) -> tuple[float, float]:
    """(read units, write units) of one request, DynamoDB's rounding: reads per 4 KB (strongly
    consistent: 1 unit, eventually: 0.5), writes per 1 KB of the larger of the old and new item."""
    item_size_ = lambda item: item_size(item, chain)  # noqa: E731

    if operation in ("GetItem", "Query"):
        found = [response["Item"]] if response.get("Item") else response.get("Items", [])
        size = sum(item_size_(i) for i in found)
        units = max(1, math.ceil(size / 4096))
        return (units if params.get("ConsistentRead") else units / 2), 0.0
    key = (params["TableName"], json.dumps(params.get("Key") or {k: params["Item"][k] for k in ("pk", "sk")},
                                           sort_keys=True))
    old = old_sizes.get(key, 0)
    if operation == "PutItem":
        new = item_size_(params["Item"])
    elif operation == "UpdateItem":  # SET of one numeric attribute (the TTL tag)
        new = old + len("expiresAt") + 6
    else:
        raise ValueError(operation)
    return 0.0, float(max(1, math.ceil(max(old, new) / 1024)))


def table_sizes(client, table: str, chain: bool | str = True) -> dict:
    sizes, start = {}, None
    while True:
        page = client.scan(TableName=table, **({"ExclusiveStartKey": start} if start else {}))
        for item in page["Items"]:
            sizes[(table, json.dumps({"pk": item["pk"], "sk": item["sk"]}, sort_keys=True))] = item_size(item, chain)
        start = page.get("LastEvaluatedKey")
        if not start:
            return sizes


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


def measure_paths(item_bytes: int, parameters: dict | None = None) -> dict:
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
    with EmbeddedStack(ROOT, time_scale=0.001, parameters=parameters or {}) as stack:
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


def wait_seconds(events: list[dict]) -> float:
    """Seconds the execution spent in Wait states (the back-off): each WaitStateEntered's ``waitSeconds``
    (the ASL waits ``SecondsPath: $.waitSeconds``). Express bills them as duration."""
    total = 0.0
    for ev in events:
        if ev["type"] == "WaitStateEntered":
            state_input = json.loads(ev["stateEnteredEventDetails"].get("input") or "{}")
            total += float(state_input.get("waitSeconds", 0) or 0)
    return total


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


def lambda_invocations(events: list[dict]) -> int:
    return sum(1 for ev in events if ev["type"] in ("TaskScheduled", "LambdaFunctionScheduled"))


def billed_transitions(events: list[dict]) -> int:
    """State transitions as Standard workflows bill them: every state entered, and every retry of a Task
    (AWS pricing: "including retries"). A retry schedules the Task again without entering it again."""
    entered = sum(1 for ev in events if ev["type"].endswith("StateEntered"))
    tasks_entered = sum(1 for ev in events if ev["type"] == "TaskStateEntered")
    return entered + lambda_invocations(events) - tasks_entered


# --- contention: K concurrent writers to one entity -----------------------------------------------------
BACKOFF_ARRAY = re.compile(r"States\.Array\(([0-9, ]+)\)")
TODAY_ENDS = "2, 2, 3, 5, 9, 17, 33, 60, 60, 60, 60"  # main before issue 11: ceilings up to 60 s


def variant_root(ends: str) -> Path:
    """A copy of the project (symlinks) whose ASL draws its back-off from ``ends`` instead."""
    root = Path(tempfile.mkdtemp(prefix="changeflow-variant-"))
    for entry in ROOT.iterdir():
        if entry.name not in ("statemachines", ".git"):
            (root / entry.name).symlink_to(entry)
    (root / "statemachines").mkdir()
    text = (ROOT / "statemachines" / "change.asl.json").read_text(encoding="utf-8")
    (root / "statemachines" / "change.asl.json").write_text(BACKOFF_ARRAY.sub(f"States.Array({ends})", text))
    return root


def main_root(ref: str = "main") -> Path:
    """``git archive`` of another commit (read only, nothing checked out here): today's design, to run
    side by side with this one in a fresh interpreter (its own changeflow_core)."""
    root = Path(tempfile.mkdtemp(prefix=f"changeflow-{ref}-"))
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root


def contention_elsewhere(root: Path, k: int, time_scale: float, label: str) -> dict:
    """``contention`` run by another tree's code (``main_root``), in a child interpreter."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from cost import contention; from pathlib import Path;"
            "print(json.dumps(contention(int(sys.argv[3]), float(sys.argv[4]), Path(sys.argv[2]), sys.argv[5])))")
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}:{root / 'layers' / 'core'}", "CHANGEFLOW_ROOT": str(root)}
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks"), str(root), str(k), str(time_scale),
                          label], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def contention(k: int, time_scale: float, root: Path = ROOT, label: str = "") -> dict:
    """K changes to one entity at once, all at one effectiveAt (so every one of them must apply, and every
    write contends). Per applied change: billed transitions, Lambda invocations, DynamoDB units (computed
    from the requests' item sizes); time to outcome (each execution's start to end, wall-clock seconds
    at ``time_scale``); how many ended VersionConflict."""
    from concurrent.futures import ThreadPoolExecutor

    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack

    entity = f"hot#{k}"
    requests = [{"entityId": entity, "operation": "put", "changeId": f"{entity}-c{i}", "effectiveAt": T0,
                 "attributes": {"writer": i, "body": "x" * 800}} for i in range(k)]
    with EmbeddedStack(root, time_scale=time_scale) as stack:
        cf = Changeflow.for_embedded(stack)
        stack.warm()
        for function in stack.lambdas.functions.values():
            function.api_calls.clear()

        def one(request):
            started = time.perf_counter()
            execution = cf.submit(request, timeout=3600)
            return execution, time.perf_counter() - started

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=k) as pool:
            results = list(pool.map(one, requests))
        wall = time.perf_counter() - started
        transitions = invocations = 0
        express_usd = 0.0  # what Express would bill these executions: each one's duration, its Waits included
        for execution, _ in results:
            events = list(cf.history(execution.arn))
            transitions += billed_transitions(events)
            invocations += lambda_invocations(events)
            express_usd += PRICES["express_per_request"] + 0.0625 * express_billed_seconds(wait_seconds(events)) * \
                PRICES["express_per_gb_second"]
        reads = writes = 0.0
        for function in stack.lambdas.functions.values():
            for _, operation, params, response in function.api_calls:
                if operation in ("GetItem", "Query", "PutItem", "UpdateItem"):
                    r, w = units_of_call(operation, params, response, {})
                    reads, writes = reads + r, writes + w
        versions = len(cf.entity(entity)["versions"])
    outcomes = [e.output["outcome"] if e.status == "SUCCEEDED" else e.error for e, _ in results]
    applied = outcomes.count("applied")
    seconds = sorted(t for _, t in results)
    pick = lambda q: seconds[min(len(seconds) - 1, int(q * len(seconds)))]  # noqa: E731
    per = max(applied, 1)
    return {"label": label, "k": k, "time_scale": time_scale, "applied": applied, "versions": versions,
            "version_conflicts": outcomes.count("VersionConflict"),
            "other": sorted(o for o in outcomes if o not in ("applied", "VersionConflict")),
            "transitions_per_applied": transitions / per, "invocations_per_applied": invocations / per,
            "read_units_per_applied": reads / per, "write_units_per_applied": writes / per,
            "p50_s": pick(0.5), "p99_s": pick(0.99), "wall_s": wall,
            "express_workflow_usd_per_million_applied": express_usd / per * 1e6,
            "standard_transitions_usd_per_million_applied": transitions / per * PRICES["standard_per_transition"] * 1e6}


def print_contention(rows: list[dict]) -> None:
    print("\nContention: K concurrent writers to one entity, one shared effectiveAt (every change must apply);"
          "\nper applied change; time to outcome in wall-clock seconds at the given time scale")
    head = (f"{'design':<22}{'K':>5}{'scale':>7}{'applied':>9}{'VersionConflict':>17}{'transitions':>13}"
            f"{'invocations':>13}{'RRU':>7}{'WRU':>7}{'p50 s':>8}{'p99 s':>8}")
    print(head)
    for r in rows:
        print(f"{r['label']:<22}{r['k']:>5}{r['time_scale']:>7g}{r['applied']:>9}{r['version_conflicts']:>17}"
              f"{r['transitions_per_applied']:>13.1f}{r['invocations_per_applied']:>13.1f}"
              f"{r['read_units_per_applied']:>7.1f}{r['write_units_per_applied']:>7.1f}{r['p50_s']:>8.1f}{r['p99_s']:>8.1f}"
              f"   workflow $/M applied: Standard {r.get('standard_transitions_usd_per_million_applied', 0):.2f},"
              f" Express {r.get('express_workflow_usd_per_million_applied', 0):.2f}")


def units_report(report: dict) -> str:
    """The load-independent part of the report: units, transitions, invocations, dollars, the chain's share,
    and the fetch step's read in both table layouts."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print("DynamoDB units per change (computed from request item sizes; reads strongly consistent)")
        print(f"{'path':<10}{'outcome':<10}" + "".join(f"{f'{s // 1000} KB R/W':>14}" for s in report["sizes"])
              + f"{'transact. W (1 KB)':>20}{'transitions':>13}{'invocations':>13}")
        for path in PATHS:
            row = report["sizes"][1000][path]
            cells = "".join(f"{report['sizes'][s][path]['read_units']:>7g}/{report['sizes'][s][path]['write_units']:<6g}"
                            for s in report["sizes"])
            trans = row["transactional_write_units"]
            print(f"{path:<10}{row['outcome']:<10}{cells}{('' if trans is None else f'{trans:g}'):>20}"
                  f"{row['state_transitions']:>13}{row['lambda_invocations']:>13}")
        for title, sizes in (("", report["sizes"]),
                             (" with a retention window (prevHash stored too)", report.get("retention") or {})):
            if not sizes:
                continue
            bytes_ = max(p["chain_bytes_per_item"] for s in sizes.values() for p in s.values())
            print(f"\nThe hash chain's share{title}: format 2 stores {bytes_} bytes per item, format 1 stored "
                  f"{FORMAT_1_BYTES}; read / write units without the chain -> format 1 -> format 2")
            for path in PATHS:
                cells = "".join(
                    f"{sizes[s][path]['read_units_without_chain']:>5g}/{sizes[s][path]['write_units_without_chain']:<4g}"
                    f"-> {sizes[s][path]['read_units_chain_format_1']:g}/{sizes[s][path]['write_units_chain_format_1']:<4g}"
                    f"-> {sizes[s][path]['read_units']:g}/{sizes[s][path]['write_units']:<6g}"
                    for s in sizes)
                print(f"{path:<10}{cells}")
        if "principal" in report:
            print("\nThe principal's share (issue 21): bytes per item (v0 and history each), bytes carried between "
                  "states, and the write units of an applied change's two puts without -> with it")
            print(f"{'principal':<24}{'item B':>8}{'state B':>9}" + "".join(
                f"{f'{s // 1000} KB W':>14}" for s in (1000, 4000)))
            for label, row in report["principal"].items():
                cells = "".join(f"{row[f'write_units_{s}']['without']:>9g} -> {row[f'write_units_{s}']['with']:<2g}"
                                for s in (1000, 4000))
                print(f"{label:<24}{row['item_bytes']:>8}{row['state_bytes']:>9}{cells}")
        print(f"\nCost per million changes at 1 KB (USD; Lambda {int(LAMBDA_MEMORY_GB * 1024)} MB x {HANDLER_MS:g} ms "
              "per invocation assumed; Express: 64 MB, 100 ms plus Waits; logs at the default: ERROR, no data)")
        for path in PATHS:
            c = report["sizes"][1000][path]["cost_per_million"]
            print(f"{path:<10} standard {c['standard']:>8.2f}   express {c['express']:>8.2f}   transitions "
                  f"{c['transitions_share_of_standard']:.0%} of standard")
        for size in (1000, 100_000):
            print(f"\nCloudWatch Logs ingestion per change at {size // 1000} KB: bytes (execution log + functions' "
                  "logs) and USD per million")
            for path in PATHS:
                row = report["sizes"][size][path]
                cells = "   ".join(f"{setting} {report['log_bytes'][size][setting][path]:>7,} + "
                                   f"{row['function_log_bytes']:,} B ${row['cost_per_million']['logs'][setting]:.2f}"
                                   for setting in LOG_SETTINGS)
                print(f"{path:<10}{cells}")
        print("\nThe fetch step's read and the write-back of a missing history item (issue 26.2): requests and "
              "read / write units per change")
        for layout, sizes in (("one table", report["sizes"]), ("separate history table", report["separate_history_table"])):
            for path in ("update", "write-back"):
                cells = "   ".join(f"{s // 1000} KB {sizes[s][path]['read_units']:g} / {sizes[s][path]['write_units']:g}"
                                   for s in sizes if s in (1000, 100_000))
                print(f"{layout:<24}{path:<12}{' '.join(sizes[1000][path]['requests']):<60}{cells}")
    return out.getvalue().rstrip("\n")


def log_cost(execution_log_bytes: float, function_log_bytes: float) -> float:
    """USD of CloudWatch Logs ingestion for one change."""
    return (execution_log_bytes + function_log_bytes) / 1e9 * PRICES["logs_ingest_per_gb"]


def express_billed_seconds(wait_s: float) -> float:
    """Express bills an execution's duration, Wait states included, in 100 ms steps: a few Lambda steps of
    milliseconds (assumed 100 ms in all) plus its waits."""
    return math.ceil((0.1 + wait_s) * 10 - 1e-9) / 10


def cost_per_million(path: dict, handler_ms: float, log_bytes: dict[str, int] | None = None) -> dict:
    """USD per million changes. ``standard`` and ``express`` include CloudWatch Logs at the default log
    settings (the functions' logs and the execution log at ERROR, without data); ``logs`` gives the logs
    alone at each setting (``log_bytes``: execution log bytes by setting, measured)."""
    lambda_cost = path["lambda_invocations"] * (
        PRICES["lambda_per_request"] + LAMBDA_MEMORY_GB * max(1.0, handler_ms) / 1000 * PRICES["lambda_per_gb_second"])
    dynamodb = path["read_units"] * PRICES["dynamodb_per_rru"] + path["write_units"] * PRICES["dynamodb_per_wru"]
    log_bytes = log_bytes or {"ERROR": path["execution_log_bytes"]}
    logs = {setting: log_cost(size, path["function_log_bytes"]) * 1e6 for setting, size in log_bytes.items()}
    default_logs = logs["ERROR"] / 1e6
    express_seconds = express_billed_seconds(path.get("wait_seconds", 0.0))
    standard = path["state_transitions"] * PRICES["standard_per_transition"] + lambda_cost + dynamodb + default_logs
    express = PRICES["express_per_request"] + 0.0625 * express_seconds * PRICES["express_per_gb_second"] + \
        lambda_cost + dynamodb + default_logs
    transitions = path["state_transitions"] * PRICES["standard_per_transition"]
    return {"standard": standard * 1e6, "express": express * 1e6, "logs": logs,
            "transitions_share_of_standard": transitions / standard,
            "standard_with_all_data": (standard - default_logs) * 1e6 + logs.get("ALL + data", logs["ERROR"]),
            "express_with_all_data": (express - default_logs) * 1e6 + logs.get("ALL + data", logs["ERROR"])}


COLD_START = r"""
import os, sys, time, importlib.util
started = time.perf_counter()
if sys.argv[1] == "boto3":
    import boto3
    boto3.client("dynamodb")
else:
    spec = importlib.util.spec_from_file_location("app", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
print(time.perf_counter() - started)
"""


def cold_starts(rounds: int = 7) -> dict:
    """Median import-and-initialise time of each handler module (a Lambda-like environment, tracing on)
    against importing boto3 and creating a DynamoDB client, each in a fresh interpreter."""
    from changeflow.local.template import Template

    template = Template(ROOT / "template.yaml")
    base_env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "PYTHONPATH": str(ROOT / "layers" / "core"), "PYTHONDONTWRITEBYTECODE": "1"}
    base_env.pop("POWERTOOLS_TRACE_DISABLED", None)

    def timed(target: str, env: dict) -> float:
        runs = [float(subprocess.run([sys.executable, "-c", COLD_START, target], env=env, capture_output=True,
                                     text=True, check=True).stdout) for _ in range(rounds)]
        return statistics.median(runs)

    results = {}
    baseline = timed("boto3", base_env)
    for logical_id in template.of_type("AWS::Serverless::Function"):
        props = template.function_properties(logical_id)
        env = {**base_env, **{k: str(v) for k, v in props["Environment"]["Variables"].items()},
               "AWS_LAMBDA_FUNCTION_NAME": logical_id, "LAMBDA_TASK_ROOT": str(ROOT / props["CodeUri"]),
               "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
               "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR"}
        seconds = timed(str(ROOT / props["CodeUri"] / "app.py"), env)
        results[logical_id] = {"seconds": seconds, "ratio": seconds / baseline}
    return {"bare_boto3_dynamodb_client": baseline, "handlers": results}


def init_billed(cold: dict) -> dict:
    """Lambda bills the INIT phase of ZIP functions on managed runtimes since 2025-08-01 ("AWS Lambda
    standardizes billing for INIT Phase", https://aws.amazon.com/blogs/compute/aws-lambda-standardizes-billing-for-init-phase/):
    USD per million cold starts of each function, its measured import time at the template's memory."""
    return {name: c["seconds"] * LAMBDA_MEMORY_GB * PRICES["lambda_per_gb_second"] * 1e6
            for name, c in cold["handlers"].items()}


def package_sizes() -> dict:
    """Sizes of what sam build produces for each function and the layer (runtime overridden to this Python)."""
    build = Path(tempfile.mkdtemp(prefix="changeflow-build-"))
    metadata = build / "samcli"
    metadata.mkdir()
    (metadata / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    runtime = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    sam = ROOT / ".venv" / "bin" / "sam"
    subprocess.run([str(sam), "build", "--parameter-overrides", f"Runtime={runtime}", "--build-dir", str(build / "out")],
                   cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "SAM_CLI_TELEMETRY": "0", "__SAM_CLI_APP_DIR": str(metadata),
                        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    sizes = {}
    for folder in sorted((build / "out").iterdir()):
        if folder.is_dir():
            sizes[folder.name] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-build", action="store_true", help="skip sam build (package sizes)")
    parser.add_argument("--contention", default="1,10,50,200", help="K values of the contention table ('' skips it)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="of Waits and back-offs in the contention runs")
    parser.add_argument("--compare-today", action="store_true", help="also run main's back-off ceilings (up to 60 s)")
    parser.add_argument("--contention-only", action="store_true")
    parser.add_argument("--units-only", action="store_true",
                        help="only the DynamoDB units, transitions and invocations (no timings: any load)")
    args = parser.parse_args()
    ks = [int(k) for k in args.contention.split(",") if k.strip()]

    def contention_table() -> list[dict]:
        rows = []
        for k in ks:
            batch = [contention(k, args.time_scale, label="this design")]
            if args.compare_today:
                batch.append(contention(k, args.time_scale, variant_root(TODAY_ENDS), label="ceilings up to 60 s"))
                batch.append(contention_elsewhere(main_root(), k, args.time_scale, label="main (8 transitions)"))
            rows += batch
            if not args.json:
                print_contention(batch)
        return rows

    if args.contention_only:
        rows = contention_table()
        if args.json:
            print(json.dumps(rows, indent=2))
        return
    report = {"prices": PRICES, "sizes": {}, "separate_history_table": {}, "log_bytes": {},
              "principal": principal_share()}
    for size in (1000, 4000, 100_000):
        report["sizes"][size] = measure_paths(size)
    for size in (1000, 100_000):  # the fetch step's two reads with SeparateHistoryTable=true
        report["separate_history_table"][size] = measure_paths(size, {"SeparateHistoryTable": "true"})
    report["retention"] = {}  # a window that expires nothing in the run, but makes the writers keep prevHash
    for size in (1000, 4000):
        report["retention"][size] = measure_paths(size, {"HistoryRetentionVersions": "1000"})
    for size in (1000, 100_000):  # the execution log at each setting (sizes only: the same on any machine)
        report["log_bytes"][size] = {setting: {p: r["execution_log_bytes"] for p, r in measure_paths(size, params).items()}
                                     for setting, params in LOG_SETTINGS.items()}
    handler_ms = HANDLER_MS

    def price_paths() -> None:
        for size, paths in ((1000, report["sizes"][1000]), (100_000, report["sizes"][100_000])):
            for name, path in paths.items():
                path["cost_per_million"] = cost_per_million(
                    path, handler_ms, {s: report["log_bytes"][size][s][name] for s in LOG_SETTINGS})

    if args.units_only:  # load-independent figures only: no timings, no build
        price_paths()
        print(json.dumps(report, indent=2, default=str) if args.json else units_report(report))
        return
    report["cold_start"] = cold_starts()
    report["init_billed"] = init_billed(report["cold_start"])
    price_paths()
    if not args.no_build:
        report["package_bytes"] = package_sizes()
    if args.json:
        report["contention"] = contention_table()
        print(json.dumps(report, indent=2, default=str))
        return
    print(units_report(report))
    cold = report["cold_start"]
    print(f"\nCold start (median of 7, fresh interpreter): bare boto3 + DynamoDB client "
          f"{cold['bare_boto3_dynamodb_client'] * 1000:.0f} ms")
    for name, c in cold["handlers"].items():
        print(f"{name:<26}{c['seconds'] * 1000:>6.0f} ms {c['ratio']:>6.2f}x")
    if "package_bytes" in report:
        print("\nDeployment package (sam build)")
        for name, size in report["package_bytes"].items():
            print(f"{name:<26}{size / 1024:>10.1f} KiB")
    contention_table()


if __name__ == "__main__":
    main()
