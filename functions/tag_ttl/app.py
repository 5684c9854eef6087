"""Retired (issue 37.2): the state machine no longer names this function. The history step tags expiries
itself (functions/put_history, ``steps.expiry_tags``) and reports a stale change; this function stays in the
stack for the executions of earlier releases, whose definitions name its published versions (for as long
as they can run or be redriven: docs/operations.md, "Deploys and in-flight executions"). Changed only to
refuse a direct invoke: it asks for the history step's report proof, which no step of this release makes.

Was step 5, TTL tagging: the version that the new write pushes out of the retention window gets an expiry
(one conditional UpdateItem, never a scan), and the one before it too if an earlier execution missed its
tag (so a missed tag heals with the next change, O(1)). Tombstones carry their expiry from the tombstone
write itself; a put over a tombstone writes ``v0`` whole, so a revived entity never keeps one. Idempotent:
retried. The same function reports a stale change, which skips the writes.

Input: ``{"entityId", "operation", "version", "changeId", "proof", "execution": {"name"}}`` (the history step's
report and its proof: without it nothing is tagged, ``seal.Unproven``), or
``{"stale": <the ChangeIsStale error>, "execution": {"name"}}``. Output: ``{"tagged": [versions newly tagged], "expiresAt"}``, or
for a stale change the execution's output.
"""

import os
import time

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from changeflow_core import names, observe, seal, steps, store

HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]
KEEP_VERSIONS = int(os.environ["HISTORY_RETENTION_VERSIONS"])
KEEP_DAYS = int(os.environ["HISTORY_RETENTION_DAYS"])

HASH_ENTITY_IDS = os.environ["CHANGEFLOW_HASH_ENTITY_IDS"] == "true"  # HashEntityIds (docs/privacy.md)
logger, tracer, metrics = Logger(), Tracer(), Metrics()
dynamodb = boto3.client("dynamodb")
SEAL = seal.SecretKey(boto3.client("secretsmanager"), os.environ[seal.SECRET_ENV])  # read at the first use


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    names.hash_entity_ids(HASH_ENTITY_IDS)  # how error messages name the entity too (docs/privacy.md)
    logger.append_keys(execution=event["execution"]["name"])
    if "stale" in event:
        result = steps.stale_report(event["stale"])
        observe.count(metrics, observe.VERSIONS_EXPIRED, result["operation"], value=0)  # nothing written
        logger.debug("stale", extra=result)
        return result
    steps.require_report(SEAL.get(), event)  # seal.Unproven unless the history step reported it: nothing tagged
    logger.append_keys(entityId=observe.entity_ref(event["entityId"], HASH_ENTITY_IDS), changeId=event["changeId"])
    observe.annotate(tracer, event["entityId"], event["version"], hashed=HASH_ENTITY_IDS)

    tags = steps.retention_tags(event["version"], KEEP_VERSIONS, KEEP_DAYS, int(time.time()))
    tagged = [v for v, expires_at in tags if store.tag_expiry(dynamodb, HISTORY_TABLE_NAME, event["entityId"], v, expires_at)]
    observe.count(metrics, observe.VERSIONS_EXPIRED, event["operation"], value=len(tagged))

    expires_at = tags[0][1] if tags else None
    logger.debug("retention", extra={"tagged": tagged, "expiresAt": expires_at})
    return {"tagged": tagged, "expiresAt": expires_at}
