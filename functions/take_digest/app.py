"""The digest, on a schedule (issue 35): EventBridge Scheduler runs this function (``DigestSchedule``); it
reads the entities changed since the last digest from the changes index, and writes the next digest of the
chain to the compliance-locked bucket (``changeflow_core.digesting``). It reads the table and the bucket and
puts new objects; it cannot delete one or change a retention (its role: template.yaml).

Input (the schedule's ``Input``, with EventBridge Scheduler's context attributes filled in):
``{"scheduledTime": "2026-11-25T21:00:00Z", "schedule": "<the schedule's ARN>"}``; both only logged.
Output: ``{"sequence", "kind", "key", "takenAt", "changed", "count", "root", "hash", "checkpoint",
"restart", "requests"}``."""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from changeflow_core import digesting

TABLE_NAME = os.environ["TABLE_NAME"]
HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]
STATE_MACHINE_ARN = os.environ["STATE_MACHINE_ARN"]
DIGEST_BUCKET = os.environ["DIGEST_BUCKET"]
DIGEST_PREFIX = os.environ["DIGEST_PREFIX"]
logger = Logger()
tracer = Tracer()
metrics = Metrics()
dynamodb = boto3.client("dynamodb")
s3 = boto3.client("s3")
STACK = digesting.Stack(TABLE_NAME, HISTORY_TABLE_NAME, STATE_MACHINE_ARN)


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    logger.append_keys(scheduledTime=event.get("scheduledTime"), schedule=event.get("schedule"))
    try:
        taken = digesting.take(s3, dynamodb, DIGEST_BUCKET, DIGEST_PREFIX, STACK, digesting.clock_ms)
    except digesting.DigestKeyTaken as exc:  # two runs at once: the other one's digest stands
        logger.warning("digest skipped", extra={"reason": str(exc)})
        metrics.add_metric(name="DigestsSkipped", unit=MetricUnit.Count, value=1)
        return {"skipped": str(exc)}
    digest = taken.digest
    tracer.put_annotation("sequence", digest["sequence"])
    metrics.add_metric(name="DigestsTaken", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="DigestEntitiesChanged", unit=MetricUnit.Count, value=len(digest["entities"]))
    metrics.add_metric(name="DigestRestarts", unit=MetricUnit.Count, value=1 if "restart" in digest else 0)
    result = {"sequence": digest["sequence"], "kind": digest["kind"], "key": taken.key, "takenAt": digest["takenAt"],
              "changed": len(digest["entities"]), "count": digest["count"], "root": digest["root"],
              "hash": digest["hash"], "checkpoint": taken.checkpoint, "restart": digest.get("restart"),
              "requests": taken.requests}
    if "restart" in digest:
        logger.warning("digest restarted from the table", extra=result)
    else:
        logger.info("digest", extra=result)
    return result
