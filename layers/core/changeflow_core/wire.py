"""The request's wire format: a change request read from its JSON text exactly, and JSON written with exact
numbers. No number ever becomes a ``float``.

Every JSON parser between a client and our code that is not ours reads a number as a double (15 to 17
significant digits), while DynamoDB keeps 38:

- Step Functions: "Numbers in JSON text format conform to JavaScript semantics. These numbers typically
  correspond to double-precision IEEE-854 values" (Step Functions Developer Guide, "State machine data");
  moto's interpreter does the same (``json.loads`` of the execution input and of every Lambda result);
- the Lambda Python runtime: awslambdaric's ``LambdaMarshaller.unmarshal_request`` is ``simplejson.loads``
  with its float defaults, before the handler runs;
- EventBridge on the embedded stack (moto ``json.loads`` of ``Detail``).

So a number must cross them inside a string. Every entry point wraps the request's JSON text, exactly as
the client sent it, as ``{"request": "<JSON text>"}`` (``execution_input``); the steps read it back with
``read_request``, numbers as ``Decimal``. Content travels between steps in DynamoDB's own wire form
(``{"N": "<digits>"}``), and what we answer (read API, CLI ``--json``) is written by ``dumps``, which
writes a ``Decimal`` as a JSON number with all its digits.

A request object (not text) is still accepted, for hand-written inputs and the readable samples, but its
numbers have crossed a double parser already: only integers that a double holds exactly (magnitude below
2**53) can be trusted there, and any other number in it is refused by name rather than stored altered.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from .errors import ValidationError

MAX_SAFE_INTEGER = 2**53 - 1  # the largest integer every double-based JSON parser keeps exactly
TEXT_FIELD = "request"  # {"request": "<the change request as JSON text>"}
_MAX_INT_DIGITS = 4_000  # Python refuses int() of more than 4,300 digits; longer ones stay Decimals


class JsonNumber(Decimal):
    """A number read from JSON text: its exact ``Decimal`` value, and ``text``, the number as it was sent
    (errors quote it). One whose exponent is beyond what ``Decimal`` can hold is kept as ``Infinity``
    with its text, so that it is refused as out of DynamoDB's range, quoted as sent."""

    text: str

    def __new__(cls, text: str):
        try:
            number = super().__new__(cls, text)
        except InvalidOperation:
            number = super().__new__(cls, "-Infinity" if text.startswith("-") else "Infinity")
        number.text = text
        return number

    def __reduce__(self):
        return (type(self), (self.text,))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _integer(text: str) -> int | JsonNumber:
    return int(text) if len(text) <= _MAX_INT_DIGITS else JsonNumber(text)


def loads(text: str | bytes, *, unique_keys: bool = False) -> Any:
    """JSON text -> Python, every non-integer number a ``JsonNumber`` (exact), integers ``int`` (exact).
    ``NaN`` and ``Infinity`` (not JSON, but Python's ``json.dumps`` writes them) become JsonNumbers too,
    so that validation refuses them by the field that holds them. With ``unique_keys``, an object that
    names a key twice is a ``ValueError`` naming it (RFC 8259 leaves which value wins to each parser)."""
    hook = _unique_object if unique_keys else None
    return json.loads(text, parse_float=JsonNumber, parse_int=_integer, parse_constant=JsonNumber,
                      object_pairs_hook=hook)


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"repeats the key {repeated!r}: which of its values counts differs from parser to parser")
    return found


def number_text(number: Any) -> str:
    """A number as JSON text with every digit: as sent for a ``JsonNumber``, shortest repr for a float
    (a float here comes from our own code, never from a request), ``Decimal``'s own string otherwise."""
    if isinstance(number, bool):
        raise TypeError("a bool is not a number")
    if isinstance(number, JsonNumber):  # even one beyond Decimal's exponent range: valid JSON as sent
        return number.text
    if isinstance(number, int):
        return int.__repr__(number)
    if isinstance(number, float):  # NaN and Infinity as json.dumps writes them; validation refuses them by name
        return json.encoder.JSONEncoder().encode(number)
    if isinstance(number, Decimal):
        if not number.is_finite():
            raise ValueError(f"{number} is not a JSON number")
        if number == number.to_integral_value() and number.adjusted() < _MAX_INT_DIGITS:
            return str(int(number))
        return str(number)
    raise TypeError(f"{type(number).__name__} is not a number")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _string(text: str, ensure_ascii: bool) -> str:
    if ensure_ascii:
        return json.encoder.encode_basestring_ascii(text)
    # a lone surrogate (which validation refuses later, by name) stays an escape: the text stays UTF-8
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.encoder.encode_basestring(text))


def dumps(value: Any, *, compact: bool = False, ensure_ascii: bool = False, default=None) -> str:
    """JSON text of ``value`` with exact numbers (``Decimal``, ``JsonNumber``, ``int``); ``default`` turns
    any other object into something JSON can hold (as ``json.dumps``'s ``default``)."""
    item_sep, key_sep = (",", ":") if compact else (", ", ": ")
    out: list[str] = []

    def write(v: Any) -> None:
        if v is None:
            out.append("null")
        elif v is True:
            out.append("true")
        elif v is False:
            out.append("false")
        elif isinstance(v, str):
            out.append(_string(v, ensure_ascii))
        elif isinstance(v, (int, float, Decimal)):
            out.append(number_text(v))
        elif isinstance(v, dict):
            out.append("{")
            for i, (k, item) in enumerate(v.items()):
                if i:
                    out.append(item_sep)
                out.append(_string(str(k), ensure_ascii))
                out.append(key_sep)
                write(item)
            out.append("}")
        elif isinstance(v, (list, tuple)):
            out.append("[")
            for i, item in enumerate(v):
                if i:
                    out.append(item_sep)
                write(item)
            out.append("]")
        elif default is not None:
            write(default(v))
        else:
            raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")

    write(value)
    return "".join(out)


def execution_input(request: Any) -> str:
    """The StartExecution input of a change request, for every entry point: ``{"request": "<JSON text>"}``.
    ``request`` is the request's JSON text exactly as the client sent it (an API body, a file's text) or a
    Python value (numbers as ``int``/``Decimal``), written here with exact numbers."""
    text = request if isinstance(request, str) else dumps(request, compact=True)
    return dumps({TEXT_FIELD: text}, compact=True)


def is_text_form(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {TEXT_FIELD} and isinstance(value[TEXT_FIELD], str)


def read_request(value: Any) -> Any:
    """The change request an execution carries: parsed exactly from its JSON text, or a request object
    (numbers already through a double parser) whose numbers are all safe integers.
    Raises ``ValidationError`` for text that is not JSON or an object with an untrustworthy number."""
    if is_text_form(value):
        try:
            return loads(value[TEXT_FIELD])
        except (ValueError, RecursionError) as exc:
            raise ValidationError(TEXT_FIELD, f"is not valid JSON text ({str(exc)[:200]})") from exc
    check_safe_numbers("", value)
    return value


def check_safe_numbers(field: str, value: Any) -> None:
    """Refuse, by name, a number in a request object that a double parser may already have altered."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            check_safe_numbers(f"{field}.{key}" if field else str(key), item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_safe_numbers(f"{field}[{i}]", item)
    elif isinstance(value, (int, float, Decimal)):
        if isinstance(value, int) and abs(value) <= MAX_SAFE_INTEGER:
            return
        raise ValidationError(
            field or TEXT_FIELD,
            f"{number_text(value) if _finite(value) else value} came as a JSON number in a request object, which "
            f"Step Functions, EventBridge and Lambda carry as a double (about 16 digits); send the request as "
            f'its JSON text, {{"{TEXT_FIELD}": "<JSON text>"}}, to keep all 38 digits DynamoDB stores',
        )


def _finite(value: Any) -> bool:
    try:
        number_text(value)
        return True
    except (ValueError, TypeError):
        return False
