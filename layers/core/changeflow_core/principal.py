"""Who made a change, as AWS authenticated it (``principal``), beside what the client says (``actor``).

Every execution input is an envelope that one of the two entry points builds; nothing else may start an
execution (only the front function's role and the rule's role are granted ``states:StartExecution``):

``{"request": <the change>, "principal": {...}, "receivedAt": <when the change was first received>}``

- ``POST /changes`` (API Gateway, ``AWS_IAM``): the front function takes the principal from the proxy
  event's ``requestContext`` (``from_api_event``), never from the body. With ``AWS_IAM`` API Gateway sets
  ``identity.userArn`` (an IAM user's ARN, or for an assumed role the session's
  ``arn:aws:sts::<account>:assumed-role/<role>/<session>``), ``identity.accountId`` (the signer's account)
  and ``identity.caller`` (the principal id: ``AIDA...`` for a user, ``AROA...:<session>`` for a role
  session). Those three name the signer; ``accessKey`` and ``sourceIp`` do not (a key is rotated, an
  address is shared) and are not recorded. If the API is switched to a Lambda authorizer, its
  ``principalId`` is the principal; to a Cognito user pool authorizer, the token's ``sub`` and ``iss``.
  (API Gateway developer guide, "$context variables for data models, authorizers, mapping templates,
  and access logging".) ``receivedAt``: ``requestContext.requestTimeEpoch`` of the first request that
  started the change (``submissions.submit`` keeps the first one across attempts).
- The event bus rule (an ``InputTransformer``, template.yaml): ``<aws.events.event>`` (the event without
  its detail: ``account`` is set by EventBridge to the account that called PutEvents; ``source`` is only
  as good as the ``events:source`` condition on the callers' ``events:PutEvents`` permission), the rule's
  ARN ``<aws.events.rule-arn>`` and ``<aws.events.event.ingestion-time>`` as ``receivedAt``; the detail
  (the change) goes under ``request``, so nothing in it can pose as the principal. (EventBridge user
  guide, "Amazon EventBridge input transformation", predefined variables;
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html)
- A direct ``StartExecution`` (``changeflow submit --via stepfunctions``, the tests): Step Functions does
  not tell an execution who started it (CloudTrail's StartExecution event does), so the principal says
  exactly that: ``{"via": "stepfunctions"}`` and nothing else; any other field is refused.

The workflow refuses an input without this envelope, or with a principal of an unknown shape, as a
``ValidationError`` naming ``principal`` before anything is written (``unwrap``). The normalised principal
is stored on every version; the hash chain covers every attribute, so it is sealed with the version.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from . import wire
from .errors import ValidationError

FIELD = "principal"
RECEIVED_AT = "receivedAt"
REQUEST = "request"
ENVELOPE_FIELDS = {REQUEST, FIELD, RECEIVED_AT}
API, EVENTS, STEPFUNCTIONS = "api", "events", "stepfunctions"
MAX_TEXT = 2048  # an ARN is at most 2048 characters (IAM quotas)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MISSING = ("is missing: executions are started by POST /changes or by the event bus rule, which add the "
           "principal AWS authenticated ({\"request\": ..., \"principal\": ..., \"receivedAt\": ...})")

# what each entry point records, and nothing else
_API_FIELDS = {"via", "arn", "accountId", "caller", "authorizer", "id", "issuer", "authenticated"}
_EVENT_FIELDS = ("account", "source", "id", "region")


def from_api_event(event: dict[str, Any]) -> dict[str, Any]:
    """The principal of an API Gateway REST (v1) proxy event: the authorizer's if there is one, else
    the SigV4 signer's (``AWS_IAM``), else ``authenticated: false`` (an API without authorization)."""
    context = event.get("requestContext") or {}
    authorizer = context.get("authorizer") or {}
    claims = authorizer.get("claims") or {}
    if claims.get("sub"):
        return {"via": API, "authorizer": "cognito", "id": str(claims["sub"]), "issuer": str(claims.get("iss", ""))}
    if authorizer.get("principalId"):
        return {"via": API, "authorizer": "lambda", "id": str(authorizer["principalId"])}
    identity = context.get("identity") or {}
    if identity.get("userArn"):
        return {"via": API, "arn": identity["userArn"], "accountId": str(identity.get("accountId") or ""),
                "caller": str(identity.get("caller") or "")}
    return {"via": API, "authenticated": False}


def api_received_at(event: dict[str, Any]) -> int | None:
    """When API Gateway received the request: ``requestContext.requestTimeEpoch`` (epoch ms; API Gateway
    always sets it; a hand-written event without it leaves the default to the execution's start)."""
    value = (event.get("requestContext") or {}).get("requestTimeEpoch")
    return int(value) if isinstance(value, (int, str)) and str(value).isdigit() else None


def envelope(request: Any, principal: dict[str, Any], received_at: int | None) -> dict[str, Any]:
    """The execution input of a change: the request (its JSON text, or a request value) and who sent it."""
    value = {REQUEST: request, FIELD: principal}
    if received_at is not None:
        value[RECEIVED_AT] = received_at
    return value


def direct() -> dict[str, Any]:
    """The principal of a direct StartExecution: the workflow cannot know who called it."""
    return {"via": STEPFUNCTIONS}


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise ValidationError(field, f"must be a non-empty string of at most {MAX_TEXT} characters")
    return value


def normalise(principal: Any) -> dict[str, Any]:
    """The principal as stored on the version, from what an entry point put in the envelope; a shape no
    entry point builds is refused by name."""
    if not isinstance(principal, dict):
        raise ValidationError(FIELD, MISSING if principal is None else "must be an object")
    via = principal.get("via")
    if via == API:
        unknown = sorted(set(principal) - _API_FIELDS)
        if unknown:
            raise ValidationError(f"{FIELD}.{unknown[0]}", "is not a field of an API principal")
        if principal.get("authenticated") is False and len(principal) == 2:
            return {"via": API, "authenticated": False}
        if "authorizer" in principal:
            kept = {k: _text(f"{FIELD}.{k}", principal[k]) for k in ("authorizer", "id")}
            if "issuer" in principal:
                kept["issuer"] = str(principal["issuer"])[:MAX_TEXT]
            return {"via": API, **kept}
        return {"via": API, "arn": _text(f"{FIELD}.arn", principal.get("arn")),
                "accountId": str(principal.get("accountId") or "")[:MAX_TEXT],
                "caller": str(principal.get("caller") or "")[:MAX_TEXT]}
    if via == EVENTS:
        unknown = sorted(set(principal) - {"via", "rule", "event"})
        if unknown:
            raise ValidationError(f"{FIELD}.{unknown[0]}", "is not a field of an event bus principal")
        event = principal.get("event")
        if not isinstance(event, dict):
            raise ValidationError(f"{FIELD}.event", "must be the event (the rule's <aws.events.event>)")
        kept = {"via": EVENTS, "rule": _text(f"{FIELD}.rule", principal.get("rule"))}
        for name in _EVENT_FIELDS:
            kept[name] = _text(f"{FIELD}.event.{name}", event.get(name))
        return kept
    if via == STEPFUNCTIONS:
        if set(principal) != {"via"}:
            extra = sorted(set(principal) - {"via"})[0]
            raise ValidationError(f"{FIELD}.{extra}", "a direct StartExecution cannot name its caller (Step "
                                                      "Functions does not tell the workflow who started it)")
        return direct()
    raise ValidationError(f"{FIELD}.via", f"must be one of {API}, {EVENTS}, {STEPFUNCTIONS}, not {via!r}")


def received_ms(value: Any) -> int | None:
    """``receivedAt`` as epoch ms: an integer (API Gateway's ``requestTimeEpoch``) or an ISO 8601 time
    (EventBridge's ingestion time, DescribeExecution's ``startDate``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValidationError(RECEIVED_AT, "must be epoch milliseconds or an ISO 8601 time")
    if isinstance(value, int):
        if not 0 <= value <= 2**53 - 1:
            raise ValidationError(RECEIVED_AT, f"must be between 0 and {2**53 - 1}, not {value}")
        return value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValidationError(RECEIVED_AT, f"is not an ISO 8601 time: {value[:64]!r}") from exc
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return (moment - EPOCH) // timedelta(milliseconds=1)
    raise ValidationError(RECEIVED_AT, "must be epoch milliseconds or an ISO 8601 time")


def unwrap(execution_input: Any) -> tuple[Any, dict[str, Any], int | None]:
    """``(request, principal, receivedAt)`` of an execution input; ``ValidationError`` naming the field
    when it is not an envelope an entry point builds."""
    if not isinstance(execution_input, dict) or FIELD not in execution_input:
        raise ValidationError(FIELD, MISSING)
    unknown = sorted(set(execution_input) - ENVELOPE_FIELDS)
    if unknown:
        raise ValidationError(unknown[0], "is not a field of the execution input (request, principal, receivedAt)")
    if REQUEST not in execution_input:
        raise ValidationError(REQUEST, "is required")
    return (execution_input[REQUEST], normalise(execution_input[FIELD]),
            received_ms(execution_input.get(RECEIVED_AT)))


def describe(principal: dict[str, Any] | None) -> str:
    """One line for people: the ARN, the event's account and source, or what is not known."""
    if not principal:
        return "(not recorded)"
    via = principal.get("via")
    if via == API:
        if principal.get("authorizer"):
            return f"{principal['authorizer']}:{principal.get('id')}"
        return principal.get("arn") or "(unauthenticated API request)"
    if via == EVENTS:
        return f"events:{principal.get('account')}/{principal.get('source')}"
    if via == STEPFUNCTIONS:
        return "(StartExecution: caller unknown)"
    return str(principal)


def direct_input(request: Any, received_at: int | None = None) -> str:
    """The StartExecution input of a direct start (``changeflow submit --via stepfunctions``): the request's
    JSON text with exact numbers (``wire.execution_input``'s text) and the direct principal."""
    text = request if isinstance(request, str) else wire.dumps(request, compact=True)
    return wire.dumps(envelope(text, direct(), received_at), compact=True)


def request_in(execution_input: Any) -> Any:
    """The change request an execution input carries, for tools that show it (not validated): inside an
    envelope, a text form or an object; numbers exact where the text carries them."""
    value = execution_input.get(REQUEST) if isinstance(execution_input, dict) and FIELD in execution_input \
        else execution_input
    if isinstance(value, str):
        value = {wire.TEXT_FIELD: value}
    return wire.read_request(value) if wire.is_text_form(value) else value
