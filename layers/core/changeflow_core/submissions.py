"""POST /changes: start a change's execution, or say what became of the change.

A request the fetch step would reject is refused here, 400 naming the field, by the same validation
(``check``: issue 27 item 7); nothing starts. Otherwise the answer says what really happened to the
change (issue 9):
- nothing yet, or every earlier execution failed (``NotFound``, ``VersionConflict``, a Lambda
  outage...): a new execution starts; the n-th attempt is named ``names.execution_name(entity, change, n)``,
  and the attempts table holds the latest n (``changeflow_core.attempts``: O(1) calls per submission);
- an execution of it is still running: that execution;
- an execution of it succeeded: that execution and its outcome.

A STANDARD state machine tells all three apart by name: StartExecution of a name already used answers
``ExecutionAlreadyExists`` (unless it is still running with the same input, when it answers that
execution), and DescribeExecution gives its status and output (Step Functions API reference,
StartExecution, "idempotent"). An EXPRESS state machine does neither: names are not deduplicated and
there is no DescribeExecution (Step Functions developer guide, "Standard vs. Express workflows",
execution guarantees). There the data answers: a change whose id ``v0`` lists as applied at its current
timestamp is answered ``duplicate`` without starting anything; otherwise a new execution starts, and
the workflow's own duplicate check (``changeIds`` on ``v0``) keeps a concurrent twin from writing twice.

Request bodies are parsed with ``Decimal`` for numbers and passed on without ever becoming ``float``.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from . import attempts, authorization, model, principal as principals, seal, store, wire
from .errors import ValidationError
from .names import MAX_ATTEMPT, event_execution_name, execution_name, hash_entity_ids
from .validation import MAX_REQUEST_BYTES, request_size, validate_request

CHANGE_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,64}(?![\s\S])"  # same meaning in Python re, ECMA 262 and Java
STANDARD, EXPRESS = "STANDARD", "EXPRESS"
FAILED_STATUSES = {"FAILED", "TIMED_OUT", "ABORTED"}
# StartExecution errors a client should retry (API reference, StartExecution "Errors"; common errors)
CLAIM_ROUNDS = 8  # rounds of "read the latest attempt, claim the next" lost to concurrent submissions
RETRY_LATER = {"ThrottlingException": 429, "TooManyRequestsException": 429, "ExecutionLimitExceeded": 503}


class Refused(Exception):
    """The request is not started: an HTTP status and a message for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, field: str | None = None):
        super().__init__(message)
        self.status, self.message, self.headers, self.field = status, message, headers or {}, field

    @property
    def body(self) -> dict[str, str]:
        """The response body: the message, and the field it names when one request field is at fault."""
        return {"message": self.message, **({"field": self.field} if self.field else {})}


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_body(body: bytes) -> dict[str, Any]:
    """The change request of a request body: UTF-8 JSON, an object, numbers as ``Decimal``, no larger
    than ``MAX_REQUEST_BYTES`` once compact (what StartExecution receives). ``Refused`` otherwise."""
    try:
        text = body.decode("utf-8")
        # numbers exact (wire.JsonNumber keeps each as it was sent); NaN/Infinity are not JSON: refused
        request = json.loads(text, parse_float=wire.JsonNumber, parse_int=wire._integer, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Refused(400, "Invalid request body: not UTF-8 JSON") from exc
    if not isinstance(request, dict):
        raise Refused(400, "Invalid request body: not a JSON object")
    for field in ("entityId", "changeId"):
        if not isinstance(request.get(field), str) or not request[field]:
            raise Refused(400, f"Invalid request body: {field} must be a non-empty string")
    if not re.match(CHANGE_ID_PATTERN, request["changeId"]):
        raise Refused(400, "Invalid request body: changeId must match " + CHANGE_ID_PATTERN)
    try:
        json.dumps(request, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (\\ud800): no UTF-8 input can carry it
        raise Refused(400, "Invalid request body: a string holds a lone surrogate") from exc
    size = request_size(request)  # the one measure every entry point and the workflow use
    if size > MAX_REQUEST_BYTES:
        raise Refused(413, f"Request too large: {size} bytes, over the {MAX_REQUEST_BYTES}-byte maximum")
    return request


def dumps(value: Any) -> str:
    """Compact JSON in which a ``Decimal`` is written as the number it is (never through ``float``)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{dumps(str(k))}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return str(value)  # a finite Decimal's str is a JSON number: "0.10", "1E+126", "-0"
    if isinstance(value, datetime):
        return json.dumps(value.timestamp())
    return json.dumps(value, ensure_ascii=False)


def execution_input(request: dict[str, Any], principal: dict[str, Any] | None = None,
                    received_at: int | None = None, key: seal.Key | None = None, name: str | None = None) -> str:
    """The StartExecution input of a change request: the envelope ``{"request": "<its JSON text>",
    "principal": {...}, "receivedAt": ms}`` (changeflow_core.principal), numbers exact in the text; with
    ``key``, sealed for execution ``name`` (an entry point's)."""
    text = wire.dumps(request, compact=True)
    if key is None:
        return wire.dumps(principals.envelope(text, principal or principals.direct(), received_at), compact=True)
    return wire.dumps(principals.sealed_envelope(key, text, principal, received_at, name), compact=True)


def first_receipt(description: dict[str, Any], received_at: int | None) -> int | None:
    """The earlier of ``received_at`` and an earlier attempt's ``receivedAt``: a change keeps the time it
    was first received across attempts, so a late attempt cannot be newer than what followed it."""
    try:
        earlier = principals.received_ms(json.loads(description.get("input") or "{}").get(principals.RECEIVED_AT))
    except (ValueError, AttributeError, principals.ValidationError):
        earlier = None
    if earlier is None:
        return received_at
    return earlier if received_at is None else min(earlier, received_at)


def execution_arn(state_machine_arn: str, name: str) -> str:
    """``arn:<partition>:states:<region>:<account>:execution:<machine>:<name>`` of a Standard execution."""
    return state_machine_arn.replace(":stateMachine:", ":execution:", 1) + ":" + name


def _answer(description: dict[str, Any]) -> dict[str, Any]:
    answer = {"executionArn": description["executionArn"], "status": description["status"],
              "startDate": description["startDate"]}
    if description["status"] == "SUCCEEDED":
        output = json.loads(description.get("output") or "null", parse_float=Decimal)
        answer["output"] = output
        if isinstance(output, dict) and "outcome" in output:
            answer["outcome"] = output["outcome"]
    return answer


def already_applied(dynamodb, table: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """The answer for a change ``v0`` lists as applied (EXPRESS: nothing can describe its execution)."""
    latest = store.get_item(dynamodb, table, request["entityId"], model.LATEST_SK)
    applied = (latest or {}).get(model.CHANGE_IDS) or {}
    if request["changeId"] not in applied:
        return None
    own = latest.get(model.CHANGE_ID) == request["changeId"]
    return {"status": "SUCCEEDED", "outcome": model.DUPLICATE, "version": int(applied[request["changeId"]]),
            "executionArn": latest.get(model.EXECUTION) if own else None}


def submit(sfn, dynamodb, state_machine_arn: str, workflow_type: str, table: str,
           request: dict[str, Any], attempts_table: str, hashed: bool = False,
           principal: dict[str, Any] | None = None, received_at: int | None = None,
           policy: list | None = None, key: seal.Key | None = None) -> tuple[dict[str, Any], int]:
    """``(answer, attempt)`` for a parsed change request, started with the ``principal`` API Gateway
    authenticated and the time the change was first received, sealed with the stack's ``key``
    (changeflow_core.seal); ``Refused`` when the stack's authorization
    ``policy`` denies it (403, nothing started) or Step Functions refuses.

    The latest attempt is found in O(1) calls whatever the number of earlier ones (changeflow_core.attempts):
    the first attempt's name, then the number the attempts table holds, then a claim of the next. Every
    attempt carries the change's first receipt (an earlier attempt's ``receivedAt``). With ``hashed`` (the
    stack's HashEntityIds) a refusal names the entity by its digest, as the workflow's errors do."""
    hash_entity_ids(hashed)
    try:
        authorization.check(policy, principal, request["entityId"], request.get("operation"))
    except authorization.Forbidden as exc:
        raise Refused(403, f"Forbidden: {exc}") from exc
    if workflow_type == EXPRESS:
        done = already_applied(dynamodb, table, request)
        if done is not None:
            return done, 0
    entity, change = request["entityId"], request["changeId"]
    receipt = {"at": received_at}

    def answer_of(attempt: int) -> dict[str, Any] | None:
        """The answer if attempt ``attempt`` runs or succeeded (started now if it never was); None if it failed."""
        name = execution_name(entity, change, attempt, hashed)
        payload = execution_input(request, principal, receipt["at"], key, name)
        try:
            started = sfn.start_execution(stateMachineArn=state_machine_arn, name=name, input=payload)
            return {"executionArn": started["executionArn"], "status": "RUNNING", "startDate": started["startDate"]}
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ExecutionAlreadyExists":
                raise refusal(exc) from exc
        if workflow_type == EXPRESS:  # AWS never answers this for Express; a stricter endpoint might
            return None
        description = sfn.describe_execution(executionArn=execution_arn(state_machine_arn, name))
        if description["status"] in FAILED_STATUSES:
            receipt["at"] = first_receipt(description, receipt["at"])  # the next attempt keeps the first receipt
            return None
        return _answer(description)

    answer, seen = answer_of(1), 1  # the common case: no earlier attempt, or the first one ran
    if answer is not None:
        return answer, 1
    for _ in range(CLAIM_ROUNDS):  # more rounds only while concurrent submissions claim first
        latest = attempts.latest(dynamodb, attempts_table, entity, change)
        if latest > seen:  # a later attempt exists (or was claimed and never started): its answer
            seen = latest
            answer = answer_of(seen)
            if answer is not None:
                return answer, seen
        if seen >= MAX_ATTEMPT:
            raise Refused(409, f"change {change!r} of this entity failed {MAX_ATTEMPT} times; "
                               "send it with a new changeId")
        if attempts.claim(dynamodb, attempts_table, entity, change, seen):
            seen += 1
            answer = answer_of(seen)
            if answer is not None:
                return answer, seen
    raise Refused(503, "other submissions of this change keep starting attempts; retry later", {"Retry-After": "1"})


def start_event(sfn, state_machine_arn: str, delivered: dict[str, Any], key: seal.Key) -> dict[str, Any]:
    """The event bus rule's target (issue 33): start the execution of the change an event carries, with the
    event's principal sealed (EventBridge cannot seal; its rule invokes the event function, which can). The
    request is not validated here: the fetch step refuses a bad one by name in the execution's history, the
    audit trail. A redelivered event (the same id, the same name) starts nothing: ``ExecutionAlreadyExists``
    is its answer on a Standard workflow; anything else Step Functions refuses fails the invocation, which
    Lambda retries and then sends to the dead-letter queue."""
    request, who, received_at = principals.from_rule_event(delivered)
    name = event_execution_name((who["event"] or {}).get("id") if isinstance(who["event"], dict) else None)
    payload = wire.dumps(principals.sealed_envelope(key, request, who, received_at, name), compact=True)
    try:
        started = sfn.start_execution(stateMachineArn=state_machine_arn, name=name, input=payload)
        return {"executionArn": started["executionArn"], "started": True}
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ExecutionAlreadyExists":
            raise
        return {"executionArn": execution_arn(state_machine_arn, name), "started": False}


def check(request: dict[str, Any], now: datetime | None = None) -> None:
    """``Refused(400)`` naming the field, for a request the fetch step would reject: the same validation
    (validation.validate_request), before anything starts. What only the data can tell (a rollback to a
    version that does not exist, an expected version that is not current, a change too big for the
    states once merged with the stored item) is still the workflow's to say."""
    moment = (now or datetime.now(timezone.utc)).isoformat()
    try:
        validate_request(request, {"name": request.get("changeId"), "startTime": moment})
    except ValidationError as exc:
        raise Refused(400, f"Invalid request: {exc}", field=exc.field) from exc


def refusal(exc: ClientError) -> Refused:
    """What a client is told when StartExecution fails: retry later (429/503) or a server error."""
    code = exc.response["Error"]["Code"]
    if code in RETRY_LATER:
        return Refused(RETRY_LATER[code], f"Step Functions is busy ({code}); retry later", {"Retry-After": "1"})
    if code == "InvalidExecutionInput":
        return Refused(413, f"Step Functions refused the input ({exc.response['Error'].get('Message', '')})")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500)
    if status >= 500:
        return Refused(503, f"Step Functions is unavailable ({code}); retry later", {"Retry-After": "1"})
    return Refused(500, f"Step Functions could not start the execution ({code})")
