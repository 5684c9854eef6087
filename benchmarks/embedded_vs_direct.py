"""Changes per second through the embedded workflow (the real ASL on moto's interpreter) against direct
calls of the same handlers in the same process, for the same sequence of changes, measured in one run.

    .venv/bin/python benchmarks/embedded_vs_direct.py [--entities 30] [--json]

The direct path calls the three steps' handlers in the order the state machine would for each outcome (its
baseline: what the handlers and DynamoDB cost without any orchestration). The embedded path is also run
once with the embedded stack's caches off ("stock"), in a separate process so that no patch leaks. The
change feed's pipe and the digest's schedule are stopped in every mode (the workflow alone: both are measured
and priced apart, and a schedule firing every 3.6 s at the benchmark's time scale would bill each path for the
digests its own duration allows). Each mode reports its wall time and its process's CPU time: on a shared
machine the CPU ratio is the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from changeflow.checks.reliability import T0  # noqa: E402 - one fixed start for every measurement


def sequence(entities: int) -> list[dict]:
    """Per entity: create, update, stale, duplicate, delete, revive, rollback (7 changes)."""
    changes = []
    for n in range(entities):
        e = f"bench#{n}"
        changes += [
            {"entityId": e, "operation": "put", "attributes": {"v": 1, "body": "x" * 200}, "effectiveAt": T0, "changeId": f"{e}-1"},
            {"entityId": e, "operation": "put", "attributes": {"v": 2, "body": "y" * 200}, "effectiveAt": T0 + 10, "changeId": f"{e}-2"},
            {"entityId": e, "operation": "put", "attributes": {"v": 0}, "effectiveAt": T0 + 5, "changeId": f"{e}-3"},
            {"entityId": e, "operation": "put", "attributes": {"v": 2, "body": "y" * 200}, "effectiveAt": T0 + 10, "changeId": f"{e}-2"},
            {"entityId": e, "operation": "delete", "effectiveAt": T0 + 20, "changeId": f"{e}-4"},
            {"entityId": e, "operation": "put", "attributes": {"v": 3}, "effectiveAt": T0 + 30, "changeId": f"{e}-5"},
            {"entityId": e, "operation": "rollback", "toVersion": 1, "effectiveAt": T0 + 40, "changeId": f"{e}-6"},
        ]
    return changes


def direct(stack, changes) -> list[str]:
    """The handlers called in workflow order, as plain function calls."""
    from changeflow.local.lambdas import LambdaContext
    from changeflow_core import principal

    stack.warm()
    fn = {f.logical_id: f.entry_point() for f in stack.lambdas.functions.values()}
    ctx = LambdaContext("direct", "arn:direct", 256, 10_000)
    outcomes = []
    for i, request in enumerate(changes):
        execution = {"id": f"arn:direct:{i}", "name": f"direct-{i}", "startTime": "2026-01-01T00:00:00.000Z"}
        try:
            # the execution input of a direct start: the request's JSON text in the envelope (principal)
            carried = json.loads(principal.direct_input(request))
            state = {**fn["FetchLatestFunction"]({"request": carried, "execution": execution}, ctx), "execution": execution}
        except Exception as exc:  # noqa: BLE001 - ChangeIsStale: the report step's outcome
            outcomes.append(json.loads(str(exc))["outcome"])
            continue
        step = "DeleteTombstoneFunction" if request["operation"] == "delete" else "UpdateLatestFunction"
        state["written"] = fn[step](state, ctx)
        fn["PutHistoryFunction"]({**state, "retryCount": 0}, ctx)  # the history put and its expiry tags
        outcomes.append(state["written"]["outcome"])
    return outcomes


def embedded(stack, changes) -> list[str]:
    from changeflow.client import Changeflow

    stack.warm()
    cf = Changeflow.for_embedded(stack)
    return [cf.submit(request).output["outcome"] for request in changes]


def measure(mode: str, entities: int) -> dict:
    from changeflow.local.embedded import EmbeddedStack

    changes = sequence(entities)
    with EmbeddedStack(ROOT, time_scale=0.001, caches=(mode != "stock")) as stack:
        # the workflow alone, both ways: the change feed's pipe (issue 36) would read the table's stream in this
        # process beside either path (it is priced apart: changeflow.cost.feed)
        stack.stop_pipes()
        stack.stop_schedules()  # the digest (issue 35) is priced apart too: changeflow.cost digests
        run = direct if mode == "direct" else embedded
        run(stack, sequence(1))  # warm up: imports, first parse, first clients
        started, cpu = time.perf_counter(), time.process_time()
        outcomes = run(stack, [dict(c, entityId="m-" + c["entityId"]) for c in changes])
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"mode": mode, "changes": len(changes), "seconds": seconds, "per_second": len(changes) / seconds,
            "cpu_ms_per_change": 1000 * cpu / len(changes),
            "outcomes": {o: outcomes.count(o) for o in sorted(set(outcomes))}}


def in_subprocess(mode: str, entities: int) -> dict:
    result = subprocess.run([sys.executable, __file__, "--mode", mode, "--entities", str(entities)],
                            capture_output=True, text=True, check=True, cwd=ROOT,
                            env={**os.environ, "CHANGEFLOW_ROOT": str(ROOT)})
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=30)
    parser.add_argument("--mode", choices=["direct", "embedded", "stock"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args.entities)))
        return
    results = {mode: in_subprocess(mode, args.entities) for mode in ("direct", "embedded", "stock")}
    assert results["direct"]["outcomes"] == results["embedded"]["outcomes"] == results["stock"]["outcomes"]
    base = results["direct"]["per_second"]
    cpu = results["direct"]["cpu_ms_per_change"]
    summary = {mode: {**r, "slowdown_vs_direct": base / r["per_second"], "cpu_vs_direct": r["cpu_ms_per_change"] / cpu}
               for mode, r in results.items()}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{results['direct']['changes']} changes ({args.entities} entities x create, update, stale, duplicate, "
          f"delete, revive, rollback); outcomes {results['direct']['outcomes']}")
    print(f"{'path':<34}{'changes/s':>10}{'x direct':>10}{'CPU ms':>8}{'x direct':>10}")
    names = {"direct": "direct handler calls (baseline)", "embedded": "embedded workflow",
             "stock": "embedded workflow, caches off"}
    for mode, r in summary.items():
        print(f"{names[mode]:<34}{r['per_second']:>10.1f}{r['slowdown_vs_direct']:>10.2f}"
              f"{r['cpu_ms_per_change']:>8.1f}{r['cpu_vs_direct']:>10.2f}")


if __name__ == "__main__":
    main()
