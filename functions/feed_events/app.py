"""The change feed's enrichment (issue 36; template.yaml ``FeedPipe``): EventBridge Pipes hands it a batch of the
table's stream records, history items written (the pipe's filter), in the stream's order, and publishes what it
returns, one ``VersionRecorded`` event per version in the same order (changeflow_core.feed says what an event
holds). It reads only the chain hash of a version's predecessor where the item does not store it (outside a
retention window), one BatchGetItem per batch; the content goes out only with ``FeedContent=full``.

Input: ``[stream record, ...]``. Output: ``[event detail, ...]``. A failure fails the whole batch: the pipe
retries it (at least once: the target may see a version twice, which consumers recognise by entity and version).
"""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from changeflow_core import feed, observe

HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]
FEED_CONTENT = os.environ["FEED_CONTENT"]  # none | full (docs/privacy.md)
logger = Logger()
tracer = Tracer()
metrics = Metrics()
dynamodb = boto3.client("dynamodb")


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    records = [record for record in event if feed.is_version_record(record)]  # the pipe's filter, checked again
    items = [feed.new_image(record) for record in records]
    known = feed.read_hashes(dynamodb, HISTORY_TABLE_NAME, feed.previous_keys(items))
    published = feed.events(items, known, FEED_CONTENT)
    metrics.add_metric(name=observe.VERSIONS_PUBLISHED, unit=MetricUnit.Count, value=len(published))
    logger.debug("batch", extra={"records": len(event), "events": len(published), "predecessorsRead": len(known)})
    return published
