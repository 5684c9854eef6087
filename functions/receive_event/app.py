"""The event bus rule's target: start the execution of the change an event carries, with the event's principal
(its account, source, id and region, the rule's ARN) sealed (changeflow_core.seal). EventBridge cannot seal an
execution input, and the workflow refuses an events principal without this stack's seal, so the rule invokes this
function (asynchronously: Lambda retries a failure twice, then sends the event to the dead-letter queue).

Input: the rule's InputTransformer output ``{"request": <detail>, "event": <aws.events.event>, "rule",
"receivedAt"}`` (template.yaml). Output: ``{"executionArn", "started"}`` (``started: false``: a redelivered event,
whose execution exists already)."""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from changeflow_core import seal, submissions

STATE_MACHINE_ARN = os.environ["STATE_MACHINE_ARN"]
logger, tracer, metrics = Logger(), Tracer(), Metrics()
sfn = boto3.client("stepfunctions")
SEAL = seal.SecretKey(boto3.client("secretsmanager"), os.environ[seal.SECRET_ENV])  # read at the first use


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    logger.append_keys(eventId=(event.get("event") or {}).get("id"))
    started = submissions.start_event(sfn, STATE_MACHINE_ARN, event, SEAL.get())
    metrics.add_metric(name="ChangeEventsStarted" if started["started"] else "ChangeEventsRedelivered",
                       unit=MetricUnit.Count, value=1)
    logger.info("started" if started["started"] else "redelivered", extra=started)
    return started
