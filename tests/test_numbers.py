"""Numbers keep their 38 significant digits end to end (issue 9, item 3).

DynamoDB's Number ("Supported data types and naming rules in Amazon DynamoDB"): up to 38 digits of
precision, more is an exception; positive 1E-130 to 9.9999999999999999999999999999999999999E+125, negative
likewise, and zero; leading and trailing zeros are trimmed. So whatever a client sends within those limits
must come back with the same value (the same digits) from every place it can be read: v0, history, the read
API, `--json` outputs and the execution history; whatever is outside them is refused, and the error quotes
the number as the client wrote it. Checked through each entry point: POST /changes on `serve`, a CLI file
(`changeflow run`, `changeflow submit`), and an EventBridge detail.

Step Functions reads the numbers of its state as doubles ("State machine data": "Numbers in JSON text format
conform to JavaScript semantics ... double-precision"), and so do moto's interpreter and the Lambda Python
runtime: numbers cross them inside the request's JSON text (``{"request": "<JSON text>"}``).
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
from changeflow.cli import main
from changeflow_core import codec, wire
from changeflow_core.errors import ValidationError
from conftest import EVENTS, http_exchange

pytestmark = pytest.mark.enable_socket

# The three values: today stored as 0.12345678901234568, as 12345678901234567000, and refused
# with an error quoting 1e+126, a value the client never sent.
THE_THREE = [
    "0.12345678901234567890123456789012345678",
    "12345678901234567890.123456789012345678",
    "9.9999999999999999999999999999999999999E+125",
]
# DynamoDB's limits and their neighbours one unit away in the last of 38 digits, or in the exponent.
INSIDE = [
    "9.9999999999999999999999999999999999998E+125",  # largest, one unit less
    "9.9999999999999999999999999999999999999E+124",  # largest, exponent one less
    "-9.9999999999999999999999999999999999999E+125",  # most negative
    "1E-130",  # smallest magnitude
    "1.0000000000000000000000000000000000001E-130",  # smallest, one unit more (38 digits)
    "1e-129",  # smallest, exponent one more (written in lower case: quoted as written)
    "-1E-130",
    "-1.0000000000000000000000000000000000001E-130",  # negative smallest, one unit more in magnitude
    "-9.9999999999999999999999999999999999998E+125",  # most negative, one unit less in magnitude
    "12345678901234567890123456789012345678",  # 38 digits, an integer past 2**64
    "-0.00000000000000000000000000000000000000012345678901234567890123456789012345678",
    "9007199254740993",  # 2**53 + 1: the first integer a double cannot hold
    "1.50",  # trailing zero, trimmed by DynamoDB: the same value
    "0",
    "-0.0",
]
OUTSIDE = [  # (as sent, why)
    ("1.0000000000000000000000000000000000000E+126", "the largest plus one unit"),
    ("9.9999999999999999999999999999999999999E+126", "the largest with the exponent one more"),
    ("-1.0000000000000000000000000000000000000E+126", "the most negative minus one unit"),
    ("9.9999999999999999999999999999999999999E-131", "the smallest minus one unit"),
    ("1E-131", "the smallest with the exponent one less"),
    ("-9.9999999999999999999999999999999999999E-131", "the negative smallest minus one unit in magnitude"),
    ("-1e-131", "the negative smallest with the exponent one less"),
    ("123456789012345678901234567890123456789", "39 significant digits"),
    ("1.00000000000000000000000000000000000001", "39 significant digits after the point"),
    ("1e99999999999999999999", "an exponent no Decimal holds"),
]


def same_numbers(got, sent: list[str]) -> None:
    """Every attribute ``n<i>`` has exactly the value of ``sent[i]`` (Decimal equality is exact)."""
    assert {k: Decimal(str(v)) if not isinstance(v, Decimal) else v for k, v in got.items()} == {
        f"n{i}": Decimal(text) for i, text in enumerate(sent)}
    for i, text in enumerate(sent):
        assert not isinstance(got[f"n{i}"], float), "a number came back as a float"


def body_text(entity: str, change: str, numbers: list[str], **extra) -> str:
    """A request's JSON text written by hand, the numbers exactly as a client writes them."""
    attributes = ", ".join(f'"n{i}": {text}' for i, text in enumerate(numbers))
    fields = "".join(f', "{k}": {json.dumps(v)}' for k, v in extra.items())
    return (f'{{"entityId": {json.dumps(entity)}, "operation": "put", "changeId": {json.dumps(change)}, '
            f'"attributes": {{{attributes}}}{fields}}}')


def raw_http(method: str, url: str, body: str | None = None) -> tuple[int, str]:
    status, _, raw = http_exchange(method, url, body, timeout=30)
    return status, raw.decode("utf-8")


def aws(server, service):
    return boto3.client(service, endpoint_url=server.url, region_name="us-east-1")


def post(server, text: str) -> dict:
    status, answer = raw_http("POST", f"{server.url}/v1/changes", text)
    assert status == 200, answer
    arn = json.loads(answer)["executionArn"]
    assert wait_for_termination(arn, 60)
    return aws(server, "stepfunctions").describe_execution(executionArn=arn)


def stored(server, entity: str, sk: str) -> dict[str, Decimal]:
    """The item's numbers as DynamoDB holds them (wire form: strings), read with boto3's low-level client."""
    outputs = server.stack.outputs
    table = outputs["ChangeTableName"] if sk == "v0" else outputs.get("HistoryTableName") or outputs["ChangeTableName"]
    item = aws(server, "dynamodb").get_item(TableName=table, Key={"pk": {"S": entity}, "sk": {"S": sk}},
                                             ConsistentRead=True)["Item"]
    return {k: Decimal(v["N"]) for k, v in item.items() if k.startswith("n") and "N" in v}


def read(server, path: str):
    status, text = raw_http("GET", f"{server.url}/v1/entities/{path}")
    assert status == 200, text
    return wire.loads(text)


def refusal(description: dict) -> str:
    assert (description["status"], description.get("error")) == ("FAILED", "ValidationError"), description
    return json.loads(description["cause"])["errorMessage"]


# --- the API: POST /changes on serve, read back everywhere ------------------------------------------------
def test_numbers_posted_to_the_api_keep_every_digit_in_v0_history_the_read_api_and_the_execution_history(server):
    numbers = THE_THREE + INSIDE
    description = post(server, body_text("num#api", "c1", numbers))
    assert description["status"] == "SUCCEEDED", description

    assert stored(server, "num#api", "v0") == {f"n{i}": Decimal(t) for i, t in enumerate(numbers)}
    assert stored(server, "num#api", "v#0000000001") == {f"n{i}": Decimal(t) for i, t in enumerate(numbers)}
    same_numbers(read(server, "num%23api")["attributes"], numbers)
    same_numbers(read(server, "num%23api/versions/1")["attributes"], numbers)
    same_numbers(read(server, "num%23api/versions")["items"][0]["attributes"], numbers)
    # the read API writes JSON numbers (not strings), with all their digits
    _, text = raw_http("GET", f"{server.url}/v1/entities/num%23api")
    assert '"n0": 0.12345678901234567890123456789012345678,' in text

    # the execution history, the audit trail, holds the request as the client sent it
    events = aws(server, "stepfunctions").get_execution_history(executionArn=description["executionArn"])["events"]
    started = json.loads(events[0]["executionStartedEventDetails"]["input"])
    same_numbers(wire.loads(started["request"])["attributes"], numbers)
    for text in THE_THREE:
        assert text in started["request"]


def test_a_rollback_restores_the_numbers_exactly(server):
    """The restored content crosses Step Functions from the fetch step to the write step in DynamoDB's own
    wire form (numbers as strings), so a rollback writes back every digit."""
    numbers = THE_THREE + INSIDE
    post(server, body_text("num#rb", "c1", numbers, effectiveAt=1_000))
    post(server, body_text("num#rb", "c2", ["1"], effectiveAt=2_000))
    description = post(server, '{"entityId": "num#rb", "operation": "rollback", "changeId": "c3", "toVersion": 1, '
                               '"effectiveAt": 3000}')
    assert json.loads(description["output"])["version"] == 3
    same_numbers(read(server, "num%23rb")["attributes"], numbers)
    assert stored(server, "num#rb", "v#0000000003") == {f"n{i}": Decimal(t) for i, t in enumerate(numbers)}


@pytest.mark.parametrize("sent, why", OUTSIDE, ids=[why for _, why in OUTSIDE])
def test_a_number_dynamodb_cannot_store_is_refused_by_the_api_quoting_it_as_sent(server, sent, why):
    # the front function validates as the fetch step does (issue 27.7): a 400 naming the field, nothing started
    status, answer = raw_http("POST", f"{server.url}/v1/changes", body_text("num#out", "c1", ["1", sent]))
    refused = json.loads(answer)
    assert status == 400 and refused["field"] == "attributes.n1", answer
    assert f"attributes.n1: {sent} " in refused["message"], refused["message"]
    assert raw_http("GET", f"{server.url}/v1/entities/num%23out")[0] == 404  # nothing written


# --- the CLI: a file, `run --json`, `submit --json`, `versions --json` ------------------------------------
def test_numbers_in_a_cli_file_keep_every_digit_through_run_json(tmp_path, capsys):
    numbers = THE_THREE + INSIDE
    path = tmp_path / "change.json"
    path.write_text(body_text("num#cli", "c1", numbers), encoding="utf-8")
    assert main(["run", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    doc = wire.loads(out)
    assert doc["executions"][0]["status"] == "SUCCEEDED"
    entity = doc["entities"]["num#cli"]
    same_numbers(entity["latest"]["attributes"], numbers)
    same_numbers(entity["versions"][0]["attributes"], numbers)
    # the --json output writes numbers as JSON numbers, never as floats' 17 digits or as strings
    assert "0.12345678901234567890123456789012345678" in out and "0.12345678901234568," not in out
    assert '"0.12345678901234567890123456789012345678"' not in out.split('"entities"')[1]


def test_numbers_submitted_from_a_file_to_serve_read_back_with_versions_json(server, tmp_path, capsys):
    numbers = THE_THREE + INSIDE
    path = tmp_path / "change.json"
    path.write_text(body_text("num#submit", "c1", numbers), encoding="utf-8")
    for via in ("stepfunctions", "api"):
        assert main(["submit", str(path), "--via", via, "--json", "--endpoint-url", server.url]) == 0
        submitted = wire.loads(capsys.readouterr().out)
        assert submitted["status"] == "SUCCEEDED"
    assert main(["versions", "num#submit", "--json", "--endpoint-url", server.url]) == 0
    entity = wire.loads(capsys.readouterr().out)
    same_numbers(entity["latest"]["attributes"], numbers)
    assert len(entity["versions"]) == 1  # the API's submission of the same change was a duplicate


def test_a_cli_file_with_a_number_out_of_range_fails_quoting_it_as_written(tmp_path, capsys):
    path = tmp_path / "change.json"
    path.write_text(body_text("num#cli-out", "c1", ["9.9999999999999999999999999999999999999e+126"]), encoding="utf-8")
    assert main(["run", str(path), "--json"]) == 1  # rejected: a named workflow failure (exit status 1)
    execution = wire.loads(capsys.readouterr().out)["executions"][0]
    assert (execution["status"], execution["error"]) == ("FAILED", "ValidationError")
    assert "9.9999999999999999999999999999999999999e+126 is outside DynamoDB's range" in execution["cause"]


# --- EventBridge -------------------------------------------------------------------------------------------
def test_numbers_in_an_eventbridge_detail_keep_every_digit(server):
    from changeflow.client import Changeflow

    cf = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=server.url)
    numbers = THE_THREE + INSIDE
    execution = cf.submit_via_events(body_text("num#evt", "c1", numbers), timeout=60)
    assert execution.status == "SUCCEEDED", execution.cause
    assert stored(server, "num#evt", "v0") == {f"n{i}": Decimal(t) for i, t in enumerate(numbers)}
    same_numbers(read(server, "num%23evt")["attributes"], numbers)


def started_by_events(server, entries) -> dict:
    """PutEvents ``entries``; the description of the one execution the rule starts, once it has ended."""
    sfn, outputs = aws(server, "stepfunctions"), server.stack.outputs
    assert aws(server, "events").put_events(Entries=entries)["FailedEntryCount"] == 0
    for _ in range(600):
        found = sfn.list_executions(stateMachineArn=outputs["ChangeStateMachineArn"])["executions"]
        if found:
            assert wait_for_termination(found[0]["executionArn"], 60)
            return sfn.describe_execution(executionArn=found[0]["executionArn"])
        time.sleep(0.05)
    raise AssertionError("the rule started no execution")


def test_the_sample_event_with_exact_numbers_stores_them_exactly(server):
    # events/eventbridge/put-events-exact-numbers.json: what a producer sends to keep 38 digits
    entries = json.loads((EVENTS / "eventbridge" / "put-events-exact-numbers.json").read_text(encoding="utf-8"))
    assert started_by_events(server, entries)["status"] == "SUCCEEDED"
    attributes = read(server, "sensor%237")["attributes"]
    assert attributes == {"reading": Decimal(THE_THREE[0]), "total": Decimal(THE_THREE[1]),
                          "ceiling": Decimal(THE_THREE[2])}


def test_an_eventbridge_detail_with_a_long_number_as_a_json_number_is_refused_not_rounded(server):
    """A request object (not its text) reaches the workflow through EventBridge's and Step Functions'
    double parsers: 0.12345678901234567890123456789012345678 arrives as 0.12345678901234568. The workflow
    cannot tell, so such a number is refused by name, with a pointer to the text form."""
    outputs = server.stack.outputs
    detail = '{"entityId": "num#evt-object", "operation": "put", "changeId": "c1", "attributes": ' \
             '{"ok": 7, "n": 0.12345678901234567890123456789012345678}}'
    description = started_by_events(server, [{"Source": outputs["ChangeEventSource"], "DetailType": "ChangeRequested",
                                              "EventBusName": outputs["ChangeBusName"], "Detail": detail}])
    message = refusal(description)
    assert message.startswith("attributes.n: 0.12345678901234568 came as a JSON number in a request object"), message
    assert raw_http("GET", f"{server.url}/v1/entities/num%23evt-object")[0] == 404


def test_a_start_execution_input_with_a_long_number_as_a_json_number_is_refused_not_rounded(server):
    """The same through StartExecution itself: Step Functions (moto's interpreter: ``json.loads`` of the
    input) hands the fetch step a double, so the number is refused, quoting the double it became."""
    sfn, outputs = aws(server, "stepfunctions"), server.stack.outputs
    arn = sfn.start_execution(stateMachineArn=outputs["ChangeStateMachineArn"], name="object-form", input=(
        '{"request": {"entityId": "num#sfn-object", "operation": "put", "changeId": "c1", '
        '"attributes": {"n": 12345678901234567890.123456789012345678}}, "principal": {"via": "stepfunctions"}}'
    ))["executionArn"]
    assert wait_for_termination(arn, 60)
    message = refusal(sfn.describe_execution(executionArn=arn))
    assert message.startswith("attributes.n: 1.2345678901234567e+19 came as a JSON number"), message


# --- random numbers within DynamoDB's limits ---------------------------------------------------------------
def dynamodb_numbers():
    """Any number DynamoDB stores: 1..38 significant digits, magnitude 1E-130..9.99..E+125, either sign,
    written plainly or in exponent form, upper or lower case."""
    def build(sign, digits, magnitude, style):
        exponent = magnitude - (len(digits) - 1)
        number = Decimal((sign, tuple(int(d) for d in digits), exponent))
        if style == "sci":
            return f"{'-' if sign else ''}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e{magnitude:+d}"
        return str(number) if style == "python" else f"{number:f}" if abs(magnitude) < 60 else str(number)

    digits = st.from_regex(r"[1-9][0-9]{0,37}", fullmatch=True)
    return st.builds(build, st.integers(0, 1), digits, st.integers(-130, 125),
                     st.sampled_from(["sci", "python", "plain"]))


@given(numbers=st.lists(dynamodb_numbers(), min_size=1, max_size=30))
@settings(max_examples=200, deadline=None)
def test_any_number_dynamodb_stores_survives_the_wire_format_and_the_codec_exactly(numbers):
    text = body_text("e", "c", numbers)
    request = wire.read_request(json.loads(wire.execution_input(text)))  # through a parser that is not ours
    values = {k: codec.check_number(k, v) for k, v in request["attributes"].items()}
    wire_item = codec.serialize_item(values)
    back = codec.deserialize_item(wire_item)
    same_numbers(back, numbers)
    same_numbers(wire.loads(wire.dumps(back)), numbers)


@given(numbers=st.lists(dynamodb_numbers(), min_size=1, max_size=20))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_numbers_posted_to_the_api_read_back_exactly(server, numbers):
    entity = f"num#random-{abs(hash(tuple(numbers)))}"
    description = post(server, body_text(entity, "c1", numbers))
    assert description["status"] == "SUCCEEDED", description
    same_numbers(read(server, entity.replace("#", "%23"))["attributes"], numbers)
    assert stored(server, entity, "v0") == {f"n{i}": Decimal(t) for i, t in enumerate(numbers)}


# --- the pieces --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sent, why", OUTSIDE, ids=[why for _, why in OUTSIDE])
def test_check_number_refuses_outside_dynamodb_limits_quoting_the_text(sent, why):
    with pytest.raises(ValidationError) as refused:
        codec.check_number("attributes.x", wire.loads(f"[{sent}]")[0])
    assert str(refused.value).startswith(f"attributes.x: {sent} ")


@pytest.mark.parametrize("text", THE_THREE + INSIDE)
def test_check_number_keeps_the_value_inside_the_limits(text):
    assert codec.check_number("x", wire.loads(f"[{text}]")[0]) == Decimal(text)


def test_a_number_with_more_digits_than_any_context_holds_is_not_rounded_into_range():
    # 1 followed by 1,200 zeros and a 1: 1,202 significant digits, not 1
    text = "1." + "0" * 1200 + "1"
    with pytest.raises(ValidationError, match="1202 significant digits"):
        codec.check_number("x", wire.loads(f"[{text}]")[0])


def test_a_request_object_keeps_safe_integers_and_refuses_every_other_number_by_name():
    assert wire.read_request({"entityId": "e", "attributes": {"n": 2**53 - 1, "m": [-(2**53 - 1)]}})
    for attributes, field in [({"n": 2**53}, "attributes.n"), ({"m": [1, 0.5]}, "attributes.m[1]"),
                              ({"x": {"y": 1e300}}, "attributes.x.y")]:
        with pytest.raises(ValidationError) as refused:
            wire.read_request({"entityId": "e", "attributes": attributes})
        assert refused.value.field == field


def test_request_text_that_is_not_json_is_a_validation_error():
    with pytest.raises(ValidationError) as refused:
        wire.read_request({"request": "{not json"})
    assert refused.value.field == "request"
