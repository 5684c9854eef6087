"""Step 3, history put and expiry tags: write version n as its own item, exactly as ``v0`` held it, then tag
what the change pushes out of the retention window (TTL tagging: version n-K, and n-K-1 if an earlier
execution missed it; never a scan). The put is idempotent (it never overwrites, and the same change finding
its own item counts as done), so it is the step the state machine retries, and safe to run again when a
failed execution is redriven. A tag never fails the step: the put's result stands, and a tag that fails is
reported (``expiry.missed``, ``ExpiryTagsMissed``) for the next change, ``verify`` and ``repair``. The same
function reports a stale change, which writes nothing.

Input: the write step's input plus ``written`` (its result) and ``retryCount``; or
``{"stale": <the ChangeIsStale error>, "execution": {"name"}}``.
Output: the execution's output (``entityId``, ``operation``, ``outcome``, ``version``, ``changeId``,
``effectiveAt``, ``superseded``), ``history``: ``written``|``present``|``repaired``|``unrepairable``, and
``expiry``: ``{"tagged", "expiresAt"}`` (and ``missed``, ``error``); for a stale change, its output. A duplicate
whose version this execution wrote (its v0 write landed, the answer was lost) is ``applied``.
Raises ``HistoryConflict`` if version n belongs to another change (never retried). A redact version, once
in history, removes the content of the version it redacts here (``chainwork.redact``, idempotent).
"""

import os
import time

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from botocore.config import Config
from changeflow_core import names, observe, steps

TABLE_NAME = os.environ["TABLE_NAME"]
HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]
# the chain stores each version's predecessor hash only where a retention window may expire it (chain.py)
CHAIN_PREV_HASH = os.environ.get("CHAIN_PREV_HASH", "true") != "false"
KEEP_VERSIONS = int(os.environ["HISTORY_RETENTION_VERSIONS"])  # HistoryRetentionVersions (0: keep every one)
KEEP_DAYS = int(os.environ["HISTORY_RETENTION_DAYS"])  # HistoryRetentionDays

HASH_ENTITY_IDS = os.environ["CHANGEFLOW_HASH_ENTITY_IDS"] == "true"  # HashEntityIds (docs/privacy.md)
logger = Logger()
tracer = Tracer()
metrics = Metrics()
dynamodb = boto3.client("dynamodb")
# The expiry tags' own client, bounded (steps.TAG_BUDGET_MS): a tag that fails is caught and reported inside
# the step's time, never left to time the step out, whose Retry would run the history put again.
tagging = boto3.client("dynamodb", config=Config(retries={"mode": "standard", "total_max_attempts": 2},
                                                  connect_timeout=1, read_timeout=1))


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    names.hash_entity_ids(HASH_ENTITY_IDS)  # how error messages name the entity too (docs/privacy.md)
    if "stale" in event:  # "Report the stale change": nothing was written, the error's message is the output
        logger.append_keys(execution=event["execution"]["name"])
        result = steps.stale_report(event["stale"])
        logger.debug("stale", extra=result)
        return result
    change, written = event["change"], event["written"]
    logger.append_keys(execution=event["execution"]["name"], entityId=observe.entity_ref(change["entityId"], HASH_ENTITY_IDS), changeId=change["changeId"])
    observe.annotate(tracer, change["entityId"], written["version"], written["outcome"], hashed=HASH_ENTITY_IDS)
    observe.count(metrics, observe.HISTORY_PUT_RETRIES, change["operation"], value=event.get("retryCount") or 0)

    result = steps.record_history(dynamodb, TABLE_NAME, HISTORY_TABLE_NAME, event, keep_prev=CHAIN_PREV_HASH)
    if result["history"] == "repaired":
        observe.count(metrics, observe.HISTORY_REPAIRED, change["operation"])

    expiry = steps.expiry_tags(tagging, HISTORY_TABLE_NAME, change["entityId"], result["version"], KEEP_VERSIONS,
                               KEEP_DAYS, int(time.time()), context.get_remaining_time_in_millis)
    observe.count(metrics, observe.VERSIONS_EXPIRED, change["operation"], value=len(expiry["tagged"]))
    if "missed" in expiry:  # the change stands; the next change, verify and repair see to the tag
        observe.count(metrics, observe.EXPIRY_TAGS_MISSED, change["operation"], value=len(expiry["missed"]))
        logger.warning("expiry tag missed", extra=expiry)

    logger.debug("history put", extra={"version": written["version"], "history": result["history"], **expiry})
    return {**result, "expiry": expiry}
