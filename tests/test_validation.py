"""What the workflow accepts, as a specification of ``changeflow_core.validation`` and of the DynamoDB
rules ``changeflow_core.codec`` enforces and measures. Pure unit tests: no AWS, no embedded stack.

Every rejection is a ``ValidationError`` whose ``.field`` names the offending field and whose message
starts with ``"<field>: "`` (the workflow's Catch and the callers read both).
"""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from changeflow_core import codec, model, validation
from changeflow_core.errors import ValidationError
from changeflow_core.validation import Change, validate_request
from conftest import listed, wrapped

EXECUTION = {"name": "exec-1", "startTime": "2026-01-01T00:00:00.000Z"}
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00.000Z in epoch milliseconds
T0 = 1_767_225_600_000


def put(**overrides):
    return {"entityId": "doc#1", "operation": "put", "attributes": {"color": "red"}, **overrides}


def delete(**overrides):
    return {"entityId": "doc#1", "operation": "delete", **overrides}


def rollback(**overrides):
    return {"entityId": "doc#1", "operation": "rollback", "toVersion": 1, **overrides}


def rejection(request, execution=EXECUTION) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        validate_request(request, execution)
    return caught.value


def assert_names(error: ValidationError, field: str) -> None:
    assert error.field == field
    assert str(error).startswith(f"{field}: ")




# =====================================================================================================
# Defaults
# =====================================================================================================


def test_effective_at_defaults_to_the_execution_start_time_in_epoch_ms():
    # GIVEN a request without effectiveAt, WHEN validated, THEN effectiveAt is $$.Execution.StartTime in ms
    assert validate_request(put(), EXECUTION).effectiveAt == START_MS


def test_effective_at_default_keeps_the_milliseconds_of_the_start_time():
    execution = {"name": "exec-1", "startTime": "2026-01-01T00:00:00.123Z"}
    assert validate_request(put(), execution).effectiveAt == START_MS + 123


def test_effective_at_default_accepts_a_start_time_without_fraction():
    execution = {"name": "exec-1", "startTime": "2026-01-01T00:00:01Z"}
    assert validate_request(put(), execution).effectiveAt == START_MS + 1000


def test_effective_at_default_is_exact_for_start_times_after_2038():
    # 2038-01-19T03:14:08.002Z is 2**31 s + 2 ms
    execution = {"name": "exec-1", "startTime": "2038-01-19T03:14:08.002Z"}
    assert validate_request(put(), execution).effectiveAt == 2**31 * 1000 + 2


def test_change_id_defaults_to_the_execution_name():
    assert validate_request(put(), EXECUTION).changeId == "exec-1"


def test_explicit_nulls_for_optional_fields_mean_absent():
    change = validate_request(
        put(effectiveAt=None, changeId=None, expectedVersion=None, actor=None, reason=None), EXECUTION
    )
    assert change == Change("doc#1", "put", START_MS, "exec-1")


def test_given_values_win_over_the_defaults():
    change = validate_request(put(effectiveAt=T0 + 5, changeId="c-1"), EXECUTION)
    assert (change.effectiveAt, change.changeId) == (T0 + 5, "c-1")


# =====================================================================================================
# Accepted shapes
# =====================================================================================================


def test_minimal_put_is_accepted_with_its_defaults():
    assert validate_request(put(), EXECUTION) == Change(
        entityId="doc#1", operation="put", effectiveAt=START_MS, changeId="exec-1",
        expectedVersion=None, toVersion=None, actor=None, reason=None,
    )


def test_put_with_every_optional_field_is_accepted():
    request = put(effectiveAt=T0, changeId="c-1", expectedVersion=3, actor="alice", reason="because")
    assert validate_request(request, EXECUTION) == Change(
        entityId="doc#1", operation="put", effectiveAt=T0, changeId="c-1",
        expectedVersion=3, toVersion=None, actor="alice", reason="because",
    )


def test_put_with_empty_attributes_is_accepted():
    assert validate_request(put(attributes={}), EXECUTION).operation == "put"


def test_put_with_every_json_type_nested_is_accepted():
    attributes = {
        "s": "ü", "empty": "", "n": 1, "f": 2.5, "neg": -7, "t": True, "f0": False, "none": None,
        "list": [1, "two", None, [3.5]], "map": {"version": 1, "pk": "nested reserved names are fine"},
    }
    assert validate_request(put(attributes=attributes), EXECUTION).entityId == "doc#1"


def test_delete_without_attributes_is_accepted():
    assert validate_request(delete(effectiveAt=T0), EXECUTION) == Change("doc#1", "delete", T0, "exec-1")


def test_rollback_with_to_version_is_accepted():
    change = validate_request(rollback(toVersion=4, effectiveAt=T0, expectedVersion=5), EXECUTION)
    assert (change.operation, change.toVersion, change.expectedVersion) == ("rollback", 4, 5)


@pytest.mark.parametrize(
    "request_, expected",
    [
        pytest.param(put(effectiveAt=0), ("effectiveAt", 0), id="effectiveAt-0"),
        pytest.param(put(effectiveAt=2**53 - 1), ("effectiveAt", 2**53 - 1), id="effectiveAt-2^53-1"),
        pytest.param(put(effectiveAt=1.767e12), ("effectiveAt", 1_767_000_000_000), id="effectiveAt-integral-float"),
        pytest.param(put(expectedVersion=0), ("expectedVersion", 0), id="expectedVersion-0"),
        pytest.param(put(expectedVersion=model.MAX_VERSION), ("expectedVersion", model.MAX_VERSION),
                     id="expectedVersion-max"),
        pytest.param(rollback(toVersion=1), ("toVersion", 1), id="toVersion-1"),
        pytest.param(rollback(toVersion=model.MAX_VERSION), ("toVersion", model.MAX_VERSION), id="toVersion-max"),
        pytest.param(rollback(toVersion=2.0), ("toVersion", 2), id="toVersion-integral-float"),
    ],
)
def test_integers_at_the_edges_of_their_range_are_accepted(request_, expected):
    field, value = expected
    result = getattr(validate_request(request_, EXECUTION), field)
    assert result == value and type(result) is int


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(put(entityId="e" * 1024), id="entityId-1024-ascii"),
        pytest.param(put(entityId="é" * 512), id="entityId-1024-bytes-of-2-byte-chars"),
        pytest.param(put(entityId="客户🙂#1"), id="entityId-non-ascii"),
        pytest.param(put(changeId="c" * 128), id="changeId-128-chars"),
        pytest.param(put(actor="a" * 256), id="actor-256-chars"),
        pytest.param(put(reason="r" * 1024), id="reason-1024-chars"),
        pytest.param(put(actor="", reason=""), id="actor-and-reason-empty"),
        pytest.param(put(reason="line one\u2028line two"), id="reason-with-a-line-separator"),
    ],
)
def test_text_at_its_limits_is_accepted(request_):
    change = validate_request(request_, EXECUTION).to_json()
    given = {k: v for k, v in request_.items() if k != "attributes"}
    assert {k: change[k] for k in given} == given


def test_a_change_survives_a_json_round_trip():
    change = validate_request(put(effectiveAt=T0, changeId="c", actor="a"), EXECUTION)
    assert Change.from_json(change.to_json()) == change


# =====================================================================================================
# Rejections: each names its field
# =====================================================================================================




@pytest.mark.parametrize(
    "request_",
    [
        pytest.param([], id="empty-list"),
        pytest.param([put()], id="list-of-a-valid-request"),
        pytest.param("put doc#1", id="string"),
        pytest.param(42, id="number"),
        pytest.param(None, id="null"),
        pytest.param(True, id="bool"),
    ],
)
def test_a_request_that_is_not_an_object_is_rejected_as_request(request_):
    assert_names(rejection(request_), "request")


def test_a_request_over_the_step_functions_payload_limit_is_rejected_as_request():
    big = put(attributes={"blob": "x" * validation.MAX_REQUEST_BYTES})
    assert_names(rejection(big), "request")


@pytest.mark.parametrize(
    "request_, field",
    [
        pytest.param(put(attribute={"typo": 1}), "attribute", id="typo-of-attributes"),
        pytest.param(put(version=3), "version", id="version"),
        pytest.param(put(zeta=1, alpha=2), "alpha", id="two-unknown-the-first-in-order"),
    ],
)
def test_an_unknown_top_level_field_is_rejected_by_its_name(request_, field):
    assert_names(rejection(request_), field)


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param({"operation": "put", "attributes": {}}, id="missing"),
        pytest.param(put(entityId=None), id="null"),
        pytest.param(put(entityId=""), id="empty"),
        pytest.param(put(entityId="e" * 1025), id="1025-chars"),
        pytest.param(put(entityId="é" * 513), id="1026-bytes-in-513-chars"),
        pytest.param(put(entityId="doc\x00#1"), id="nul"),
        pytest.param(put(entityId="doc\n1"), id="newline"),
        pytest.param(put(entityId="\x1b[31mred"), id="escape"),
        pytest.param(put(entityId="doc\x7f"), id="del"),
        pytest.param(put(entityId="doc\x85"), id="c1-next-line"),
        pytest.param(put(entityId=7), id="number"),
        pytest.param(put(entityId=True), id="bool"),
        pytest.param(put(entityId=["doc#1"]), id="list"),
        pytest.param(put(entityId={"id": "doc#1"}), id="object"),
        pytest.param(put(entityId="doc\ud800"), id="lone-surrogate"),
    ],
)
def test_bad_entity_id_is_rejected(request_):
    assert_names(rejection(request_), "entityId")


@pytest.mark.parametrize(
    "operation",
    [
        pytest.param("upsert", id="unknown"),
        pytest.param("PUT", id="wrong-case"),
        pytest.param("", id="empty"),
        pytest.param(None, id="null"),
        pytest.param(1, id="number"),
        pytest.param(["put"], id="list"),
        pytest.param({"put": True}, id="object"),
    ],
)
def test_bad_operation_is_rejected(operation):
    assert_names(rejection(put(operation=operation)), "operation")


def test_missing_operation_is_rejected():
    assert_names(rejection({"entityId": "doc#1"}), "operation")


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param({"entityId": "doc#1", "operation": "put"}, id="missing-on-put"),
        pytest.param(put(attributes=None), id="null"),
        pytest.param(put(attributes=[1]), id="list"),
        pytest.param(put(attributes="color=red"), id="string"),
        pytest.param(put(attributes=3), id="number"),
        pytest.param(put(attributes={"": 1}), id="empty-name"),
        pytest.param(delete(attributes={"color": "red"}), id="on-delete"),
        pytest.param(delete(attributes={}), id="empty-on-delete"),
        pytest.param(rollback(attributes={"color": "red"}), id="on-rollback"),
    ],
)
def test_bad_attributes_are_rejected_as_attributes(request_):
    assert_names(rejection(request_), "attributes")


@pytest.mark.parametrize("name", sorted(model.RESERVED))
def test_every_reserved_name_is_refused_as_an_attribute(name):
    assert_names(rejection(put(attributes={"color": "red", name: 1})), f"attributes.{name}")


@pytest.mark.parametrize(
    "attributes, field",
    [
        pytest.param({"x": math.nan}, "attributes.x", id="nan"),
        pytest.param({"x": math.inf}, "attributes.x", id="infinity"),
        pytest.param({"x": -math.inf}, "attributes.x", id="minus-infinity"),
        pytest.param({"m": {"l": [1, math.nan]}}, "attributes.m.l[1]", id="nan-nested"),
        pytest.param({"x": 1e126}, "attributes.x", id="1e126"),
        pytest.param({"x": -1e126}, "attributes.x", id="minus-1e126"),
        pytest.param({"x": 1e-131}, "attributes.x", id="1e-131"),
        pytest.param({"x": 10**126}, "attributes.x", id="integer-10^126"),
        pytest.param({"x": 10**38 + 1}, "attributes.x", id="39-significant-digits"),
        pytest.param({"m": {"": 1}}, "attributes.m", id="empty-map-key"),
        pytest.param({"deep": wrapped(33)}, "attributes.deep" + ".n" * 32, id="33-nested-maps"),
        pytest.param({"deep": listed(33)}, "attributes.deep" + "[0]" * 32, id="33-nested-lists"),
    ],
)
def test_attribute_values_dynamodb_cannot_store_are_rejected_by_their_path(attributes, field):
    assert_names(rejection(put(attributes=attributes)), field)


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param({"entityId": "doc#1", "operation": "rollback"}, id="missing"),
        pytest.param(rollback(toVersion=None), id="null"),
        pytest.param(rollback(toVersion=0), id="zero"),
        pytest.param(rollback(toVersion=-1), id="negative"),
        pytest.param(rollback(toVersion=1.5), id="fraction"),
        pytest.param(rollback(toVersion="1"), id="string"),
        pytest.param(rollback(toVersion=True), id="bool"),
        pytest.param(rollback(toVersion=math.nan), id="nan"),
        pytest.param(rollback(toVersion=math.inf), id="infinity"),
        pytest.param(rollback(toVersion=model.MAX_VERSION + 1), id="over-max"),
        pytest.param(put(toVersion=1), id="on-put"),
        pytest.param(delete(toVersion=1), id="on-delete"),
    ],
)
def test_bad_to_version_is_rejected(request_):
    assert_names(rejection(request_), "toVersion")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(-1, id="negative"),
        pytest.param("1", id="string"),
        pytest.param(True, id="bool"),
        pytest.param(1.5, id="fraction"),
        pytest.param(math.nan, id="nan"),
        pytest.param(model.MAX_VERSION + 1, id="over-max"),
        pytest.param([1], id="list"),
    ],
)
def test_bad_expected_version_is_rejected(value):
    assert_names(rejection(put(expectedVersion=value)), "expectedVersion")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(-1, id="negative"),
        pytest.param("2026-01-01T00:00:00Z", id="string"),
        pytest.param(1.5, id="fraction"),
        pytest.param(2**53, id="2^53"),
        pytest.param(1e300, id="1e300"),
        pytest.param(False, id="bool"),
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="infinity"),
    ],
)
def test_bad_effective_at_is_rejected(value):
    assert_names(rejection(put(effectiveAt=value)), "effectiveAt")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("c\n1", id="newline"),
        pytest.param("c\x00", id="nul"),
        pytest.param("c" * 129, id="129-chars"),
        pytest.param(42, id="number"),
        pytest.param(["c"], id="list"),
        pytest.param(False, id="bool"),
    ],
)
def test_bad_change_id_is_rejected(value):
    assert_names(rejection(put(changeId=value)), "changeId")


@pytest.mark.parametrize(
    "field, value",
    [
        pytest.param("actor", 42, id="actor-number"),
        pytest.param("actor", ["alice"], id="actor-list"),
        pytest.param("actor", "al\x07ice", id="actor-bell"),
        pytest.param("actor", "a" * 257, id="actor-257-chars"),
        pytest.param("reason", {"why": "x"}, id="reason-object"),
        pytest.param("reason", True, id="reason-bool"),
        pytest.param("reason", "r" * 1025, id="reason-1025-chars"),
    ],
)
def test_bad_actor_or_reason_is_rejected(field, value):
    assert_names(rejection(put(**{field: value})), field)


# =====================================================================================================
# codec: DynamoDB's 32 levels of nesting (the attribute itself is level 1)
# =====================================================================================================



def test_31_nested_maps_are_within_dynamodbs_32_levels():
    # attribute (level 1) + 31 maps: the leaf is at level 32, the deepest DynamoDB stores
    assert codec.to_dynamo_value("attributes.deep", wrapped(31)) == wrapped(31, leaf=Decimal(1))


def test_31_nested_lists_are_within_dynamodbs_32_levels():
    assert codec.to_dynamo_value("attributes.deep", listed(31)) == listed(31, leaf=Decimal(1))


def test_32_nested_maps_exceed_dynamodbs_32_levels():
    with pytest.raises(ValidationError):
        codec.to_dynamo_value("attributes.deep", wrapped(32))


def test_a_put_nested_32_maps_deep_is_rejected():
    assert rejection(put(attributes={"deep": wrapped(32)})).field.startswith("attributes.deep")


def test_33_nested_maps_are_rejected_with_the_path_of_the_offending_map():
    with pytest.raises(ValidationError) as caught:
        codec.to_dynamo_value("attributes.deep", wrapped(33))
    assert_names(caught.value, "attributes.deep" + ".n" * 32)




def test_an_attribute_name_just_under_64_kib_is_accepted():
    assert validate_request(put(attributes={"a" * 65_535: 1}), EXECUTION).operation == "put"


def test_an_attribute_name_of_64_kib_is_rejected():
    assert rejection(put(attributes={"a" * 65_536: 1})).field.startswith("attributes")


# =====================================================================================================
# codec.check_number: DynamoDB's number range and precision
# =====================================================================================================


ACCEPTED_NUMBERS = [
    pytest.param(Decimal("1E-130"), id="smallest-positive-1E-130"),
    pytest.param(Decimal("-1E-130"), id="smallest-negative-magnitude"),
    pytest.param(Decimal("9.9999999999999999999999999999999999999E+125"), id="largest-38-nines-E125"),
    pytest.param(Decimal("-9.9999999999999999999999999999999999999E+125"), id="most-negative"),
    pytest.param(Decimal("1.234567890123456789012345678901234567"), id="37-digits"),
    pytest.param(Decimal("12345678901234567890123456789012345678"), id="38-digits"),
    pytest.param(10**38 - 1, id="38-nines-int"),
    pytest.param(10**38, id="10^38-one-significant-digit"),
    pytest.param(Decimal("1.000000000000000000000000000000000000000000"), id="trailing-zeros-trimmed"),
    pytest.param(Decimal("0.00000000000000000000000000000000000000000012"), id="leading-zeros-trimmed"),
    pytest.param("1E-130", id="string-1E-130"),
]


@pytest.mark.parametrize("value", ACCEPTED_NUMBERS)
def test_numbers_dynamodb_can_store_are_accepted_exactly(value):
    assert codec.check_number("n", value) == Decimal(value)


@pytest.mark.parametrize("value", ACCEPTED_NUMBERS)
def test_an_accepted_number_is_one_boto3_can_send_to_dynamodb(value):
    # GIVEN a number check_number accepts, WHEN the item holding it is serialized for DynamoDB,
    # THEN boto3 (38-digit context, trapping Inexact and Rounded) sends the same number
    wire = codec.serialize_item({"n": codec.check_number("n", value)})
    assert Decimal(wire["n"]["N"]) == Decimal(value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(Decimal("1E-131"), id="1E-131"),
        pytest.param(Decimal("9.9E-131"), id="9.9E-131"),
        pytest.param(Decimal("-1E-131"), id="minus-1E-131"),
        pytest.param(Decimal("1E+126"), id="1E+126"),
        pytest.param(Decimal("-1E+126"), id="minus-1E+126"),
        pytest.param(10**126, id="int-10^126"),
        pytest.param(1e-131, id="float-1e-131"),
        pytest.param(1e126, id="float-1e126"),
        pytest.param(5e-324, id="float-subnormal"),
        pytest.param(math.nan, id="float-nan"),
        pytest.param(math.inf, id="float-infinity"),
        pytest.param(-math.inf, id="float-minus-infinity"),
        pytest.param(Decimal("NaN"), id="decimal-nan"),
        pytest.param(Decimal("sNaN"), id="decimal-signalling-nan"),
        pytest.param(Decimal("Infinity"), id="decimal-infinity"),
        pytest.param("NaN", id="string-nan"),
        pytest.param("twelve", id="not-a-number"),
    ],
)
def test_numbers_dynamodb_cannot_store_are_rejected_naming_the_field(value):
    with pytest.raises(ValidationError) as caught:
        codec.check_number("attributes.n", value)
    assert_names(caught.value, "attributes.n")


@pytest.mark.parametrize("digits", [28, 29, 37, 38])
def test_up_to_38_significant_digits_are_accepted_unrounded(digits):
    value = Decimal("1" * digits)
    stored = codec.check_number("n", value)
    assert stored == value and len(stored.as_tuple().digits) == digits


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(Decimal("1" * 39), id="39-ones"),
        pytest.param(Decimal("123456789012345678901234567890123456789"), id="39-digits"),
        pytest.param(10**38 + 1, id="39-digits-int"),
        pytest.param(-(10**38 + 1), id="39-digits-negative-int"),
        pytest.param(Decimal("1.00000000000000000000000000000000000001"), id="39-digits-fraction"),
        pytest.param(Decimal("9.99999999999999999999999999999999999999E+125"), id="39-nines-E125"),
        pytest.param(Decimal("1" * 50), id="50-digits"),
    ],
)
def test_more_than_38_significant_digits_are_rejected(value):
    with pytest.raises(ValidationError) as caught:
        codec.check_number("attributes.n", value)
    assert_names(caught.value, "attributes.n")


@pytest.mark.parametrize("value", [0, 0.0, -0.0, Decimal("0E+500"), Decimal("-0.000")])
def test_every_zero_is_stored_as_zero(value):
    assert codec.check_number("n", value) == 0


def test_a_float_is_stored_as_its_shortest_repr_not_its_binary_expansion():
    assert str(codec.check_number("n", 0.1)) == "0.1"


def test_bools_are_not_numbers_in_attributes():
    assert codec.to_dynamo_value("attributes.flag", True) is True


# =====================================================================================================
# codec.item_size: DynamoDB's documented sizing ("Item sizes and formats"), computed by hand
# =====================================================================================================


@pytest.mark.parametrize(
    "wire_item, expected",
    [
        # strings: name bytes + UTF-8 bytes of the value
        pytest.param({"a": {"S": "abc"}}, 1 + 3, id="ascii-string"),
        pytest.param({"name": {"S": "héllo"}}, 4 + 6, id="string-with-2-byte-char"),
        pytest.param({"e": {"S": "€"}}, 1 + 3, id="string-with-3-byte-char"),
        pytest.param({"e": {"S": "🙂"}}, 1 + 4, id="string-with-4-byte-char"),
        pytest.param({"é": {"S": ""}}, 2 + 0, id="non-ascii-name-empty-string"),
        # numbers: name + 1 byte per two significant digits (rounded up) + 1
        pytest.param({"n": {"N": "12"}}, 1 + (1 + 1), id="number-2-digits"),
        pytest.param({"n": {"N": "1234"}}, 1 + (2 + 1), id="number-4-digits"),
        pytest.param({"n": {"N": "12345"}}, 1 + (3 + 1), id="number-5-digits-rounds-up"),
        pytest.param({"n": {"N": "1200000"}}, 1 + (1 + 1), id="number-trailing-zeros-trimmed"),
        pytest.param({"n": {"N": "0.000012"}}, 1 + (1 + 1), id="number-leading-zeros-trimmed"),
        pytest.param({"n": {"N": "12.34"}}, 1 + (2 + 1), id="number-decimal-point-not-counted"),
        pytest.param({"n": {"N": "1" * 28}}, 1 + (14 + 1), id="number-28-digits"),
        pytest.param({"n": {"N": "1" * 38}}, 1 + (19 + 1), id="number-38-digits"),
        pytest.param({"n": {"N": "1" * 30}}, 1 + (15 + 1), id="number-30-digits"),
        # booleans and null: name + 1
        pytest.param({"flag": {"BOOL": True}}, 4 + 1, id="bool"),
        pytest.param({"gone": {"NULL": True}}, 4 + 1, id="null"),
        # lists and maps: name + 3 + per element (1 + element size; a map element also its key's bytes)
        pytest.param({"l": {"L": []}}, 1 + 3, id="empty-list"),
        pytest.param({"m": {"M": {}}}, 1 + 3, id="empty-map"),
        pytest.param({"l": {"L": [{"S": "xy"}, {"N": "12"}]}}, 1 + 3 + (1 + 2) + (1 + 2), id="list-of-two"),
        pytest.param({"m": {"M": {"ab": {"S": "xyz"}, "c": {"BOOL": False}}}},
                     1 + 3 + (1 + 2 + 3) + (1 + 1 + 1), id="map-of-two"),
        pytest.param({"m": {"M": {"l": {"L": [{"M": {}}]}}}},
                     1 + 3 + (1 + 1 + (3 + (1 + 3))), id="map-list-map"),
        # an item: the sum of its attributes
        pytest.param({"pk": {"S": "doc#1"}, "sk": {"S": "v0"}, "version": {"N": "42"}},
                     (2 + 5) + (2 + 2) + (7 + 2), id="item-of-three"),
    ],
)
def test_item_size_follows_dynamodbs_documented_rules(wire_item, expected):
    assert codec.item_size(wire_item) == expected


def test_item_size_of_a_serialized_python_item():
    item = {"pk": "doc#1", "n": Decimal("1234"), "tags": ["a", "bc"], "meta": {"ok": True}}
    # pk: 2 + 5; n: 1 + 3; tags: 4 + 3 + (1 + 1) + (1 + 2); meta: 4 + 3 + (1 + 2 + 1)
    expected = (2 + 5) + (1 + 3) + (4 + 3 + 2 + 3) + (4 + 3 + 4)
    assert codec.item_size(codec.serialize_item(item)) == expected


def test_an_item_over_400_kib_is_refused_before_anything_is_written():
    from changeflow_core import items

    change = validate_request(put(effectiveAt=T0), EXECUTION)
    with pytest.raises(ValidationError) as caught:
        items.check_item_size(change, {"blob": "x" * codec.MAX_ITEM_BYTES})
    assert_names(caught.value, "attributes")
    items.check_item_size(change, {"blob": "x" * (codec.MAX_ITEM_BYTES - 2048)})  # well under: fine
