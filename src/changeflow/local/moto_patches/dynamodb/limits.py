"""DynamoDB's limits, where moto 5.2.5 is more lenient than AWS: a Number's range and precision, 4 KB
expressions, and key sizes in every request that names an item by its key. Each check runs before the
action, inside moto's error handling (a ValidationException is the HTTP 400 the client sees, and nothing is
written), and each is shown failing on stock moto by tests/test_parity.py. Each function names its AWS page.
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html"""

from __future__ import annotations

import re
from typing import Any, Callable

from ..originals import ORIGINALS


def _walk(value: Any, visit: Callable[[dict], None]) -> None:
    if isinstance(value, dict):
        visit(value)
        for child in value.values():
            _walk(child, visit)
    elif isinstance(value, list):
        for child in value:
            _walk(child, visit)


_DYNAMODB_CHECKS: list[Callable[[Any], None]] = []


_DYNAMODB_VISITS: list[Callable[[dict], None]] = []


def wrap_dynamodb_actions(check: Callable[[Any], None] | None = None, visit: Callable[[dict], None] | None = None) -> None:
    """Run ``check(handler)``, and ``visit(node)`` on every object of the request, before each DynamoDB
    data action, inside moto's error handling (a raised ValidationException becomes the HTTP 400 the
    client sees, and nothing is written). One wrapper and one walk of the request for every check: they run
    under the request lock."""
    from moto.dynamodb import responses

    if check is not None:
        _DYNAMODB_CHECKS.append(check)
    if visit is not None:
        _DYNAMODB_VISITS.append(visit)
    if "dynamodb_actions" in ORIGINALS:
        return
    handler = responses.DynamoHandler
    ORIGINALS["dynamodb_actions"] = True

    def visit_all(node: dict) -> None:
        for each in _DYNAMODB_VISITS:
            each(node)

    for action in ("put_item", "update_item", "delete_item", "get_item", "query", "scan", "batch_write_item",
                   "batch_get_item", "transact_write_items", "transact_get_items"):
        original = ORIGINALS.setdefault(f"dynamodb_{action}", getattr(handler, action))

        def checked(self, _original=original):
            _walk(self.body, visit_all)
            for each in _DYNAMODB_CHECKS:
                each(self)
            return _original(self)

        setattr(handler, action, checked)


def patch_dynamodb_number_limits() -> None:
    """A Number has at most 38 significant digits, and a magnitude from 1E-130 to
    9.9999999999999999999999999999999999999E+125; leading and trailing zeros do not count.
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html#HowItWorks.DataTypes.Number
    Stock moto checks the range through a float (so 1E+126 passes) and never the precision, and not at
    all in UpdateItem's values."""
    import decimal

    from moto.dynamodb.exceptions import MockValidationException

    def check_number(text: str) -> None:
        try:
            number = decimal.Decimal(text.strip() if text == text.strip() else "x")
        except decimal.InvalidOperation:
            raise MockValidationException(f"The parameter cannot be converted to a numeric value: {text}") from None
        if not number.is_finite():
            raise MockValidationException(f"The parameter cannot be converted to a numeric value: {text}")
        if number.is_zero():
            return
        digits = "".join(map(str, number.as_tuple().digits)).strip("0")
        if len(digits) > 38:
            raise MockValidationException("Attempting to store more than 38 significant digits in a Number")
        if number.adjusted() > 125:
            raise MockValidationException(
                "Number overflow. Attempting to store a number with magnitude larger than supported range")
        if number.adjusted() < -130:
            raise MockValidationException(
                "Number underflow. Attempting to store a number with magnitude smaller than supported range")

    def visit(node: dict) -> None:
        if "N" in node and isinstance(node["N"], str):
            check_number(node["N"])
        if "NS" in node and isinstance(node["NS"], list):
            for text in node["NS"]:
                if isinstance(text, str):
                    check_number(text)

    wrap_dynamodb_actions(visit=visit)


def patch_dynamodb_expression_size() -> None:
    """Each expression string (condition, update, key condition, filter, projection) is at most 4 KB.
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-expression-parameters
    Stock moto accepts any length."""
    from moto.dynamodb.exceptions import MockValidationException

    kinds = ("ConditionExpression", "UpdateExpression", "KeyConditionExpression", "FilterExpression",
             "ProjectionExpression")

    def visit(node: dict) -> None:
        for kind in kinds:
            if kind in node and isinstance(node[kind], str) and len(node[kind]) > 1024:  # 4 bytes a character at most
                size = len(node[kind].encode("utf-8"))
                if size > 4096:
                    raise MockValidationException(
                        f"Invalid {kind}: Expression size has exceeded the maximum allowed size; expression size: {size}")

    wrap_dynamodb_actions(visit=visit)


def patch_dynamodb_key_size_on_reads() -> None:
    """The partition key is at most 2,048 bytes and the sort key 1,024 bytes, in every request that names
    an item by its key, not only in the writes that store one: a Key, a batch's or a transaction's Keys, a
    Query's or a Scan's ExclusiveStartKey, and the partition key value a Query's key condition names.
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys
    Stock moto checks them when an item is stored, so a GetItem/DeleteItem with an oversized key answers
    "not found", and a Query of an oversized partition key or from an oversized ExclusiveStartKey answers an
    empty page, where AWS refuses the request ("Size of hashkey has exceeded the maximum size limit of2048
    bytes" on Query: facebook/ThreatExchange#1324)."""
    from moto.dynamodb.exceptions import HashKeyTooLong, RangeKeyTooLong
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import HASH_KEY_MAX_LENGTH, RANGE_KEY_MAX_LENGTH

    def check_key(handler, table_name: Any, key: Any) -> None:
        if not isinstance(key, dict) or not isinstance(table_name, str):
            return
        try:
            table = handler.dynamodb_backend.get_table(table_name)
        except Exception:  # noqa: BLE001 - an unknown table is the action's own error to report
            return
        hash_value = key.get(table.hash_key_attr)
        if isinstance(hash_value, dict) and DynamoType(hash_value).size() > HASH_KEY_MAX_LENGTH:
            raise HashKeyTooLong
        range_value = key.get(table.range_key_attr) if table.range_key_attr else None
        if isinstance(range_value, dict) and DynamoType(range_value).size() > RANGE_KEY_MAX_LENGTH:
            raise RangeKeyTooLong

    def check_key_condition(handler, table_name: Any, condition: Any, names: Any, values: Any) -> None:
        if not (isinstance(condition, str) and isinstance(values, dict) and isinstance(table_name, str)):
            return
        try:
            table = handler.dynamodb_backend.get_table(table_name)
        except Exception:  # noqa: BLE001 - an unknown table is the action's own error to report
            return
        names = names if isinstance(names, dict) else {}
        for left, right in re.findall(r"([#:]?[\w.]+)\s*=\s*([#:]?[\w.]+)", condition):
            name, placeholder = (left, right) if right.startswith(":") else (right, left)
            if names.get(name, name) == table.hash_key_attr and isinstance(values.get(placeholder), dict) \
                    and DynamoType(values[placeholder]).size() > HASH_KEY_MAX_LENGTH:
                raise HashKeyTooLong

    def check(handler) -> None:
        body = handler.body
        check_key(handler, body.get("TableName"), body.get("Key"))
        check_key(handler, body.get("TableName"), body.get("ExclusiveStartKey"))
        check_key_condition(handler, body.get("TableName"), body.get("KeyConditionExpression"),
                            body.get("ExpressionAttributeNames"), body.get("ExpressionAttributeValues"))
        for entry in body.get("TransactItems", []) or []:
            for request in entry.values() if isinstance(entry, dict) else []:
                if isinstance(request, dict):
                    check_key(handler, request.get("TableName"), request.get("Key"))
        for table_name, request in (body.get("RequestItems") or {}).items():
            for key in request.get("Keys", []) if isinstance(request, dict) else []:
                check_key(handler, table_name, key)

    wrap_dynamodb_actions(check=check)
