"""What the change feed costs per million versions (issue 36): the pipe, its enrichment and its target, measured
on the embedded stack (the stream records and events the pipe really handled, their sizes, the enrichment's
invocations and reads, the target's requests) and priced at the us-east-1 list prices of ``prices`` (Pipes,
EventBridge, Kinesis on demand, DynamoDB Streams, Lambda and DynamoDB reads, each with its page there).

    .venv/bin/python -m changeflow.cost.feed [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from .prices import AWS_LATENCY, LAMBDA_MEMORY_GB, PRICES

CHUNK = PRICES["eventbridge_chunk_bytes"]  # Pipes and EventBridge both bill 64 KB chunks
HOURS_A_MONTH = 730
VERSIONS = 40  # versions written per measurement: one entity in turn, then four at once
# the enrichment's billed duration on AWS: its handler and one BatchGetItem (the capacity model's latencies)
ENRICH_SECONDS = AWS_LATENCY["handler"][0] + AWS_LATENCY["dynamodb"][0]


def _chunks(size: int) -> int:
    return max(1, math.ceil(size / CHUNK))


def measure(content_bytes: int = 1000, feed_content: str = "none", root: Path | None = None) -> dict[str, Any]:
    """One embedded stack: ``VERSIONS`` versions (half one after another on one entity, half by four writers at
    once on four entities), the pipe's counts and the events' sizes as its target received them."""
    import boto3

    from changeflow.client import Changeflow
    from changeflow.common.project import project_root
    from changeflow.local.embedded import EmbeddedStack
    from changeflow.local.moto_patches.pipes import runner

    with EmbeddedStack(root or project_root(), time_scale=0.001, parameters={"FeedContent": feed_content}) as stack:
        cf = Changeflow.for_embedded(stack)
        sqs, events = boto3.client("sqs", region_name=stack.region), boto3.client("events", region_name=stack.region)
        queue = sqs.create_queue(QueueName="cost-feed")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        bus = stack.outputs["ChangeBusName"]
        events.put_rule(Name="cost-feed", EventBusName=bus, EventPattern=json.dumps({"source": [stack.outputs["FeedEventSource"]]}))
        events.put_targets(Rule="cost-feed", EventBusName=bus, Targets=[{"Id": "q", "Arn": arn}])
        body = {"body": "x" * content_bytes}
        for n in range(VERSIONS // 2):
            cf.submit({"entityId": "cost#0", "operation": "put", "changeId": f"s{n}", "attributes": body})
        started = [cf.start({"entityId": f"cost#{1 + n % 4}", "operation": "put", "changeId": f"c{n}",
                             "attributes": body})[1] for n in range(VERSIONS // 2)]
        for execution in started:
            cf.wait(execution)
        recorded = sum(int(cf.entity(f"cost#{n}")["latest"]["version"]) for n in range(5))
        pipe = f"{stack.template.stack_name}-FeedPipe"
        deadline = time.monotonic() + 60
        while runner.statistics(pipe)["events delivered"] < recorded and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = runner.statistics(pipe)
        received = []
        while True:
            batch = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
            if not batch:
                break
            received += [json.loads(m["Body"])["detail"] for m in batch]
            sqs.delete_message_batch(QueueUrl=queue, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                             for i, m in enumerate(batch)])
        feed_function = stack.function("FeedEventsFunction")
        reads = [c for c in feed_function.api_calls if c[0] == "dynamodb" and c[1] == "BatchGetItem"]
        keys_read = sum(len(p["RequestItems"][t]["Keys"]) for _, _, p, _ in reads for t in p["RequestItems"])
        item_bytes = _history_item_bytes(cf)
    sizes = [len(json.dumps(e, separators=(",", ":")).encode()) for e in received]
    versions = stats["events delivered"]
    return {
        "versions": versions, "content_bytes": content_bytes, "feed_content": feed_content,
        "stream_records_read": stats["records read"], "records_filtered_out": stats["records filtered out"],
        "get_records_calls": stats["stream reads with records"], "enrichment_invocations": stats["enrichment invocations"],
        "target_requests": stats["target requests"], "predecessor_reads": keys_read,
        "event_bytes_mean": sum(sizes) / max(1, len(sizes)), "event_bytes_max": max(sizes or [0]),
        "source_record_bytes": item_bytes + 200,  # the stream record: the new image plus its envelope (keys, ids)
    }


def _history_item_bytes(cf) -> int:
    from changeflow_core import codec

    page = cf.dynamodb.query(TableName=cf.history_table, KeyConditionExpression="pk = :e",
                             ExpressionAttributeValues={":e": {"S": "cost#0"}}, Limit=2)["Items"]
    return max(codec.item_size(i) for i in page)


def per_million(measured: dict[str, Any]) -> dict[str, float]:
    """USD per million versions, by part, for each target (the Kinesis stream's hours are not per version: see
    ``monthly``)."""
    n = measured["versions"]
    per = lambda count: count / n * 1e6  # noqa: E731 - per million versions
    pipes = per(n) * _chunks(measured["source_record_bytes"]) * PRICES["pipes_per_request"]
    lambda_cost = per(measured["enrichment_invocations"]) * (
        PRICES["lambda_per_request"] + LAMBDA_MEMORY_GB * ENRICH_SECONDS * PRICES["lambda_per_gb_second"])
    reads = per(measured["predecessor_reads"]) * PRICES["dynamodb_per_rru"]  # 1 RRU: a strongly consistent item
    stream = per(measured["get_records_calls"]) * PRICES["streams_per_read_request"]
    bus = per(n) * _chunks(int(measured["event_bytes_mean"])) * PRICES["eventbridge_per_event"]
    kinesis_gb = per(n) * math.ceil(measured["event_bytes_mean"] / 1024) * 1024 / 1e9
    kinesis = kinesis_gb * PRICES["kinesis_per_gb_in"]
    common = pipes + lambda_cost + reads + stream
    return {"pipes": pipes, "enrichment": lambda_cost, "predecessor_reads": reads, "stream_reads": stream,
            "bus": bus, "kinesis_in": kinesis, "kinesis_out_per_reader": kinesis_gb * PRICES["kinesis_per_gb_out"],
            "total_bus": common + bus, "total_kinesis": common + kinesis}


IDLE_POLLS_A_SECOND = 4  # a shard's reader polls it about 4 times a second (Lambda's documented base rate)


def monthly() -> dict[str, float]:
    """What does not grow with versions: an on-demand Kinesis stream's hours, and a reader's polls of each
    stream shard when nothing is written (if Pipes' reads are billed as stream read requests)."""
    return {"kinesis_stream": HOURS_A_MONTH * PRICES["kinesis_stream_hour"],
            "idle_polls_per_shard": IDLE_POLLS_A_SECOND * 3600 * HOURS_A_MONTH * PRICES["streams_per_read_request"]}


def report(rows: list[dict[str, Any]]) -> str:
    lines = ["The change feed per million versions (USD; measured on the embedded stack: "
             f"{rows[0]['measured']['versions']} versions, half one entity in turn, half four writers at once; its "
             "batching window is on the stack's time scale, so batches are smaller than AWS's 1 s window makes them "
             "under load, and the enrichment's and reads' shares here are upper bounds)",
             f"{'content':<16}{'event B':>9}{'batch':>7}{'reads/v':>9}{'pipes':>8}{'enrich':>8}{'reads':>7}"
             f"{'stream':>8}{'bus':>7}{'kinesis':>9}{'= bus':>8}{'= kinesis':>11}"]
    for row in rows:
        m, c = row["measured"], row["per_million"]
        lines.append(f"{m['feed_content'] + ', ' + str(m['content_bytes'] // 1000) + ' KB':<16}"
                     f"{m['event_bytes_mean']:>9,.0f}{m['versions'] / max(1, m['enrichment_invocations']):>7.1f}"
                     f"{m['predecessor_reads'] / m['versions']:>9.2f}{c['pipes']:>8.2f}{c['enrichment']:>8.2f}"
                     f"{c['predecessor_reads']:>7.2f}{c['stream_reads']:>8.2f}{c['bus']:>7.2f}{c['kinesis_in']:>9.2f}"
                     f"{c['total_bus']:>8.2f}{c['total_kinesis']:>11.2f}")
    fixed = monthly()
    lines.append(f"plus, with FeedTarget=kinesis, the on-demand stream itself: ${fixed['kinesis_stream']:.2f} a month, "
                 f"and ${rows[0]['per_million']['kinesis_out_per_reader']:.2f} per million versions for each consumer "
                 f"that reads it; and the pipe's polls of an idle stream shard, {IDLE_POLLS_A_SECOND} a second: "
                 f"${fixed['idle_polls_per_shard']:.2f} a shard a month if Pipes' reads are billed as stream reads")
    return "\n".join(lines)


def measure_all(root: Path | None = None, quick: bool = False) -> list[dict[str, Any]]:
    """The three rows of docs/cost.md's table (``quick``: the first alone, the same code path)."""
    rows = []
    for content_bytes, feed_content in ((1000, "none"), (1000, "full"), (100_000, "full"))[:1 if quick else 3]:
        measured = measure(content_bytes, feed_content, root)
        rows.append({"measured": measured, "per_million": per_million(measured)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure_all()
    print(json.dumps({"rows": rows, "monthly": monthly()}, indent=2) if args.json else report(rows))


if __name__ == "__main__":
    main()
