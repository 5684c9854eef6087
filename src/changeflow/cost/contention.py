"""Contention: K concurrent writers to one entity, at real back-off timing, per applied change (billed
transitions, invocations, units, time to outcome, VersionConflicts); and the same run with other back-off
ceilings or another commit's whole design, side by side (``--compare-today``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from changeflow.checks.reliability import T0
from changeflow.common.project import project_root

from .bill import express_billed_seconds, seconds_of_history
from .digests import QUIET
from .prices import EXPRESS_MEMORY_GB, PRICES
from .units import INDEXED, billed_transitions, item_key, lambda_invocations, units_of_call, wait_seconds

BACKOFF_ARRAY = re.compile(r"States\.Array\(([0-9, ]+)\)")
TODAY_ENDS = "2, 2, 3, 5, 9, 17, 33, 60, 60, 60, 60"  # main before issue 11: ceilings up to 60 s


def variant_root(ends: str, project: Path | None = None) -> Path:
    """A copy of the project (symlinks) whose ASL draws its back-off from ``ends`` instead."""
    project = project or project_root()
    root = Path(tempfile.mkdtemp(prefix="changeflow-variant-"))
    for entry in project.iterdir():
        if entry.name not in ("statemachines", ".git"):
            (root / entry.name).symlink_to(entry)
    (root / "statemachines").mkdir()
    text = (project / "statemachines" / "change.asl.json").read_text(encoding="utf-8")
    (root / "statemachines" / "change.asl.json").write_text(BACKOFF_ARRAY.sub(f"States.Array({ends})", text))
    return root


def main_root(ref: str = "main", project: Path | None = None) -> Path:
    """``git archive`` of another commit (read only, nothing checked out here): today's design, to run
    side by side with this one in a fresh interpreter (its own changeflow_core)."""
    root = Path(tempfile.mkdtemp(prefix=f"changeflow-{ref}-"))
    archive = subprocess.run(["git", "archive", ref], cwd=project or project_root(), check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root


def contention_elsewhere(root: Path, k: int, time_scale: float, label: str) -> dict:
    """The contention run of another tree (``main_root``) by that tree's own code, in a child interpreter
    on its own ``src`` and layer: its ``changeflow.cost.contention`` where it has one, else its
    ``benchmarks/cost.py --contention-only`` run as a program (trees from before the cost model moved)."""
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}:{root / 'layers' / 'core'}", "CHANGEFLOW_ROOT": str(root)}
    if (root / "src" / "changeflow" / "cost" / "contention.py").is_file():
        code = ("import json, sys; from pathlib import Path; from changeflow.cost.contention import contention;"
                "print(json.dumps([contention(int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])]))")
        command = [sys.executable, "-c", code, str(k), str(time_scale), str(root), label]
    else:
        command = [sys.executable, str(root / "benchmarks" / "cost.py"), "--contention-only", "--contention", str(k),
                   "--time-scale", str(time_scale), "--json"]
    out = subprocess.run(command, cwd=root, env=env, check=True, capture_output=True, text=True).stdout
    return {**json.loads(out)[0], "label": label}  # both print a JSON list of rows, and only that


def contention(k: int, time_scale: float, root: Path | None = None, label: str = "") -> dict:
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
    with EmbeddedStack(root or project_root(), time_scale=time_scale, parameters=QUIET) as stack:
        cf = Changeflow.for_embedded(stack)
        stack.warm()
        stack.stop_pipes()  # the workflow alone: the feed is priced apart (changeflow.cost.feed)
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
            express_usd += PRICES["express_per_request"] + EXPRESS_MEMORY_GB * express_billed_seconds(
                seconds_of_history(events, wait_seconds(events))) * PRICES["express_per_gb_second"]
        reads = writes = 0.0
        index_keys: dict = {}  # what the changes index reads of v0, as the puts went (a new table: none before)
        for function in stack.lambdas.functions.values():
            for _, operation, params, response in function.api_calls:
                if operation in ("GetItem", "Query", "PutItem", "UpdateItem"):
                    r, w = units_of_call(operation, params, response, {}, index_keys=index_keys)
                    reads, writes = reads + r, writes + w
                if operation == "PutItem" and not (response or {}).get("Error"):
                    index_keys[item_key(params)] = {k: params["Item"][k] for k in INDEXED if k in params["Item"]}
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
