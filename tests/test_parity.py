"""Parity with AWS: each limit or semantic of AWS that the workflow can meet holds on the embedded stack
too (changeflow.local.moto_patches makes moto as strict as AWS's documentation), and the template's deploy-time settings
that only AWS can exercise are pinned here. Each test names the AWS page it follows."""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import time
from decimal import Decimal

import pytest
from botocore.exceptions import ClientError

from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
from changeflow.client import Changeflow
from changeflow.local.template import Template
from changeflow_core import principal
from conftest import LOGGED, ROOT, proven, table_specs

LAYER = ROOT / "layers" / "core"


# --- deploy-time settings (section 3 of issue 10) -------------------------------------------------------
def test_tables_are_retained_when_the_stack_is_deleted_or_the_table_replaced():
    # https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html
    template = Template(ROOT / "template.yaml", overrides={"SeparateHistoryTable": "true"})
    tables = template.of_type("AWS::DynamoDB::Table")
    assert set(tables) == {"ChangeTable", "HistoryTable", "AttemptsTable"}
    for logical_id, spec in tables.items():
        assert spec.get("DeletionPolicy") == "Retain", logical_id
        assert spec.get("UpdateReplacePolicy") == "Retain", logical_id


def test_each_stack_publishes_its_own_layer():
    # a LayerName shared by two stacks would interleave their versions of one layer
    names = set()
    for stack_name in ("changeflow", "changeflow-staging"):
        template = Template(ROOT / "template.yaml", stack_name=stack_name)
        props = template.resolve(template.resources["CoreLayer"]["Properties"])
        assert "LayerName" in props
        names.add(props["LayerName"])
    assert len(names) == 2


def test_tracer_does_not_capture_responses_anywhere(stack):
    # https://docs.powertools.aws.dev/lambda/python/latest/core/tracer/ (POWERTOOLS_TRACER_CAPTURE_RESPONSE)
    template = Template(ROOT / "template.yaml")
    for logical_id in template.of_type("AWS::Serverless::Function"):
        variables = template.function_properties(logical_id)["Environment"]["Variables"]
        assert str(variables.get("POWERTOOLS_TRACER_CAPTURE_RESPONSE")).lower() == "false", logical_id
        assert stack.function(logical_id).environment["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"


def _python313() -> str | None:
    env = {**os.environ, "PYENV_VERSION": "3.13.0"}
    for command in (["python3.13"], ["pyenv", "exec", "python"]):
        try:
            found = subprocess.run([*command, "-c", "import sys; print(sys.executable)"], capture_output=True,
                                   text=True, env=env if command[0] == "pyenv" else None, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    return None


@pytest.fixture(scope="module")
def built_layer(tmp_path_factory):
    """The layer exactly as `sam build` makes it (its Makefile's build-CoreLayer target)."""
    if shutil.which("make") is None or _python313() is None:
        pytest.skip("make or python3.13 is missing: the layer cannot be built for Lambda here")
    out = tmp_path_factory.mktemp("layer")
    subprocess.run(["make", "--no-print-directory", "build-CoreLayer", f"ARTIFACTS_DIR={out}"], cwd=LAYER,
                   check=True, capture_output=True, timeout=600)
    return out / "python"


def test_the_layer_ships_python313_bytecode_valid_on_a_read_only_opt(built_layer):
    # /opt is read-only on Lambda: a module without a usable .pyc is compiled again on every cold start
    sources = [p for p in built_layer.rglob("*.py") if "__pycache__" not in p.parts]
    assert any(p.parts[-2:] == ("tracing", "tracer.py") for p in sources)  # Powertools is in the layer
    missing = [p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.cpython-313.pyc").exists()]
    assert not missing, missing[:5]
    for source in sources[:50]:
        header = (source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc").read_bytes()[:8]
        flags = struct.unpack("<I", header[4:8])[0]
        # PEP 552: hash-based (bit 0) and unchecked (bit 1 clear): valid whatever mtimes the zip keeps
        assert flags == 0b01, (source, flags)


def test_python313_imports_the_layer_from_its_bytecode_alone(built_layer, tmp_path):
    # the proof that the shipped .pyc is what runs: replace a module's source with one that refuses to
    # run, and python3.13 (which may not write bytecode, as on /opt) still imports the compiled module
    layer = tmp_path / "python"
    shutil.copytree(built_layer, layer, symlinks=True)
    (layer / "changeflow_core" / "model.py").write_text("raise SystemExit('the source was compiled again')\n")
    done = subprocess.run([_python313(), "-s", "-c", "import changeflow_core.model as m; print(m.LATEST_SK)"],
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(layer), "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "v0"


def test_the_layer_accepts_manylinux_2_28_wheels():
    # python3.13 on Lambda runs on Amazon Linux 2023 (glibc 2.34): manylinux_2_28 wheels load there
    # https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtimes.html
    dry = subprocess.run(["make", "-n", "--no-print-directory", "build-CoreLayer", "ARTIFACTS_DIR=/nonexistent",
                          "BYTECODE_PYTHON=python3.13"], cwd=LAYER, capture_output=True, text=True, check=True)
    pip_line = next(line for line in dry.stdout.splitlines() if "pip install" in line or "--platform" in line)
    pip_command = " ".join(line for line in dry.stdout.splitlines() if "--platform" in line or "pip install" in line)
    assert "--platform manylinux_2_28_x86_64" in pip_command, pip_line
    assert "--platform manylinux2014_x86_64" in pip_command


# --- Step Functions (section 2 of issue 10) ---------------------------------------------------------------
T0 = 1_767_225_600_000
ROLE = "arn:aws:iam::123456789012:role/parity"
LOG_GROUP = "/aws/vendedlogs/states/changeflow-change"


def put(entity="e", **attributes):
    return {"entityId": entity, "operation": "put", "attributes": attributes or {"a": 1}, "effectiveAt": T0}


def machine(stack, definition: dict, kind: str = "STANDARD", level: str = "ALL", data: bool = True) -> str:
    """A small state machine of our own on the embedded stack, logging to the stack's execution log."""
    logging.getLogger("moto.stepfunctions.parser").setLevel(logging.CRITICAL)
    log_arn = f"arn:aws:logs:us-east-1:123456789012:log-group:{LOG_GROUP}:*"
    return stack.client("stepfunctions").create_state_machine(
        name=f"parity-{len(stack.client('stepfunctions').list_state_machines()['stateMachines'])}",
        definition=json.dumps(definition), roleArn=ROLE, type=kind,
        loggingConfiguration={"level": level, "includeExecutionData": data,
                              "destinations": [{"cloudWatchLogsLogGroup": {"logGroupArn": log_arn}}]},
    )["stateMachineArn"]


def log_records(stack, execution_arn: str) -> list[dict]:
    events = stack.client("logs").filter_log_events(logGroupName=LOG_GROUP)["events"]
    records = [json.loads(e["message"]) for e in events]
    return sorted((r for r in records if r["execution_arn"] == execution_arn), key=lambda r: int(r["id"]))


def run(stack, arn: str, payload=None, name: str = "run") -> str:
    execution_arn = stack.client("stepfunctions").start_execution(
        stateMachineArn=arn, name=name, input=json.dumps(payload or {}))["executionArn"]
    assert wait_for_termination(execution_arn, 30)
    return execution_arn


def error_code(call) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response["Error"]["Code"]


# Names AWS refuses: https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html
REFUSED_NAMES = ["a b", "tab\tname", "nbsp\u00a0name", "a:b", "a/b", "a*", "a?", "<a>", "{a}", "[a]", "a#1",
                 "50%", "a\\b", "a^b", "a|b", "a~b", "a`b", "a$b", "a&b", "a,b", "a;b", 'a"b', "bell\u0007",
                 "c1\u0085", "x" * 81]


@pytest.mark.parametrize("name", REFUSED_NAMES, ids=[repr(n)[:20] for n in REFUSED_NAMES])
def test_start_execution_refuses_a_name_aws_refuses_and_writes_nothing(cf, name):
    start = lambda: cf.sfn.start_execution(stateMachineArn=cf.state_machine_arn, name=name,  # noqa: E731
                                           input=json.dumps(put()))
    assert error_code(start) in {"InvalidName", "ValidationException"}
    assert cf.sfn.list_executions(stateMachineArn=cf.state_machine_arn)["executions"] == []
    assert cf.dynamodb.scan(TableName=cf.table)["Items"] == []


def test_start_execution_accepts_every_name_aws_accepts(cf):
    for name in ("x" * 80, "ünïcode-名前", "a.b-c_d+e=f@g!h'(i)"):
        assert cf.submit(put(), name=name, redeliver=False).status == "SUCCEEDED", name


def test_start_execution_refuses_input_over_256_kib_in_utf8_bytes(cf):
    # 2-byte characters: under 256 Ki characters, over 256 KiB of UTF-8 - the limit is in bytes
    request = put(text="é" * (128 * 1024))
    assert len(json.dumps(request, ensure_ascii=False)) < 256 * 1024 < len(json.dumps(request, ensure_ascii=False).encode())
    start = lambda: cf.sfn.start_execution(stateMachineArn=cf.state_machine_arn, name="big",  # noqa: E731
                                           input=json.dumps(request, ensure_ascii=False))
    assert error_code(start) == "ValidationException"
    assert cf.sfn.list_executions(stateMachineArn=cf.state_machine_arn)["executions"] == []


def test_a_state_output_over_256_kib_is_terminal_even_under_a_states_all_catch(stack):
    # https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html: States.ALL does not
    # catch States.DataLimitExceeded. (Enforced by stock moto 5.2.5 too: pinned here.)
    big = "x" * (150 * 1024)
    arn = machine(stack, {"StartAt": "Grow", "States": {
        "Grow": {"Type": "Parallel", "Branches": [{"StartAt": "Half", "States": {"Half": {
            "Type": "Pass", "Result": big, "End": True}}}] * 2,
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": True},
        "Caught": {"Type": "Pass", "Result": "caught", "End": True}}})
    execution = run(stack, arn)
    records = log_records(stack, execution)
    assert records[-1]["type"] == "ExecutionFailed"
    assert records[-1]["details"]["error"] == "States.DataLimitExceeded"
    assert not any(r["type"] == "PassStateEntered" and r["details"].get("name") == "Caught" for r in records)


def test_a_lambda_result_over_256_kib_fails_the_task_with_data_limit_exceeded(stack):
    # AWS reports it as the task's failure, States.DataLimitExceeded (recorded from AWS: LocalStack's
    # tests/aws/services/stepfunctions/v2/error_handling/test_states_errors.snapshot.json). Stock moto too.
    from changeflow.local.lambdas import fault_hook

    fetch = stack.function("FetchLatestFunction").arn
    arn = machine(stack, {"StartAt": "Fetch", "States": {"Fetch": {
        "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
        "Parameters": {"FunctionName": fetch, "Payload.$": "$"}, "End": True}}})
    with fault_hook(stack.lambdas, lambda function, event, invoke: {"blob": "y" * (257 * 1024)}):
        execution = run(stack, arn, put())
    records = log_records(stack, execution)
    failed = next(r for r in records if r["type"] == "TaskFailed")
    assert failed["details"]["error"] == "States.DataLimitExceeded"
    assert records[-1]["type"] == "ExecutionFailed"


# --- Express ----------------------------------------------------------------------------------------------
@pytest.fixture
def express(make_stack):
    stack = make_stack(WorkflowType="EXPRESS", **LOGGED)
    return stack, Changeflow.for_embedded(stack)


def test_express_does_not_dedupe_execution_names(express):
    # https://docs.aws.amazon.com/step-functions/latest/dg/choosing-workflow-type.html (Express: at-least-once)
    stack, cf = express
    request = put()
    first = cf.sfn.start_execution(stateMachineArn=cf.state_machine_arn, name="same",
                                   input=principal.direct_input(request))
    second = cf.sfn.start_execution(stateMachineArn=cf.state_machine_arn, name="same",
                                    input=principal.direct_input(request))
    assert first["executionArn"] != second["executionArn"]
    assert ":express:" in first["executionArn"] and first["executionArn"].split(":")[-2] == "same"
    outcomes = sorted(cf.wait(arn).output["outcome"] for arn in (first["executionArn"], second["executionArn"]))
    assert outcomes == ["applied", "duplicate"]  # both ran; the workflow's own idempotency held


def test_standard_refuses_a_closed_execution_s_name(cf):
    # the contrast: https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html
    # (a name is unique for 90 days; a closed execution's name gives ExecutionAlreadyExists). Stock moto too.
    cf.submit(put(), name="once", redeliver=False)
    again = lambda: cf.sfn.start_execution(stateMachineArn=cf.state_machine_arn, name="once",  # noqa: E731
                                           input=json.dumps(put()))
    assert error_code(again) == "ExecutionAlreadyExists"


def test_express_executions_are_not_described_listed_stopped_or_given_a_history(express):
    # Witness: LocalStack's recorded AWS responses, tests/aws/services/stepfunctions/v2/test_sfn_api_express.snapshot.json
    stack, cf = express
    _, arn = cf.start(put())
    assert error_code(lambda: cf.sfn.describe_execution(executionArn=arn)) == "InvalidArn"
    assert error_code(lambda: cf.sfn.get_execution_history(executionArn=arn)) == "InvalidArn"
    assert error_code(lambda: cf.sfn.stop_execution(executionArn=arn)) == "InvalidArn"
    assert error_code(lambda: cf.sfn.list_executions(stateMachineArn=cf.state_machine_arn)) == \
        "StateMachineTypeNotSupported"
    # the execution ends here, not in the next test: its writes would land in that test's tables
    assert stack.wait_for_termination(arn, 30)


def test_an_express_execution_never_inherits_the_time_an_earlier_execution_waited(stack):
    # Threads' idents are reused once a thread ends. Standard executions that waited long (compressed) ran
    # on threads whose idents later Express executions get: each must count only its own time.
    def waiting(seconds):
        return {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": seconds, "End": True}}}

    standard, express = machine(stack, waiting(400)), machine(stack, waiting(1), "EXPRESS")
    for i in range(6):
        run(stack, standard, name=f"long-{i}")
    endings = [log_records(stack, run(stack, express, name=f"short-{i}"))[-1]["type"] for i in range(12)]
    assert endings == ["ExecutionSucceeded"] * 12


def test_the_client_reads_an_express_execution_from_its_execution_log(make_stack):
    # the same change on Standard and on Express: the client gives the same result and the same history
    standard_stack = make_stack()
    standard = Changeflow.for_embedded(standard_stack)
    reference = standard.submit(put(), name="from-the-log")
    expected = list(standard.history(reference.arn))
    standard_stack.stop()  # one embedded stack at a time in a process
    cf = Changeflow.for_embedded(make_stack(WorkflowType="EXPRESS", **LOGGED))
    execution = cf.submit(put(), name="from-the-log")
    assert (execution.status, execution.output, execution.input) == (reference.status, reference.output,
                                                                      reference.input)
    events = list(cf.history(execution.arn))
    assert [e["type"] for e in events] == [e["type"] for e in expected]
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    key = "executionSucceededEventDetails"
    assert json.loads(events[-1][key]["output"]) == json.loads(expected[-1][key]["output"])
    assert [e["name"] for e in cf.executions()] == ["from-the-log"]


def test_the_execution_log_follows_the_logging_configuration(stack):
    # https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html: record fields, level, execution data
    definition = {"StartAt": "Say", "States": {"Say": {"Type": "Pass", "Result": {"secret": "audit"}, "End": True}}}
    everything = run(stack, machine(stack, definition, "EXPRESS", level="ALL", data=True), {"in": 1})
    records = log_records(stack, everything)
    assert [r["type"] for r in records] == ["ExecutionStarted", "PassStateEntered", "PassStateExited",
                                            "ExecutionSucceeded"]
    assert set(records[0]) >= {"id", "type", "details", "previous_event_id", "event_timestamp", "execution_arn"}
    assert json.loads(records[-1]["details"]["output"]) == {"secret": "audit"}
    without_data = run(stack, machine(stack, definition, "EXPRESS", level="ALL", data=False), {"in": 1})
    assert "audit" not in json.dumps(log_records(stack, without_data))
    errors_only = run(stack, machine(stack, definition, "EXPRESS", level="ERROR"), {"in": 1})
    assert log_records(stack, errors_only) == []  # nothing failed


def test_an_express_execution_past_five_minutes_ends_timed_out(stack):
    # https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html (Express: 5 minutes); the
    # embedded clock is compressed, and the limit counts the seconds the definition asked for
    def waiting(seconds):
        return {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": seconds, "End": True}}}

    over = run(stack, machine(stack, waiting(301), "EXPRESS"))
    assert log_records(stack, over)[-1]["type"] == "ExecutionTimedOut"
    under = run(stack, machine(stack, waiting(290), "EXPRESS"))
    assert log_records(stack, under)[-1]["type"] == "ExecutionSucceeded"
    standard = run(stack, machine(stack, waiting(301), "STANDARD"))
    assert stack.client("stepfunctions").describe_execution(executionArn=standard)["status"] == "SUCCEEDED"


def test_states_math_random_excludes_its_end_value(stack):
    # https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html#asl-intrsc-func-math-operation
    fields = {f"r{seed}.$": f"States.MathRandom(0, 2, {seed})" for seed in range(60)}
    arn = machine(stack, {"StartAt": "Draw", "States": {"Draw": {"Type": "Pass", "Parameters": fields, "End": True}}})
    execution = run(stack, arn)
    drawn = json.loads(stack.client("stepfunctions").describe_execution(executionArn=execution)["output"])
    assert set(drawn.values()) == {0, 1}


# --- DynamoDB (section 2 of issue 10) ---------------------------------------------------------------------
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html and
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html
def key(pk="e", sk="v0"):
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def refused(call) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    return caught.value.response["Error"]["Message"]


@pytest.mark.parametrize("number, reason", [
    ("1" * 39, "38 significant digits"),
    ("-1.23456789012345678901234567890123456789", "38 significant digits"),
    ("1E+126", "overflow"),
    ("-1E+126", "overflow"),
    ("1E-131", "underflow"),
])
def test_dynamodb_refuses_numbers_outside_its_range_or_precision_in_every_write(stack, number, reason):
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    assert reason in refused(lambda: client.put_item(TableName=table, Item={**key(), "n": {"N": number}}))
    assert reason in refused(lambda: client.put_item(TableName=table, Item={**key(), "m": {"M": {"n": {"N": number}}}}))
    assert reason in refused(lambda: client.put_item(TableName=table, Item={**key(), "s": {"NS": ["1", number]}}))
    assert reason in refused(lambda: client.update_item(TableName=table, Key=key(), UpdateExpression="SET n = :n",
                                                        ExpressionAttributeValues={":n": {"N": number}}))
    assert client.scan(TableName=table)["Items"] == []  # nothing written


def test_dynamodb_accepts_the_numbers_it_documents(stack):
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    for number in ("9.9999999999999999999999999999999999999E+125", "-9.9999999999999999999999999999999999999E+125",
                   "1E-130", "1" * 38, "1" + "0" * 100, "0.000" + "1" * 38 + "000", "0"):
        client.put_item(TableName=table, Item={**key(), "n": {"N": number}})
        stored = client.get_item(TableName=table, Key=key())["Item"]["n"]["N"]
        assert float(stored) == float(number), number


def test_dynamodb_refuses_an_expression_over_4_kb(stack):
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    clause = "attribute_not_exists(pk)"
    fits = " OR ".join([clause] * 146)
    fits += " " * (4096 - len(fits))
    assert len(fits.encode()) == 4096
    client.put_item(TableName=table, Item=key("fits"), ConditionExpression=fits)
    too_long = fits + " OR " + clause
    assert "Expression size has exceeded" in refused(
        lambda: client.put_item(TableName=table, Item=key("long"), ConditionExpression=too_long))
    assert "Expression size has exceeded" in refused(
        lambda: client.update_item(TableName=table, Key=key("fits"),
                                   UpdateExpression="SET " + ", ".join(f"a{i} = :v" for i in range(600)),
                                   ExpressionAttributeValues={":v": {"N": "1"}}))
    assert [i["pk"]["S"] for i in client.scan(TableName=table)["Items"]] == ["fits"]


def test_dynamodb_refuses_an_oversized_key_in_reads_too(stack):
    # GetItem/DeleteItem with a partition key over 2,048 bytes or a sort key over 1,024 bytes are refused,
    # not answered "no such item"; the sizes are UTF-8 bytes (multibyte characters count double)
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    for oversized in (key(pk="é" * 1025), key(sk="é" * 513), key(pk="p" * 2049)):
        assert "size" in refused(lambda: client.get_item(TableName=table, Key=oversized)).lower()
        assert "size" in refused(lambda: client.delete_item(TableName=table, Key=oversized)).lower()
        assert "size" in refused(lambda: client.put_item(TableName=table, Item=oversized)).lower()
    assert "Item" not in client.get_item(TableName=table, Key=key(pk="p" * 2048, sk="s" * 1024))


def test_dynamodb_refuses_an_oversized_key_in_a_query_and_in_its_exclusive_start_key(stack):
    # a Query of a partition key over 2,048 bytes, or from an ExclusiveStartKey over the key limits, is
    # refused (AWS: "Size of hashkey has exceeded the maximum size limit of2048 bytes" on Query), not
    # answered an empty page; keys at the limits are fine
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]

    def query(pk, start=None, names=False):
        condition = "#p = :pk" if names else "pk = :pk"
        return client.query(TableName=table, KeyConditionExpression=condition,
                            ExpressionAttributeValues={":pk": {"S": pk}},
                            **({"ExpressionAttributeNames": {"#p": "pk"}} if names else {}),
                            **({"ExclusiveStartKey": start} if start else {}))

    for names in (False, True):
        assert "size" in refused(lambda: query("p" * 2049, names=names)).lower()
    assert "size" in refused(lambda: query("e", start=key(pk="e", sk="s" * 1025))).lower()
    assert "size" in refused(lambda: query("e", start=key(pk="é" * 1025))).lower()
    assert query("p" * 2048, start=key(pk="p" * 2048, sk="s" * 1024))["Items"] == []


def test_dynamodb_refuses_an_attribute_value_with_more_than_one_type(stack):
    # API reference, AttributeValue: one name (the type) and its value; two are a ValidationException
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    two = {"S": "x", "N": "1"}
    expected = "more than one datatypes"
    assert expected in refused(lambda: client.put_item(TableName=table, Item={**key(), "a": two}))
    assert expected in refused(lambda: client.put_item(TableName=table, Item={**key(), "m": {"M": {"a": two}}}))
    assert expected in refused(lambda: client.get_item(TableName=table, Key={"pk": two, "sk": {"S": "v0"}}))
    assert expected in refused(lambda: client.query(
        TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "e"}},
        ExclusiveStartKey={"pk": {"S": "e"}, "sk": {"S": "v#0000000001", "N": "1"}}))
    assert client.scan(TableName=table)["Items"] == []


@pytest.mark.parametrize("sent, returned", [
    ("1E+38", "1" + "0" * 38), ("1e100", "1" + "0" * 100), ("1.5E2", "150"), ("1.50", "1.5"), ("00042", "42"),
    ("1.0", "1"), ("-0", "0"), ("1e-7", "0.0000001"), ("-1.25E-3", "-0.00125"), ("0.000", "0"),
])
def test_dynamodb_returns_a_number_normalised_and_written_out_whatever_it_was_sent_as(stack, sent, returned):
    # DynamoDB stores the number, not the text: 1E+100 comes back as 1 and 100 zeros (boto/boto3#2500), 1e-7
    # as 0.0000001 (aws/aws-sdk-js-v3#1983), 1.5E2 as 150, 00042 as 42, -0 as 0 (ExtendDB/extenddb#7)
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    client.put_item(TableName=table, Item={**key(), "n": {"N": sent}, "s": {"NS": [sent, "7"]}})
    item = client.get_item(TableName=table, Key=key())["Item"]
    assert item["n"] == {"N": returned} and sorted(item["s"]["NS"]) == sorted([returned, "7"])
    client.update_item(TableName=table, Key=key(), UpdateExpression="SET n = :v", ExpressionAttributeValues={":v": {"N": sent}})
    assert client.get_item(TableName=table, Key=key())["Item"]["n"] == {"N": returned}


def test_dynamodb_reads_back_in_a_projection_every_number_it_accepted(stack):
    # numbers DynamoDB returns written out with more than 38 digits, and its smallest: a projected read
    # (a Scan of keys, as verify --all makes) returns them; stock moto fails with decimal.Rounded
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    numbers = {"big": "1" + "0" * 38, "huge": "9" * 38 + "0" * 88, "tiny": "1E-130", "negative": "-1E+125"}
    for name, number in numbers.items():
        client.put_item(TableName=table, Item={**key(pk=name), "n": {"N": number}, "m": {"M": {"n": {"N": number}}}})
    projected = client.scan(TableName=table, ProjectionExpression="pk, n, m")["Items"]
    assert {i["pk"]["S"]: Decimal(i["n"]["N"]) for i in projected} == {k: Decimal(v) for k, v in numbers.items()}
    assert all(Decimal(i["m"]["M"]["n"]["N"]) == Decimal(i["n"]["N"]) for i in projected)


def test_a_local_secondary_index_query_fetches_what_the_index_does_not_project(stack):
    # API reference, Query, Select: "ALL_ATTRIBUTES ... If you query a local secondary index, then for each
    # matching item in the index, DynamoDB fetches the entire item from the parent table"; the same for a
    # ProjectionExpression of attributes it does not project (developer guide, LSI.html). The time indexes are
    # KEYS_ONLY (template.yaml); stock moto 5.2.5 answers their keys only, whatever is asked.
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    client.put_item(TableName=table, Item={**key(sk="v#0000000001"), "priorEffective": {"N": "0"},
                                           "body": {"S": "the whole item"}, "n": {"N": "7"}})
    asked = dict(TableName=table, IndexName="EffectiveIndex", KeyConditionExpression="pk = :pk",
                 ExpressionAttributeValues={":pk": {"S": "e"}})
    assert client.query(**asked)["Items"] == [{**key(sk="v#0000000001"), "priorEffective": {"N": "0"}}]
    [whole] = client.query(**asked, Select="ALL_ATTRIBUTES", ConsistentRead=True)["Items"]
    assert whole["body"] == {"S": "the whole item"} and whole["n"] == {"N": "7"}
    assert client.query(**asked, ProjectionExpression="body")["Items"] == [{"body": {"S": "the whole item"}}]


def test_a_query_of_an_index_the_table_does_not_have_is_a_validation_exception(stack):
    # "ValidationException: The table does not have the specified index: <name>" (the service's answer, quoted in
    # aws-amplify/amplify-js#10989 and awslabs/aws-sdk-ios-samples#58); stock moto 5.2.5 answers
    # ResourceNotFoundException, AWS's answer for a missing table, which the as-of reads cannot take for a table
    # made without the time indexes
    client, table = stack.client("dynamodb"), stack.template.physical_name("AttemptsTable")
    message = refused(lambda: client.query(TableName=table, IndexName="EffectiveIndex",
                                           KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "e"}}))
    assert message == "The table does not have the specified index: EffectiveIndex"
    with pytest.raises(ClientError) as missing:
        client.query(TableName="no-such-table", IndexName="EffectiveIndex", KeyConditionExpression="pk = :pk",
                     ExpressionAttributeValues={":pk": {"S": "e"}})
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_dynamodb_item_size_counts_attribute_names(stack):
    # values that fit in 400 KB, names that push the item over: refused (stock moto 5.2.5 counts names too,
    # and refuses from 405,000 bytes where AWS refuses above 409,600: stricter, so not patched)
    client, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    values = {f"a{i}": {"S": "v" * 1000} for i in range(390)}
    client.put_item(TableName=table, Item={**key("values"), **values})
    named = {f"{'n' * 255}{i:04d}": {"S": "v" * 1000} for i in range(390)}
    assert "size" in refused(lambda: client.put_item(TableName=table, Item={**key("names"), **named})).lower()


# --- X-Ray (section 2 of issue 10) ------------------------------------------------------------------------
def test_xray_a_segment_over_64_kb_is_lost_so_handlers_do_not_capture_responses(tmp_path):
    # X-Ray takes a segment document of at most 64 KB, sent to the daemon in one UDP datagram
    # (https://docs.aws.amazon.com/xray/latest/devguide/xray-api-segmentdocuments.html); a larger one is
    # lost. Offline it is lost the same way: the datagram cannot be sent. The read API's response carries
    # whole versions (audit data), which Powertools' Tracer would copy into the handler's subsegment.
    from test_observability import XRAY_PACKET_HEADER, _child_env, _report, _start, _traced_steps

    template = Template(ROOT / "template.yaml", overrides={"TimeIndexes": "true"})
    steps = _traced_steps(template)
    # a version whose content is 80 KB: in the request the fetch step reads, and in the content (DynamoDB
    # JSON) the write and history steps carry
    steps["fetch_latest"]["event"]["request"]["request"]["attributes"]["notes"] = "n" * (80 * 1024)
    for name in ("update_latest", "put_history"):
        steps[name]["event"]["content"]["notes"] = {"S": "n" * (80 * 1024)}
    for name in ("fetch_latest", "update_latest", "put_history"):  # sealed and proven again, as the steps would
        steps[name]["event"] = proven(steps[name]["event"], name)
    step = steps["read_api"]
    layer = str(ROOT / template.resolve(template.resources["CoreLayer"]["Properties"]["ContentUri"]))
    seeding = _start({"mode": "seed", "layer": layer, "tables": table_specs(template), "seed": [],
                      "steps": [steps[n] for n in ("fetch_latest", "update_latest", "put_history", "read_api")]},
                     _child_env({"POWERTOOLS_TRACE_DISABLED": "true", "AWS_XRAY_SDK_ENABLED": "false"}),
                     tmp_path, "seed")
    seeded = _report(seeding)["before"][-1]
    daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    daemon.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    daemon.bind(("127.0.0.1", 0))
    daemon.settimeout(0.2)
    received: dict[str, list[tuple[int, dict]]] = {}
    try:
        runs = {}
        for case, capture in (("template", step["env"]["POWERTOOLS_TRACER_CAPTURE_RESPONSE"]), ("captured", "true")):
            trace_id = f"1-{int(time.time()):08x}-{secrets.token_hex(12)}"
            env = _child_env({**step["env"], "POWERTOOLS_TRACER_CAPTURE_RESPONSE": capture,
                              "_X_AMZN_TRACE_ID": f"Root={trace_id};Parent={secrets.token_hex(8)};Sampled=1",
                              "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{daemon.getsockname()[1]}",
                              "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR"})
            traced = {**step, "env": {**step["env"], "POWERTOOLS_TRACER_CAPTURE_RESPONSE": capture}}
            job = {"mode": "trace", "layer": layer, "tables": table_specs(template), "seed": seeded, "steps": [traced]}
            report = _report(_start(job, env, tmp_path, case))
            assert "error" not in report and len(json.dumps(report["result"])) > 64 * 1024, report.get("error")
            runs[trace_id] = case
            received[case] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                packet = daemon.recv(65_535)
            except socket.timeout:
                if any(doc.get("name") == "## lambda_handler" for _, doc in received["template"]):
                    break
                continue
            header, _, body = packet.decode("utf-8").partition("\n")
            assert json.loads(header) == XRAY_PACKET_HEADER
            document = json.loads(body)
            received[runs[document["trace_id"]]].append((len(packet), document))
    finally:
        daemon.close()
    # the template's setting: the handler's subsegment arrives, under 64 KB, without the response
    handler = [(size, doc) for size, doc in received["template"] if doc.get("name") == "## lambda_handler"]
    assert len(handler) == 1 and handler[0][0] < 64 * 1024
    assert "notes" not in json.dumps(handler[0][1]) and "nnnnnnnn" not in json.dumps(received["template"])
    # capturing the response: the DynamoDB subsegments arrive, the handler's (over 64 KB) never does
    assert any(doc.get("namespace") == "aws" for _, doc in received["captured"])
    assert not any(doc.get("name") == "## lambda_handler" for _, doc in received["captured"])


# --- the Lambda integration's result envelope (issue 27 item 8) ------------------------------------------
def test_a_lambda_task_result_carries_the_sdk_metadata_aws_returns(stack, cf):
    """https://docs.aws.amazon.com/step-functions/latest/dg/connect-lambda.html; the shape AWS returned in
    LocalStack's AWS-validated snapshot (test_lambda_task_service.snapshot.json, test_invoke, 2025-11-06)."""
    done = cf.submit({"entityId": "parity#envelope", "operation": "put", "changeId": "c1", "attributes": {"a": 1}})
    assert done.status == "SUCCEEDED"
    events = list(cf.history(done.arn))
    results = [json.loads(e["taskSucceededEventDetails"]["output"]) for e in events if e["type"] == "TaskSucceeded"]
    assert len(results) >= 3
    for result in results:
        # GIVEN each Lambda task's result as the history records it
        assert list(result) == ["ExecutedVersion", "Payload", "SdkHttpMetadata", "SdkResponseMetadata", "StatusCode"]
        meta = result["SdkHttpMetadata"]
        assert meta["HttpStatusCode"] == 200 and result["StatusCode"] == 200
        assert set(meta["AllHttpHeaders"]) == set(meta["HttpHeaders"]) == {
            "X-Amz-Executed-Version", "x-amzn-Remapped-Content-Length", "Connection", "x-amzn-RequestId",
            "Content-Length", "Date", "X-Amzn-Trace-Id", "Content-Type"}
        assert all(meta["AllHttpHeaders"][k] == [v] for k, v in meta["HttpHeaders"].items())
        assert meta["HttpHeaders"]["x-amzn-RequestId"] == result["SdkResponseMetadata"]["RequestId"]
        body = json.dumps(result["Payload"], separators=(",", ":"))
        assert meta["HttpHeaders"]["Content-Length"] == str(len(body.encode("utf-8")))
        # THEN the envelope around the payload is about 1 KB, as on AWS
        envelope = len(json.dumps(result, separators=(",", ":"))) - len(body)
        assert 700 <= envelope <= 1300, envelope
    # and the states carry only what ResultSelector picks
    exited = [json.loads(e["stateExitedEventDetails"]["output"]) for e in events if e["type"] == "TaskStateExited"]
    assert not any("SdkHttpMetadata" in json.dumps(o) for o in exited)


LOG_PAYLOAD_LIMIT = 248 * 1024  # "248KB", as AWS's "256 KB" is ExecutionStartedEventDetails.input's 262,144 bytes


def escaped_size(text: str) -> int:
    return len(json.dumps(text)) - 2


def test_the_execution_log_cuts_an_input_or_output_over_248_kb_escaped_and_says_so(stack):
    # https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html ("CloudWatch Logs payloads"): "If
    # escaped input or escaped output sent to CloudWatch Logs exceeds 248KB, it will be truncated";
    # inputDetails/outputDetails.truncated says so (API_HistoryEventExecutionDataDetails). GetExecutionHistory
    # keeps it whole. Stock moto logs it whole.
    sfn = stack.client("stepfunctions")
    arn = machine(stack, {"StartAt": "Say", "States": {"Say": {"Type": "Pass", "End": True}}})
    shell = len('{"q":""}') + 4  # its four quotes are escaped in the log
    texts = {
        "at the limit": '{"q":"' + "x" * (LOG_PAYLOAD_LIMIT - shell) + '"}',
        "one byte over": '{"q":"' + "x" * (LOG_PAYLOAD_LIMIT - shell + 1) + '"}',
        "140 KB that escapes to 280 KB": '{"q":"' + '\\"' * 70_000 + '"}',
    }
    for case, text in texts.items():
        assert len(text.encode()) < 256 * 1024  # StartExecution accepts every one
        execution = sfn.start_execution(stateMachineArn=arn, name=f"cut-{len(text)}", input=text)["executionArn"]
        assert wait_for_termination(execution, 30)
        api = {e["id"]: next(v for k, v in e.items() if k.endswith("EventDetails"))
               for e in sfn.get_execution_history(executionArn=execution)["events"]}
        sizes, cuts = [], []
        for record in log_records(stack, execution):
            for field in ("input", "output"):
                if field not in record.get("details", {}):
                    continue
                logged, whole = record["details"][field], api[int(record["id"])][field]
                cut = record["details"][f"{field}Details"]["truncated"]
                assert api[int(record["id"])][f"{field}Details"]["truncated"] is False  # the API keeps it whole
                assert escaped_size(logged) <= LOG_PAYLOAD_LIMIT, (case, record["type"])
                if escaped_size(whole) <= LOG_PAYLOAD_LIMIT:
                    assert (logged, cut) == (whole, False), (case, record["type"])
                else:  # the longest prefix that fits (an escape is at most 6 bytes)
                    assert cut is True and whole.startswith(logged), (case, record["type"])
                    assert escaped_size(logged) > LOG_PAYLOAD_LIMIT - 6, (case, record["type"])
                sizes.append(escaped_size(whole))
                cuts.append(cut)
        if case == "at the limit":
            assert LOG_PAYLOAD_LIMIT in sizes and not any(cuts[sizes.index(LOG_PAYLOAD_LIMIT):][:1])
        else:
            assert any(cuts)


# --- EventBridge ----------------------------------------------------------------------------------------------
def test_an_input_transformer_gets_eventbridges_predefined_variables(stack):
    # https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html ("Predefined
    # variables"): the rule's ARN and name, the event without its detail, the ingestion time as ISO 8601.
    # Stock moto 5.2.5 leaves the first three in the template (invalid JSON) and writes a Unix time.
    arn = machine(stack, {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})
    events = stack.client("events")
    rule = events.put_rule(Name="parity-transformer", EventPattern=json.dumps({"source": ["parity.test"]}))["RuleArn"]
    events.put_targets(Rule="parity-transformer", Targets=[{"Id": "t", "Arn": arn, "InputTransformer": {
        "InputPathsMap": {"detail": "$.detail"},
        "InputTemplate": '{"detail": <detail>, "rule": "<aws.events.rule-arn>", "name": "<aws.events.rule-name>", '
                         '"event": <aws.events.event>, "at": "<aws.events.event.ingestion-time>"}'}}])
    before = time.time()
    events.put_events(Entries=[{"Source": "parity.test", "DetailType": "t", "Detail": json.dumps({"k": 1})}])
    [started] = stack.client("stepfunctions").list_executions(stateMachineArn=arn)["executions"]
    sent = json.loads(stack.client("stepfunctions").describe_execution(executionArn=started["executionArn"])["input"])
    assert sent["detail"] == {"k": 1} and sent["rule"] == rule and sent["name"] == "parity-transformer"
    assert sent["event"]["source"] == "parity.test" and sent["event"]["account"] == "123456789012"
    assert "detail" not in sent["event"] and "ingestion-time" not in sent["event"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", sent["event"]["time"])
    at = datetime.datetime.fromisoformat(sent["at"].replace("Z", "+00:00")).timestamp()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", sent["at"]) and before - 1 <= at <= time.time() + 1


# --- IAM evaluated (issue 33 item 2: moto_patches.iam) --------------------------------------------------------
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html
def _user(stack, name: str, statements: list[dict]):
    iam = stack.client("iam")
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="p",
                        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    import boto3

    return lambda service: boto3.client(service, region_name="us-east-1", aws_access_key_id=key["AccessKeyId"],
                                        aws_secret_access_key=key["SecretAccessKey"])


def _refused(call) -> str:
    with pytest.raises(ClientError) as raised:
        call()
    assert raised.value.response["Error"]["Code"] in ("AccessDeniedException", "AccessDenied")
    return raised.value.response["Error"]["Message"]


def test_iam_allows_what_an_identity_policy_allows_on_its_resource_and_an_explicit_deny_wins(stack, cf):
    machine = cf.state_machine_arn
    make = _user(stack, "u", [{"Effect": "Allow", "Action": "states:StartExecution", "Resource": machine},
                              {"Effect": "Allow", "Action": "states:Describe*", "Resource": "*"},
                              {"Effect": "Deny", "Action": "states:DescribeStateMachine", "Resource": "*"}])
    sfn = make("stepfunctions")
    assert sfn.start_execution(stateMachineArn=machine, input=principal.direct_input(
        {"entityId": "iam#1", "operation": "put", "changeId": "c1", "attributes": {}}))["executionArn"]
    assert "explicit deny in an identity-based policy" in _refused(
        lambda: sfn.describe_state_machine(stateMachineArn=machine))
    message = _refused(lambda: make("dynamodb").put_item(TableName=cf.table, Item={"pk": {"S": "x"}, "sk": {"S": "v0"}}))
    assert message == (f"User: arn:aws:iam::123456789012:user/u is not authorized to perform: dynamodb:PutItem on "
                       f"resource: arn:aws:dynamodb:us-east-1:123456789012:table/{cf.table} because no "
                       "identity-based policy allows the dynamodb:PutItem action")


def test_iam_evaluates_a_resource_policys_deny_with_the_requests_condition_keys(stack):
    # the bus's policy denies PutEvents whose events:source is not the stack's (ChangeBusOnlyThisSource)
    make = _user(stack, "producer", [{"Effect": "Allow", "Action": "events:PutEvents", "Resource": "*"}])
    events, bus = make("events"), stack.outputs["ChangeBusName"]
    entry = {"DetailType": "ChangeRequested", "EventBusName": bus, "Detail": "{}"}
    # entry by entry (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsResultEntry.html)
    answer = events.put_events(Entries=[{**entry, "Source": "someone.else"},
                                        {**entry, "Source": stack.outputs["ChangeEventSource"]}])
    refused, sent = answer["Entries"]
    assert answer["FailedEntryCount"] == 1 and refused["ErrorCode"] == "NotAuthorizedForSourceException"
    assert "explicit deny in a resource-based policy" in refused["ErrorMessage"] and sent["EventId"]
    # a caller no policy lets call PutEvents is refused the call
    nobody = _user(stack, "nobody", [{"Effect": "Allow", "Action": "sqs:ListQueues", "Resource": "*"}])
    assert "no identity-based policy allows" in _refused(
        lambda: nobody("events").put_events(Entries=[{**entry, "Source": stack.outputs["ChangeEventSource"]}]))


def test_a_kms_key_policy_is_the_only_way_in_unless_it_delegates_to_the_account(stack):
    # https://docs.aws.amazon.com/kms/latest/developerguide/key-policy-overview.html
    make = _user(stack, "admin", [{"Effect": "Allow", "Action": "*", "Resource": "*"}])
    kms = stack.client("kms")
    only_a_role = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:role/somebody"}, "Action": "kms:*",
         "Resource": "*"}]}
    delegated = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "kms:*", "Resource": "*"}]}
    closed = kms.create_key(Policy=json.dumps(only_a_role), BypassPolicyLockoutSafetyCheck=True)["KeyMetadata"]["KeyId"]
    open_ = kms.create_key(Policy=json.dumps(delegated))["KeyMetadata"]["KeyId"]
    assert "no resource-based policy allows the kms:Encrypt action" in _refused(
        lambda: make("kms").encrypt(KeyId=closed, Plaintext=b"x"))
    assert make("kms").encrypt(KeyId=open_, Plaintext=b"x")["CiphertextBlob"]


def test_assuming_a_role_takes_its_trust_policy(stack):
    make = _user(stack, "assumer", [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}])
    role = stack.access.role_arn("SubmitChangeFunction")  # trusts lambda.amazonaws.com only
    assert "sts:AssumeRole" in _refused(lambda: make("sts").assume_role(RoleArn=role, RoleSessionName="session"))


# --- DynamoDB Streams and EventBridge Pipes (issue 36) -----------------------------------------------------------
def _stream_table(stack, name: str = "parity-stream"):
    client = stack.client("dynamodb")
    arn = client.create_table(TableName=name, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                              BillingMode="PAY_PER_REQUEST",
                              StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
                              )["TableDescription"]["LatestStreamArn"]
    streams = stack.client("dynamodbstreams")
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    return client, streams, arn, shard


def test_a_stream_record_is_trimmed_after_24_hours(stack):
    # https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html ("stores this information in
    # a log for up to 24 hours"); GetShardIterator and GetRecords: TrimmedDataAccessException past the trim point.
    # Stock moto 5.2.5 keeps every record for ever: the reader a week late still reads them all.
    from changeflow.local.moto_patches.dynamodbstreams.retention import StreamClock

    client, streams, arn, shard = _stream_table(stack)
    client.put_item(TableName="parity-stream", Item={"pk": {"S": "old"}})

    def oldest() -> str:
        return streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]

    [record] = streams.get_records(ShardIterator=oldest())["Records"]
    created = record["dynamodb"]["ApproximateCreationDateTime"].timestamp()
    assert abs(created - time.time()) < 2
    held = oldest()
    StreamClock.advance(24 * 3600 + 1)
    assert streams.get_records(ShardIterator=oldest())["Records"] == []
    with pytest.raises(ClientError) as trimmed:
        streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="AT_SEQUENCE_NUMBER",
                                   SequenceNumber=record["dynamodb"]["SequenceNumber"])
    assert trimmed.value.response["Error"]["Code"] == "TrimmedDataAccessException"
    with pytest.raises(ClientError) as trimmed:  # taken before the record aged out, used after
        streams.get_records(ShardIterator=held)
    assert trimmed.value.response["Error"]["Code"] == "TrimmedDataAccessException"
    client.put_item(TableName="parity-stream", Item={"pk": {"S": "new"}})
    [fresh] = streams.get_records(ShardIterator=oldest())["Records"]
    assert fresh["dynamodb"]["Keys"] == {"pk": {"S": "new"}}
    assert fresh["dynamodb"]["ApproximateCreationDateTime"].timestamp() - time.time() > 24 * 3600


def test_a_pipe_delivers_its_stream_in_order_filtered_in_batches_its_target_takes(stack):
    # https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-dynamodb.html (order kept),
    # eb-pipes-event-filtering.html, eb-pipes-batching-concurrency.html (an event bus takes 10 a batch).
    # Stock moto 5.2.5 stores the pipe and delivers nothing.
    from changeflow.local.moto_patches.pipes import runner

    client, _, arn, _ = _stream_table(stack)
    sqs, events = stack.client("sqs"), stack.client("events")
    queue = sqs.create_queue(QueueName="parity-pipe")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="parity-pipe", EventPattern=json.dumps({"source": ["parity.pipe"]}))
    events.put_targets(Rule="parity-pipe", Targets=[{"Id": "q", "Arn": queue_arn}])
    iam = stack.client("iam")  # the pipe's role, which Pipes assumes to deliver (IAM is evaluated)
    iam.create_role(RoleName="parity", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "pipes.amazonaws.com"}, "Action": "sts:AssumeRole"}]}))
    iam.put_role_policy(RoleName="parity", PolicyName="deliver", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "events:PutEvents", "Resource": "*"}]}))
    stack.client("pipes").create_pipe(
        Name="parity-pipe", RoleArn="arn:aws:iam::123456789012:role/parity", Source=arn,
        Target="arn:aws:events:us-east-1:123456789012:event-bus/default",
        SourceParameters={"FilterCriteria": {"Filters": [{"Pattern": json.dumps({"dynamodb": {"Keys": {"pk": {"S": [
            {"prefix": "keep"}]}}}})}]}, "DynamoDBStreamParameters": {"StartingPosition": "TRIM_HORIZON", "BatchSize": 10}},
        TargetParameters={"EventBridgeEventBusParameters": {"Source": "parity.pipe", "DetailType": "record"}})
    for n in range(25):
        client.put_item(TableName="parity-stream", Item={"pk": {"S": f"{'keep' if n % 5 else 'drop'}-{n:02d}"}})
    delivered = []
    deadline = time.monotonic() + 30
    while len(delivered) < 20 and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", []):
            delivered.append(json.loads(message["Body"])["detail"]["dynamodb"]["Keys"]["pk"]["S"])
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
    assert delivered == [f"keep-{n:02d}" for n in range(25) if n % 5]
    stats = runner.statistics("parity-pipe")
    assert stats["records filtered out"] == 5 and stats["target requests"] >= 2  # 20 events, 10 a request at most


def test_a_stopped_pipe_sleeps_through_the_writes_and_wakes_at_start_pipe(stack, cf, monkeypatch):
    # StopPipe: the pipe reads nothing until StartPipe (API_StopPipe, API_StartPipe). Its thread used to wake on
    # every stream record all the same, and each wake took the GIL from the writers. The poll that bounds a
    # state set without the API is made longer than the test, so only StartPipe can wake it.
    from changeflow.local.moto_patches.pipes import runner

    monkeypatch.setattr(runner, "IDLE_POLL_SECONDS", 60.0)
    pipe = f"{stack.template.stack_name}-FeedPipe"
    stack.stop_pipes()
    delivered = runner.statistics(pipe)["events delivered"]
    for n in range(6):  # 18 stream records: v0, the history item and its expiry tags, each change
        cf.submit({"entityId": f"stopped-{n}", "operation": "put", "changeId": f"s{n}", "attributes": {"n": n}})
    time.sleep(0.2)
    stopped = runner.statistics(pipe)
    assert stopped["waits while stopped"] <= 2, "the stopped pipe woke on the writes"
    assert stopped["events delivered"] == delivered
    stack.client("pipes").start_pipe(Name=pipe)
    deadline = time.monotonic() + 30  # well inside the 60 s poll: StartPipe woke it
    while runner.statistics(pipe)["events delivered"] < delivered + 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.statistics(pipe)["events delivered"] == delivered + 6  # each version once, none lost while stopped


def test_a_pipe_retries_a_failing_batch_then_dead_letters_it_and_moves_on(stack, cf):
    # PipeSourceDynamoDBStreamParameters: MaximumRetryAttempts, then DeadLetterConfig; a target that took the
    # events but whose answer was lost gets them again (at least once). The template's own pipe: 10 retries.
    from changeflow.checks.faults import Injector

    injector, sqs = Injector(), stack.client("sqs")
    with injector.around(stack.lambdas, [("FeedEventsFunction", "before", 11)]):  # the first batch, every attempt
        cf.submit({"entityId": "parity", "operation": "put", "changeId": "p1", "attributes": {"n": 1}})
        deadline = time.monotonic() + 30
        while injector.injected["failure before the write"] < 11 and time.monotonic() < deadline:
            time.sleep(0.05)
    queue = stack.outputs["FeedDeadLetterQueueUrl"]
    dead_letters = []  # the runner sends the batch after its last failure: wait for it (another invocation, the
    deadline = time.monotonic() + 30  # scheduled digest's, may take the in-process Lambda service's turn first)
    while not dead_letters and time.monotonic() < deadline:
        dead_letters = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0).get("Messages", [])
        time.sleep(0.02)
    [dead] = dead_letters
    batch = json.loads(dead["Body"])
    assert batch["context"]["condition"] == "RetryAttemptsExhausted" and batch["DDBStreamBatchInfo"]["batchSize"] == 1
    from changeflow.local.moto_patches.pipes import runner

    pipe = f"{stack.template.stack_name}-FeedPipe"
    with injector.feed_target([("lost", 1)]):
        cf.submit({"entityId": "parity", "operation": "put", "changeId": "p2", "attributes": {"n": 2}})
        deadline = time.monotonic() + 30
        while runner.statistics(pipe)["events delivered"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert runner.statistics(pipe)["events delivered"] == 2  # version 2, twice: the shard moved on past version 1


# --- S3 Object Lock and EventBridge Scheduler (issue 35: the digests) ------------------------------------------
@pytest.fixture
def locked_bucket(make_stack):
    """A bucket with Object Lock and a version locked in each mode, on a stack whose digest schedule stays quiet."""
    stack = make_stack(DigestSchedule="rate(365 days)")
    s3 = stack.client("s3")
    s3.create_bucket(Bucket="parity-locked", ObjectLockEnabledForBucket=True)
    until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=30)
    versions = {mode: s3.put_object(Bucket="parity-locked", Key=mode, Body=b"x", ObjectLockMode=mode,
                                    ObjectLockRetainUntilDate=until, ChecksumAlgorithm="SHA256")["VersionId"]
                for mode in ("COMPLIANCE", "GOVERNANCE")}
    return s3, versions, until


def retention(s3, mode, version):
    head = s3.head_object(Bucket="parity-locked", Key=mode, VersionId=version)
    return head["ObjectLockMode"], head["ObjectLockRetainUntilDate"]


def test_a_compliance_locked_version_keeps_its_mode_and_its_date_can_only_grow(locked_bucket):
    # https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-lock.html (Retention modes): "When an object
    # is locked in compliance mode, its retention mode can't be changed, and its retention period can't be
    # shortened." Stock moto 5.2.5 replaces any retention.
    s3, versions, until = locked_bucket
    version = versions["COMPLIANCE"]
    for mode, date in (("COMPLIANCE", until - datetime.timedelta(days=1)), ("GOVERNANCE", until),
                       ("GOVERNANCE", until + datetime.timedelta(days=1))):
        with pytest.raises(ClientError, match="AccessDenied"):
            s3.put_object_retention(Bucket="parity-locked", Key="COMPLIANCE", VersionId=version,
                                    Retention={"Mode": mode, "RetainUntilDate": date},
                                    BypassGovernanceRetention=True)
    assert retention(s3, "COMPLIANCE", version)[0] == "COMPLIANCE"
    later = until + datetime.timedelta(days=365)
    s3.put_object_retention(Bucket="parity-locked", Key="COMPLIANCE", VersionId=version,
                            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later})
    assert retention(s3, "COMPLIANCE", version)[1].date() == later.date()
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.delete_object(Bucket="parity-locked", Key="COMPLIANCE", VersionId=version, BypassGovernanceRetention=True)


def test_a_governance_locked_version_is_shortened_only_with_the_bypass_header(locked_bucket):
    # same page, "Bypassing governance mode": shortening or removing a governance retention needs
    # x-amz-bypass-governance-retention (and the s3:BypassGovernanceRetention permission)
    s3, versions, until = locked_bucket
    version, shorter = versions["GOVERNANCE"], until - datetime.timedelta(days=1)
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.put_object_retention(Bucket="parity-locked", Key="GOVERNANCE", VersionId=version,
                                Retention={"Mode": "GOVERNANCE", "RetainUntilDate": shorter})
    s3.put_object_retention(Bucket="parity-locked", Key="GOVERNANCE", VersionId=version,
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": shorter}, BypassGovernanceRetention=True)
    assert retention(s3, "GOVERNANCE", version)[1].date() == shorter.date()


def test_versioning_cannot_be_suspended_on_a_bucket_with_object_lock(locked_bucket):
    # https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-lock-configure.html: "After you enable Object
    # Lock on a bucket, you can't disable Object Lock or suspend versioning for that bucket." Stock moto suspends.
    s3, _, _ = locked_bucket
    with pytest.raises(ClientError, match="InvalidBucketState"):
        s3.put_bucket_versioning(Bucket="parity-locked", VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket="parity-locked")["Status"] == "Enabled"


def test_a_default_retention_changes_on_a_bucket_that_holds_objects_for_new_ones_only(locked_bucket):
    # https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObjectLockConfiguration.html: "You can enable Object
    # Lock for new or existing buckets"; the rule applies "to every new object". Stock moto: BucketNeedsToBeNew.
    s3, versions, _ = locked_bucket
    s3.put_object_lock_configuration(Bucket="parity-locked", ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 1}}})
    new = s3.put_object(Bucket="parity-locked", Key="new", Body=b"y", ChecksumAlgorithm="SHA256")["VersionId"]
    assert s3.head_object(Bucket="parity-locked", Key="new", VersionId=new)["ObjectLockMode"] == "COMPLIANCE"
    s3.put_object_lock_configuration(Bucket="parity-locked", ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    assert retention(s3, "COMPLIANCE", versions["COMPLIANCE"])[0] == "COMPLIANCE"  # a locked version stays locked


def test_a_schedule_invokes_its_lambda_target_with_its_context_attributes_on_the_stacks_time_scale(make_stack):
    # https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-schedule-context-attributes.html: Scheduler
    # fills in <aws.scheduler.*> in the target's Input. Stock moto 5.2.5 stores a schedule and never runs it.
    stack = make_stack(DigestSchedule="rate(365 days)")
    digest = stack.function("DigestFunction")
    scheduler = stack.client("scheduler")
    # its role: the one SAM makes for the digest's own schedule (Scheduler assumes it and invokes as it)
    target = {"Arn": digest.arn, "RoleArn": stack.template.arn("DigestFunctionDigestScheduleRole"),
              "Input": json.dumps({"scheduledTime": "<aws.scheduler.scheduled-time>",
                                   "schedule": "<aws.scheduler.schedule-arn>#<aws.scheduler.attempt-number>"})}
    arn = scheduler.create_schedule(Name="parity-every-hour", ScheduleExpression="rate(1 hour)", Target=target,
                                    FlexibleTimeWindow={"Mode": "OFF"})["ScheduleArn"]
    deadline = time.monotonic() + 20
    while digest.invocations < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    scheduler.delete_schedule(Name="parity-every-hour")
    assert digest.invocations >= 2
    events = [json.loads(line) for line in digest.logs if '"message":"digest"' in line.replace(" ", "")]
    assert events and all(e["schedule"] == f"{arn}#1" for e in events)
    times = sorted(datetime.datetime.fromisoformat(e["scheduledTime"].replace("Z", "+00:00")) for e in events)
    assert all(b - a == datetime.timedelta(hours=1) for a, b in zip(times, times[1:]))
    stopped = digest.invocations
    time.sleep(0.5)
    assert digest.invocations == stopped  # deleted: it runs no more


def test_a_cron_schedule_fires_each_minute_its_fields_match():
    # https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html (cron: minutes hours
    # day-of-month month day-of-week year; one of day-of-month and day-of-week is ?)
    from changeflow.local.moto_patches.scheduler.runs import next_cron

    at = datetime.datetime(2026, 11, 25, 21, 7, tzinfo=datetime.timezone.utc)  # a Wednesday
    assert next_cron("cron(5 * * * ? *)", at, "UTC") == at.replace(hour=22, minute=5)
    assert next_cron("cron(0 8 ? * MON-FRI *)", at, "UTC") == datetime.datetime(2026, 11, 26, 8, 0,
                                                                              tzinfo=datetime.timezone.utc)
    assert next_cron("cron(0/15 * * * ? *)", at, "UTC") == at.replace(minute=15)
    assert next_cron("cron(0 0 1 1 ? 2027)", at, "UTC").year == 2027


def test_an_index_key_attribute_of_another_type_is_refused_in_every_item_and_nothing_is_written(make_stack):
    # https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html: an index key attribute is a
    # scalar of its declared type; DynamoDB refuses a write that gives it another, in a sparse index too
    # ("Type mismatch for Index Key", as DynamoDB emulators' conformance suites record it: nubo-db/dynoxide#94).
    # Stock moto 5.2.5 accepts it unless an update expression names the attribute literally.
    stack = make_stack(DigestSchedule="rate(365 days)")
    dynamodb, table = stack.client("dynamodb"), stack.outputs["ChangeTableName"]
    item = {"pk": {"S": "p"}, "sk": {"S": "v#0000000001"}, "recordedHour": {"N": "1"}}  # no digestShard: not indexed
    dynamodb.put_item(TableName=table, Item=item)
    with pytest.raises(ClientError, match="Type mismatch for Index Key recordedHour Expected: N Actual: S "
                                          "IndexName: ChangesIndex"):
        dynamodb.put_item(TableName=table, Item={**item, "sk": {"S": "v#0000000002"}, "recordedHour": {"S": "then"}})
    with pytest.raises(ClientError, match="Type mismatch for Index Key"):
        dynamodb.update_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]},
                             UpdateExpression="SET #r = :r, extra = :o", ExpressionAttributeNames={"#r": "recordedHour"},
                             ExpressionAttributeValues={":r": {"S": "then"}, ":o": {"S": "x"}})
    stored = dynamodb.get_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})["Item"]
    assert stored == item  # nothing of the refused update was applied
    assert "Item" not in dynamodb.get_item(TableName=table, Key={"pk": {"S": "p"}, "sk": {"S": "v#0000000002"}})
    dynamodb.update_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]}, UpdateExpression="SET extra = :o",
                         ExpressionAttributeValues={":o": {"S": "x"}})  # an update that leaves the keys alone passes
