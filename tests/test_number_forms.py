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
from hypothesis import HealthCheck, given, settings
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


def test_a_put_of_1e38_and_a_patch_of_an_entity_holding_1e100_are_read_back_by_every_audit(cf):
    # GIVEN {"n": 1E+38} put as JSON text (the number exact, as a client sends it)
    from changeflow.audit import digests
    from changeflow.audit.verify import entities, verify

    first = cf.submit('{"entityId":"big","operation":"put","attributes":{"n":1E+38},"effectiveAt":%d,'
                      '"changeId":"c1"}' % T0)
    assert first.output["outcome"] == "applied"
    # AND an entity holding 1E+100, then patched (the patch re-writes the content it read)
    cf.submit('{"entityId":"huge","operation":"put","attributes":{"n":1E+100},"effectiveAt":%d,'
              '"changeId":"c1"}' % T0)
    patched = cf.submit({"entityId": "huge", "operation": "patch", "set": {"m": 1}, "effectiveAt": T0 + 1,
                         "changeId": "c2"})
    assert patched.output["outcome"] == "applied"
    # THEN DynamoDB holds them as it returns them, written out (1 and 38 zeros: more than boto3's 38 digits)
    stored = {(i["pk"]["S"], i["sk"]["S"]): i["n"]["N"] for t in {cf.table, cf.history_table}
              for i in cf.dynamodb.scan(TableName=t)["Items"]}
    assert stored[("big", "v0")] == "1" + "0" * 38 and stored[("huge", "v#0000000002")] == "1" + "0" * 100
    # AND every read of them works: a projected scan (verify --all, digest --all, the console's list),
    # verify, the chain, a digest, and the values are exact
    assert len(projected_scan(cf)) == 5 and entities(cf) == ["big", "huge"]
    assert verify(cf, "big").problems == [] and verify(cf, "huge").problems == []
    assert digests.verify_chain(cf, "huge") == []
    assert [h["version"] for h in digests.digest(cf, entities(cf))["entities"]] == [1, 2]
    assert cf.entity("huge")["latest"]["attributes"] == {"n": 10 ** 100, "m": 1}
    assert cf.entity("big")["versions"][0]["attributes"] == {"n": 10 ** 38}


# --- every number DynamoDB stores, through put, patch, rollback, read, verify and digest ------------------
def as_json_text(number) -> str:
    return format(Decimal(number), "E") if isinstance(number, Decimal) else str(number)


EXAMPLES = iter(range(10 ** 6))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(dynamodb_numbers(), min_size=1, max_size=4), dynamodb_numbers())
def test_any_number_goes_through_put_patch_rollback_read_verify_and_digest_exactly(cf, numbers, other):
    from changeflow.audit import digests
    from changeflow.audit.verify import entities, verify

    entity = f"num#{next(EXAMPLES)}"  # one stack for the examples (hypothesis reuses the fixture)
    fields = ",".join(f'"n{i}":{as_json_text(n)}' for i, n in enumerate(numbers))
    # version 1: a put of the numbers, as JSON text (every digit); 2: a patch setting one more, removing n0;
    # 3: a rollback to 1
    put = cf.submit('{"entityId":"%s","operation":"put","attributes":{%s},"effectiveAt":%d,"changeId":"c1"}'
                    % (entity, fields, T0))
    patch = cf.submit('{"entityId":"%s","operation":"patch","set":{"other":%s},"remove":["n0"],"effectiveAt":%d,'
                      '"changeId":"c2"}' % (entity, as_json_text(other), T0 + 1))
    rollback = cf.submit({"entityId": entity, "operation": "rollback", "toVersion": 1, "effectiveAt": T0 + 2,
                          "changeId": "c3"})
    assert [e.output["outcome"] for e in (put, patch, rollback)] == ["applied"] * 3, (put.cause, patch.cause)
    first = {f"n{i}": Decimal(n) for i, n in enumerate(numbers)}
    second = {**{k: v for k, v in first.items() if k != "n0"}, "other": Decimal(other)}
    versions = [{k: Decimal(v) for k, v in version["attributes"].items()} for version in cf.entity(entity)["versions"]]
    assert versions == [first, second, first]
    assert verify(cf, entity).problems == [] and digests.verify_chain(cf, entity) == []
    assert entity in entities(cf)  # the projected scan every --all audit makes
    assert digests.digest(cf, [entity])["entities"][0]["version"] == 3


def test_the_console_lists_and_shows_an_entity_holding_1e38(server):
    # /console/entities answered 500 for the whole stack once one entity held 1E+38
    import json

    from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
    from conftest import http_exchange

    body = '{"entityId":"big","operation":"put","attributes":{"n":1E+38},"effectiveAt":%d,"changeId":"c1"}' % T0
    status, _, raw = http_exchange("POST", f"{server.url}/v1/changes", body)
    assert status == 200 and wait_for_termination(json.loads(raw)["executionArn"], 60)
    status, _, page = http_exchange("GET", f"{server.url}/console/entities?q=big")
    assert status == 200 and b"big" in page
    status, _, page = http_exchange("GET", f"{server.url}/console/entity?id=big")
    assert status == 200 and b"1" + b"0" * 38 in page
