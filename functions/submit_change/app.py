"""POST /changes (Lambda proxy): start the change's execution, sealed (changeflow_core.seal), or answer what became of
it (running, succeeded, or failed: a new attempt runs). The rules are changeflow_core.submissions'; this file is their
table of contents."""

import base64
import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from botocore.config import Config
from changeflow_core import authorization, observe, principal, seal, submissions
from changeflow_core.submissions import Refused

STATE_MACHINE_ARN = os.environ["STATE_MACHINE_ARN"]
WORKFLOW_TYPE = os.environ["WORKFLOW_TYPE"]
TABLE_NAME = os.environ["TABLE_NAME"]
ATTEMPTS_TABLE_NAME = os.environ["ATTEMPTS_TABLE_NAME"]
POLICY = authorization.parse(os.environ["AUTHORIZATION_POLICY"])  # None: authorization off
HASH_ENTITY_IDS = os.environ["CHANGEFLOW_HASH_ENTITY_IDS"] == "true"  # HashEntityIds (docs/privacy.md)
logger, tracer, metrics = Logger(), Tracer(), Metrics()
retries = Config(retries={"mode": "standard", "max_attempts": 2})  # throttling is answered 429, not waited out
sfn = boto3.client("stepfunctions", config=retries)
dynamodb = boto3.client("dynamodb", config=retries)
SEAL = seal.SecretKey(boto3.client("secretsmanager"), os.environ[seal.SECRET_ENV])  # read at the first use


def respond(status: int, body: dict, headers: dict | None = None) -> dict:
    return {"statusCode": status, "headers": {"Content-Type": "application/json", **(headers or {})},
            "body": submissions.dumps(body)}


@logger.inject_lambda_context(correlation_id_path="requestContext.requestId", log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event, context):
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    if headers.get("content-type", "application/json").split(";")[0].strip().lower() != "application/json":
        return respond(415, {"message": "Unsupported Media Type"})
    body = event.get("body") or ""
    raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode("utf-8", "surrogatepass")
    try:
        request = submissions.parse_body(raw)
        submissions.check(request)  # the fetch step's validation: 400 naming the field, nothing started
        logger.append_keys(entityId=observe.entity_ref(request["entityId"], HASH_ENTITY_IDS), changeId=request["changeId"])
        observe.annotate(tracer, request["entityId"], hashed=HASH_ENTITY_IDS)
        # who API Gateway authenticated, never the body (actor is a claim), when the change was first received
        answer, attempt = submissions.submit(sfn, dynamodb, STATE_MACHINE_ARN, WORKFLOW_TYPE, TABLE_NAME, request,
                                             ATTEMPTS_TABLE_NAME, HASH_ENTITY_IDS, principal.from_api_event(event),
                                             principal.api_received_at(event), POLICY, SEAL.get())  # sealed: seal.py
    except Refused as refused:
        logger.info("refused", extra={"status": refused.status, "reason": refused.message})
        metrics.add_metric(name="ChangesRefused", unit=MetricUnit.Count, value=1)
        return respond(refused.status, refused.body, refused.headers)
    metrics.add_metric(name="ChangesSubmitted", unit=MetricUnit.Count, value=1)
    if attempt > 1:
        metrics.add_metric(name="ChangesRetriedAfterFailure", unit=MetricUnit.Count, value=1)
    logger.debug("submitted", extra={"status": answer["status"], "attempt": attempt,
                                     "executionArn": answer.get("executionArn")})
    return respond(200, answer)
