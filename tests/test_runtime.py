"""The Lambda runtime without Docker: handlers run by the Runtime Interface Emulator (shipped in aws-sam-cli)
with awslambdaric, on the runtime venv's Python (python3.13, Lambda's runtime, where pyenv has it).

``changeflow local invoke`` behaves as ``sam local invoke`` does (response on stdout, logs and the
START/END/REPORT lines on stderr, exit 0 when the function ran even if it failed, 1 when it could not
be run), and ``--lambda-runtime emulator`` runs the whole workflow with one process per execution
environment: handlers no longer take turns, timeouts are real, ``context`` is the runtime's own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import EVENTS, ROOT

from changeflow.local.runtime import emulator, functions
from changeflow.local.runtime.dispatch import EmulatorRuntime
from changeflow_core import principal
from changeflow.cli import main

T0 = 1_767_225_600_000


def _runtime_python() -> Path:
    try:
        return emulator.runtime_python(ROOT)
    except emulator.RuntimeSetupError as exc:
        if os.environ.get("CI"):
            raise  # make test builds it (make lambda-runtime): in CI its absence is a failure
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def lambda_python() -> Path:
    return _runtime_python()


def pyenv_has_313() -> bool:
    try:
        out = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.strip().startswith("3.13") for line in out.splitlines())


def test_the_runtime_is_python_3_13_where_pyenv_has_it(lambda_python):
    # what ships to Lambda runs on python3.13 (the template's Runtime): the tests' handlers too
    version = emulator.runtime_version(lambda_python)
    if pyenv_has_313():
        assert version == "python3.13"
    else:
        assert version.startswith("python3.")


# --- changeflow local invoke, on a probe function (its own small template) -------------------------------
PROBE_TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  Greeting:
    Type: String
    Default: hello
Globals:
  Function:
    Runtime: python3.13
    Handler: app.handler
    Timeout: 5
    MemorySize: 384
    Layers: [!Ref ProbeLayer]
    Environment:
      Variables:
        FROM_GLOBALS: globals
        SHARED: globals
Resources:
  ProbeLayer:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: layer/
  ProbeFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: probe/
      Timeout: 2
      Environment:
        Variables:
          SHARED: function
          GREETING: !Ref Greeting
"""

PROBE_APP = """\
import os, sys, time
import probe_layer

def handler(event, context):
    print("probe saw", event.get("say", "nothing"))
    if event.get("sleep"):
        time.sleep(event["sleep"])
    if event.get("fail"):
        raise KeyError("asked to fail")
    return {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "env": {k: os.environ.get(k) for k in ("FROM_GLOBALS", "SHARED", "GREETING", "NOT_DECLARED",
                "AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_TIMEOUT",
                "AWS_ENDPOINT_URL", "AWS_REGION", "LAMBDA_TASK_ROOT", "HOST_ONLY")},
        "context": {"function_name": context.function_name, "memory_limit_in_mb": int(context.memory_limit_in_mb),
                    "remaining_ms": context.get_remaining_time_in_millis(), "request_id": context.aws_request_id},
        "layer": probe_layer.WHERE,
        "task_root_first": sys.path.index(os.environ["LAMBDA_TASK_ROOT"]) < sys.path.index(os.path.dirname(probe_layer.__file__)),
        "cwd": os.getcwd(),
    }
"""


@pytest.fixture
def probe(tmp_path, lambda_python, monkeypatch):
    (tmp_path / "template.yaml").write_text(PROBE_TEMPLATE)
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "app.py").write_text(PROBE_APP)
    (tmp_path / "layer").mkdir()
    (tmp_path / "layer" / "probe_layer.py").write_text("WHERE = 'the layer, where /opt/python puts it'\n")
    monkeypatch.setenv("CHANGEFLOW_LAMBDA_PYTHON", str(lambda_python))
    monkeypatch.setenv("HOST_ONLY", "must not leak into the function")
    return tmp_path


def local_invoke(capsys, *args) -> tuple[int, str, str]:
    code = main(["local", "invoke", *args])
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_local_invoke_runs_the_handler_in_the_runtime_with_the_templates_configuration(probe, capsys):
    event = write(probe / "event.json", {"say": "hi"})
    code, out, err = local_invoke(capsys, "ProbeFunction", "-e", event, "-t", str(probe / "template.yaml"),
                                  "--endpoint-url", "http://127.0.0.1:9")
    assert code == 0
    response = json.loads(out)  # stdout is the response and nothing else
    env, context = response["env"], response["context"]
    # the template's environment with Globals merged: the function's own value wins, parameters resolved
    assert env["FROM_GLOBALS"] == "globals" and env["SHARED"] == "function" and env["GREETING"] == "hello"
    # its Timeout and MemorySize, and the runtime's own context
    assert env["AWS_LAMBDA_FUNCTION_TIMEOUT"] == "2" and env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "384"
    assert context["memory_limit_in_mb"] == 384 and 0 < context["remaining_ms"] <= 2000
    assert context["function_name"] == env["AWS_LAMBDA_FUNCTION_NAME"] == "changeflow-ProbeFunction"
    # AWS endpoints at the given serve; nothing of this shell's environment leaks in
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9" and env["HOST_ONLY"] is None
    # the layer's code where /opt/python would be: after the task root, which is the working directory
    assert response["layer"] == "the layer, where /opt/python puts it" and response["task_root_first"]
    assert Path(response["cwd"]) == probe / "probe" == Path(env["LAMBDA_TASK_ROOT"])
    if pyenv_has_313():
        assert response["python"] == "3.13"
    # the function's output and the runtime's START/END/REPORT lines on stderr, for this request
    request_id = context["request_id"]
    assert "probe saw hi" in err
    assert f"START RequestId: {request_id}" in err and f"END RequestId: {request_id}" in err
    assert f"REPORT RequestId: {request_id}" in err and "Memory Size: 384 MB" in err


def test_local_invoke_env_vars_file_and_parameters_override_as_sam_does(probe, capsys):
    # sam local invoke --env-vars: Parameters for every function, the function's entry wins, and only
    # variables the template declares are set
    env_vars = write(probe / "env.json", {"Parameters": {"SHARED": "everyone", "FROM_GLOBALS": "params"},
                                          "ProbeFunction": {"SHARED": "mine", "NOT_DECLARED": "x"}})
    code, out, _ = local_invoke(capsys, "ProbeFunction", "--env-vars", env_vars, "--param", "Greeting=hej",
                                "-t", str(probe / "template.yaml"))
    env = json.loads(out)["env"]
    assert code == 0
    assert env["SHARED"] == "mine" and env["FROM_GLOBALS"] == "params" and env["GREETING"] == "hej"
    assert env["NOT_DECLARED"] is None


def test_a_handler_past_its_timeout_fails_as_on_lambda(probe, capsys):
    # the template gives 2 s; the handler would take 4: the runtime stops it at 2 s
    event = write(probe / "slow.json", {"sleep": 4})
    code, out, err = local_invoke(capsys, "ProbeFunction", "-e", event, "-t", str(probe / "template.yaml"))
    assert code == 0  # sam local invoke: the function ran; its failure is the response
    response = json.loads(out)
    assert response["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after 2.00 seconds" in response["errorMessage"]
    report = next(line for line in err.splitlines() if line.startswith("REPORT"))
    duration_ms = float(re.search(r"\tDuration: ([0-9.]+) ms", report).group(1))
    assert 2000 <= duration_ms < 3500


def test_an_unhandled_error_is_the_runtimes_error_document_and_exit_0(probe, capsys):
    event = write(probe / "fail.json", {"fail": True})
    code, out, err = local_invoke(capsys, "ProbeFunction", "-e", event, "-t", str(probe / "template.yaml"))
    assert code == 0
    response = json.loads(out)
    assert response["errorType"] == "KeyError" and "asked to fail" in response["errorMessage"]
    assert response["stackTrace"] and "[ERROR] KeyError" in err


def test_what_cannot_be_run_exits_1_with_the_reason(probe, capsys):
    template = str(probe / "template.yaml")
    code, out, err = local_invoke(capsys, "NoSuchFunction", "-t", template)
    assert (code, out) == (1, "") and "Function NoSuchFunction not found in template" in err
    code, out, err = local_invoke(capsys, "ProbeFunction", "-e", str(probe / "missing.json"), "-t", template)
    assert (code, out) == (1, "") and "missing.json" in err
    (probe / "nested.json").write_text("[" * 5000 + "]" * 5000)  # nested past the JSON parser's depth
    code, out, err = local_invoke(capsys, "ProbeFunction", "--env-vars", str(probe / "nested.json"), "-t", template)
    assert (code, out) == (1, "") and "--env-vars" in err and "nested.json" in err, err


def test_the_function_can_be_named_by_its_physical_name(probe, capsys):
    code, out, _ = local_invoke(capsys, "changeflow-ProbeFunction", "-t", str(probe / "template.yaml"))
    assert code == 0 and json.loads(out)["env"]["SHARED"] == "function"


def test_interpret_tells_results_from_errors_as_the_lambda_service_does():
    assert emulator.interpret(200, b'{"errorType": "X", "errorMessage": "m", "requestId": "r"}') == (
        {"errorType": "X", "errorMessage": "m", "requestId": "r"}, True)
    # a result that merely has an errorType among other fields is a result
    assert emulator.interpret(200, b'{"errorType": "X", "errorMessage": "m", "order": 1}')[1] is False
    assert emulator.interpret(200, b"Task timed out after 3.00 seconds") == (
        {"errorType": "Sandbox.Timedout", "errorMessage": "Error: Task timed out after 3.00 seconds"}, True)
    assert emulator.interpret(200, b"null") == (None, False)


# --- every file in events/functions/, through the emulator, against an embedded serve ---------------------
# events/functions/<name>.json is a payload for the function whose CodeUri is functions/<name>/; the
# workflow's steps run first, in the workflow's order, so that each finds what the one before wrote
WORKFLOW_ORDER = ["fetch_latest", "update_latest", "put_history", "tag_ttl", "delete_tombstone", "read_api"]


def functions_by_folder() -> dict[str, str]:
    from changeflow.local.template import Template

    template = Template(ROOT / "template.yaml")
    return {Path(template.function_properties(f)["CodeUri"]).name: f
            for f in template.of_type("AWS::Serverless::Function")}


@pytest.fixture
def served(lambda_python):
    from changeflow.local.server import EmbeddedServer

    with EmbeddedServer(port=0) as server:
        yield server


SEALING = {"fetch_latest", "update_latest", "put_history", "tag_ttl", "delete_tombstone", "submit_change",
           "receive_event"}  # the functions that seal or check seals (changeflow_core.seal)


def test_every_function_event_runs_in_the_emulator_against_a_serve(served, capsys):
    """Each payload runs in the emulator as ``sam local invoke`` runs it: outside the stack, with your
    credentials. The read API answers. Every function that seals or checks a seal is refused the seal key
    (issue 33: nobody in the account reads it, the default credentials included), by name, and writes nothing,
    as a direct invocation on AWS does; tests/test_handlers.py runs those payloads with their example key."""
    functions = functions_by_folder()
    files = sorted((EVENTS / "functions").glob("*.json"),
                   key=lambda p: (WORKFLOW_ORDER.index(p.stem) if p.stem in WORKFLOW_ORDER else len(WORKFLOW_ORDER), p.stem))
    assert {p.stem for p in files} >= set(WORKFLOW_ORDER) and all(p.stem in functions for p in files)
    assert {p.stem for p in files} - {"read_api", "feed_events", "take_digest"} == SEALING
    from changeflow.client import Changeflow

    results = {}
    for path in files:
        code, out, err = local_invoke(capsys, functions[path.stem], "-e", str(path), "--endpoint-url", served.url)
        assert code == 0, err
        assert "REPORT RequestId:" in err
        results[path.stem] = json.loads(out)
        if path.stem in SEALING:  # THEN refused the key, by name
            assert emulator.is_error_document(results[path.stem]), (path.name, results[path.stem])
            message = results[path.stem]["errorMessage"]
            assert "AccessDeniedException" in message and "GetSecretValue" in message, (path.name, message)
        else:  # AND the read API answers, not a server error
            assert not emulator.is_error_document(results[path.stem]), (path.name, results[path.stem])
    read = results["read_api"]
    assert read["statusCode"] == 200 and json.loads(read["body"])["items"] == []
    # AND nothing was written, nothing started
    entity = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=served.url).entity("user#1001")
    assert entity["versions"] == [] and entity["latest"] is None


# --- the whole workflow with handlers in the emulator ----------------------------------------------------
@pytest.fixture
def emulated(lambda_python):
    from changeflow.local.embedded import EmbeddedStack

    with EmbeddedStack(ROOT, time_scale=0.0005, lambda_runtime="emulator") as running:
        yield running


def put(entity="doc#1", at=T0, change=None, **attributes):
    request = {"entityId": entity, "operation": "put", "attributes": attributes or {"v": at}, "effectiveAt": at}
    if change:
        request["changeId"] = change
    return request


def test_the_workflow_runs_with_handlers_in_the_runtime_and_logs_as_on_lambda(lambda_python):
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack

    # at levels that send Lambda's own lines (INFO) and each step's summary (DEBUG): the defaults send neither
    with EmbeddedStack(ROOT, time_scale=0.0005, lambda_runtime="emulator",
                       parameters={"FunctionSystemLogLevel": "INFO", "LogLevel": "DEBUG"}) as emulated:
        logs_as_on_lambda(emulated, Changeflow.for_embedded(emulated))


def logs_as_on_lambda(emulated, cf):
    execution = cf.submit(put(v=1))
    assert execution.status == "SUCCEEDED" and execution.output["outcome"] == "applied"
    assert [v["version"] for v in cf.entity("doc#1")["versions"]] == [1]
    # the function's log holds the runtime's lines, and Powertools' context is the runtime's own
    logs = list(emulated.function("FetchLatestFunction").logs)
    start = next(line for line in logs if line.startswith("START RequestId:"))
    request_id = start.split()[2]
    records = [json.loads(line) for line in logs if line.startswith('{"level"')]
    assert any(r.get("function_request_id") == request_id and r.get("cold_start") is not None for r in records)
    assert any(line.startswith(f"REPORT RequestId: {request_id}") for line in logs)


def test_handlers_do_not_take_turns_in_the_emulator(emulated):
    # GIVEN two executions whose fetch steps are held until both are in flight at once
    # (in-process, handlers take turns: the second would never arrive, and the barrier breaks)
    from changeflow.client import Changeflow
    from changeflow.local.lambdas import fault_hook

    # The emulator adds a function's second environment only while no other is starting (two cores): the
    # feed's enrichment or the digest, cold beside the workflow, would hold the fetch step's back. Neither is
    # tested here.
    emulated.stop_pipes()
    emulated.stop_schedules()
    cf = Changeflow.for_embedded(emulated)
    cf.submit(put(entity="warm#1"))  # one environment per function, warm
    barrier = threading.Barrier(2, timeout=60)

    def together(function, event, invoke):
        entity = principal.request_in(event["request"])["entityId"] if "request" in event else event["change"]["entityId"]
        if function.logical_id == "FetchLatestFunction" and entity.startswith("par"):
            barrier.wait()
        return invoke()

    results = {}
    with fault_hook(emulated.lambdas, together):
        threads = [threading.Thread(target=lambda e=e: results.__setitem__(e, cf.submit(put(entity=e))))
                   for e in ("par#1", "par#2")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    # THEN both applied, and the fetch step ran in two execution environments at once
    assert {e: r.output["outcome"] for e, r in results.items()} == {"par#1": "applied", "par#2": "applied"}
    assert emulated.lambdas.runtime.processes(emulated.function("FetchLatestFunction")) == 2


def test_a_real_timeout_of_the_v0_write_is_an_unknown_outcome_resolved_by_a_fresh_read(emulated):
    # GIVEN the v0 write step with a 4 s timeout, whose PutItem is held for 8 s (the table answers late):
    # the runtime times the handler out while its write is still in flight, and the write then lands.
    # (4 s, not 1: the emulator counts a cold start inside the timeout, and a cold start here can take
    # seconds on a loaded machine; Lambda gives the first Init its own 10 s.)
    from changeflow.local.moto_patches.core.locking import API_LOCK
    from changeflow.client import Changeflow
    from changeflow.local.lambdas import fault_hook

    cf = Changeflow.for_embedded(emulated)
    emulated.function("UpdateLatestFunction").timeout_s = 4
    held = threading.Event()

    def hold_the_table():
        with API_LOCK:
            held.set()
            threading.Event().wait(8)

    def slow_table(function, event, invoke):
        if function.logical_id == "UpdateLatestFunction" and not held.is_set():
            threading.Thread(target=hold_the_table, daemon=True).start()
            held.wait()
        return invoke()

    with fault_hook(emulated.lambdas, slow_table):
        execution = cf.submit(put(v="late"))
    # THEN the state machine saw Lambda's timeout error, read again, and the change took effect once
    failures = [e for e in cf.history(execution.arn) if e["type"] in ("TaskFailed", "LambdaFunctionFailed")]
    details = [e.get("taskFailedEventDetails") or e.get("lambdaFunctionFailedEventDetails") for e in failures]
    assert "Sandbox.Timedout" in [d["error"] for d in details]
    entered = [e["stateEnteredEventDetails"]["name"] for e in cf.history(execution.arn) if e["type"].endswith("StateEntered")]
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause, entered, details)
    assert execution.output["outcome"] in ("applied", "duplicate")
    entity = cf.entity("doc#1")
    assert [v["version"] for v in entity["versions"]] == [1] and entity["latest"]["attributes"] == {"v": "late"}


def test_lambda_runtime_option_reaches_the_embedded_stack(lambda_python, capsys, tmp_path, monkeypatch):
    calls = []
    original = EmulatorRuntime.call
    monkeypatch.setattr(EmulatorRuntime, "call",
                        lambda self, function, event: calls.append(function.logical_id) or original(self, function, event))
    change = write(tmp_path / "c.json", put(entity="cli#1", v=1))
    code = main(["run", change, "--json", "--lambda-runtime", "emulator"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["executions"][0]["status"] == "SUCCEEDED"
    steps = ["FetchLatestFunction", "UpdateLatestFunction", "PutHistoryFunction"]  # the digest's schedule and
    assert [c for c in calls if c in steps][:3] == steps  # the feed's pipe may invoke theirs in between
    assert [v["version"] for v in out["entities"]["cli#1"]["versions"]] == [1]


def test_dynamodb_throttling_reaches_the_handler_out_of_process(emulated):
    # fault injection registers on the handler's DynamoDB client; out of process, the endpoint answers
    # the function's requests with the throttle, and the handler's own botocore retries them
    from changeflow.client import Changeflow
    from changeflow.checks.faults import Injector

    cf = Changeflow.for_embedded(emulated)
    function = emulated.function("FetchLatestFunction")
    emulated.lambdas.load(function)
    injector = Injector()
    with injector.throttle(function, "Query", 2, "ProvisionedThroughputExceededException"):  # its one read
        execution = cf.submit(put(entity="throttled#1", v=1))
    assert injector.injected == {"DynamoDB ProvisionedThroughputExceededException": 2}
    assert execution.output["outcome"] == "applied"
    # other functions' requests were not throttled: only the fetch step's client was
    assert [v["version"] for v in cf.entity("throttled#1")["versions"]] == [1]


def test_with_stack_name_the_function_gets_the_deployed_resources_names():
    # on AWS, CloudFormation names the resources (<stack>-ChangeTable-<suffix>): --stack-name reads them
    import boto3
    from moto import mock_aws

    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name="us-east-1")
        table = {"Type": "AWS::DynamoDB::Table", "Properties": {
            "BillingMode": "PAY_PER_REQUEST", "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}]}}
        cloudformation.create_stack(StackName="prod", TemplateBody=json.dumps({"Resources": {"ChangeTable": table}}))
        physical = cloudformation.describe_stack_resource(
            StackName="prod", LogicalResourceId="ChangeTable")["StackResourceDetail"]["PhysicalResourceId"]
        template = functions.deployed_template(ROOT, ROOT / "template.yaml", "prod", "us-east-1", {})
    spec = functions.function_spec(template, ROOT, "FetchLatestFunction")
    assert physical != "changeflow-ChangeTable"
    assert spec.environment["TABLE_NAME"] == physical and spec.name == "prod-FetchLatestFunction"


def test_with_stack_name_the_fetch_step_names_the_deployed_writer_version(monkeypatch):
    # SAM's AutoPublishAlias: the stack lists <Function>Version<hash>, whose physical id is the version ARN
    # (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-lambda-version.html)
    import boto3

    version = "arn:aws:lambda:us-east-1:123456789012:function:prod-UpdateLatestFunction-1ABC:7"
    resources = [("UpdateLatestFunction", "prod-UpdateLatestFunction-1ABC"),
                 ("UpdateLatestFunctionVersion0fb826ac35", version),
                 ("UpdateLatestFunctionAliaslive", version.rsplit(":", 1)[0] + ":live")]

    class Pages:
        def paginate(self, StackName):
            return [{"StackResourceSummaries": [{"LogicalResourceId": logical, "PhysicalResourceId": physical}
                                                for logical, physical in resources]}]

    class CloudFormation:
        meta = type("Meta", (), {"region_name": "us-east-1"})

        def get_paginator(self, name):
            return Pages()

    monkeypatch.setattr(boto3, "client", lambda *args, **kwargs: CloudFormation())
    template = functions.deployed_template(ROOT, ROOT / "template.yaml", "prod", "us-east-1", {})
    spec = functions.function_spec(template, ROOT, "FetchLatestFunction")
    assert spec.environment["UPDATE_LATEST_FUNCTION_ARN"] == version



# --- no execution environment outlives the runtime that started it ----------------------------------------
def runtime_processes(beneath: int) -> set[tuple[int, str]]:
    """(pid, start time) of the aws-lambda-rie and awslambdaric processes beneath process ``beneath``, found
    by the process tree, not by name (other runs on the machine have their own); 1 for all of them."""
    parents, commands = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields, pid = stat.read_text().rsplit(")", 1)[1].split(), int(stat.parent.name)
            parents[pid], commands[(pid, fields[19])] = int(fields[1]), (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue  # it ended meanwhile

    def is_beneath(pid: int) -> bool:
        while pid not in (0, beneath):
            pid = parents.get(pid, 0)
        return pid == beneath

    return {key for key, command in commands.items() if is_beneath(parents.get(key[0], 0))
            and (b"aws-lambda-rie" in command or b"awslambdaric" in command)}


@pytest.fixture
def before():
    """The runtime processes beneath this one beforehand; those started since are killed afterwards (so that a
    failing test leaves none behind)."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads the process tree from /proc")
    found = runtime_processes(os.getpid())
    yield found
    for pid, _ in runtime_processes(os.getpid()) - found:
        os.kill(pid, signal.SIGKILL)


def test_a_stopped_runtime_leaves_no_process_and_starts_none(probe, before):
    # GIVEN a runtime whose function timed out (the emulator restarts its runtime after that), then failed
    from changeflow.local.lambdas import Function, LambdaServiceError

    runtime = EmulatorRuntime(ROOT, "us-east-1", [probe / "layer"], keep_warm=False).start()
    function = Function("ProbeFunction", "changeflow-ProbeFunction", "arn:aws:lambda:us-east-1:123456789012:"
                        "function:changeflow-ProbeFunction", probe / "probe", "app.handler", {}, timeout_s=2)
    assert runtime.invoke(function, {"sleep": 4})[0]["errorType"] == "Sandbox.Timedout"
    assert runtime.invoke(function, {"fail": True})[0]["errorType"] == "KeyError"
    started = runtime_processes(os.getpid()) - before
    # WHEN it stops, and a thread still running then invokes (as the feed's pipe did while its stack stopped)
    runtime.stop()
    try:
        late = runtime.invoke(function, {})
    except LambdaServiceError as refused:
        late = refused
    # THEN none of its processes is alive (an orphan included), it started none, and Lambda refused the call
    assert started and started & runtime_processes(1) == set()
    assert runtime_processes(os.getpid()) - before == set()
    assert isinstance(late, LambdaServiceError), late


# --- a warm execution environment serves the next stack ---------------------------------------------------
def test_the_next_stack_reuses_a_warm_environment_whose_handler_holds_that_stacks_identity(lambda_python, before):
    # GIVEN a stack whose change ran in the runtime, stopped: its environments are kept warm for the next stack
    # (and none an earlier test of this process left warm: this one's write step must start cold below)
    from changeflow.client import Changeflow
    from changeflow.local.embedded import EmbeddedStack
    from changeflow.local.moto_patches.iam.enforcement import identify
    from changeflow.local.runtime.dispatch import WARM
    from changeflow.local.template import ACCOUNT

    WARM.clear()

    def quiet(stack):  # the feed's pipe and the digest's schedule would start environments of their own
        stack.stop_pipes()
        stack.stop_schedules()
        return Changeflow.for_embedded(stack)

    with EmbeddedStack(ROOT, time_scale=0.0005, lambda_runtime="emulator") as first:
        assert quiet(first).submit(put(entity="first#1")).output["outcome"] == "applied"
    warm = runtime_processes(os.getpid())
    # WHEN the next stack runs a change, its write step changed (a longer timeout: a new, cold environment)
    with EmbeddedStack(ROOT, time_scale=0.0005, lambda_runtime="emulator") as second:
        second.function("UpdateLatestFunction").timeout_s = 4
        execution = quiet(second).submit(put(entity="second#1"))
        fetch = second.function("FetchLatestFunction").environment
        who = identify(ACCOUNT, fetch["AWS_ACCESS_KEY_ID"], fetch["AWS_SESSION_TOKEN"])
        role = second.access.role_arn("FetchLatestFunction")
        started = runtime_processes(os.getpid()) - warm
    # THEN it applied: the seal's key the warm fetch step read in the first stack is the one the cold write step
    # read in this one, and the fetch step's credentials are a session of its role in this stack's IAM
    assert execution.status == "SUCCEEDED" and execution.output["outcome"] == "applied", execution.cause
    assert who.role_arn == role and who.arn.endswith("/changeflow-FetchLatestFunction")
    # and the changed write step's runtime is the only one started (aws-lambda-rie and awslambdaric): the fetch
    # and history steps ran in the first stack's environments
    assert len(started) == 2, started
