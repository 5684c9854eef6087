"""Shared fixtures. Nothing here can reach AWS: fake credentials, a fixed region, and pytest-socket
(configured in pyproject.toml) refuses every network connection except to 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import boto3
import pytest

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"
ASL = ROOT / "statemachines" / "change.asl.json"
# The operator's opt-in (docs/privacy.md): every state logged with its input and output. The default logs
# failures only, with no data; an Express stack needs this for its history, and so does a test that reads
# an execution from the log.
LOGGED = {"StateMachineLogLevel": "ALL", "StateMachineIncludeExecutionData": "true"}
# The seal key (changeflow_core.seal) the payloads in events/functions/ are sealed and proven with: the handler
# tests' secret holds it. A deployed stack's key is its own secret's (random): those payloads fail there by name.
EXAMPLE_SEAL_KEY = "changeflow-example-seal-key-of-the-payloads-in-events-functions0"


@pytest.fixture(autouse=True)
def aws_sandbox(monkeypatch):
    """Fake credentials and region for every test; no profile or config file from the machine."""
    for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "CHANGEFLOW_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("CHANGEFLOW_ROOT", str(ROOT))


@pytest.fixture
def sigint_reaches_children():
    """Children the test starts act on SIGINT as a program started from a terminal does.

    A background job of a non-interactive shell (``make test &`` in a script, ``nohup``, some CI runners)
    starts with SIGINT ignored, and an ignored signal stays ignored across ``execve``: a child that the test
    sends SIGINT (or types Ctrl-C at, in tmux) would never see it. A *handled* signal is reset to its
    default action by ``execve`` (POSIX, "Signal actions" in execve(2)), so with Python's own handler
    installed for the test, every child starts with SIGINT at its default. The test sets up the child's
    handling itself, whatever the suite was started from."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def wrapped(levels: int, leaf=1, key="n"):
    """``leaf`` inside ``levels`` single-key maps: wrapped(2) == {"n": {"n": 1}}."""
    value = leaf
    for _ in range(levels):
        value = {key: value}
    return value


def listed(levels: int, leaf=1):
    """``leaf`` inside ``levels`` one-element lists: listed(2) == [[1]]."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def without_emf(out: str) -> str:
    """A command's captured stdout without the EMF documents of the stack's background functions (the feed's
    enrichment, the scheduled digest). In-process, a function prints its EMF document to the router that sends
    it to its own log (changeflow.local.lambdas), but pytest swaps sys.stdout between a test's phases, and a
    function invoked across that swap prints into the test's capture instead. On Lambda, and in a command run
    outside pytest, it never reaches the command's output."""
    return "".join(line for line in out.splitlines(keepends=True) if not line.startswith('{"_aws"'))


def load_event(relative: str):
    return json.loads((EVENTS / relative).read_text(encoding="utf-8"))


def stack_seal_key(stack) -> str:
    """An embedded stack's seal key, read from moto's Secrets Manager behind IAM's back (the test's privilege:
    no identity of the stack's account may read it, tests/test_trust.py)."""
    from moto.secretsmanager.models import secretsmanager_backends

    from changeflow.local.template import ACCOUNT

    secret = secretsmanager_backends[ACCOUNT][stack.region].secrets[stack.template.physical["SealKeySecret"]["Ref"]]
    return next(v["secret_string"] for v in secret.versions.values() if "AWSCURRENT" in v["version_stages"])


def proven(event: dict, step: str, key: str = EXAMPLE_SEAL_KEY) -> dict:
    """A step's payload (events/functions) changed by a test, sealed or proven again with ``key`` (that of the
    payloads, or a stack's: ``stack_seal_key``), as the step before it would have: ``step`` is the function it
    is for (fetch_latest, a writer, put_history, tag_ttl)."""
    from changeflow_core import seal, steps

    key = seal.Key(key.encode())
    name = event["execution"]["name"]
    if step == "fetch_latest":
        body = {k: v for k, v in event["request"].items() if k != "seal"}
        return {**event, "request": {**body, "seal": key.mac(seal.ENVELOPE, body)}}
    if step == "tag_ttl":
        return {**event, "proof": key.prove(seal.REPORT, {"execution": name, "report": steps.tagged_part(event)})}
    event = steps.proven(key, name, event)
    if step == "put_history":
        written = {k: v for k, v in event["written"].items() if k != "proof"}
        event["written"] = {**written, "proof": key.prove(seal.WRITTEN, {"execution": name, "written": written})}
    return event


def let_executions_end(stack, timeout: float = 30.0) -> None:
    """Before a test's stack stops: the executions the test started end first. moto's backends outlive a
    mock, so an execution still running would write into the next test's tables (test_parity's Express test
    did, ~1 order in 50). One still running after ``timeout`` fails the test that left it."""
    if getattr(stack, "_mock", None) is None:  # the test stopped it itself
        return
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    from changeflow.local.template import ACCOUNT

    backend = stepfunctions_parser_backends[ACCOUNT][stack.region]
    running = [e.execution_arn for machine in backend.state_machines for e in list(machine.executions)
               if e.status == "RUNNING"]
    deadline = time.monotonic() + timeout
    left = [arn for arn in running if not stack.wait_for_termination(arn, max(0.0, deadline - time.monotonic()))]
    assert not left, f"the test left executions running after its end: {left}"


@pytest.fixture
def stack():
    """The whole application on the embedded stack (template, ASL, handlers), time compressed."""
    from changeflow.local.embedded import EmbeddedStack

    with EmbeddedStack(ROOT, time_scale=0.0005) as running:
        yield running
        let_executions_end(running)


@pytest.fixture
def make_stack():
    """An embedded stack with template parameter overrides: ``make_stack(HistoryRetentionVersions="2")``."""
    from changeflow.local.embedded import EmbeddedStack

    started = []

    def make(root=ROOT, time_scale=0.0005, **parameters):
        running = EmbeddedStack(root, parameters=parameters, time_scale=time_scale).start()
        started.append(running)
        return running

    yield make
    try:
        for running in started:
            let_executions_end(running)
    finally:
        for running in reversed(started):
            running.stop()


@pytest.fixture
def cf(stack):
    from changeflow.client import Changeflow

    return Changeflow.for_embedded(stack)


# what AWS_IAM asks of a signer of the API besides a good signature (an identity policy that allows it)
INVOKE_API = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "execute-api:Invoke",
                                                                 "Resource": "*"}]})


def table_specs(template) -> list[dict]:
    """CreateTable's arguments for each of the template's tables (keys, attributes, billing, indexes)."""
    specs = []
    for logical_id, spec in template.of_type("AWS::DynamoDB::Table").items():
        props = template.resolve(spec["Properties"])
        specs.append({"TableName": template.physical_name(logical_id), "KeySchema": props["KeySchema"],
                      "AttributeDefinitions": props["AttributeDefinitions"], "BillingMode": props["BillingMode"],
                      **{k: props[k] for k in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes")  # the changes index,
                         if k in props}})  # the time indexes
    return specs


@pytest.fixture
def tables():
    """The template's tables and the seal key's secret on plain moto (no state machine, no IAM), for domain
    and handler tests."""
    from moto import mock_aws

    from changeflow.local.embedded import NEW_STACK_CHOICES
    from changeflow.local.template import Template

    template = Template(ROOT / "template.yaml", overrides=NEW_STACK_CHOICES)  # the tables a new stack creates
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        for spec in table_specs(template):
            client.create_table(**spec)
        boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name=template.physical_name("SealKeySecret"), SecretString=EXAMPLE_SEAL_KEY)
        yield client, template.physical_name("ChangeTable")


@pytest.fixture
def lambda_module(tables, monkeypatch):
    """Load ``functions/<name>/app.py`` by path with the environment the template gives it, the way
    Lambda imports it (no package, no sys.path games): ``lambda_module("fetch_latest")``."""
    from changeflow.local.template import Template

    template = Template(ROOT / "template.yaml")
    by_dir = {}
    for logical_id in template.of_type("AWS::Serverless::Function"):
        props = template.function_properties(logical_id)
        by_dir[Path(props["CodeUri"]).name] = props
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")

    def load(name: str):
        props = by_dir[name]
        for key, value in props["Environment"]["Variables"].items():
            monkeypatch.setenv(key, str(value))
        spec = importlib.util.spec_from_file_location(f"lambda_{name}", ROOT / props["CodeUri"] / "app.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


class Context:
    """A Lambda context as Powertools reads it."""

    function_name = "test"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:test"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    @staticmethod
    def get_remaining_time_in_millis():
        return 10_000


@pytest.fixture
def context():
    return Context()


STATE_LIMIT = 256 * 1024  # AWS: "Maximum input or output size for a task, state, or execution", UTF-8 bytes


def largest_state(cf, execution):
    """The largest state input/output, task parameters or task result in the execution's history."""
    sizes = [0]
    for event in cf.history(execution.arn):
        for key, details in event.items():
            if key.endswith("EventDetails") and isinstance(details, dict):
                sizes += [len(details[field].encode("utf-8")) for field in ("input", "output", "parameters")
                          if isinstance(details.get(field), str)]
    return max(sizes)


def sigv4_headers(method: str, url: str, data: bytes | None, headers: dict, key: str = "testing",
                  secret: str = "testing", token: str | None = "testing", region: str = "us-east-1",
                  service: str = "execute-api", when=None) -> dict:
    """``headers`` with a SigV4 signature (botocore's signer), as a client of an AWS_IAM API sends them."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=url, data=data or b"", headers=dict(headers))
    signer = SigV4Auth(Credentials(key, secret, token), service, region)
    if when is None:
        signer.add_auth(request)
    else:  # a signature made at another time (a replay)
        stamp = when.strftime("%Y%m%dT%H%M%SZ")
        request.context["timestamp"] = stamp
        request.headers["X-Amz-Date"] = stamp
        if token:
            request.headers["X-Amz-Security-Token"] = token
        canonical = signer.canonical_request(request)
        signature = signer.signature(signer.string_to_sign(request, canonical), request)
        scope = f"{key}/{stamp[:8]}/{region}/{service}/aws4_request"
        request.headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders="
                                            f"{signer.signed_headers(signer.headers_to_sign(request))}, Signature={signature}")
    return dict(request.headers.items())


def http_exchange(method: str, url: str, body: bytes | str | None = None, content_type: str = "application/json",
                  timeout: float = 60, sign: bool = True) -> tuple[int, dict, bytes]:
    """One HTTP request to a local server: ``(status, headers, body bytes)``; an error status is an answer,
    not an exception. A text body is sent as UTF-8. A request to the REST API (``/v1/...``) is SigV4-signed
    with the default credentials, as API Gateway's AWS_IAM requires, unless ``sign=False``."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    headers = {"Content-Type": content_type}
    if sign and urllib.parse.urlsplit(url).path.startswith("/v1/"):
        headers = sigv4_headers(method, url, data, headers)
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def server():
    """``changeflow serve`` on 127.0.0.1 (a free port), Waits and back-offs at 1/1000 of their time."""
    from changeflow.local.server import EmbeddedServer

    with EmbeddedServer(port=0, time_scale=0.001) as running:
        yield running
        let_executions_end(running.stack)
