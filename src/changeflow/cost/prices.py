"""The prices and billing rules the cost model uses: us-east-1 public list prices as published on
aws.amazon.com on 2026-11-21, and what each service counts (the log event's overhead, Lambda's platform
lines, the template's memory)."""

from __future__ import annotations

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
HANDLER_MS = 5.0  # assumed per Lambda invocation in the dollar figures
