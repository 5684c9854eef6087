"""The embedded stack at scale: work against time and memory, measured in one run, as ratios to the
first checkpoint (issue 17).

    .venv/bin/python benchmarks/scaling.py                    # make bench: checkpoints 200, 2,000
    .venv/bin/python benchmarks/scaling.py --checkpoints 1000,10000,100000 --fill direct   # the issue's sizes

Two series, each on its own embedded stack: every change on ONE entity (its history grows), and changes
spread over ENTITIES entities (the table grows). At each checkpoint C (a number of changes so far):

- per change: the mean time of the last ``--window`` changes before C, each a whole workflow execution
  (StartExecution, three Lambda steps, the ended execution read from the stack), as ``changeflow run``
  submits them;
- the reads a user makes at that size: on the one entity, paging all its C versions 100 at a time (the
  read API's and ``changeflow versions``' Query); over the entities, ``verify --all`` (the scan, then
  each entity) and the end-of-run report of ``changeflow run`` (every touched entity's versions, read
  and rendered). Each is divided by what it reads (versions or entities);
- memory: the process's resident set now and at its peak.

The changes before each window are made through the workflow too (``--fill workflow``, the default), or
with ``--fill direct`` by calling the same handlers in workflow order with no Step Functions (the
same items in DynamoDB, 3x faster: for the 100,000-change sizes; the executions list then grows only by
the windows, so state that in what you report). Ratios compare checkpoints of the same run: on a shared
machine absolute times move with the load, ratios much less.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from changeflow.checks.reliability import T0  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def change(i: int, entities: int, prefix: str) -> dict:
    """Change i: a put of entity i mod ``entities`` (a create the first time, then an update)."""
    return {"entityId": f"{prefix}#{i % entities}", "operation": "put", "changeId": f"{prefix}-{i}",
            "attributes": {"n": i, "body": "x" * 200}, "effectiveAt": T0 + i}


def page_all_versions(client, entity_id: str) -> int:
    from changeflow_core import store

    count, start = 0, None
    while True:
        page, start = store.query_history(client.dynamodb, client.history_table, entity_id,
                                          newest_first=False, limit=100, start_key=start)
        count += len(page)
        if not start:
            return count


def verify_all(client) -> int:
    from changeflow.audit import verify

    ids = verify.entities(client)
    reports = [verify.verify(client, entity_id) for entity_id in ids]
    assert all(r.ok for r in reports), [r.problems for r in reports if not r.ok][:3]
    return len(ids)


def end_of_run_report(client, entity_ids: list[str]) -> int:
    """What ``changeflow run`` does after the changes: read every touched entity and render its table."""
    from changeflow import report

    text = [report.versions(e, client.entity(e)) for e in entity_ids]
    return sum(len(t) > 0 for t in text)


def series(name: str, entities: int, checkpoints: list[int], window: int, fill: str) -> list[dict]:
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack

    from embedded_vs_direct import direct

    rows, done = [], 0
    with EmbeddedStack(ROOT, time_scale=0.001) as stack:
        stack.stop_schedules()  # the hourly digest, every 3.6 s at this scale over every entity so far: priced apart
        stack.warm()
        client = Changeflow.for_embedded(stack)
        client.submit(change(0, 1, "warm"))
        gc.collect()
        rss0 = rss_mb()
        for checkpoint in checkpoints:
            before_window = checkpoint - window
            if before_window > done:
                batch = [change(i, entities, name) for i in range(done, before_window)]
                if fill == "direct":
                    direct(stack, batch)
                else:
                    for request in batch:
                        client.submit(request)
                done = before_window
            started = time.perf_counter()
            for i in range(done, checkpoint):
                result = client.submit(change(i, entities, name))
                assert result.status == "SUCCEEDED", result
            per_change_ms = (time.perf_counter() - started) * 1000 / (checkpoint - done)
            done = checkpoint
            row = {"series": name, "changes": checkpoint, "entities": min(entities, checkpoint),
                   "per_change_ms": per_change_ms}
            started = time.perf_counter()
            if entities == 1:
                row["read"] = "page all versions (100 a page)"
                row["read_items"] = page_all_versions(client, f"{name}#0")
                assert row["read_items"] == checkpoint
            else:
                row["read_items"] = verify_all(client)
                row["read"] = "verify --all"
                row["verify_ms"] = (time.perf_counter() - started) * 1000
                started = time.perf_counter()
                ids = [f"{name}#{e}" for e in range(min(entities, checkpoint))]
                end_of_run_report(client, ids)
                row["report_ms"] = (time.perf_counter() - started) * 1000
            row["read_ms"] = row.pop("verify_ms", None) or (time.perf_counter() - started) * 1000
            gc.collect()
            row["rss_mb"], row["peak_mb"] = rss_mb(), peak_mb()
            row["rss_growth_kb_per_change"] = (row["rss_mb"] - rss0) * 1024 / checkpoint
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| series | changes | entities | ms/change | × first | read | read ms per item | × first "
             "| report ms per entity | × first | RSS MB | peak MB | RSS growth KB/change |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    first: dict = {}
    for r in rows:
        f = first.setdefault(r["series"], r)
        read_per = r["read_ms"] / r["read_items"]
        read_first = f["read_ms"] / f["read_items"]
        report = r.get("report_ms")
        report_cells = ("", "")
        if report is not None:
            per, per_first = report / r["entities"], f["report_ms"] / f["entities"]
            report_cells = (f"{per:.2f}", f"{per / per_first:.2f}")
        lines.append(
            f"| {r['series']} | {r['changes']:,} | {r['entities']:,} | {r['per_change_ms']:.1f} "
            f"| {r['per_change_ms'] / f['per_change_ms']:.2f} | {r['read']} | {read_per:.3f} "
            f"| {read_per / read_first:.2f} | {report_cells[0]} | {report_cells[1]} | {r['rss_mb']:.0f} "
            f"| {r['peak_mb']:.0f} | {r['rss_growth_kb_per_change']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", default="200,2000", help="changes so far at each measurement")
    parser.add_argument("--entities", type=int, default=2000, help="entities of the spread series")
    parser.add_argument("--window", type=int, default=100, help="changes timed at each checkpoint")
    parser.add_argument("--fill", choices=["workflow", "direct"], default="workflow")
    parser.add_argument("--series", choices=["both", "one", "spread"], default="both")
    parser.add_argument("--without-perf-patches", action="store_true",
                        help="leave moto's perf patches out (moto's own costs), for a before/after in the same sizes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.without_perf_patches:
        from changeflow.local import moto_patches

        moto_patches.install_perf = lambda: None
    checkpoints = sorted(int(c) for c in args.checkpoints.split(","))
    if checkpoints[0] < args.window:
        parser.error("the first checkpoint must be at least --window changes")
    rows = []
    if args.series in ("both", "one"):
        rows += series("one", 1, checkpoints, args.window, args.fill)
    if args.series in ("both", "spread"):
        rows += series("spread", args.entities, checkpoints, args.window, args.fill)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'WITHOUT the perf patches: ' if args.without_perf_patches else ''}"
          f"checkpoints {checkpoints}, window {args.window} changes, fill {args.fill}, "
          f"spread over {args.entities:,} entities; ratios are to each series' first checkpoint")
    print(table(rows))


if __name__ == "__main__":
    main()
