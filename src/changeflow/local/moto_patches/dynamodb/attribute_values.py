"""An attribute value holds exactly one data type, where moto 5.2.5 takes one of several and answers. Shown
failing on stock moto by tests/test_parity.py.

"Each attribute value is described as a name-value pair. The name is the data type, and the value is the
data itself" (API reference, AttributeValue,
https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_AttributeValue.html); a value with two
(``{"S": "x", "N": "1"}``) is refused with a ValidationException "Supplied AttributeValue has more than one
datatypes set, must contain exactly one of the supported datatypes" (aws/aws-sdk-net#428, the service's
answer quoted by the SDK's maintainers).
"""

from __future__ import annotations

from typing import Any, Iterator

from .limits import wrap_dynamodb_actions

TYPES = frozenset({"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"})
MORE_THAN_ONE = ("Supplied AttributeValue has more than one datatypes set, must contain exactly one of the "
                 "supported datatypes")


def _attribute_values(body: dict) -> Iterator[Any]:
    """The attribute values a request carries at the places the API says they are."""
    for field in ("Item", "Key", "ExclusiveStartKey", "ExpressionAttributeValues"):
        if isinstance(body.get(field), dict):
            yield from body[field].values()
    for request in (body.get("RequestItems") or {}).values() if isinstance(body.get("RequestItems"), dict) else []:
        if isinstance(request, dict):
            for key in request.get("Keys") or []:
                if isinstance(key, dict):
                    yield from key.values()
        elif isinstance(request, list):
            for write in request:
                for inner in (write or {}).values() if isinstance(write, dict) else []:
                    if isinstance(inner, dict):
                        for field in ("Item", "Key"):
                            if isinstance(inner.get(field), dict):
                                yield from inner[field].values()
    for entry in body.get("TransactItems") or []:
        for inner in entry.values() if isinstance(entry, dict) else []:
            if isinstance(inner, dict):
                yield from _attribute_values(inner)


def _check(value: Any) -> None:
    from moto.dynamodb.exceptions import MockValidationException

    if not isinstance(value, dict):
        return
    kinds = TYPES & set(value)
    if len(kinds) > 1:
        raise MockValidationException(MORE_THAN_ONE)
    if isinstance(value.get("M"), dict):
        for inner in value["M"].values():
            _check(inner)
    if isinstance(value.get("L"), list):
        for inner in value["L"]:
            _check(inner)


def patch_one_type_per_attribute_value() -> None:
    """Refuse a request with an attribute value of more than one type, anywhere the API takes one."""

    def check(handler) -> None:
        body = handler.body
        if isinstance(body, dict):
            for value in _attribute_values(body):
                _check(value)

    wrap_dynamodb_actions(check=check)
