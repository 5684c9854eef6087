"""Step 2, conditional v0 update (put, patch and rollback: the fetch step made the whole new content):
write ``v0`` whole if it is still the fetched version and the change is not older than it. Never retried
by the state machine: a failed condition is classified from the old item DynamoDB returns with it.

Input: ``{"change", "latest", "content", "attempt", "proof", "execution"}`` (the fetch step's result and its
proof: without it nothing is written, ``seal.Unproven``).
Output: ``{"outcome": "applied"|"duplicate", "version", "recordedAt", "proof"}``. Raises ``WriteConflict`` (another
writer got in: back off and read again), ``ChangeIsStale``, or ``VersionConflict``.
"""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from changeflow_core import names, observe, seal, steps
from changeflow_core.decisions import ChangeIsStale, WriteConflict
from changeflow_core.errors import VersionConflict

TABLE_NAME = os.environ["TABLE_NAME"]
# the chain stores each version's predecessor hash only where a retention window may expire it (chain.py)
CHAIN_PREV_HASH = os.environ.get("CHAIN_PREV_HASH", "true") != "false"

HASH_ENTITY_IDS = os.environ["CHANGEFLOW_HASH_ENTITY_IDS"] == "true"  # HashEntityIds (docs/privacy.md)
logger, tracer, metrics = Logger(), Tracer(), Metrics()
dynamodb = boto3.client("dynamodb")
SEAL = seal.SecretKey(boto3.client("secretsmanager"), os.environ[seal.SECRET_ENV])  # read at the first use


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    names.hash_entity_ids(HASH_ENTITY_IDS)  # how error messages name the entity too (docs/privacy.md)
    change = event["change"]
    logger.append_keys(execution=event["execution"]["name"], entityId=observe.entity_ref(change["entityId"], HASH_ENTITY_IDS), changeId=change["changeId"])

    try:
        # seal.Unproven without the fetch step's proof: nothing written
        result = steps.write(dynamodb, TABLE_NAME, event, keep_prev=CHAIN_PREV_HASH, key=SEAL.get())
    except (WriteConflict, VersionConflict):  # counted, then the named error the state machine routes
        observe.count(metrics, observe.METRIC_OF_OUTCOME["conflict"], change["operation"])
        raise
    except ChangeIsStale as stale:
        observe.record_outcome(tracer, metrics, change, stale.result, hashed=HASH_ENTITY_IDS)
        raise

    observe.record_outcome(tracer, metrics, change, result, hashed=HASH_ENTITY_IDS)
    logger.debug("v0 write", extra=result)
    return result
