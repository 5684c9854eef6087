"""The two Lambda dispatches of the embedded stack, measured in one run: handlers in-process (the default)
against handlers in warm per-function Lambda runtime processes (``--lambda-runtime emulator``: the Runtime
Interface Emulator from aws-sam-cli with awslambdaric, on the runtime venv's python3.13).

    .venv/bin/python benchmarks/runtime.py [--invokes 200] [--changes 120] [--json]

1. warm invoke latency: one function (fetch-latest) invoked directly through the dispatch, after warm-up;
2. the workflow: changes per second through the real state machine, one execution at a time;
3. ``run --concurrency 1 / 4 / 8``: changes per second with executions in flight at once (each change
   its own entity, so nothing conflicts). In-process, handlers take turns (one Powertools metric set
   per process); in the emulator each concurrent invocation has its own process.

Every figure is a ratio against a baseline measured in the same run (the machine is shared; absolute
figures are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "layers" / "core")]

from changeflow.checks.reliability import T0  # noqa: E402

MODES = ("in-process", "emulator")
CONCURRENCY = (1, 4, 8)


def fetch_event(i: int, key) -> dict:
    """The fetch step's input as the state machine gives it: the envelope an entry point built and sealed (the
    change under "request", the principal AWS authenticated beside it: events/functions/fetch_latest.json's)."""
    from changeflow_core import principal

    envelope = json.loads((ROOT / "events" / "functions" / "fetch_latest.json").read_text())["request"]
    change = {"entityId": f"lat#{i % 10}", "operation": "put", "attributes": {"v": i}, "effectiveAt": T0}
    name = f"lat-{i}"
    return {"request": principal.sealed_envelope(key, json.dumps(change), envelope["principal"],
                                                 envelope["receivedAt"], name),
            "execution": {"id": f"arn:aws:states:us-east-1:123456789012:execution:x:{name}", "name": name,
                          "startTime": "2026-01-01T00:00:00.000Z"}}


def seal_key(stack):
    """The stack's seal key, read from moto's Secrets Manager behind IAM's back (as an entry point holds it)."""
    from moto.secretsmanager.models import secretsmanager_backends

    from changeflow.local.template import ACCOUNT
    from changeflow_core import seal

    secret = secretsmanager_backends[ACCOUNT][stack.region].secrets[stack.template.physical["SealKeySecret"]["Ref"]]
    return seal.Key(next(v["secret_string"] for v in secret.versions.values()
                         if "AWSCURRENT" in v["version_stages"]).encode())


def invoke_latency(stack, invokes: int) -> dict:
    function, key = stack.function("FetchLatestFunction"), seal_key(stack)
    started = time.perf_counter()
    payload, failed = stack.lambdas.invoke(function, fetch_event(0, key))  # the cold start
    cold_ms = (time.perf_counter() - started) * 1000
    assert not failed, payload
    for i in range(20):  # warm-up
        stack.lambdas.invoke(function, fetch_event(i, key))
    samples = []
    for i in range(invokes):
        started = time.perf_counter()
        payload, failed = stack.lambdas.invoke(function, fetch_event(i, key))
        samples.append((time.perf_counter() - started) * 1000)
        assert not failed, payload
    samples.sort()
    return {"cold_ms": cold_ms, "median_ms": statistics.median(samples),
            "p90_ms": samples[int(len(samples) * 0.9) - 1]}


def changes_per_second(stack, changes: int, concurrency: int, tag: str) -> float:
    from changeflow.commands.run import submit_all
    from changeflow.client import Changeflow

    client = Changeflow.for_embedded(stack)
    requests = [(f"{tag}-{i}", {"entityId": f"{tag}#{i}", "operation": "put", "attributes": {"v": i, "body": "x" * 200},
                                "effectiveAt": T0, "changeId": f"{tag}-{i}"}) for i in range(changes)]
    started = time.perf_counter()
    results = submit_all(client, requests, concurrency, progress=False)
    elapsed = time.perf_counter() - started
    bad = [r for r in results if r.status != "SUCCEEDED"]
    assert not bad, f"{len(bad)} executions did not succeed: {bad[0].error} {bad[0].cause}"
    return changes / elapsed


def measure(mode: str, invokes: int, changes: int) -> dict:
    from changeflow.local.embedded import EmbeddedStack

    with EmbeddedStack(ROOT, time_scale=0.001, lambda_runtime=mode) as stack:
        stack.stop_schedules()  # the hourly digest, every 3.6 s at this scale: measured and priced apart
        out = {"invoke": invoke_latency(stack, invokes)}
        changes_per_second(stack, 10, 8, f"warm-{mode}")  # every function warm, up to 8 environments each
        out["concurrency"] = {c: changes_per_second(stack, changes, c, f"{mode}-c{c}") for c in CONCURRENCY}
        if mode == "emulator":
            out["runtime"] = stack.lambdas.runtime.version
            out["environments"] = {f.logical_id: stack.lambdas.runtime.processes(f)
                                   for f in stack.lambdas.functions.values()}
    return out


def report(results: dict) -> str:
    base, emu = results["in-process"], results["emulator"]
    lines = [f"Lambda dispatch: in-process vs emulator ({emu.get('runtime')}, aws-lambda-rie + awslambdaric), "
             f"{os.cpu_count()} cores, measured in one run", ""]
    lines += ["| measure | in-process | emulator | emulator / in-process |", "|---|---|---|---|"]
    for key, label in (("median_ms", "warm invoke, median (ms)"), ("p90_ms", "warm invoke, p90 (ms)"),
                       ("cold_ms", "first invoke (cold start, ms)")):
        a, b = base["invoke"][key], emu["invoke"][key]
        lines.append(f"| {label} | {a:.1f} | {b:.1f} | {b / a:.2f}× |")
    for c in CONCURRENCY:
        a, b = base["concurrency"][c], emu["concurrency"][c]
        lines.append(f"| workflow, concurrency {c} (changes/s) | {a:.1f} | {b:.1f} | {b / a:.2f}× |")
    lines += ["", "| concurrency | in-process gain over concurrency 1 | emulator gain over concurrency 1 |",
              "|---|---|---|"]
    for c in CONCURRENCY:
        lines.append(f"| {c} | {base['concurrency'][c] / base['concurrency'][1]:.2f}× | "
                     f"{emu['concurrency'][c] / emu['concurrency'][1]:.2f}× |")
    if "environments" in emu:
        lines += ["", "execution environments per function (emulator): "
                  + ", ".join(f"{k}: {v}" for k, v in emu["environments"].items())]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--invokes", type=int, default=200)
    parser.add_argument("--changes", type=int, default=120, help="changes per concurrency level and dispatch")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    results = {mode: measure(mode, args.invokes, args.changes) for mode in MODES}
    print(json.dumps(results, indent=2) if args.json else report(results))


if __name__ == "__main__":
    main()
