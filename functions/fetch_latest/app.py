"""Step 1, fetch-latest: validate the change request (or, after a back-off, take it from the state and settle
whether the write before landed: ``lostwrites``), read the entity's latest state consistently (writing v0's
version to history if its writer never did), and decide. A stale change ends here.

Input: ``{"request": <changeflow_core.principal's envelope>, "execution": {"id", "name", "startTime"}, "writers"}``,
or after a back-off ``{"change", "content", "attempt", "error", "tried", "execution": {"name"}, "writers"}``.
Output: ``{"change", "latest", "content", "writer", "attempt", "tries"}``, and ``historyRepaired``. Raises
``ValidationError``, ``Forbidden`` or ``NotFound`` (nothing is written), ``ChangeIsStale`` (the report step returns
the outcome), ``VersionConflict``, ``LatestWriteFailed`` or ``OutcomeUnknown`` (nothing can tell)."""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from changeflow_core import authorization, lostwrites, model, names, observe, seal, steps
from changeflow_core.decisions import ChangeIsStale
from changeflow_core.errors import ValidationError, VersionConflict

TABLE_NAME = os.environ["TABLE_NAME"]
HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]
UPDATE, TOMBSTONE = os.environ["UPDATE_LATEST_FUNCTION_ARN"], os.environ["DELETE_TOMBSTONE_FUNCTION_ARN"]
WRITERS = {model.PUT: UPDATE, model.DELETE: TOMBSTONE}  # for a direct invoke: steps.writers_named names the rest
POLICY = authorization.parse(os.environ["AUTHORIZATION_POLICY"])  # None: authorization off
ADOPTION_CLOSED = os.environ["CHAIN_ADOPTION_CLOSED"] == "true"  # ChainAdoptionClosed: adopt refused
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
    try:
        change, content, attempt = steps.take(event, POLICY, SEAL.get())  # Forbidden, or no seal: nothing written
    except ValidationError:
        observe.count(metrics, observe.CHANGES_REJECTED, "invalid")
        raise
    logger.append_keys(entityId=observe.entity_ref(change.entityId, HASH_ENTITY_IDS), changeId=change.changeId, attempt=attempt)
    observe.annotate(tracer, change.entityId, hashed=HASH_ENTITY_IDS)
    observe.count(metrics, observe.CHANGES_RECEIVED if attempt == 1 else observe.CHANGES_FETCHED_AGAIN, change.operation)

    try:
        fetched = steps.fetch(dynamodb, TABLE_NAME, HISTORY_TABLE_NAME, change, content, attempt,
                              steps.writers_named(event, WRITERS), lostwrites.lost(event), ADOPTION_CLOSED,
                              SEAL.get(), event["execution"]["name"])
    except ChangeIsStale as stale:  # the report step returns the outcome; the execution succeeds
        observe.record_outcome(tracer, metrics, stale.result, stale.result, hashed=HASH_ENTITY_IDS)
        raise
    except VersionConflict:  # the caller's expectedVersion is not current: counted, then the named failure
        observe.count(metrics, observe.METRIC_OF_OUTCOME["conflict"], change.operation)
        raise
    if "historyRepaired" in fetched:  # the version v0 held was missing from history: written from v0
        observe.count(metrics, observe.HISTORY_REPAIRED, change.operation)
    logger.debug("fetched", extra={"latestVersion": (fetched["latest"] or {}).get("version", 0),
                                   "historyRepaired": fetched.get("historyRepaired")})
    return fetched
