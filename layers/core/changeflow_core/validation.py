"""Validation of a change request: the one place that decides what the workflow accepts.

Every rejection is a ``ValidationError`` whose message starts with the field it names, raised before
anything is written.
"""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from . import codec, model, wire
from .errors import ValidationError

# The one maximum request size (compact UTF-8 JSON), checked at every entry point before anything is
# written, below Step Functions' 256 KiB per state input/output (AWS: "Quotas related to state machine
# executions"). It is not the bound on what the states carry: the fetch step measures that on the data
# itself (the whole change, the ids v0 remembers, the content as DynamoDB JSON, room for an error on the
# back-off path and the Lambda integration's envelope) before anything is written (changeflow_core.carried).
MAX_REQUEST_BYTES = 224 * 1024
MAX_ENTITY_ID_BYTES = 1024  # DynamoDB allows 2048 for a partition key; keep room for the prefixes
MAX_CHANGE_ID_CHARS = 128
MAX_ACTOR_CHARS = 256
MAX_REASON_CHARS = 1024
MAX_EFFECTIVE_AT = 2**53 - 1  # epoch ms that survive a JSON round trip through any client

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
FIELDS = {
    "entityId", "operation", "attributes", "set", "remove", "toVersion", "effectiveAt", "changeId",
    "expectedVersion", "actor", "reason", "redactVersion",
}


@dataclass(frozen=True)
class Change:
    """A validated change request with its defaults filled in."""

    entityId: str
    operation: str
    effectiveAt: int
    changeId: str
    expectedVersion: int | None = None
    toVersion: int | None = None
    actor: str | None = None
    reason: str | None = None
    set: dict[str, Any] | None = None  # a patch: the fields it sets, as DynamoDB JSON (exact numbers)
    remove: list[str] | None = None  # a patch: the fields it removes
    redactVersion: int | None = None  # a redact: the version whose content it removes
    chainRecord: dict[str, Any] | None = None  # a redact or adopt: what the fetch step found to record (chain)
    principal: dict[str, Any] | None = None  # who AWS authenticated (changeflow_core.principal), never the body
    superseded: list[str] | None = None  # a patch: its fields a newer change wrote (the fetch step: clocks)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Change":
        return cls(**data)


def request_size(request: Any) -> int:
    """Bytes of the request as StartExecution receives it from every entry point: the execution input
    ``{"request": "<its compact JSON text>"}`` (wire.execution_input), UTF-8. Escaping a quote or a
    backslash inside that text doubles it, so this, not the request's own text, is what must fit
    (a lone surrogate, which validation rejects later by name, counts as its 3-byte encoding)."""
    return len(wire.execution_input(request).encode("utf-8", "surrogatepass"))


def check_request_size(request: Any) -> None:
    size = request_size(request)
    if size > MAX_REQUEST_BYTES:
        raise ValidationError(
            "request", f"{size} bytes is over the {MAX_REQUEST_BYTES}-byte request limit"
        )


def _text(field: str, value: Any, max_chars: int, required: bool) -> str | None:
    if value is None:
        if required:
            raise ValidationError(field, "is required")
        return None
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, not {type(value).__name__}")
    if required and value == "":
        raise ValidationError(field, "must not be empty")
    if len(value) > max_chars:
        raise ValidationError(field, f"is longer than {max_chars} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value):
        raise ValidationError(field, "must not contain control characters")
    return value


def _integer(field: str, value: Any, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise ValidationError(field, f"must be an integer, not {type(value).__name__}")
    if isinstance(value, (float, Decimal)):  # 2.0 or 1.767E+12 from JSON text: integral values are integers
        sent = value.text if isinstance(value, wire.JsonNumber) else value
        if not (value.is_integer() if isinstance(value, float) else value.is_finite() and value == value.to_integral_value()):
            raise ValidationError(field, f"must be an integer, not {sent}")
        if abs(value.adjusted() if isinstance(value, Decimal) else 0) > 30:
            raise ValidationError(field, f"must be between {minimum} and {maximum}, not {sent}")
        value = int(value)
    if not minimum <= value <= maximum:
        raise ValidationError(field, f"must be between {minimum} and {maximum}, not {value}")
    return value


def check_entity_id(value: Any) -> str:
    """An entity id the workflow accepts: the one rule for every entry point and every read (a read of
    an id no change could have written is refused by name, never sent to DynamoDB, whose key limit it
    may exceed)."""
    entity_id = _text("entityId", value, MAX_ENTITY_ID_BYTES, required=True)
    if len(entity_id.encode("utf-8", "surrogatepass")) > MAX_ENTITY_ID_BYTES:
        raise ValidationError("entityId", f"is longer than {MAX_ENTITY_ID_BYTES} bytes")
    return entity_id


def epoch_ms(timestamp: str) -> int:
    """Epoch milliseconds of an ISO-8601 timestamp such as ``$$.Execution.StartTime`` (exact: no float)."""
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return (moment - EPOCH) // timedelta(milliseconds=1)


def validate_attributes(attributes: Any, field: str = "attributes") -> dict[str, Any]:
    """The change's own attributes (a put's ``attributes``, a patch's ``set``) as DynamoDB values: an
    object, no reserved names, storable values."""
    if not isinstance(attributes, dict):
        raise ValidationError(field, f"must be an object, not {type(attributes).__name__}")
    clash = sorted(set(attributes) & model.RESERVED)
    if clash:
        raise ValidationError(f"{field}.{clash[0]}", "is a name the item model reserves")
    values = {}
    for name, value in attributes.items():
        codec.check_name(field, name)
        values[name] = codec.to_dynamo_value(f"{field}.{name}", value)
    return values


def validate_patch(request: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A patch's ``(set, remove)``: top-level field names, taken literally (``a.b`` is the field named
    ``a.b``, never a path: a nested value changes by setting its whole top-level field); at least one
    field in all; a field in one of the two only; no reserved names."""
    values = validate_attributes(request["set"], "set") if "set" in request else {}
    remove = request.get("remove", [])
    if not isinstance(remove, list):
        raise ValidationError("remove", f"must be an array of field names, not {type(remove).__name__}")
    seen: set[str] = set()
    for i, name in enumerate(remove):
        codec.check_name(f"remove[{i}]", name)
        if name in model.RESERVED:
            raise ValidationError(f"remove[{i}]", f"{name!r} is a name the item model reserves")
        if name in values:
            raise ValidationError(f"remove[{i}]", f"{name!r} is also in set: a patch sets a field or removes it")
        if name in seen:
            raise ValidationError(f"remove[{i}]", f"{name!r} is named twice")
        seen.add(name)
    if not values and not remove:
        raise ValidationError("set", "a patch needs at least one field to set or to remove")
    return values, list(remove)


def validate_request(request: Any, execution: dict[str, Any], principal: dict[str, Any] | None = None,
                     received_at: int | None = None) -> Change:
    """A ``Change`` from a raw request, or ``ValidationError`` naming the first bad field.

    ``execution`` is ``{"name", "startTime"}`` of the running execution: the default for ``changeId``.
    The default ``effectiveAt`` is ``received_at``, when the change was first received (the envelope's
    ``receivedAt``: the first API request, the event's ingestion time), else the execution's start: a
    resend in a later execution keeps it, so it is stale at worst (never newer than what followed it).
    ``principal`` is the envelope's, normalised (``changeflow_core.principal``).
    """
    if not isinstance(request, dict):
        raise ValidationError("request", f"must be a JSON object, not {type(request).__name__}")
    check_request_size(request)
    unknown = sorted(set(request) - FIELDS)
    if unknown:
        raise ValidationError(unknown[0], "is not a field of a change request")

    entity_id = check_entity_id(request.get("entityId"))

    operation = request.get("operation")
    if operation not in model.OPERATIONS:
        raise ValidationError("operation", f"must be one of {', '.join(model.OPERATIONS)}, not {operation!r}")

    if operation == model.PUT:
        if "attributes" not in request:
            raise ValidationError("attributes", "is required for a put")
        validate_attributes(request["attributes"])
    elif "attributes" in request:
        raise ValidationError("attributes", f"is only for a put, not a {operation}")

    patch_set = patch_remove = None
    if operation == model.PATCH:
        values, patch_remove = validate_patch(request)
        patch_set = codec.serialize_item(values)  # DynamoDB JSON: carried between steps with exact numbers
    else:
        for field in ("set", "remove"):
            if field in request:
                raise ValidationError(field, f"is only for a patch, not a {operation}")

    to_version = None
    if operation == model.ROLLBACK:
        if request.get("toVersion") is None:
            raise ValidationError("toVersion", "is required for a rollback")
        to_version = _integer("toVersion", request["toVersion"], 1, model.MAX_VERSION)
    elif "toVersion" in request:
        raise ValidationError("toVersion", f"is only for a rollback, not a {operation}")

    redact_version = None
    if operation == model.REDACT:
        if request.get("redactVersion") is None:
            raise ValidationError("redactVersion", "is required for a redact: the version whose content it removes")
        redact_version = _integer("redactVersion", request["redactVersion"], 1, model.MAX_VERSION)
        if not request.get("reason"):
            raise ValidationError("reason", "is required for a redact: say why the content is removed")
    elif "redactVersion" in request:
        raise ValidationError("redactVersion", f"is only for a redact, not a {operation}")

    expected = request.get("expectedVersion")
    if expected is not None:
        expected = _integer("expectedVersion", expected, 0, model.MAX_VERSION)

    if request.get("effectiveAt") is None:
        effective_at = received_at if received_at is not None else epoch_ms(execution["startTime"])
    else:
        effective_at = _integer("effectiveAt", request["effectiveAt"], 0, MAX_EFFECTIVE_AT)

    change_id = _text("changeId", request.get("changeId"), MAX_CHANGE_ID_CHARS, required=True) \
        if request.get("changeId") is not None else execution["name"]

    return Change(
        entityId=entity_id,
        operation=operation,
        effectiveAt=effective_at,
        changeId=change_id,
        expectedVersion=expected,
        toVersion=to_version,
        actor=_text("actor", request.get("actor"), MAX_ACTOR_CHARS, required=False),
        reason=_text("reason", request.get("reason"), MAX_REASON_CHARS, required=False),
        set=patch_set,
        remove=patch_remove,
        redactVersion=redact_version,
        principal=principal,
    )
