"""Step 3, history put and expiry tags: write version n as its own item, exactly as ``v0`` held it, then tag
what the change pushes out of the retention window (version n-K, and n-K-1 if an earlier execution missed
it; never a scan). The put is idempotent (never overwrites; the same change finding its own item is done),
so the state machine retries this step, and it is safe after a redrive. A tag never fails the step: one
that fails is reported (``expiry.missed``, ``ExpiryTagsMissed``). The same function reports a stale change.

Input: the write step's input plus ``written`` (its result) and ``retryCount``, or ``{"stale": <the
ChangeIsStale error>, "execution": {"name"}}``. Output: the execution's output, ``history`` (``written``|
``present``|``repaired``|``unrepairable``) and ``expiry`` (``steps.expiry_tags``); for a stale change, its
output. Raises ``HistoryConflict`` if version n is another change's (never retried). Without the fetch step's and the write
step's proofs nothing is written (``seal.Unproven``).
"""

import os
import time

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from changeflow_core import names, observe, seal, steps

TABLE_NAME = os.environ["TABLE_NAME"]
HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]
# the chain stores each version's predecessor hash only where a retention window may expire it (chain.py)
CHAIN_PREV_HASH = os.environ.get("CHAIN_PREV_HASH", "true") != "false"
KEEP_VERSIONS = int(os.environ["HISTORY_RETENTION_VERSIONS"])  # HistoryRetentionVersions (0: keep every one)
KEEP_DAYS = int(os.environ["HISTORY_RETENTION_DAYS"])  # HistoryRetentionDays

HASH_ENTITY_IDS = os.environ["CHANGEFLOW_HASH_ENTITY_IDS"] == "true"  # HashEntityIds (docs/privacy.md)
logger, tracer, metrics = Logger(), Tracer(), Metrics()
dynamodb = boto3.client("dynamodb")
tagging = boto3.client("dynamodb", config=steps.TAGGING_CLIENT)  # the tags' own, bounded in time
SEAL = seal.SecretKey(boto3.client("secretsmanager"), os.environ[seal.SECRET_ENV])  # read at the first use


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    names.hash_entity_ids(HASH_ENTITY_IDS)  # how error messages name the entity too (docs/privacy.md)
    logger.append_keys(execution=event["execution"]["name"])
    if "stale" in event:  # "Report the stale change": nothing was written, the error's message is the output
        return steps.stale_report(event["stale"])
    change, written = event["change"], event["written"]
    logger.append_keys(entityId=observe.entity_ref(change["entityId"], HASH_ENTITY_IDS), changeId=change["changeId"])
    observe.annotate(tracer, change["entityId"], written["version"], written["outcome"], hashed=HASH_ENTITY_IDS)
    observe.count(metrics, observe.HISTORY_PUT_RETRIES, change["operation"], value=event.get("retryCount") or 0)

    result = steps.record_history(dynamodb, TABLE_NAME, HISTORY_TABLE_NAME, event, keep_prev=CHAIN_PREV_HASH,
                                  key=SEAL.get())  # seal.Unproven without the proofs: nothing written
    if result["history"] == "repaired":
        observe.count(metrics, observe.HISTORY_REPAIRED, change["operation"])

    # after the put, whose result stands: a tag that fails is caught and reported, never raised
    expiry = steps.expiry_tags(tagging, HISTORY_TABLE_NAME, change["entityId"], result["version"], KEEP_VERSIONS,
                               KEEP_DAYS, int(time.time()), context.get_remaining_time_in_millis)
    if observe.count_expiry(metrics, change["operation"], expiry):
        logger.warning("expiry tag missed", extra=expiry)  # the next change, verify and repair see to it
    logger.debug("history put", extra={"version": written["version"], "history": result["history"], **expiry})
    return {**result, "expiry": expiry}
