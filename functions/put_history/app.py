"""Step 3, history put: write version n as its own item, exactly as ``v0`` held it. Idempotent (the put
never overwrites, and the same change finding its own item counts as done), so it is the step the state
machine retries, and safe to run again when a failed execution is redriven.

Input: the write step's input plus ``written`` (its result, with its proof) and ``retryCount``; without the
fetch step's and the write step's proofs nothing is written (``seal.Unproven``).
Output: the execution's output (``entityId``, ``operation``, ``outcome``, ``version``, ``changeId``,
``effectiveAt``) and ``history``: ``written``|``present``|``repaired``|``unrepairable``. A duplicate whose
version this execution wrote (its v0 write landed, the answer was lost) is ``applied``.
Raises ``HistoryConflict`` if version n belongs to another change (never retried). A redact version, once
in history, removes the content of the version it redacts here (``chainwork.redact``, idempotent).
"""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from changeflow_core import names, observe, seal, steps

TABLE_NAME = os.environ["TABLE_NAME"]
HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]
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
    change, written = event["change"], event["written"]
    logger.append_keys(execution=event["execution"]["name"], entityId=observe.entity_ref(change["entityId"], HASH_ENTITY_IDS), changeId=change["changeId"])
    observe.annotate(tracer, change["entityId"], written["version"], written["outcome"], hashed=HASH_ENTITY_IDS)
    observe.count(metrics, observe.HISTORY_PUT_RETRIES, change["operation"], value=event.get("retryCount") or 0)

    result = steps.record_history(dynamodb, TABLE_NAME, HISTORY_TABLE_NAME, event, keep_prev=CHAIN_PREV_HASH,
                                  key=SEAL.get())  # seal.Unproven without the proofs: nothing written
    if result["history"] == "repaired":
        observe.count(metrics, observe.HISTORY_REPAIRED, change["operation"])

    logger.debug("history put", extra={"version": written["version"], "history": result["history"]})
    return result
