"""Step 1, fetch-latest: validate the change request, then read the entity's latest state consistently.

Input: ``{"request": {"request": "<change request as JSON text>"}, "execution": {"id", "name", "startTime"}}``.
Output: ``{"change": <normalised change>, "latest": <state or null>,
"content": <rollback content in DynamoDB wire form, numbers as strings, or null>}``.
Raises ``ValidationError`` (nothing is written by any later step) or ``NotFound`` (rollback target).
"""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from changeflow_core import codec, items, model, observe, store, wire
from changeflow_core.errors import ValidationError
from changeflow_core.validation import validate_request

TABLE_NAME = os.environ["TABLE_NAME"]
HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]

logger = Logger()
tracer = Tracer()
metrics = Metrics()
dynamodb = boto3.client("dynamodb")


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    logger.append_keys(execution=event["execution"]["name"])
    try:
        request = wire.read_request(event["request"])  # numbers exact: parsed here, never by a double parser
        change = validate_request(request, event["execution"])
    except ValidationError:
        observe.count(metrics, observe.CHANGES_REJECTED, "invalid")
        raise
    logger.append_keys(entityId=change.entityId, changeId=change.changeId)
    observe.annotate(tracer, change.entityId)
    observe.count(metrics, observe.CHANGES_RECEIVED, change.operation)

    latest = store.fetch_latest_state(dynamodb, TABLE_NAME, HISTORY_TABLE_NAME, change.entityId)
    content = None
    if change.operation == model.ROLLBACK:
        content = store.rollback_content(dynamodb, HISTORY_TABLE_NAME, change.entityId, change.toVersion)
    items.check_item_size(change, request.get("attributes", content))

    logger.info("fetched", extra={"latestVersion": latest["version"] if latest else 0})
    # the content crosses Step Functions in DynamoDB's own string form, so no number is read as a double
    return {"change": change.to_json(), "latest": latest,
            "content": None if content is None else codec.serialize_item(store.codec_ready(content))}
