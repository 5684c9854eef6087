"""What keeping execution histories past Step Functions' 90 days costs, both ways (issue 14): the state
machine's execution log (level ALL with execution data; what changeflow uses) against an archiver that
writes each history to S3. Sizes are measured on the embedded stack (its execution log follows the
template's LoggingConfiguration); prices are us-east-1 list prices as published on 2026-11-22.

    .venv/bin/python benchmarks/archive.py [--changes 50]
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_767_225_600_000
PRICES = {
    "logs_ingest_per_gb": 0.50,  # CloudWatch Logs, vended logs, first 10 TB
    "logs_storage_per_gb_month": 0.03,  # archived (compressed) log data
    "s3_put_per_1000": 0.005,  # S3 Standard PUT
    "s3_storage_per_gb_month": 0.023,
    "lambda_per_million": 0.20,
    "lambda_gb_second": 0.0000166667,
}
# CloudWatch Logs pricing: archived data is "compressed using gzip level 6" plus "26 bytes of metadata per
# log event", and storage is billed on that size.
ARCHIVE_METADATA_BYTES = 26


def measure(changes: int) -> dict:
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack

    # the operator's opt-in (docs/privacy.md): every state with its data, the archive this page weighs
    with EmbeddedStack(ROOT, time_scale=0.001, parameters={"StateMachineLogLevel": "ALL",
                                                           "StateMachineIncludeExecutionData": "true"}) as stack:
        cf = Changeflow.for_embedded(stack)
        executions = [cf.submit({"entityId": f"arch#{i % 10}", "operation": "put", "changeId": f"c{i}",
                                 "effectiveAt": T0 + i, "attributes": {"title": f"version {i}", "n": i}})
                      for i in range(changes)]
        logs = cf.make("logs")
        group = cf._log_group()
        log_bytes = archived_bytes = history_bytes = 0
        for execution in executions:
            records = [json.dumps(r, separators=(",", ":")).encode() for r in cf._log_records(execution.arn)]
            log_bytes += sum(len(r) for r in records)
            archived_bytes += len(gzip.compress(b"\n".join(records), 6)) + ARCHIVE_METADATA_BYTES * len(records)
            history_bytes += len(json.dumps(list(cf.history(execution.arn)), default=str).encode())
        assert logs and group
    return {"changes": changes, "log_bytes_per_change": log_bytes / changes,
            "archived_log_bytes_per_change": archived_bytes / changes,
            "history_bytes_per_change": history_bytes / changes}


def costs(sizes: dict) -> dict:
    per_million = 1e6
    log_gb = sizes["log_bytes_per_change"] * per_million / 1e9
    archived_gb = sizes["archived_log_bytes_per_change"] * per_million / 1e9
    history_gb = sizes["history_bytes_per_change"] * per_million / 1e9
    return {
        "execution log": {
            "write": log_gb * PRICES["logs_ingest_per_gb"],
            "a year kept": archived_gb * PRICES["logs_storage_per_gb_month"] * 12,
        },
        "archiver to S3": {
            # one PUT per execution, one 128 MB Lambda invocation of ~100 ms reading the history
            "write": per_million / 1000 * PRICES["s3_put_per_1000"] + PRICES["lambda_per_million"]
            + per_million * 0.128 * 0.1 * PRICES["lambda_gb_second"],
            "a year kept": history_gb * PRICES["s3_storage_per_gb_month"] * 12,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = measure(args.changes)
    result = {"sizes": sizes, "per_million_changes_usd": costs(sizes), "prices": PRICES}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"per applied change: execution log {sizes['log_bytes_per_change']:.0f} bytes "
          f"({sizes['archived_log_bytes_per_change']:.0f} archived), "
          f"GetExecutionHistory JSON {sizes['history_bytes_per_change']:.0f} bytes ({args.changes} changes)")
    print(f"{'way':<16}{'$ per million: write':>24}{'+ kept a year':>16}")
    for way, cost in result["per_million_changes_usd"].items():
        print(f"{way:<16}{cost['write']:>24.2f}{cost['a year kept']:>16.2f}")
    print("(the archiver also makes a GetExecutionHistory call per execution: Step Functions' quota refills that "
          "bucket at 20 calls per second per account and region, so it keeps up with about 1.7 million changes a day)")


if __name__ == "__main__":
    main()
