"""Dollars: the complete bill of one change, line by line, from what it consumed (``paths``, ``units``) at the
list prices (``prices``), per entry point (a direct StartExecution, POST /changes, an EventBridge event) and
workflow type; the floor it is compared with (the same DynamoDB reads and writes made directly); and the
storage its versions take while they are kept.

Durations are billed on AWS's latencies as the capacity model assumes them (``prices.AWS_LATENCY``), on the
requests and states each change was measured to make: a Lambda invocation its handler's work plus each of
its requests, in 1 ms steps; an Express execution every state's transition, every task's invocation and
work, and every Wait, in 100 ms steps (Step Functions pricing).
"""

from __future__ import annotations

import math
from typing import Any

from .prices import (AWS_LATENCY, EXPRESS_MEMORY_GB, LAMBDA_MEMORY_GB, LOG_EVENT_OVERHEAD, PRICES,
                     XRAY_REFERENCE_RATE, traced_share)

FRONT = "SubmitChangeFunction"
LINES = ("Step Functions", "Lambda requests", "Lambda duration", "DynamoDB", "CloudWatch Logs", "API Gateway",
         "EventBridge", "X-Ray", "KMS")
# API Gateway's access log line (the template's AccessLogSetting.Format) with typical values: one per request
ACCESS_LOG_LINE = ('{"requestId":"c6af9ac6-7b61-11e6-9a41-93e8deadbeef","caller":"AIDAJQABLZS4A3QDU576Q",'
                   '"user":"AIDAJQABLZS4A3QDU576Q","ip":"203.0.113.10","method":"POST","path":"/changes",'
                   '"status":"200","latency":"45"}')


def ms(name: str) -> float:
    return AWS_LATENCY[name][0] * 1000


def log_cost(execution_log_bytes: float, function_log_bytes: float) -> float:
    """USD of CloudWatch Logs ingestion for one change."""
    return (execution_log_bytes + function_log_bytes) / 1e9 * PRICES["logs_ingest_per_gb"]


def express_billed_seconds(seconds: float) -> float:
    """Express bills an execution's duration, Wait states included, in 100 ms steps (at least one)."""
    return max(1, math.ceil(seconds * 10 - 1e-9)) / 10


def lambda_billed_ms(function: dict[str, Any]) -> float:
    """A function's billed milliseconds in one change: per invocation its handler's work, plus each DynamoDB
    request and each other AWS call (StartExecution) it made, in 1 ms steps."""
    invocations = function["invocations"]
    if not invocations:
        return 0.0
    others = function["requests"] - function["dynamodb_requests"]
    total = invocations * ms("handler") + function["dynamodb_requests"] * ms("dynamodb") + others * ms("service_call")
    return invocations * math.ceil(total / invocations - 1e-9)


def execution_seconds(path: dict[str, Any]) -> float:
    """How long the execution runs on AWS (Express bills it): each state entered, each task's invocation and
    handler time, and its Waits."""
    tasks = [f for name, f in path["functions"].items() if name != FRONT]
    return (path["states_entered"] * ms("express_transition") + sum(f["invocations"] for f in tasks) * ms("invoke")
            + sum(lambda_billed_ms(f) for f in tasks)) / 1000 + path.get("wait_seconds", 0.0)


def seconds_of_history(events: list[dict[str, Any]], waited: float) -> float:
    """An execution's duration on AWS from its history alone (no request counts: each invocation one
    DynamoDB request), its Waits included."""
    entered = sum(1 for ev in events if ev["type"].endswith("StateEntered"))
    invoked = sum(1 for ev in events if ev["type"] in ("TaskScheduled", "LambdaFunctionScheduled"))
    return (entered * ms("express_transition") + invoked * (ms("invoke") + ms("handler") + ms("dynamodb"))) / 1000 \
        + waited


def workflow_lines(standard: bool, transitions: float, invocations: float, lambda_ms: float, read_units: float,
                   write_units: float, express_seconds: float, log_bytes: float,
                   traced: float = traced_share(), kms_requests: float = 0.0) -> dict[str, float]:
    """USD per change of the workflow itself (whatever started it), by line."""
    if standard:
        step_functions = transitions * PRICES["standard_per_transition"]
    else:
        step_functions = PRICES["express_per_request"] + EXPRESS_MEMORY_GB * express_billed_seconds(
            express_seconds) * PRICES["express_per_gb_second"]
    return {
        "Step Functions": step_functions,
        "Lambda requests": invocations * PRICES["lambda_per_request"],
        "Lambda duration": LAMBDA_MEMORY_GB * lambda_ms / 1000 * PRICES["lambda_per_gb_second"],
        "DynamoDB": read_units * PRICES["dynamodb_per_rru"] + write_units * PRICES["dynamodb_per_wru"],
        "CloudWatch Logs": log_bytes / 1e9 * PRICES["logs_ingest_per_gb"],
        "API Gateway": 0.0, "EventBridge": 0.0,
        "X-Ray": traced * PRICES["xray_per_trace"],
        "KMS": kms_requests * PRICES["kms_per_request"],
    }


def bill(path: dict[str, Any], standard: bool, entry: str | None = None, execution_log_bytes: float | None = None,
         rate: float = XRAY_REFERENCE_RATE) -> dict[str, float]:
    """The complete bill of one measured change, USD per million, by line (``LINES``) and ``total``.
    ``entry``: how it started (default: how it was measured); ``execution_log_bytes``: the execution log at
    another setting than the measured one; ``rate``: changes per second, for X-Ray's sampling."""
    entry = entry or path.get("entry", "direct")
    functions = path["functions"]
    workflow = [f for name, f in functions.items() if name != FRONT]
    lines = workflow_lines(
        standard, transitions=path["state_transitions"], invocations=sum(f["invocations"] for f in workflow),
        lambda_ms=sum(lambda_billed_ms(f) for f in workflow), read_units=path["read_units"],
        write_units=path["write_units"], express_seconds=execution_seconds(path),
        log_bytes=path["function_log_bytes"] + (path["execution_log_bytes"] if execution_log_bytes is None
                                                 else execution_log_bytes),
        traced=traced_share(rate))
    if entry == "api":  # the request, its front function (its reads included in the path's units) and access log
        front = functions.get(FRONT) or {"invocations": 1, "requests": 1, "dynamodb_requests": 0, "log_bytes": 0}
        lines["API Gateway"] = PRICES["api_rest_per_request"]
        lines["Lambda requests"] += front["invocations"] * PRICES["lambda_per_request"]
        lines["Lambda duration"] += LAMBDA_MEMORY_GB * lambda_billed_ms(front) / 1000 * PRICES["lambda_per_gb_second"]
        lines["CloudWatch Logs"] += (front["log_bytes"] + len(ACCESS_LOG_LINE) + LOG_EVENT_OVERHEAD) / 1e9 * \
            PRICES["logs_ingest_per_gb"]
    elif entry == "events":  # PutEvents: each 64 KB chunk of the event is one event
        lines["EventBridge"] = max(1, math.ceil(path.get("input_bytes", 0) / PRICES["eventbridge_chunk_bytes"])) * \
            PRICES["eventbridge_per_event"]
    out = {line: value * 1e6 for line, value in lines.items()}
    out["total"] = sum(out[line] for line in LINES)
    return out


def floor(path: dict[str, Any]) -> float:
    """USD per million of the same reads and writes done directly against DynamoDB (the read, the v0 put, the
    history put, with the chain): what no workflow can go below."""
    return (path["read_units"] * PRICES["dynamodb_per_rru"] + path["write_units"] * PRICES["dynamodb_per_wru"]) * 1e6


def storage_per_month(path: dict[str, Any]) -> dict[str, float]:
    """USD per month, per million such changes, of the bytes they add to the tables while they are kept
    (every version is kept by default: no retention window), as table storage and as point-in-time recovery."""
    gb = path["stored_bytes"] * 1e6 / 1e9
    return {"storage": gb * PRICES["dynamodb_storage_per_gb_month"], "pitr": gb * PRICES["dynamodb_pitr_per_gb_month"]}


def cost_per_million(path: dict[str, Any], log_bytes: dict[str, int] | None = None) -> dict[str, Any]:
    """The units table's dollars for one path at the default logs: ``standard`` and ``express`` (the complete
    bill of a direct start), and ``logs``, the logs alone at each execution-log setting (``log_bytes``:
    execution log bytes by setting, measured)."""
    log_bytes = log_bytes or {"ERROR": path["execution_log_bytes"]}
    standard, express = bill(path, True), bill(path, False)
    logs = {setting: log_cost(size, path["function_log_bytes"]) * 1e6 for setting, size in log_bytes.items()}
    transitions = path["state_transitions"] * PRICES["standard_per_transition"] * 1e6
    default = logs.get("ERROR", standard["CloudWatch Logs"])
    return {"standard": standard["total"], "express": express["total"], "logs": logs,
            "transitions_share_of_standard": transitions / standard["total"],
            "standard_with_all_data": standard["total"] - default + logs.get("ALL + data", default),
            "express_with_all_data": express["total"] - default + logs.get("ALL + data", default)}


def simulated_cost(figures: dict[str, float], standard: bool, log_bytes: float,
                   rate: float = XRAY_REFERENCE_RATE) -> float:
    """USD per million applied changes from the simulation's figures per applied change (capacity): each
    invocation billed a handler's work and one DynamoDB request, Express its simulated mean duration."""
    invocations = figures["invocations_per_applied"]
    lines = workflow_lines(standard, transitions=figures["transitions_per_applied"], invocations=invocations,
                           lambda_ms=invocations * (ms("handler") + ms("dynamodb")),
                           read_units=figures["read_units_per_applied"], write_units=figures["write_units_per_applied"],
                           express_seconds=figures["mean_s"], log_bytes=log_bytes, traced=traced_share(rate))
    return sum(lines.values()) * 1e6
