"""The read API (Powertools REST resolver): the latest state (404 for a tombstone or nothing) or as of a time
(?asOf=&knownAt=), versions newest first (?limit=&cursor=, or ?from=&to=), one version, its execution."""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from changeflow_core import asof, authorization, observe, principal, reads, validation, wire
from changeflow_core.errors import NotFound, ValidationError

TABLE_NAME = os.environ["TABLE_NAME"]
HISTORY_TABLE_NAME = os.environ["HISTORY_TABLE_NAME"]
POLICY = authorization.parse(os.environ["AUTHORIZATION_POLICY"])  # None: authorization off
HASH_ENTITY_IDS = os.environ["CHANGEFLOW_HASH_ENTITY_IDS"] == "true"  # HashEntityIds (docs/privacy.md)
logger = Logger()
tracer = Tracer()
metrics = observe.cold_start_only(Metrics())  # API Gateway's own metrics count the reads, by route and status
dynamodb = boto3.client("dynamodb")
app = APIGatewayRestResolver(serializer=wire.dumps)  # numbers as JSON numbers with all 38 digits, never floats


def entity_id(raw: str) -> str:
    """The id as API Gateway decoded it (``pathParameters``): the route matched the raw path, where an
    id's ``/`` is still ``%2F``, so ``raw`` (still percent-encoded) only routes. An id no change could
    have written (the workflow's own rule) is a 400 naming ``entityId``."""
    value = validation.check_entity_id(app.current_event.path_parameters["id"])
    authorization.check(POLICY, principal.from_api_event(app.current_event.raw_event), value, authorization.READ)
    observe.annotate(tracer, value, hashed=HASH_ENTITY_IDS)
    return value


@app.get("/entities/<id>")
def get_latest(id: str):
    query = app.current_event.get_query_string_value
    return reads.state(dynamodb, TABLE_NAME, HISTORY_TABLE_NAME, entity_id(id), query("asOf"), query("knownAt"))


@app.get("/entities/<id>/versions")
def list_versions(id: str):
    query = app.current_event.get_query_string_value
    return reads.versions(dynamodb, TABLE_NAME, HISTORY_TABLE_NAME, entity_id(id), reads.page_limit(query("limit")),
                          query("cursor"), query("from"), query("to"))


@app.get("/entities/<id>/versions/<version>")
def get_version(id: str, version: str):
    return reads.version(dynamodb, HISTORY_TABLE_NAME, entity_id(id), reads.version_number(version))


@app.get("/entities/<id>/versions/<version>/execution")
def get_version_execution(id: str, version: str):
    return {key: get_version(id, version)[key] for key in ("entityId", "version", "changeId", "executionArn")}


@app.exception_handler([ValidationError, NotFound, asof.Gone, authorization.Forbidden])
def client_error(exc):
    status = {NotFound: 404, asof.Gone: 410, authorization.Forbidden: 403}.get(type(exc), 400)
    return Response(status, "application/json", {"statusCode": status, "message": str(exc)})


@logger.inject_lambda_context(correlation_id_path="requestContext.requestId", log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    # A REST API delivers ``path`` as the client sent it (doc%2F1 stays one segment) and ``pathParameters``
    # decoded: routing the raw path keeps every id's segments apart. Logged: the route with HashEntityIds.
    response = app.resolve(event, context)
    logger.debug("read", extra={"path": observe.request_path(event, HASH_ENTITY_IDS), "status": response["statusCode"]})
    return response
