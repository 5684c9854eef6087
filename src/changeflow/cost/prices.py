"""The prices and billing rules the cost model uses, us-east-1 public list prices, each with the page it was
read from and the day, and what each service counts (the log event's overhead, the template's memory, the
AWS latencies that durations are billed on).

Read on 2026-11-21 (Step Functions, Lambda, DynamoDB requests, CloudWatch Logs ingestion) and 2026-11-25 (the
rest), in the pages below.
"""

from __future__ import annotations

PAGES = {
    "step_functions": "https://aws.amazon.com/step-functions/pricing/",
    "lambda": "https://aws.amazon.com/lambda/pricing/",
    "dynamodb": "https://aws.amazon.com/dynamodb/pricing/on-demand/",
    "api_gateway": "https://aws.amazon.com/api-gateway/pricing/",
    "eventbridge": "https://aws.amazon.com/eventbridge/pricing/",
    "xray": "https://aws.amazon.com/xray/pricing/",
    "cloudwatch": "https://aws.amazon.com/cloudwatch/pricing/",
    "kms": "https://aws.amazon.com/kms/pricing/",
    "kinesis": "https://aws.amazon.com/kinesis/data-streams/pricing/",  # the change feed (issue 36)
}
PRICES = {  # USD, us-east-1
    # Step Functions: Standard per state transition (retries included); Express per request plus duration,
    # memory billed in 64 MB chunks and time in 100 ms steps (first tier)
    "standard_per_transition": 0.025 / 1000,
    "express_per_request": 1.00 / 1e6,
    "express_per_gb_second": 0.00001667,
    # Lambda, x86: per request and per GB-second, duration in 1 ms steps
    "lambda_per_request": 0.20 / 1e6,
    "lambda_per_gb_second": 0.0000166667,
    # DynamoDB on demand: a write request unit per 1 KB written, a read request unit per 4 KB read strongly
    # consistent; storage per GB-month (Standard table class) and point-in-time recovery per GB-month
    "dynamodb_per_wru": 0.625 / 1e6,
    "dynamodb_per_rru": 0.125 / 1e6,
    "dynamodb_storage_per_gb_month": 0.25,
    "dynamodb_pitr_per_gb_month": 0.20,
    # API Gateway REST APIs: per request received (first 333 million a month)
    "api_rest_per_request": 3.50 / 1e6,
    # EventBridge: a custom event published, per 64 KB chunk of its payload (delivery to the rule's target
    # is not billed apart)
    "eventbridge_per_event": 1.00 / 1e6,
    "eventbridge_chunk_bytes": 64 * 1024,
    # X-Ray: per trace recorded, after the first 100,000 of each month
    "xray_per_trace": 5.00 / 1e6,
    # CloudWatch Logs ingestion, first tier: the execution log is billed as vended logs, the functions' logs
    # and the API's access log as standard logs; both $0.50 per GB in us-east-1
    "logs_ingest_per_gb": 0.50,
    # KMS: per request to a key (the first 20,000 a month free)
    "kms_per_request": 0.03 / 10_000,
    # --- the change feed (issue 36, changeflow.cost.feed), read on 2026-11-25 ---
    # EventBridge Pipes: per request, each 64 KB chunk of a source event that passes the filter (filtered-out
    # events are not billed)
    "pipes_per_request": 0.40 / 1e6,
    # Kinesis Data Streams on demand: per stream-hour, per GB written (each record rounded up to 1 KB), per GB read
    "kinesis_stream_hour": 0.04,
    "kinesis_per_gb_in": 0.08,
    "kinesis_per_gb_out": 0.04,
    # DynamoDB Streams: per read request unit (a GetRecords call); free for Lambda triggers, and the page exempts
    # no other reader
    "streams_per_read_request": 0.02 / 1e5,
}
# Each log event counts its UTF-8 message plus 26 bytes (CloudWatch Logs quotas: PutLogEvents batch size,
# "the sum of all event messages in UTF-8, plus 26 bytes for each log event").
LOG_EVENT_OVERHEAD = 26
# DynamoDB bills storage as the items' size plus 100 bytes of index overhead per item ("DynamoDB item sizes
# and formats", https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html).
DYNAMODB_ITEM_OVERHEAD = 100
# The execution log's settings measured: the default (failures only, no data), every state without data,
# every state with data (docs/privacy.md)
LOG_SETTINGS = {"ERROR": {"StateMachineLogLevel": "ERROR", "StateMachineIncludeExecutionData": "false"},
                "ALL": {"StateMachineLogLevel": "ALL", "StateMachineIncludeExecutionData": "false"},
                "ALL + data": {"StateMachineLogLevel": "ALL", "StateMachineIncludeExecutionData": "true"}}
LAMBDA_MEMORY_GB = 0.25  # MemorySize 256 in the template's Globals
EXPRESS_MEMORY_GB = 0.0625  # Express bills memory in 64 MB chunks; this workflow's state fits in one

# AWS's latencies, assumed, not measured (no AWS here): the capacity model's platform (docs/capacity.md) and
# the billed durations below use the same figures, (median, p99) in seconds. A Standard state transition 25 ms
# (Express 10 ms), a warm Lambda invoke 15 ms, a handler's own work 3 ms, a DynamoDB request 5 ms ("single-digit
# milliseconds"), a Step Functions or EventBridge API call 15 ms, a cold start 400 ms.
AWS_LATENCY = {
    "standard_transition": (0.025, 0.08), "express_transition": (0.010, 0.04), "invoke": (0.015, 0.05),
    "handler": (0.003, 0.01), "dynamodb": (0.005, 0.02), "service_call": (0.015, 0.05), "cold_start": (0.4, 1.0),
}

# X-Ray's default sampling rule: the first request each second and 5% of the others ("Sampling rules",
# https://docs.aws.amazon.com/xray/latest/devguide/xray-console-sampling.html). The machine, the API and the
# functions trace one change as one trace (each passes the trace header on). Per change, that is a share
# that depends on the rate: every change at 1 change/s, 5.95% at 100/s, 5.1% at 1,000/s. The bill uses the
# API stage's steady limit (ApiThrottlingRateLimit, 100/s) as its rate.
XRAY_RESERVOIR_PER_SECOND = 1.0
XRAY_FIXED_RATE = 0.05
XRAY_REFERENCE_RATE = 100.0


def traced_share(rate_per_second: float = XRAY_REFERENCE_RATE, reservoir: float = XRAY_RESERVOIR_PER_SECOND,
                 fixed_rate: float = XRAY_FIXED_RATE) -> float:
    """The share of changes a sampling rule records at a steady ``rate_per_second``: its ``reservoir`` each
    second, then ``fixed_rate`` of the rest (the X-Ray API's SamplingRule: ReservoirSize, FixedRate). The
    defaults are X-Ray's default rule; docs/cost.md prices other rules with it (issue 37.2)."""
    if rate_per_second <= reservoir:
        return 1.0
    return (reservoir + fixed_rate * (rate_per_second - reservoir)) / rate_per_second
