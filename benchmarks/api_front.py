"""What the front function of POST /changes costs: its handler time against the read API's in the same
run (a ratio: figures on this shared machine are noisy), the AWS calls it makes per request, and its price
per million requests next to API Gateway's own.

    .venv/bin/python benchmarks/api_front.py [--requests 60]

Handler times are measured in-process on the embedded stack (moto answers in microseconds where AWS takes
milliseconds), so the price is also given at an assumed billed duration on AWS (--aws-ms, default 60 ms:
one StartExecution round trip plus Powertools, rounded up): check it with the REPORT lines after sam deploy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from changeflow.cost.prices import LAMBDA_MEMORY_GB, PRICES  # the same list prices as the cost model

API_GATEWAY_REST_PER_REQUEST = 3.50 / 1e6  # us-east-1, first 333 million requests a month


def post_event(request: dict) -> dict:
    event = json.loads((ROOT / "events" / "functions" / "submit_change.json").read_text())
    return {**event, "body": json.dumps(request)}


def measure(workflow_type: str, requests: int) -> dict:
    from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
    from changeflow.local.server import EmbeddedServer

    with EmbeddedServer(port=0, time_scale=0.001, parameters={"WorkflowType": workflow_type}) as server:
        server.stack.stop_schedules()  # the hourly digest, every 3.6 s at this scale: measured and priced apart
        lambdas = server.stack.lambdas
        front, read = server.stack.function("SubmitChangeFunction"), server.stack.function("ReadApiFunction")
        read_event = json.loads((ROOT / "events" / "functions" / "read_api.json").read_text())
        lambdas.invoke(front, post_event({"entityId": "warm", "operation": "put", "changeId": "w", "attributes": {}}))
        lambdas.invoke(read, read_event)
        times: dict[str, list[float]] = {"new change": [], "retry of a done change": [], "read API (baseline)": []}
        calls: dict[str, Counter] = {"new change": Counter(), "retry of a done change": Counter()}
        arns = []
        requests_made = [{"entityId": f"e{i}", "operation": "put", "changeId": "c1", "attributes": {"i": i}}
                         for i in range(requests)]
        for kind in ("new change", "retry of a done change"):
            for request in requests_made:
                before = len(front.api_calls)
                started = time.perf_counter()
                payload, _ = lambdas.invoke(front, post_event(request))
                times[kind].append(time.perf_counter() - started)
                calls[kind].update(op for _, op, _, _ in list(front.api_calls)[before:])
                if kind == "new change":
                    arns.append(json.loads(payload["body"])["executionArn"])
                started = time.perf_counter()
                lambdas.invoke(read, read_event)
                times["read API (baseline)"].append(time.perf_counter() - started)
            for arn in arns:
                wait_for_termination(arn, 60)
    medians = {k: statistics.median(v) * 1000 for k, v in times.items()}
    return {"medians_ms": medians, "calls": {k: {op: n / requests for op, n in c.items()} for k, c in calls.items()}}


def price_per_million(billed_ms: float, read_units: float) -> float:
    lambda_cost = PRICES["lambda_per_request"] + LAMBDA_MEMORY_GB * billed_ms / 1000 * PRICES["lambda_per_gb_second"]
    return (lambda_cost + read_units * PRICES["dynamodb_per_rru"]) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--aws-ms", type=float, default=60.0)
    args = parser.parse_args()
    from changeflow.report import table

    rows = []
    for workflow_type in ("STANDARD", "EXPRESS"):
        found = measure(workflow_type, args.requests)
        baseline = found["medians_ms"]["read API (baseline)"]
        for kind in ("new change", "retry of a done change"):
            ms = found["medians_ms"][kind]
            reads = found["calls"][kind].get("GetItem", 0.0)  # one strongly consistent read of v0: 1 RRU
            calls = ", ".join(f"{op} x{n:g}" for op, n in sorted(found["calls"][kind].items()))
            rows.append([workflow_type, kind, f"{ms:.1f}", f"{ms / baseline:.2f}", calls,
                         f"{price_per_million(max(1.0, ms), reads):.2f}", f"{price_per_million(args.aws_ms, reads):.2f}"])
    print(table(["workflow", "request", "handler ms (embedded)", "x read API", "AWS calls per request",
                 "$ per 1M (embedded ms)", f"$ per 1M (at {args.aws_ms:g} ms)"], rows))
    print(f"\nFor scale: API Gateway REST itself is ${API_GATEWAY_REST_PER_REQUEST * 1e6:.2f} per million requests; "
          f"Lambda {int(LAMBDA_MEMORY_GB * 1024)} MB, x86, us-east-1 list prices (benchmarks/cost.py PRICES).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
