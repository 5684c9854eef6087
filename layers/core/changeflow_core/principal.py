"""Who made a change, as AWS authenticated it (``principal``), beside what the client says (``actor``).

Every execution input is an envelope that one of the two entry points builds and seals
(``changeflow_core.seal``); nothing else can name a principal:

``{"v": 2, "request": <the change's JSON text>, "principal": {...}, "receivedAt": <first receipt>,
"name": <the execution's name>, "seal": <the entry point's MAC of all of it>}``

- ``POST /changes`` (API Gateway, ``AWS_IAM``): the front function takes the principal from the proxy
  event's ``requestContext`` (``from_api_event``), never from the body. With ``AWS_IAM`` API Gateway sets
  ``identity.userArn`` (an IAM user's ARN, or for an assumed role the session's
  ``arn:aws:sts::<account>:assumed-role/<role>/<session>``), ``identity.accountId`` (the signer's account)
  and ``identity.caller`` (the principal id: ``AIDA...`` for a user, ``AROA...:<session>`` for a role
  session). Those three name the signer; ``accessKey`` and ``sourceIp`` do not (a key is rotated, an
  address is shared) and are not recorded. ``requestId`` is API Gateway's id of the request, which its
  access log records with the signer (``changeflow verify --principals`` matches the two). If the API is
  switched to a Lambda authorizer, its ``principalId`` is the principal; to a Cognito user pool authorizer,
  the token's ``sub`` and ``iss``. (API Gateway developer guide, "$context variables for data models,
  authorizers, mapping templates, and access logging".) ``receivedAt``: ``requestContext.requestTimeEpoch``
  of the first request that started the change (``submissions.submit`` keeps the first one across attempts).
- The event bus rule: its target is the event function, which an ``InputTransformer`` (template.yaml) hands
  ``<aws.events.event>`` (the event without its detail: ``account`` is set by EventBridge to the account
  that called PutEvents; ``source`` is only as good as the ``events:source`` condition on the callers'
  ``events:PutEvents`` permission), the rule's ARN ``<aws.events.rule-arn>``,
  ``<aws.events.event.ingestion-time>`` as ``receivedAt``, and the detail (the change), which goes under
  ``request``, so nothing in it can pose as the principal. (EventBridge user guide, "Amazon EventBridge
  input transformation", predefined variables;
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html)
- A direct ``StartExecution`` (``changeflow submit --via stepfunctions``, the tests): Step Functions does
  not tell an execution who started it (CloudTrail's StartExecution event does), so the principal says
  exactly that: ``{"via": "stepfunctions"}`` and nothing else; any other field is refused. It needs no
  seal (``{"request": ..., "principal": {"via": "stepfunctions"}}``, the envelope before issue 33).

The workflow refuses an input without this envelope, with a principal of an unknown shape, or with an
``api`` or ``events`` principal whose seal is missing, does not match, or was made for another execution
name, as a ``ValidationError`` naming the field before anything is written (``unwrap``). The normalised
principal is stored on every version; the hash chain covers every attribute, so it is sealed with the version.

Envelope versions (issue 33 item 4): during a deploy, one release's entry points meet the other release's
state machine, in both directions. ``v`` says which format an entry point wrote. A release accepts its own
version and every older one it knows, strictly (a field it does not know is refused); a sealed envelope of a
newer version is accepted too, and the fields this release does not know are left out of what it records
(the seal proves they came from an entry point; only their meaning is unknown here). So a new envelope field
is an addition that an older release may ignore; a change that an older release must not ignore (a new seal)
needs two deploys: the first accepts both, the second sends the new one.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from . import seal, wire
from .errors import ValidationError

FIELD = "principal"
RECEIVED_AT = "receivedAt"
REQUEST = "request"
VERSION, NAME, SEAL = "v", "name", "seal"
ENVELOPE_VERSION = 2  # the format this release's entry points write
# the fields of each format this release knows: 1 (no "v") is the unsealed envelope before issue 33
FIELDS_OF_VERSION = {1: {REQUEST, FIELD, RECEIVED_AT}, 2: {VERSION, REQUEST, FIELD, RECEIVED_AT, NAME, SEAL}}
ENVELOPE_FIELDS = FIELDS_OF_VERSION[ENVELOPE_VERSION]
API, EVENTS, STEPFUNCTIONS = "api", "events", "stepfunctions"
MAX_TEXT = 2048  # an ARN is at most 2048 characters (IAM quotas)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MISSING = ("is missing: executions are started by POST /changes or by the event bus rule, which add the "
           "principal AWS authenticated ({\"request\": ..., \"principal\": ..., \"receivedAt\": ...})")

SEALED = (API, EVENTS)  # what only an entry point may say, under its seal
UNSEALED = ("is missing: only this stack's entry points (POST /changes, the event bus rule) may name an api or "
            "events principal, and they seal it; a StartExecution of your own records {\"via\": \"stepfunctions\"}")

# what each entry point records, and nothing else
_API_FIELDS = {"via", "arn", "accountId", "caller", "authorizer", "id", "issuer", "authenticated", "requestId"}
_EVENT_FIELDS = ("account", "source", "id", "region")


def from_api_event(event: dict[str, Any]) -> dict[str, Any]:
    """The principal of an API Gateway REST (v1) proxy event: the authorizer's if there is one, else
    the SigV4 signer's (``AWS_IAM``), else ``authenticated: false`` (an API without authorization); with
    API Gateway's ``requestId``, which its access log records beside the signer."""
    context = event.get("requestContext") or {}
    request = {"requestId": str(context["requestId"])} if context.get("requestId") else {}
    authorizer = context.get("authorizer") or {}
    claims = authorizer.get("claims") or {}
    if claims.get("sub"):
        return {"via": API, "authorizer": "cognito", "id": str(claims["sub"]), "issuer": str(claims.get("iss", "")),
                **request}
    if authorizer.get("principalId"):
        return {"via": API, "authorizer": "lambda", "id": str(authorizer["principalId"]), **request}
    identity = context.get("identity") or {}
    if identity.get("userArn"):
        return {"via": API, "arn": identity["userArn"], "accountId": str(identity.get("accountId") or ""),
                "caller": str(identity.get("caller") or ""), **request}
    return {"via": API, "authenticated": False, **request}


def api_received_at(event: dict[str, Any]) -> int | None:
    """When API Gateway received the request: ``requestContext.requestTimeEpoch`` (epoch ms; API Gateway
    always sets it; a hand-written event without it leaves the default to the execution's start)."""
    value = (event.get("requestContext") or {}).get("requestTimeEpoch")
    return int(value) if isinstance(value, (int, str)) and str(value).isdigit() else None


def envelope(request: Any, principal: dict[str, Any], received_at: int | str | None) -> dict[str, Any]:
    """The execution input of a change: the request (its JSON text, or a request value) and who sent it."""
    value = {REQUEST: request, FIELD: principal}
    if received_at is not None:
        value[RECEIVED_AT] = received_at
    return value


def sealed_envelope(key: seal.Key, request: str, principal: dict[str, Any], received_at: int | str | None,
                    name: str) -> dict[str, Any]:
    """What an entry point starts execution ``name`` with: the envelope, its format and its seal."""
    value = {VERSION: ENVELOPE_VERSION, **envelope(request, principal, received_at), NAME: name}
    value[SEAL] = key.mac(seal.ENVELOPE, value)
    return value


def from_rule_event(delivered: dict[str, Any]) -> tuple[Any, dict[str, Any], Any]:
    """``(request, principal, receivedAt)`` of what the event bus rule hands the event function (template.yaml's
    InputTransformer: ``{"request": <detail>, "event": <aws.events.event>, "rule": "<aws.events.rule-arn>",
    "receivedAt": "<aws.events.event.ingestion-time>"}``); the fetch step normalises the principal."""
    return delivered.get(REQUEST), {"via": EVENTS, "rule": delivered.get("rule"), "event": delivered.get("event")}, \
        delivered.get(RECEIVED_AT)


def direct() -> dict[str, Any]:
    """The principal of a direct StartExecution: the workflow cannot know who called it."""
    return {"via": STEPFUNCTIONS}


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise ValidationError(field, f"must be a non-empty string of at most {MAX_TEXT} characters")
    return value


def normalise(principal: Any, strict: bool = True) -> dict[str, Any]:
    """The principal as stored on the version, from what an entry point put in the envelope; a shape no
    entry point builds is refused by name. ``strict=False`` (a sealed envelope of a newer release) leaves
    out the fields this release does not know instead of refusing them."""
    if not isinstance(principal, dict):
        raise ValidationError(FIELD, MISSING if principal is None else "must be an object")
    via = principal.get("via")
    if via == API:
        unknown = sorted(set(principal) - _API_FIELDS)
        if unknown and strict:
            raise ValidationError(f"{FIELD}.{unknown[0]}", "is not a field of an API principal")
        request = {"requestId": _text(f"{FIELD}.requestId", principal["requestId"])} if "requestId" in principal else {}
        if principal.get("authenticated") is False and "arn" not in principal and "authorizer" not in principal:
            return {"via": API, "authenticated": False, **request}
        if "authorizer" in principal:
            kept = {k: _text(f"{FIELD}.{k}", principal[k]) for k in ("authorizer", "id")}
            if "issuer" in principal:
                kept["issuer"] = str(principal["issuer"])[:MAX_TEXT]
            return {"via": API, **kept, **request}
        return {"via": API, "arn": _text(f"{FIELD}.arn", principal.get("arn")),
                "accountId": str(principal.get("accountId") or "")[:MAX_TEXT],
                "caller": str(principal.get("caller") or "")[:MAX_TEXT], **request}
    if via == EVENTS:
        unknown = sorted(set(principal) - {"via", "rule", "event"})
        if unknown and strict:
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


def unwrap(execution_input: Any, execution_name: str | None = None,
           key: seal.Key | None = None) -> tuple[Any, dict[str, Any], int | None]:
    """``(request, principal, receivedAt)`` of an execution input; ``ValidationError`` naming the field
    when it is not an envelope an entry point builds: an ``api`` or ``events`` principal must carry the
    seal of this stack's ``key``, made for this execution's name."""
    if not isinstance(execution_input, dict) or FIELD not in execution_input:
        raise ValidationError(FIELD, MISSING)
    version = execution_input.get(VERSION, 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValidationError(VERSION, "must be the envelope's format, a whole number 1 or more")
    newer = version > ENVELOPE_VERSION
    unknown = sorted(set(execution_input) - FIELDS_OF_VERSION[min(version, ENVELOPE_VERSION)])
    if REQUEST not in execution_input:
        raise ValidationError(REQUEST, "is required")
    claimed = execution_input[FIELD]
    sealed = isinstance(claimed, dict) and claimed.get("via") in SEALED
    if unknown and not (newer and sealed):
        raise ValidationError(unknown[0], "is not a field of the execution input (v, request, principal, "
                                          "receivedAt, name, seal)")
    if sealed:
        _check_seal(execution_input, execution_name, key)
    elif newer:
        raise ValidationError(VERSION, f"format {version} is newer than this release's ({ENVELOPE_VERSION}) and "
                                       "is not sealed by an entry point")
    return (execution_input[REQUEST], normalise(claimed, strict=not newer),
            received_ms(execution_input.get(RECEIVED_AT)))


def _check_seal(execution_input: dict[str, Any], execution_name: str | None, key: seal.Key | None) -> None:
    mac = execution_input.get(SEAL)
    if mac is None:
        raise ValidationError(SEAL, UNSEALED)
    body = {name: value for name, value in execution_input.items() if name != SEAL}
    if key is None or not key.matches(seal.ENVELOPE, body, mac):
        raise ValidationError(SEAL, "does not match the envelope: it was not sealed by this stack's entry points, "
                                    "or was changed after")
    if execution_input.get(NAME) != execution_name:
        raise ValidationError(NAME, f"the envelope was sealed for the execution {execution_input.get(NAME)!r}, "
                                    f"not {execution_name!r}: a sealed input is good for one execution only")


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
