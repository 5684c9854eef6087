"""What a scheduled digest costs (issue 35), per digest and per change, measured: ``benchmarks/digests.py``
(part of ``make cost``).

On the embedded stack, at each size: the table seeded with N entities (a ``v0`` and one history item each, as
the workflow writes them, ~300 bytes), then the stack's own digest function run as its schedule runs it:

- the **first** digest reads every ``v0`` (a parallel Scan of the whole table): what any digest would cost if
  it rescanned the table every hour, the baseline;
- a **changes** digest after 1% of the entities changed: 16 Queries of the changes index (keys only), then
  the ``v0`` of each entity it names (BatchGetItem, 100 a request, strongly consistent);
- a digest that **rebuilds from a checkpoint** (the steady state: the function reads the newest checkpoint,
  every head, and the digests after it), and the checkpoint itself.

Requests are counted from the function's own calls; read units from the bytes the table and the index hold
(DynamoDB's rounding: a Scan or Query reads its items' size, 4 KB a unit, half for eventually consistent
reads; BatchGetItem reads each item whole, 4 KB a unit, whatever it projects); time is the function's wall
time in this process (moto answering in-process, so an upper bound of the requests' part). Where a size is
not run here (``make cost``: 10^5 and 10^6; ``--full``: 10^6), the function's own work (a checkpoint parsed,
the tree rebuilt and updated) is measured on the heads alone, and the requests and bytes are projected from
the per-entity figures measured at the largest size that ran."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from .prices import PRICES
from .units import INDEX_PROJECTION

S3_PRICES = {  # USD, us-east-1, list prices on 2026-11-25
    "put_per_1000": 0.005, "list_per_1000": 0.005, "get_per_1000": 0.0004,
    "standard_per_gb_month": 0.023, "instant_retrieval_per_gb_month": 0.004,
    "transition_to_instant_retrieval_per_1000": 0.02,
}
DIGESTS_PER_MONTH = 730  # hourly (DigestSchedule's default)
RETENTION_MONTHS = 84  # DigestRetentionDays' default, seven years
STANDARD_MONTHS = 3  # the bucket's lifecycle moves them to Glacier Instant Retrieval after 90 days
MEMORY_GB = 2.0  # the function's MemorySize (2048: a million heads rebuilt from a checkpoint peak at ~1.6 GB)
AVERAGE_DELTAS = 11  # a steady digest reads the checkpoint and, on average, 11 digests after it (24 a day)
# (the in-process measurement reads the checkpoint and the head: the 11 are added from the measured parse time)
T0 = 1_767_225_600_000  # an hour's start: the first digest's (the entities were seeded a day before)
DAY_MS = 86_400_000
# A change's cost leaves the scheduled digest out (it runs on its own, priced per digest here): the stacks
# that measure changes keep the schedule from firing during the measurement.
QUIET = {"DigestSchedule": "rate(3650 days)"}
PADDING = "x" * 200  # an entity's content: ~300-byte items


def _item(entity: str, version: int, recorded_at: int, latest: bool) -> dict[str, dict]:
    from changeflow_core import model

    item = {"pk": {"S": entity}, "sk": {"S": model.LATEST_SK if latest else model.history_sk(version)},
            "version": {"N": str(version)}, "recordedAt": {"N": str(recorded_at)},
            "chainHash": {"B": (entity + str(version)).encode().ljust(32, b"-")[:32]}, "name": {"S": PADDING}}
    if latest:
        item.update({k: {"N": str(v)} for k, v in model.changes_index_keys(entity, recorded_at).items()})
    return item


def _write(dynamodb, table: str, items: list[dict]) -> None:
    for start in range(0, len(items), 25):
        dynamodb.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": i}} for i in items[start:start + 25]]})


def _size(body: Any) -> int:
    return len(body) if isinstance(body, (bytes, bytearray)) else len(body.getvalue())


def _units(size_bytes: int, pages: int, consistent: bool = False) -> float:
    """Read request units of ``pages`` requests reading ``size_bytes`` in all (each at least one unit)."""
    units = max(pages, math.ceil(size_bytes / 4096))
    return units if consistent else units / 2


def _changes_read_units(api_calls, v0_bytes: int) -> float:
    """Read units of a changes digest's table reads, from its requests: each Query of the index the entries it
    returned (keys only: what it returns is what the index holds), eventually consistent; each ``v0`` that
    BatchGetItem returned, whole (``v0_bytes``), strongly consistent."""
    from changeflow_core import codec

    units = 0.0
    for _, operation, params, response in api_calls:
        if operation == "Query":
            units += _units(sum(codec.item_size(i) for i in response.get("Items", [])), 1)
        elif operation == "BatchGetItem":
            units += sum(len(found) for found in response.get("Responses", {}).values()) * math.ceil(v0_bytes / 4096)
    return units


def measure(entities: int, changed_share: float = 0.01) -> dict[str, Any]:
    """One size on the embedded stack: the first digest, a changes digest, a digest from a checkpoint, each at
    the time the hourly schedule runs it (the function's clock set), a different 1% of the entities changed in
    each hour before."""
    from changeflow_core import codec, digesting, digestformat, model
    from changeflow_core.digesting import clock_ms

    from ..client import Changeflow
    from ..common.project import project_root
    from ..local.embedded import EmbeddedStack

    event = json.loads((project_root() / "events" / "functions" / "take_digest.json").read_text())
    with EmbeddedStack(project_root(), time_scale=0.001, parameters=QUIET) as stack:
        cf = Changeflow.for_embedded(stack)
        digest = stack.function("DigestFunction")
        names = [f"user#{i:08d}" for i in range(entities)]
        seeded = [_item(e, 1, T0 - DAY_MS + i, latest) for i, e in enumerate(names) for latest in (True, False)]
        started = time.perf_counter()
        _write(cf.dynamodb, cf.table, seeded)
        seed_seconds = time.perf_counter() - started
        table_bytes = sum(codec.item_size(i) for i in seeded)
        index_bytes_per_entity = codec.item_size({k: seeded[0][k] for k in INDEX_PROJECTION})
        v0_bytes = codec.item_size(seeded[0])

        def run(hour: int) -> dict[str, Any]:  # as the hourly schedule runs it, 30 s past the hour
            digest.api_calls.clear()
            digesting.clock_ms = lambda: T0 + hour * model.HOUR_MS + 30_000
            began, cpu = time.perf_counter(), time.process_time()
            try:
                payload, failed = stack.lambdas.invoke(digest, event)
            finally:
                digesting.clock_ms = clock_ms
            assert not failed, payload
            payload["wall_seconds"] = time.perf_counter() - began
            payload["seconds"] = time.process_time() - cpu  # CPU: the machine is shared; Lambda's vCPU is not
            # (the in-process moto's CPU included: an upper bound of the requests' part)
            puts = [(p["Key"], _size(p["Body"])) for s, op, p, _ in digest.api_calls if op == "PutObject"]
            payload["bytes_put"] = sum(size for _, size in puts)
            payload["checkpoint_bytes"] = sum(size for key, size in puts if "/heads/" in key)
            return payload

        first = run(0)
        first["read_units"] = _units(table_bytes, first["requests"].get("Scan", 0))
        step = max(1, int(1 / changed_share))

        def change_them(hour: int) -> list[str]:  # another 1% of the entities each hour, 10 minutes in
            moved = names[step // 2 * hour % step::step]
            _write(cf.dynamodb, cf.table, [_item(e, 1 + hour, T0 + hour * model.HOUR_MS + 600_000 + i, True)
                                           for i, e in enumerate(moved)])
            return moved

        original = digestformat.CHECKPOINT_EVERY
        digestformat.CHECKPOINT_EVERY = 2  # the changes digest writes a checkpoint, the next reads it back
        try:
            moved = change_them(0)
            changes = run(1)  # reads the hour before its predecessor's clock less the overlap, and its own
            changes["read_units"] = _changes_read_units(digest.api_calls, v0_bytes)
            digestformat.CHECKPOINT_EVERY = 10 ** 9
            change_them(1)
            steady = run(2)  # the steady state: the two hours' changed entities read, the last hour's committed
            steady["read_units"] = _changes_read_units(digest.api_calls, v0_bytes)
        finally:
            digestformat.CHECKPOINT_EVERY = original
        # a steady digest reads, on average, 11 digests after the checkpoint besides: each one GET and its
        # heads parsed (1% of them), measured on the changes digest's own document
        delta = [p for s, op, p, _ in digest.api_calls if op == "PutObject"]
        body = stack.client("s3").get_object(Bucket=cf.outputs["DigestLocation"].split("/")[2],
                                             Key=changes["key"])["Body"].read()
        began = time.process_time()
        digestformat.check(json.loads(body))
        parse = time.process_time() - began
        steady["requests"]["GetObject"] = steady["requests"].get("GetObject", 0) + AVERAGE_DELTAS
        steady["seconds"] += AVERAGE_DELTAS * parse
        steady["delta_parse_seconds"] = parse
        del delta
    return {"entities": entities, "changed": len(moved), "seed_seconds": seed_seconds, "table_bytes": table_bytes,
            "index_bytes_per_entity": index_bytes_per_entity, "v0_bytes": v0_bytes, "first": first,
            "changes": changes, "from_checkpoint": steady}


def measure_compute(entities: int, changed_share: float = 0.01) -> dict[str, Any]:
    """The function's own work at a size the embedded stack cannot hold here: a checkpoint of every head
    written and parsed, the tree rebuilt from it, and 1% of the heads updated in place."""
    import hashlib

    from changeflow_core import digestformat
    from changeflow_core.digesttree import HeadTree

    heads = [{"entityId": f"user#{i:08d}", "version": 1, "chainHash": hashlib.sha256(str(i).encode()).hexdigest()}
             for i in range(entities)]
    import resource

    timings = {}
    began = time.process_time()  # CPU seconds: the machine is shared; a Lambda's vCPU is its own
    tree = HeadTree(heads)
    root = tree.root()
    timings["tree_from_scratch"] = time.process_time() - began
    document = digestformat.make_checkpoint({"sequence": 24, "root": root}, tree.entries())
    began = time.process_time()
    body = digestformat.dumps(document)
    timings["checkpoint_written"] = time.process_time() - began
    began = time.process_time()
    parsed = digestformat.check_checkpoint(json.loads(body))
    timings["checkpoint_parsed"] = time.process_time() - began
    began = time.process_time()
    rebuilt = HeadTree(parsed["entities"])
    assert rebuilt.root() == root
    timings["tree_rebuilt"] = time.process_time() - began
    step = max(1, int(1 / changed_share))
    began = time.process_time()
    for head in heads[::step]:
        rebuilt.put(head["entityId"], 2, head["chainHash"])
    rebuilt.root()
    timings["changes_applied"] = time.process_time() - began
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # this process's peak, so far
    return {"entities": entities, "checkpoint_bytes": len(body), "seconds": timings, "peak_rss_mb": peak_mb}


def dollars(measured: dict[str, Any], run: str, history_versions: int = 1) -> dict[str, float]:
    """USD of one digest of a measured run (``first``, ``changes``, ``from_checkpoint``): Lambda (its wall time
    at the function's memory), DynamoDB reads, S3 requests; and the S3 storage its bytes cost over the
    retention (90 days in Standard, then Instant Retrieval). ``history_versions``: the versions per entity
    the table holds besides ``v0`` (a full Scan reads them all)."""
    digest = measured[run]
    requests = digest["requests"]
    read_units = digest["read_units"]
    if run == "first" and history_versions != 1:
        read_units *= (1 + history_versions) / 2
    lambda_usd = PRICES["lambda_per_request"] + digest["seconds"] * MEMORY_GB * PRICES["lambda_per_gb_second"]
    dynamodb_usd = read_units * PRICES["dynamodb_per_rru"]
    s3_usd = (requests.get("PutObject", 0) * S3_PRICES["put_per_1000"]
              + requests.get("ListObjectVersions", 0) * S3_PRICES["list_per_1000"]
              + requests.get("GetObject", 0) * S3_PRICES["get_per_1000"]) / 1000
    gb = digest["bytes_put"] / 1e9
    storage_usd = gb * (STANDARD_MONTHS * S3_PRICES["standard_per_gb_month"] + (RETENTION_MONTHS - STANDARD_MONTHS)
                        * S3_PRICES["instant_retrieval_per_gb_month"]) + \
        requests.get("PutObject", 0) * S3_PRICES["transition_to_instant_retrieval_per_1000"] / 1000
    return {"lambda": lambda_usd, "dynamodb": dynamodb_usd, "s3_requests": s3_usd, "storage_7_years": storage_usd,
            "total": lambda_usd + dynamodb_usd + s3_usd + storage_usd}


def _own_seconds(work: dict[str, Any], run: str) -> float:
    """The function's own work in a run, as ``measure_compute`` timed it at that size."""
    own = work["seconds"]
    if run == "changes":  # rebuilt from the full digest before it, and a checkpoint written after
        return own["checkpoint_parsed"] + own["tree_rebuilt"] + own["changes_applied"] + own["checkpoint_written"]
    if run == "from_checkpoint":  # and the digests after the checkpoint, each 1% of the heads
        return (own["checkpoint_parsed"] * (1 + AVERAGE_DELTAS / 100) + own["tree_rebuilt"]
                + own["changes_applied"] * (1 + AVERAGE_DELTAS))
    return 0.0


def projected(sizes: list[dict[str, Any]], compute: dict[int, dict[str, Any]], entities: int) -> dict[str, Any]:
    """A size that did not run on the embedded stack, from the largest that did: requests, read units and bytes
    scale with the entities (or the changed ones: 1% of them); the time is the measured run's, its own work
    (``measure_compute`` at the measured size) replaced by the same work measured at the larger size; the first
    digest's time (a Scan: requests) scales with the table."""
    largest = max(sizes, key=lambda m: m["entities"])
    scale = entities / largest["entities"]
    result: dict[str, Any] = {"entities": entities, "changed": int(largest["changed"] * scale),
                              "projected_from": largest["entities"]}
    for run in ("first", "changes", "from_checkpoint"):
        base = largest[run]
        requests = dict(base["requests"])
        if run == "first":
            requests["Scan"] = max(base["requests"].get("Scan", 0), math.ceil(largest["table_bytes"] * scale / 1e6))
            seconds = base["seconds"] * scale
        else:
            pages = math.ceil(largest["changed"] * scale * largest["index_bytes_per_entity"] / 1e6)
            requests["Query"] = max(base["requests"].get("Query", 0), pages)
            requests["BatchGetItem"] = math.ceil(base["requests"].get("BatchGetItem", 0) * scale)
            seconds = (base["seconds"] - _own_seconds(compute[largest["entities"]], run)
                       + _own_seconds(compute[entities], run))
        checkpoint = compute[entities]["checkpoint_bytes"] if base["checkpoint_bytes"] else 0
        result[run] = {"requests": requests, "read_units": base["read_units"] * scale, "seconds": seconds,
                       "bytes_put": (base["bytes_put"] - base["checkpoint_bytes"]) * scale + checkpoint,
                       "checkpoint_bytes": checkpoint}
    return result


def report(sizes: list[dict[str, Any]], compute: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures the docs show: per size and run, time, requests, read units and dollars; the ratio of a
    changes digest to a rescan of the table (the first digest's Scan) in the same run; per month, hourly."""
    rows = list(sizes)
    by_size = {work["entities"]: work for work in compute}
    for entities in sorted(by_size):
        if all(m["entities"] != entities for m in sizes):
            rows.append(projected(sizes, by_size, entities))
    table = []
    for measured in rows:
        for run in ("first", "changes", "from_checkpoint"):
            usd = dollars(measured, run)
            table.append({"entities": measured["entities"], "run": run, "projected": "projected_from" in measured,
                          "seconds": measured[run]["seconds"], "requests": measured[run]["requests"],
                          "read_units": measured[run]["read_units"], "bytes_put": measured[run]["bytes_put"],
                          "usd": usd})
        per_day = (dollars(measured, "changes")["total"] + 23 * dollars(measured, "from_checkpoint")["total"]) / 24
        month = per_day * DIGESTS_PER_MONTH  # one digest a day writes a checkpoint, the others read one
        rescan = dollars(measured, "first")["total"] * DIGESTS_PER_MONTH
        table.append({"entities": measured["entities"], "run": "per month, hourly", "usd_incremental": month,
                      "usd_rescanning": rescan, "ratio": rescan / month if month else None})
    return {"rows": table, "compute": compute}


def write(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")


def markdown(result: dict[str, Any]) -> str:
    """docs/cost.md's table of a run: per size and digest, CPU seconds, requests, read units and dollars."""
    names = {"first": "first (Scan: a rescan)", "changes": "changes (+ checkpoint)",
             "from_checkpoint": "steady (checkpoint + 11)"}
    lines = ["| entities | digest | CPU s | requests | read units | bytes written | $ per digest |",
             "|---:|---|---:|---|---:|---:|---:|"]
    for row in result["rows"]:
        if row["run"] == "per month, hourly":
            continue
        requests = ", ".join(f"{k} {v}" for k, v in sorted(row["requests"].items()))
        lines.append(f"| {row['entities']:,}{' (projected)' if row['projected'] else ''} | {names[row['run']]} | "
                     f"{row['seconds']:.2f} | {requests} | {row['read_units']:,.1f} | {int(row['bytes_put']):,} | "
                     f"{row['usd']['total']:.6f} |")
    lines += ["", "| entities | $ a month, hourly digests | $ a month, rescanning the table every hour | ratio |",
              "|---:|---:|---:|---:|"]
    for row in result["rows"]:
        if row["run"] == "per month, hourly":
            lines.append(f"| {row['entities']:,} | {row['usd_incremental']:.2f} | {row['usd_rescanning']:.2f} | "
                         f"{row['ratio']:.1f}x |")
    return "\n".join(lines)
