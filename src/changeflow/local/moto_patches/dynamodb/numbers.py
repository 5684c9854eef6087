"""DynamoDB's numbers as DynamoDB stores and returns them, where moto 5.2.5 keeps the text it was sent and
then cannot always read it back. Each function is one behaviour, shown failing on stock moto by
tests/test_parity.py.

A Number has up to 38 significant digits, leading and trailing zeros trimmed
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html#HowItWorks.DataTypes.Number).
DynamoDB normalises the number it stores and returns it written out, whatever notation it was sent in:
``1E+100`` comes back as a 1 and 100 zeros (boto/boto3#2500, measured against DynamoDB by a ScyllaDB
Alternator developer), ``1.00000000000000007629769841092E+50`` as 51 digits (boto/boto3#4636), ``1e-7`` as
``0.0000001`` (aws/aws-sdk-js-v3#1983), and ``00042`` as ``42``, ``1.0`` as ``1``, ``-0`` as ``0``,
``1.5E2`` as ``150`` (ExtendDB/extenddb#7, a table "verified against real DynamoDB").
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ..originals import ORIGINALS
from .limits import wrap_dynamodb_actions


def written_out(text: str) -> str:
    """A number as DynamoDB returns it: its exact value written out in plain digits (never an exponent),
    with no leading zero before the point but one, no trailing zero after it, and no sign on zero."""
    number = Decimal(text)
    if number.is_zero():
        return "0"
    sign, digits, exponent = number.as_tuple()
    digits = list(digits)
    while digits and digits[-1] == 0:
        digits.pop()
        exponent += 1
    body = "".join(map(str, digits))
    if exponent >= 0:
        body = body + "0" * exponent
    else:
        body = body.rjust(-exponent + 1, "0")
        body = f"{body[:exponent]}.{body[exponent:]}"
    return ("-" if sign else "") + body


def patch_number_normalisation() -> None:
    """DynamoDB stores a number normalised and returns it written out (the sources above). Stock moto keeps
    the text it was sent (``1E+38``, ``1.50``, ``-0``), so a client reads back a form AWS never returns
    (and a reader that cannot read AWS's form, such as boto3's, passes here and fails on AWS), and moto's
    own arithmetic (``SET n = n + :one``) fails on an exponent (``int('1E+38')``). Every number in a request
    (items, keys, expression values; ``NS`` members too) is rewritten to DynamoDB's form before moto takes
    it, after the range and precision checks (``limits.patch_dynamodb_number_limits``) have passed it."""

    def visit(node: dict) -> None:
        if isinstance(node.get("N"), str):
            node["N"] = written_out(node["N"])
        if isinstance(node.get("NS"), list) and all(isinstance(text, str) for text in node["NS"]):
            node["NS"] = [written_out(text) for text in node["NS"]]

    wrap_dynamodb_actions(visit=visit)


def patch_numbers_read_exactly() -> None:
    """DynamoDB reads back every number it accepted. moto projects an item (``ProjectionExpression``) through
    boto3's TypeDeserializer and TypeSerializer, which work in a 38-digit context that traps ``Rounded``
    (boto3/dynamodb/types.py ``DYNAMODB_CONTEXT``): a number DynamoDB stores and returns written out with more
    than 38 digits (``1E+38``: 39) fails there with ``decimal.Rounded`` (boto/boto3#2500, #4693), and every
    projected read of the table with it (a Scan of keys, ``verify --all``, the console) answers 500. moto
    reads them exactly instead: the value as a Decimal, written back out in DynamoDB's form."""
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
    from moto.dynamodb.models import dynamo_type

    class ExactDeserializer(TypeDeserializer):
        def _deserialize_n(self, value: str) -> Decimal:
            return Decimal(value)

    class ExactSerializer(TypeSerializer):
        def _serialize_n(self, value: Any) -> str:
            if not isinstance(value, (int, Decimal)) or isinstance(value, bool):
                return super()._serialize_n(value)  # boto3's own refusal of floats and the rest
            return written_out(str(value))

    ORIGINALS.setdefault("dynamodb_deserializer", dynamo_type.deserializer)
    ORIGINALS.setdefault("dynamodb_serializer", dynamo_type.serializer)
    dynamo_type.deserializer = ExactDeserializer()
    dynamo_type.serializer = ExactSerializer()
