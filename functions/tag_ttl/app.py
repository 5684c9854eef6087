"""Step 5, TTL tagging: the version that the new write pushes out of the retention window gets an expiry
(one conditional UpdateItem, never a scan). Tombstones carry their expiry from the tombstone write itself;
a put over a tombstone writes ``v0`` whole, so a revived entity never keeps one. Idempotent: retried.

Input: ``{"entityId", "operation", "version"}``. Output: ``{"tagged": <version or null>, "expiresAt"}``.
"""

import os
import time

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from changeflow_core import observe, steps, store

HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]
KEEP_VERSIONS = int(os.environ["HISTORY_RETENTION_VERSIONS"])
KEEP_DAYS = int(os.environ["HISTORY_RETENTION_DAYS"])

logger = Logger()
tracer = Tracer()
metrics = Metrics()
dynamodb = boto3.client("dynamodb")


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    logger.append_keys(execution=event["execution"]["name"], entityId=event["entityId"])
    observe.annotate(tracer, event["entityId"], event["version"])

    tag = steps.retention_tag(event["version"], KEEP_VERSIONS, KEEP_DAYS, int(time.time()))
    version, expires_at = tag or (None, None)
    tagged = tag is not None and store.tag_expiry(dynamodb, HISTORY_TABLE_NAME, event["entityId"], version, expires_at)
    observe.count(metrics, observe.VERSIONS_EXPIRED, event["operation"], value=int(tagged))

    logger.info("retention", extra={"tagged": version, "expiresAt": expires_at, "newlyTagged": tagged})
    return {"tagged": version, "expiresAt": expires_at}
