"""What every write step reports: X-Ray annotations (searchable in the console) and an EMF metric per
outcome, by operation. Metric names live here only."""

from __future__ import annotations

import warnings
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from .names import entity_ref

METRIC_OF_OUTCOME = {
    "applied": "ChangesApplied",
    "stale": "ChangesStale",
    "duplicate": "ChangesDuplicate",
    "conflict": "VersionConflicts",
}
CHANGES_RECEIVED = "ChangesReceived"
CHANGES_REJECTED = "ChangesRejected"  # ValidationError: nothing written
CHANGES_FETCHED_AGAIN = "ChangesFetchedAgain"  # reads after a back-off (a conflict or a failed write)
HISTORY_PUT_RETRIES = "HistoryPutRetries"  # $$.State.RetryCount of each history put attempt
HISTORY_REPAIRED = "HistoryRepaired"
VERSIONS_EXPIRED = "VersionsTaggedForExpiry"
EXPIRY_TAGS_MISSED = "ExpiryTagsMissed"  # tags the history step could not make (steps.expiry_tags)
VERSIONS_PUBLISHED = "VersionsPublished"  # the feed's enrichment (issue 36): events handed to the pipe's target


def annotate(tracer, entity_id: str, version: int | None = None, outcome: str | None = None,
             hashed: bool = False) -> None:
    """Indexed X-Ray annotations: the entity (hashed with ``HashEntityIds``: names.entity_ref), never content."""
    tracer.put_annotation("entityId", entity_ref(entity_id, hashed))
    if version is not None:
        tracer.put_annotation("version", version)
    if outcome is not None:
        tracer.put_annotation("outcome", outcome)


def count(metrics, name: str, operation: str, value: int = 1) -> None:
    """One EMF count by operation. A count of 0 is not sent (a history put's first attempt, a retention
    step that tagged nothing): a metric's Sum is the same without it, and every EMF document is a log event
    CloudWatch Logs bills (issue 37: fewer EMF lines per change)."""
    if not value:
        return
    metrics.add_dimension(name="operation", value=operation)
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def count_expiry(metrics, operation: str, expiry: dict[str, Any]) -> bool:
    """The history step's expiry tags (``steps.expiry_tags``): versions tagged, and tags missed; True if one
    was missed (the change stands: the next change, verify and repair see to it)."""
    count(metrics, VERSIONS_EXPIRED, operation, value=len(expiry["tagged"]))
    count(metrics, EXPIRY_TAGS_MISSED, operation, value=len(expiry.get("missed", ())))
    return bool(expiry.get("missed"))


def record_outcome(tracer, metrics, change: dict[str, Any], result: dict[str, Any], hashed: bool = False) -> None:
    annotate(tracer, change["entityId"], result["version"], result["outcome"], hashed)
    count(metrics, METRIC_OF_OUTCOME[result["outcome"]], change["operation"])


def cold_start_only(metrics):
    """``metrics`` for a function that publishes no application metric, only its cold start (the read API:
    API Gateway counts the reads). Powertools warns "No application metrics to publish" after every such
    call, into every read's log; its Metrics documentation gives this filter for a function that expects
    none (docs.powertools.aws.dev/lambda/python/latest/core/metrics/, "raise_on_empty_metrics")."""
    warnings.filterwarnings("ignore", "No application metrics to publish")
    return metrics


def request_path(event: dict[str, Any], hashed: bool = False) -> str:
    """What a read's log line names: the raw path (the id in it, as the client sent it), or with
    ``HashEntityIds`` the route (``/entities/{id}``), which names no entity."""
    return event["resource" if hashed else "path"]
