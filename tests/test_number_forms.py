"""Issue 26.6, the codec's part: every number is sent to DynamoDB in one exact form that every reader can
read back: its value, trailing zeros trimmed, never more than 38 digits (``1E+38``, not the 39-digit
``100000000000000000000000000000000000000``).

DynamoDB accepts a number in any notation, keeps up to 38 significant digits ("leading and trailing zeroes
are trimmed"; "Supported data types and naming rules in Amazon DynamoDB", Number,
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html#HowItWorks.DataTypes.Number)
and normalises it. boto3's deserializer reads a number in a 38-digit context that traps ``Rounded``, so a
number written with more than 38 digit characters, exact as it is, cannot be read by it (boto/boto3#2500,
#4693), and moto reads items with it when it projects them (``Item.project`` -> ``to_regular_json``):
before this, ``{"n": 1E+38}`` was stored as 39 digits and every projected read of the table (``verify
--all``, ``digest --all``, ``/console/entities``) failed with ``decimal.Rounded``; a patch of an entity
holding ``1E+100`` wrote it back as 101 digits (the content it read came back as a Python ``int``).
"""

from __future__ import annotations

import decimal
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changeflow_core import codec

T0 = 1_767_225_600_000
BOTO3_PRECISION = decimal.Context(prec=38, Emin=-130, Emax=126,
                                  traps=[decimal.Clamped, decimal.Overflow, decimal.Inexact, decimal.Rounded])


@st.composite
def dynamodb_numbers(draw):
    """A number DynamoDB stores (1-38 significant digits, magnitude 1E-130 .. 9.99..E+125, or 0, either
    sign), written in any notation a client may use: as an int, or a Decimal with trailing zeros and an
    exponent moved around."""
    digits = draw(st.integers(1, 38))
    coefficient = draw(st.integers(10 ** (digits - 1), 10 ** digits - 1))
    adjusted = draw(st.integers(-130, 125))
    value = Decimal(coefficient).scaleb(adjusted - (digits - 1))
    if draw(st.booleans()):
        value = -value
    if draw(st.integers(0, 20)) == 0:
        value = Decimal(0)
    zeros = draw(st.integers(0, 5))
    padded = Decimal((value.as_tuple().sign, value.as_tuple().digits + (0,) * zeros, value.as_tuple().exponent - zeros))
    if value == value.to_integral_value() and abs(value) < 10 ** 60 and draw(st.booleans()):
        return int(value)
    return padded


@settings(max_examples=300, deadline=None)
@given(dynamodb_numbers())
def test_every_number_is_sent_exact_in_at_most_38_digits_and_read_back_by_a_38_digit_reader(number):
    text = codec.number_text(number)
    assert Decimal(text) == Decimal(number)  # exact
    assert BOTO3_PRECISION.create_decimal(text) == Decimal(number)  # no Rounded: boto3's reading of it
    assert codec.number_text(Decimal(text)) == text  # one form: sending it again changes nothing
    value = Decimal(text)
    if value == value.to_integral_value() and len(str(abs(int(value)))) <= 38:
        assert text == str(int(value))  # everyday integers stay written out
    else:
        digits = value.as_tuple().digits
        assert len(digits) <= 38 and digits[-1] != 0  # trimmed: at most 38 digits


@pytest.mark.parametrize("number, stored", [
    (10 ** 38, "1E+38"), (Decimal("1E+38"), "1E+38"), (10 ** 100, "1E+100"), (Decimal("1.50"), "1.5"),
    (123000, "123000"), (10 ** 37, "10000000000000000000000000000000000000"), (Decimal("-0.0"), "0"),
    (Decimal("1E-130"), "1E-130"), (Decimal("9.9999999999999999999999999999999999999E+125"),
                                    "9.9999999999999999999999999999999999999E+125"),
])
def test_the_form_of_the_issues_numbers_and_their_neighbours(number, stored):
    assert codec.serialize_item({"n": number}) == {"n": {"N": stored}}


def projected_scan(cf):
    """A projected read of the whole table, as ``verify --all``, ``digest --all`` and the console make."""
    return cf.dynamodb.scan(TableName=cf.table, ProjectionExpression="pk, sk, version", ConsistentRead=True)["Items"]


def test_a_put_of_1e38_and_a_patch_of_an_entity_holding_1e100_store_numbers_every_reader_reads(cf):
    # GIVEN {"n": 1E+38} put as JSON text (the number exact, as a client sends it)
    first = cf.submit('{"entityId":"big","operation":"put","attributes":{"n":1E+38},"effectiveAt":%d,'
                      '"changeId":"c1"}' % T0)
    assert first.output["outcome"] == "applied"
    # AND an entity holding 1E+100, then patched (the patch re-writes the content it read)
    cf.submit('{"entityId":"huge","operation":"put","attributes":{"n":1E+100},"effectiveAt":%d,'
              '"changeId":"c1"}' % T0)
    patched = cf.submit({"entityId": "huge", "operation": "patch", "set": {"m": 1}, "effectiveAt": T0 + 1,
                         "changeId": "c2"})
    assert patched.output["outcome"] == "applied"
    # THEN each is stored in its short exact form, in v0 and in history
    stored = {(i["pk"]["S"], i["sk"]["S"]): i["n"]["N"] for t in {cf.table, cf.history_table}
              for i in cf.dynamodb.scan(TableName=t)["Items"]}
    assert stored == {("big", "v0"): "1E+38", ("big", "v#0000000001"): "1E+38",
                      ("huge", "v0"): "1E+100", ("huge", "v#0000000001"): "1E+100", ("huge", "v#0000000002"): "1E+100"}
    # AND a projected read of the table (moto reads it with boto3's 38-digit deserializer) works
    assert len(projected_scan(cf)) == 5
    assert cf.entity("huge")["latest"]["attributes"] == {"n": 10 ** 100, "m": 1}
