"""Changes per second through the embedded workflow (the real ASL on moto's interpreter) against direct
calls of the same handlers in the same process, for the same sequence of changes, measured in one run.

    .venv/bin/python benchmarks/embedded_vs_direct.py [--entities 30] [--rounds 3] [--json]

The direct path calls the steps' handlers in the order the state machine would for each outcome (its baseline:
what the handlers and DynamoDB cost without any orchestration): fetch, write and history for a change that is
applied or a duplicate; fetch, then the history function's report, for a stale one. The embedded path is also
run once with the embedded stack's caches off ("stock"), in a separate process so that no patch leaks. The
change feed's pipe and the digest's schedule are stopped in every mode (the workflow alone: both are measured
and priced apart, and a schedule firing every 3.6 s at the benchmark's time scale would bill each path for the
digests its own duration allows). Each mode reports its wall time and its process's CPU time: on a shared
machine the CPU ratio is the steadier figure.

The direct and embedded paths run ``--rounds`` times each, alternately (direct then embedded, then the other
way round), each run in a process of its own, and each reports the median of its runs beside each round's
ratio: on this 2-core VM the same mode's CPU per change moves by up to a third from one run to the next (the
embedded path's most), so one run of each decided the ratio by chance. Stock runs once (it is 13x). In each
run, after the warm-up, the heap that start-up made (imports, service models, the parsed definition: some
360,000 objects) is collected once and frozen (``gc.freeze``), so that a full collection, ~200 ms over that
heap and due every few hundred changes in either mode, does not land in one mode's measured window and not
the other's; both modes' own garbage is collected as before.

With ``--instructions`` (valgrind installed) each path also runs once more, under callgrind, with only the
measured changes instrumented (``callgrind_control`` switches it on after the warm-up and off after the last
change): the instructions each path executes per change. That count is the same from run to run (within
0.2%) where the times move by a third, so it tells how much more work the embedded path does from what the
machine (its caches, the other core's load, two threads instead of one) makes of that work.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
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
    from changeflow_core.decisions import ChangeIsStale

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
            step = "DeleteTombstoneFunction" if request["operation"] == "delete" else "UpdateLatestFunction"
            state["written"] = fn[step](state, ctx)
        except ChangeIsStale as exc:  # "Report the stale change": the history function answers with the outcome
            stale = {"errorMessage": str(exc), "errorType": "ChangeIsStale"}  # the Lambda error's Cause, parsed
            outcomes.append(fn["PutHistoryFunction"]({"stale": stale, "execution": execution}, ctx)["outcome"])
            continue
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
        gc.collect()
        gc.freeze()  # start-up's heap: never garbage, no longer walked by every full collection (docstring)
        window = Path(os.environ["CHANGEFLOW_BENCH_WINDOW"]) if os.environ.get("CHANGEFLOW_BENCH_WINDOW") else None
        if window:  # under callgrind (--instructions): the parent switches instrumentation on, then says go
            _signal_and_wait(window, "ready", "go")
        started, cpu = time.perf_counter(), time.process_time()
        outcomes = run(stack, [dict(c, entityId="m-" + c["entityId"]) for c in changes])
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        if window:
            _signal_and_wait(window, "done", "off")
    return {"mode": mode, "changes": len(changes), "seconds": seconds, "per_second": len(changes) / seconds,
            "cpu_ms_per_change": 1000 * cpu / len(changes),
            "outcomes": {o: outcomes.count(o) for o in sorted(set(outcomes))}}


def in_subprocess(mode: str, entities: int) -> dict:
    result = subprocess.run([sys.executable, __file__, "--mode", mode, "--entities", str(entities)],
                            capture_output=True, text=True, check=True, cwd=ROOT,
                            env={**os.environ, "CHANGEFLOW_ROOT": str(ROOT)})
    return json.loads(result.stdout.strip().splitlines()[-1])


def _signal_and_wait(window: Path, mine: str, theirs: str, timeout: float = 600.0) -> None:
    (window / mine).write_text(str(os.getpid()), encoding="utf-8")
    deadline = time.monotonic() + timeout
    while not (window / theirs).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {theirs!r} from the benchmark's parent in {timeout} s")
        time.sleep(0.05)


def _tail(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-2000:]


def instructions(mode: str, entities: int) -> dict:
    """The instructions ``mode`` executes for the measured changes alone, counted by callgrind."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        window, out = Path(tmp), Path(tmp) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                   sys.executable, __file__, "--mode", mode, "--entities", str(entities)]
        env = {**os.environ, "CHANGEFLOW_ROOT": str(ROOT), "CHANGEFLOW_BENCH_WINDOW": tmp}
        # its output to files, not pipes: the direct path prints its EMF lines, and a full pipe would stall it
        with open(window / "stdout", "w+") as stdout, open(window / "stderr", "w+") as stderr, \
                subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=stderr) as child:
            try:
                for mine, theirs, switch in (("go", "ready", "on"), ("off", "done", "off")):
                    while not (window / theirs).exists():
                        if child.poll() is not None:
                            raise RuntimeError(f"{mode} under callgrind ended early: {_tail(window / 'stderr')}")
                        time.sleep(0.1)
                    subprocess.run(["callgrind_control", "-i", switch, str(child.pid)], check=True,
                                   capture_output=True)
                    (window / mine).write_text(switch, encoding="utf-8")
                child.wait(timeout=600)
            finally:
                if child.poll() is None:
                    child.kill()
        if child.returncode:
            raise RuntimeError(f"{mode} under callgrind failed: {_tail(window / 'stderr')}")
        result = json.loads((window / "stdout").read_text(encoding="utf-8").strip().splitlines()[-1])
        totals = [line for line in out.read_text(encoding="utf-8").splitlines() if line.startswith("totals:")]
        count = int(totals[-1].split()[1])
    return {"mode": mode, "changes": result["changes"], "instructions_per_change": count / result["changes"],
            "outcomes": result["outcomes"]}


def rounds_of(entities: int, rounds: int) -> dict[str, list[dict]]:
    """Direct and embedded ``rounds`` times each, alternately (D E, E D, D E, ...), each in its own process."""
    runs: dict[str, list[dict]] = {"direct": [], "embedded": []}
    for n in range(rounds):
        for mode in ("direct", "embedded") if n % 2 == 0 else ("embedded", "direct"):
            runs[mode].append(in_subprocess(mode, entities))
    return runs


def median_of(runs: list[dict]) -> dict:
    return {**runs[0], "per_second": statistics.median(r["per_second"] for r in runs),
            "seconds": statistics.median(r["seconds"] for r in runs),
            "cpu_ms_per_change": statistics.median(r["cpu_ms_per_change"] for r in runs)}


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Each mode's median run against direct's, and the embedded/direct ratios of each round (wall, CPU)."""
    results = {mode: median_of(r) for mode, r in runs.items()}
    assert len({json.dumps(r["outcomes"], sort_keys=True) for rs in runs.values() for r in rs}) == 1
    base, cpu = results["direct"]["per_second"], results["direct"]["cpu_ms_per_change"]
    summary: dict = {mode: {**r, "runs": len(runs[mode]), "slowdown_vs_direct": base / r["per_second"],
                            "cpu_vs_direct": r["cpu_ms_per_change"] / cpu}
                     for mode, r in results.items()}
    summary["embedded_by_round"] = [[d["per_second"] / e["per_second"], e["cpu_ms_per_change"] / d["cpu_ms_per_change"]]
                                    for d, e in zip(runs["direct"], runs["embedded"])]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3, help="runs of direct and of embedded (medians)")
    parser.add_argument("--mode", choices=["direct", "embedded", "stock"])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--instructions", type=int, metavar="ENTITIES", default=0,
                        help="also count each path's instructions per change under callgrind, on this many entities")
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args.entities)))
        return
    runs = rounds_of(args.entities, args.rounds)
    runs["stock"] = [in_subprocess("stock", args.entities)]
    summary = summarise(runs)
    if args.instructions:
        counted = {mode: instructions(mode, args.instructions) for mode in ("direct", "embedded")}
        assert counted["direct"]["outcomes"] == counted["embedded"]["outcomes"]
        summary["instructions"] = {"changes": counted["direct"]["changes"],
                                   **{mode: c["instructions_per_change"] for mode, c in counted.items()},
                                   "ratio": counted["embedded"]["instructions_per_change"]
                                   / counted["direct"]["instructions_per_change"]}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    direct = summary["direct"]
    print(f"{direct['changes']} changes ({args.entities} entities x create, update, stale, duplicate, "
          f"delete, revive, rollback); outcomes {direct['outcomes']}; median of {args.rounds} runs of each path "
          f"(stock: 1)")
    print(f"{'path':<34}{'changes/s':>10}{'x direct':>10}{'CPU ms':>8}{'x direct':>10}")
    names = {"direct": "direct handler calls (baseline)", "embedded": "embedded workflow",
             "stock": "embedded workflow, caches off"}
    for mode in ("direct", "embedded", "stock"):
        r = summary[mode]
        print(f"{names[mode]:<34}{r['per_second']:>10.1f}{r['slowdown_vs_direct']:>10.2f}"
              f"{r['cpu_ms_per_change']:>8.1f}{r['cpu_vs_direct']:>10.2f}")
    print("embedded / direct by round (wall, CPU): "
          + ", ".join(f"{wall:.2f}/{cpu:.2f}" for wall, cpu in summary["embedded_by_round"]))
    if "instructions" in summary:
        counted = summary["instructions"]
        print(f"instructions per change (callgrind, {counted['changes']} changes): direct "
              f"{counted['direct'] / 1e6:.1f} M, embedded {counted['embedded'] / 1e6:.1f} M: {counted['ratio']:.2f}x")


if __name__ == "__main__":
    main()
