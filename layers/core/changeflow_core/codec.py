"""Plain JSON <-> DynamoDB attribute values, with DynamoDB's own limits checked on the way in,
and DynamoDB's item-size arithmetic (the basis of capacity units).

Numbers are never floats: a request is read with ``wire.loads`` (``int`` and exact ``Decimal``), DynamoDB
returns numbers as strings, and ``to_plain`` gives them back as ``int`` (integral) or ``Decimal``, which
``wire.dumps`` writes with every digit. A float handed in by Python code (never by a request) is taken
at its shortest ``repr``, so ``0.1`` stays ``0.1``. The limits are DynamoDB's ("Supported data types and
naming rules in Amazon DynamoDB", Number): up to 38 significant digits, leading and trailing zeros
trimmed; magnitudes from 1E-130 to 9.9999999999999999999999999999999999999E+125; zero.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from .errors import ValidationError
from .wire import JsonNumber

MAX_DEPTH = 32  # DynamoDB: 32 levels, the top-level attribute being level 1
MAX_NAME_BYTES = 65_535  # DynamoDB: an attribute name is less than 64 KB
MAX_NUMBER_DIGITS = 38
MAX_EXPONENT = 125  # largest magnitude: 9.99...E+125
MIN_EXPONENT = -130  # smallest magnitude: 1E-130
MAX_ITEM_BYTES = 400 * 1024
RANGE = "magnitudes 1E-130 to 9.9999999999999999999999999999999999999E+125, and 0"



def number_text(value: Any) -> str:
    """The one form changeflow sends a number to DynamoDB in: its exact value, trailing zeros trimmed, an
    integer of up to 38 digits written out (``123000``), any other number in Python's exact notation
    (``1E+38``, ``1.5``, ``1E-130``): never more than 38 digits. DynamoDB accepts any form and normalises
    it, but returns large numbers written out (``1E+100`` comes back as a 1 and 100 zeros: boto/boto3#2500,
    #4636), which boto3's own deserializer (a 38-digit context that traps ``Rounded``) and every reader
    built on it cannot read (boto/boto3#4693, aws-powertools/powertools-lambda-python#4845): so a stored
    number is never written longer than it must be, and an integer that reached us as Python ``int``
    (a patch re-serializes the content it read) is trimmed like any other."""
    number = Decimal(value) if not isinstance(value, Decimal) else value
    if not number.is_finite():
        raise TypeError("Infinity and NaN not supported")
    sign, digits, exponent = number.as_tuple()
    digits = list(digits)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exponent += 1
    if digits == [0]:
        return "0"
    trimmed = Decimal((sign, tuple(digits), exponent))
    if exponent >= 0 and trimmed.adjusted() < MAX_NUMBER_DIGITS:
        return str(int(trimmed))
    return str(trimmed)


class _Serializer(TypeSerializer):
    """boto3's serializer, but numbers exact and in one form (``number_text``): boto3 converts them in a
    context with Emin=-128 (boto3/dynamodb/types.py ``DYNAMODB_CONTEXT``), which refuses DynamoDB's own
    smallest magnitudes, 1E-130 to 1E-128, with ``Underflow``. ``check_number`` has already checked
    DynamoDB's limits."""

    def _serialize_n(self, value):
        return number_text(value)


class _Deserializer(TypeDeserializer):
    """boto3's deserializer, but a number is its exact Decimal (boto3's context refuses 1E-130..1E-128)."""

    def _deserialize_n(self, value):
        return Decimal(value)


_serializer = _Serializer()
_deserializer = _Deserializer()


def _as_sent(value: Any) -> str:
    """The number as the client wrote it, for error messages."""
    if isinstance(value, JsonNumber):
        return value.text
    return repr(value) if isinstance(value, float) else str(value)


def check_number(field: str, value: Any) -> Decimal:
    """The Decimal DynamoDB would store for ``value`` (exact: no rounding, zeros trimmed), or a
    ValidationError naming ``field`` and quoting the value as it was sent."""
    sent = _as_sent(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(field, f"{sent} is not a number DynamoDB can store")
    try:
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError, TypeError) as exc:
        raise ValidationError(field, f"{sent!r} is not a number") from exc
    if number.is_nan():
        raise ValidationError(field, f"{sent} is not a number DynamoDB can store")
    if number.is_infinite():  # also a JsonNumber whose exponent is beyond any Decimal
        raise ValidationError(field, f"{sent} is outside DynamoDB's range ({RANGE})")
    sign, digits, exponent = number.as_tuple()
    digits = list(digits)
    while digits and digits[-1] == 0:  # DynamoDB trims trailing zeros: 1.50 and 10**38 are short numbers
        digits.pop()
        exponent += 1
    if not digits:
        return Decimal(0)
    if len(digits) > MAX_NUMBER_DIGITS:
        raise ValidationError(field, f"{sent} has {len(digits)} significant digits; DynamoDB keeps {MAX_NUMBER_DIGITS}")
    magnitude = exponent + len(digits) - 1
    if magnitude > MAX_EXPONENT or magnitude < MIN_EXPONENT:
        raise ValidationError(field, f"{sent} is outside DynamoDB's range ({RANGE})")
    return Decimal((sign, tuple(digits), exponent))


def check_text(field: str, text: str) -> str:
    """A string DynamoDB can store: valid Unicode (no lone surrogates), so it has a UTF-8 encoding."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(field, "is not valid Unicode (a lone surrogate)") from exc
    return text


def check_name(field: str, name: Any) -> str:
    if not isinstance(name, str) or name == "":
        raise ValidationError(field, "attribute and map key names must be non-empty strings")
    check_text(field, name)
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ValidationError(field, f"the name {name[:20]!r}... is longer than DynamoDB's {MAX_NAME_BYTES} bytes")
    return name


def to_dynamo_value(field: str, value: Any, depth: int = 1) -> Any:
    """A JSON value as the Python value boto3's serializer accepts, validated against DynamoDB's rules.
    ``depth`` is the value's nesting level; a top-level attribute is level 1."""
    if depth > MAX_DEPTH:
        raise ValidationError(field, f"nested deeper than DynamoDB's {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return check_text(field, value)
    if isinstance(value, (int, float, Decimal)):
        return check_number(field, value)
    if isinstance(value, (list, dict)):
        if isinstance(value, list):
            return [to_dynamo_value(f"{field}[{i}]", v, depth + 1) for i, v in enumerate(value)]
        out = {}
        for key, v in value.items():
            out[check_name(field, key)] = to_dynamo_value(f"{field}.{key}", v, depth + 1)
        return out
    raise ValidationError(field, f"unsupported type {type(value).__name__}")


def serialize_item(item: dict[str, Any]) -> dict[str, dict]:
    """Python item (Decimals, not floats) -> DynamoDB wire format."""
    return {name: _serializer.serialize(value) for name, value in item.items()}


def deserialize_value(value: dict) -> Any:
    """One attribute value in wire format -> its Python value (exact Decimals, sets, bytes), for every
    number DynamoDB stores (boto3's own deserializer refuses the smallest: its context's Emin is -128)."""
    return _deserializer.deserialize(value)


def deserialize_item(item: dict[str, dict] | None) -> dict[str, Any] | None:
    """DynamoDB wire format -> Python item, numbers exact (``int`` or ``Decimal``: see ``to_plain``)."""
    if item is None:
        return None
    return {name: to_plain(_deserializer.deserialize(value)) for name, value in item.items()}


def to_plain(value: Any) -> Any:
    """Integral Decimals -> int, others stay Decimal (never float), sets -> sorted lists, recursively:
    the plain JSON of a stored value, written exactly by ``wire.dumps``."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else value
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(to_plain(v) for v in value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return getattr(value, "value", value)  # boto3 Binary


def _number_size(number: Any) -> int:
    value = Decimal(str(number))
    digits = list(value.as_tuple().digits) if value != 0 else [0]
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
    return (len(digits) + 1) // 2 + 1


def attribute_value_size(value: dict) -> int:
    """DynamoDB's size of one attribute value in wire format (docs: 'Item sizes and formats')."""
    (kind, inner), = value.items()
    if kind == "S":
        return len(inner.encode("utf-8"))
    if kind == "N":
        return _number_size(inner)
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + attribute_value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + attribute_value_size(v) for k, v in inner.items())
    if kind == "SS":
        return sum(len(s.encode("utf-8")) for s in inner)
    if kind == "NS":
        return sum(_number_size(n) for n in inner)
    if kind == "BS":
        return sum(len(b) for b in inner)
    raise ValueError(f"unknown attribute type {kind}")


def item_size(wire_item: dict[str, dict]) -> int:
    """Bytes DynamoDB counts for an item in wire format: attribute names plus values."""
    return sum(len(name.encode("utf-8")) + attribute_value_size(v) for name, v in wire_item.items())
