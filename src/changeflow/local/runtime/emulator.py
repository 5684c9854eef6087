"""The Lambda runtime without Docker: each function's handler in its own process, run by the Lambda Runtime
Interface Emulator (the ``aws-lambda-rie`` binary that ships inside the aws-sam-cli package, the one
``sam local invoke`` runs inside its container) with the runtime interface client ``awslambdaric``, on the
Python of ``.venv-lambda`` (python3.13, Lambda's runtime, where pyenv has it).

- ``changeflow local invoke FUNCTION``: one invocation, as ``sam local invoke`` does it.
- ``EmulatorRuntime``: the embedded stack's Lambda dispatch with ``--lambda-runtime emulator``: warm
  processes per function (one more whenever all are busy, as Lambda adds execution environments), the
  handlers' AWS calls going to a moto endpoint of the same embedded stack.

The function's process sees what a Lambda execution environment has (not this process's environment):
the template's variables with ``Globals`` merged, ``AWS_LAMBDA_FUNCTION_*`` (name, memory size, timeout,
version), ``AWS_REGION``, ``LAMBDA_TASK_ROOT`` (the CodeUri folder, its working directory), the layers'
code where ``/opt/python`` puts it on ``sys.path`` (after the task root, before the runtime's own
packages), and credentials. https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html
https://docs.aws.amazon.com/lambda/latest/dg/python-layers.html (layer paths).
"""

from __future__ import annotations

import argparse

import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

RUNTIME_VENV = ".venv-lambda"
# The layer's third-party requirements, installed by ``make lambda-runtime`` as ``sam build`` puts them
# into the layer (layers/core/Makefile): --no-deps, only what requirements.txt lists.
LAYER_DEPS = "opt/python"
INVOKE_PATH = "/2015-03-31/functions/function/invocations"
EMULATOR_LOG_LEVEL = "error"  # as sam local invoke runs it, unless SAM_CLI_RIE_DEV=1


class RuntimeSetupError(RuntimeError):
    """The emulator or the runtime's Python is missing: say how to get it."""


# --- what runs the handler -------------------------------------------------------------------------
def emulator_binary() -> Path:
    """``samcli/local/rapid/aws-lambda-rie-<arch>`` from the installed aws-sam-cli package."""
    try:
        import samcli
    except ImportError as exc:
        raise RuntimeSetupError("aws-sam-cli is not installed (pip install -e '.[dev]')") from exc
    arch = "arm64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"
    path = Path(samcli.__file__).parent / "local" / "rapid" / f"aws-lambda-rie-{arch}"
    if not path.is_file():
        raise RuntimeSetupError(f"no Runtime Interface Emulator at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def runtime_python(root: Path) -> Path:
    """The function runtime's interpreter: ``CHANGEFLOW_LAMBDA_PYTHON``, else ``<root>/.venv-lambda``, else
    the one of the checkout this toolkit comes from (for a template elsewhere, ``-t``)."""
    configured = os.environ.get("CHANGEFLOW_LAMBDA_PYTHON")
    python = Path(configured) if configured else Path(root) / RUNTIME_VENV / "bin" / "python"
    own = Path(__file__).resolve().parents[4] / RUNTIME_VENV / "bin" / "python"
    if not configured and not python.exists() and own.exists():
        python = own
    if not python.exists():
        raise RuntimeSetupError(
            f"no Lambda runtime Python at {python}: run `make lambda-runtime` (a python3.13 venv with "
            "awslambdaric, boto3 and the layer's requirements)")
    return python


def runtime_version(python: Path) -> str:
    """``python3.13`` (what the runtime really is, for reports and tests)."""
    out = subprocess.run([str(python), "-c", "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class FunctionSpec:
    """What the runtime needs of one function: where its code is, its handler and its configuration."""

    logical_id: str
    name: str
    code_dir: Path
    handler: str
    environment: dict[str, str]
    memory_mb: int = 128
    timeout_s: int = 3
    layer_dirs: list[Path] = field(default_factory=list)


def runtime_environment(spec: FunctionSpec, python: Path, region: str, credentials: dict[str, str]) -> dict[str, str]:
    """The environment of the function's process: only what a Lambda execution environment has."""
    deps = Path(python).parent.parent / LAYER_DEPS  # <venv>/opt/python
    # /var/task first, then /opt/python (the layers' content), then the runtime's own packages (boto3)
    python_path = [str(spec.code_dir), *(str(d) for d in spec.layer_dirs)]
    if deps.is_dir():
        python_path.append(str(deps))
    env = {
        "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "PYTHONPATH": ":".join(python_path),
        "PYTHONUNBUFFERED": "1",
        "LAMBDA_TASK_ROOT": str(spec.code_dir),
        "_HANDLER": spec.handler,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{runtime_version_cached(python)}",
        "AWS_LAMBDA_FUNCTION_NAME": spec.name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
        "AWS_LAMBDA_FUNCTION_TIMEOUT": str(spec.timeout_s),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_HANDLER": spec.handler,
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        **credentials,
    }
    env.update(spec.environment)
    return env


_VERSIONS: dict[str, str] = {}


def runtime_version_cached(python: Path) -> str:
    key = str(python)
    if key not in _VERSIONS:
        _VERSIONS[key] = runtime_version(python)
    return _VERSIONS[key]


# --- one execution environment ---------------------------------------------------------------------
# The emulator starts the runtime on an environment's first invocation and counts its Init inside the
# function's timeout, where Lambda gives the first Init its own 10 s (and its own machine). Eight python3.13
# cold starts at once on two shared cores take longer than that, so cold starts take turns: at most this
# many at once in this process (warm invocations never wait for it).
# https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html (Init phase: 10 s)
COLD_STARTS = threading.BoundedSemaphore(int(os.environ.get("CHANGEFLOW_EMULATOR_COLD_STARTS", "1")))
class EmulatorProcess:
    """One execution environment: ``aws-lambda-rie`` with ``python -m awslambdaric HANDLER`` beneath it.
    It takes one invocation at a time, as a Lambda execution environment does. The runtime starts on
    the first invocation (its cold start) and again after a timeout (the emulator resets it)."""

    def __init__(self, spec: FunctionSpec, env: dict[str, str], python: Path,
                 log: Callable[[str], None], host: str = "127.0.0.1"):
        self.spec, self.env, self.python, self.log, self.host = spec, env, python, log, host
        self.process: subprocess.Popen | None = None
        self.function = None  # the embedded stack's Function whose log this process writes to
        self.port = 0
        self.cold = True  # the runtime starts (again) on the next invocation
        self.reports = 0
        self._reported = threading.Condition()
        self._reader: threading.Thread | None = None

    def start(self, attempts: int = 3) -> "EmulatorProcess":
        emulator = emulator_binary()
        self.cold = True
        for attempt in range(attempts):
            self.port = free_port(self.host)
            command = [
                str(emulator), "--log-level", EMULATOR_LOG_LEVEL,
                "--runtime-interface-emulator-address", f"{self.host}:{self.port}",
                "--runtime-api-address", f"{self.host}:{free_port(self.host)}",
                str(self.python), "-m", "awslambdaric", self.spec.handler,
            ]
            self.process = subprocess.Popen(command, cwd=self.spec.code_dir, env=self.env, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            self._reader = threading.Thread(target=self._read, args=(self.process,), daemon=True,
                                            name=f"rie-{self.spec.logical_id}")
            self._reader.start()
            if self._wait_listening(10.0):
                return self
            self.stop()  # the port was taken meanwhile, or it failed: try another
        raise RuntimeSetupError(f"the Runtime Interface Emulator for {self.spec.logical_id} did not start")

    def _wait_listening(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return True
            except OSError:
                time.sleep(0.01)
        return False

    def _read(self, process: subprocess.Popen) -> None:
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.log(line)
            if line.startswith("REPORT RequestId:"):
                with self._reported:
                    self.reports += 1
                    self._reported.notify_all()

    def invoke(self, payload: bytes) -> tuple[int, bytes]:
        """POST the event to the emulator; ``(status, body)`` once the handler has answered and its
        ``REPORT`` line has been logged (so that the invocation's logs are complete when this returns)."""
        if self.process is None or self.process.poll() is not None:
            self.start()
        before = self.reports
        if self.cold:
            with COLD_STARTS:
                status, body = self._post(payload)
        else:
            status, body = self._post(payload)
        # after a timeout the emulator resets the runtime: the next invocation starts it again
        self.cold = body.startswith(TIMEOUT_PREFIX.encode())
        with self._reported:
            self._reported.wait_for(lambda: self.reports > before, timeout=2.0)
        return status, body

    def _post(self, payload: bytes) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.spec.timeout_s + 60)
        try:
            connection.request("POST", INVOKE_PATH, body=payload, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout:
            self.process.stdout.close()
        self.process = None


# --- what the emulator's answer means --------------------------------------------------------------
TIMEOUT_PREFIX = "Task timed out after"


def interpret(status: int, body: bytes) -> tuple[Any, bool]:
    """``(payload, function_error)`` from the emulator's answer, as the Lambda service reports it.

    The emulator answers 200 both for a result and for a function error (it sets no
    ``X-Amz-Function-Error``), so an error is known by its shape, as ``sam local start-lambda`` does:
    the runtime client's error document (``errorMessage`` and ``errorType``, and at most ``requestId``
    and ``stackTrace`` besides). A timeout comes back as plain text; Lambda reports it as
    ``FunctionError: Unhandled`` with ``errorType`` ``Sandbox.Timedout`` (what a state machine sees).
    """
    text = body.decode("utf-8", "replace")
    if text.startswith(TIMEOUT_PREFIX):
        return {"errorType": "Sandbox.Timedout", "errorMessage": f"Error: {text}"}, True
    if status != 200:
        return {"errorType": "Runtime.Unknown", "errorMessage": text}, True
    try:
        payload = json.loads(text) if text else None
    except ValueError:
        return {"errorType": "Runtime.InvalidResponse", "errorMessage": text}, True
    return payload, is_error_document(payload)


def is_error_document(payload: Any) -> bool:
    return (isinstance(payload, dict) and {"errorMessage", "errorType"} <= set(payload)
            and set(payload) <= {"errorMessage", "errorType", "requestId", "stackTrace"})


# --- the embedded stack's dispatch -----------------------------------------------------------------
_ENDPOINT: dict[str, Any] = {}
_ENDPOINT_LOCK = threading.Lock()


def handler_endpoint() -> str:
    """The URL of a moto endpoint on 127.0.0.1 for the handlers' AWS clients, started once per process.
    It serves moto's in-process backends, so it reaches whichever embedded stack is running (the same
    backends the interpreter uses, behind the same request lock). A request first meets the hooks that
    fault injection registered on the function's client stand-in (``RemoteClient``)."""
    with _ENDPOINT_LOCK:
        if "url" not in _ENDPOINT:
            import logging

            from moto.moto_server.threaded_moto_server import MotoRequestHandler
            from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
            from werkzeug.serving import make_server

            logging.getLogger("werkzeug").setLevel(logging.WARNING)
            moto_app = DomainDispatcherApplication(create_backend_app)

            def app(environ, start_response):
                answer = _intercepted(environ)
                if answer is None:
                    return moto_app(environ, start_response)
                status, headers, body = answer
                start_response(f"{status} {http.client.responses.get(status, '')}",
                               [*headers.items(), ("Content-Length", str(len(body)))])
                return [body]

            server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
            threading.Thread(target=server.serve_forever, daemon=True, name="changeflow-lambda-endpoint").start()
            _ENDPOINT.update(server=server, url=f"http://127.0.0.1:{server.server_address[1]}")
        return _ENDPOINT["url"]


class _Events:
    """The part of a botocore event system that fault injection uses (register_first, unregister)."""

    def __init__(self) -> None:
        self.handlers: dict[str, list[Callable]] = {}
        self.lock = threading.Lock()

    def register_first(self, event: str, handler: Callable, **_) -> None:
        with self.lock:
            self.handlers.setdefault(event, []).insert(0, handler)

    def register(self, event: str, handler: Callable, **_) -> None:
        with self.lock:
            self.handlers.setdefault(event, []).append(handler)

    def unregister(self, event: str, handler: Callable, **_) -> None:
        with self.lock:
            if handler in self.handlers.get(event, []):
                self.handlers[event].remove(handler)

    def emit(self, event: str, **kwargs) -> Any:
        with self.lock:
            handlers = list(self.handlers.get(event, []))
        for handler in handlers:
            answer = handler(**kwargs)
            if answer is not None:
                return answer
        return None


class RemoteClient:
    """A handler's module-level client, seen from outside its process: ``before-send.<service>.<Op>``
    hooks registered on ``meta.events`` answer the handler's requests at the endpoint (the handler's
    botocore then treats the answer as AWS's, retries included), as they would in-process."""

    def __init__(self, service: str):
        from types import SimpleNamespace

        self.meta = SimpleNamespace(events=_Events(), service_model=SimpleNamespace(service_name=service))


# (app id, service) -> the client stand-in; a function's processes send its logical id as their SDK app id
REMOTE_CLIENTS: dict[tuple[str, str], RemoteClient] = {}
_TARGET_SERVICES = {"DynamoDB_20120810": "dynamodb"}


def remote_module(function):
    """The stand-in for the handler's module that fault injection reaches into (``module.dynamodb``)."""
    from types import SimpleNamespace

    client = REMOTE_CLIENTS.setdefault((function.logical_id, "dynamodb"), RemoteClient("dynamodb"))
    return SimpleNamespace(dynamodb=client)


def _intercepted(environ) -> tuple[int, dict, bytes] | None:
    import re as _re
    from types import SimpleNamespace

    agent = environ.get("HTTP_USER_AGENT", "")
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    app = _re.search(r"\bapp/([A-Za-z0-9_.-]+)", agent)
    if not app or "." not in target:
        return None
    prefix, operation = target.split(".", 1)
    service = _TARGET_SERVICES.get(prefix)
    client = REMOTE_CLIENTS.get((app.group(1), service)) if service else None
    if client is None:
        return None
    url = f"http://{environ.get('HTTP_HOST', '')}{environ.get('PATH_INFO', '/')}"
    answer = client.meta.events.emit(f"before-send.{service}.{operation}", request=SimpleNamespace(url=url))
    if answer is None:
        return None
    return answer.status_code, dict(answer.headers), answer.content


class _WarmPool:
    """Execution environments kept warm across embedded stacks in one process (a test run starts a stack
    per test): one whose command and environment are exactly those a new stack asks for is reused, as
    Lambda reuses a warm environment of an unchanged function. At most ``limit`` are kept."""

    def __init__(self, limit: int = 40):
        self.limit = limit
        self.idle: dict[tuple, list[EmulatorProcess]] = {}
        self.order: list[EmulatorProcess] = []
        self.lock = threading.Lock()
        import atexit

        atexit.register(self.clear)

    @staticmethod
    def key(process: "EmulatorProcess") -> tuple:
        return (str(process.spec.code_dir), process.spec.handler, str(process.python),
                tuple(sorted(process.env.items())))

    def take(self, key: tuple) -> "EmulatorProcess | None":
        with self.lock:
            group = self.idle.get(key)
            while group:
                process = group.pop()
                self.order.remove(process)
                if process.process is not None and process.process.poll() is None:
                    return process
        return None

    def give(self, process: "EmulatorProcess") -> None:
        evicted = []
        with self.lock:
            self.idle.setdefault(self.key(process), []).append(process)
            self.order.append(process)
            while len(self.order) > self.limit:
                oldest = self.order.pop(0)
                self.idle[self.key(oldest)].remove(oldest)
                evicted.append(oldest)
        for process in evicted:
            process.stop()

    def clear(self) -> None:
        with self.lock:
            processes, self.order, self.idle = self.order, [], {}
        for process in processes:
            process.stop()


WARM = _WarmPool()


class EmulatorRuntime:
    """Lambda invocations of an embedded stack, each in a warm per-function emulator process.

    The handlers' AWS clients reach the stack through ``handler_endpoint()``. Processes are added per
    function when every one is busy (up to ``max_per_function``, as Lambda adds execution environments
    for concurrent invocations), kept warm, and handed back to the process-wide warm pool when the stack
    stops (``keep_warm=False`` stops them instead).
    """

    def __init__(self, root: Path, region: str, layer_dirs: list[Path], max_per_function: int = 16,
                 keep_warm: bool = True):
        self.root, self.region, self.max_per_function = Path(root), region, max_per_function
        self.layer_dirs = list(layer_dirs)
        self.keep_warm = keep_warm
        self.python = runtime_python(self.root)
        emulator_binary()
        self.version = runtime_version_cached(self.python)
        self.endpoint_url = ""
        self._idle: dict[str, list[EmulatorProcess]] = {}
        self._all: dict[str, list[EmulatorProcess]] = {}
        self._available = threading.Condition()
        self._starting = 0  # environments created and not yet through their first invocation

    def start(self) -> "EmulatorRuntime":
        self.endpoint_url = handler_endpoint()
        return self

    def stop(self) -> None:
        with self._available:
            idle = {id(p) for group in self._idle.values() for p in group}
            processes = [p for group in self._all.values() for p in group if p is not None]
            self._all.clear()
            self._idle.clear()
        for process in processes:
            if self.keep_warm and id(process) in idle and process.process is not None:
                process.function = None
                WARM.give(process)
            else:
                process.stop()

    def spec_of(self, function) -> FunctionSpec:
        return FunctionSpec(function.logical_id, function.name, Path(function.code_dir), function.handler,
                            dict(function.environment), function.memory_mb, function.timeout_s, self.layer_dirs)

    def _new_process(self, function) -> EmulatorProcess:
        spec = self.spec_of(function)
        credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_ENDPOINT_URL": self.endpoint_url,
                       # the User-Agent's app/<id>: tells the endpoint which function a request is from
                       "AWS_SDK_UA_APP_ID": function.logical_id}
        env = runtime_environment(spec, self.python, self.region, credentials)
        process = EmulatorProcess(spec, env, self.python, log=None)
        process.log = lambda line, process=process: _log_to(process.function, line)
        warm = WARM.take(_WarmPool.key(process)) if self.keep_warm else None
        if warm is not None:
            warm.function = function
            return warm
        process.function = function
        return process.start()

    def _acquire(self, function) -> EmulatorProcess:
        """An idle environment of the function, else a new one; while one environment is starting (a
        cold start takes seconds here), invocations wait for the next idle one rather than queue more cold
        starts behind it (on two cores, scaling out one environment at a time serves them sooner)."""
        with self._available:
            while True:
                idle = self._idle.setdefault(function.name, [])
                if idle:
                    return idle.pop()
                group = self._all.setdefault(function.name, [])
                if len(group) < self.max_per_function and (not group or not self._starting):
                    group.append(None)  # reserve the slot while the process starts
                    self._starting += 1
                    break
                self._available.wait()
        try:
            process = self._new_process(function)
        except BaseException:
            with self._available:
                group.remove(None)
                self._starting -= 1
                self._available.notify_all()
            raise
        process.starting = True
        with self._available:
            group[group.index(None)] = process
        return process

    def _release(self, function, process: EmulatorProcess) -> None:
        with self._available:
            if getattr(process, "starting", False):
                process.starting = False
                self._starting -= 1
            if process in self._all.get(function.name, []):
                self._idle.setdefault(function.name, []).append(process)
            else:  # the stack stopped meanwhile
                process.stop()
            self._available.notify_all()

    def warm(self, function) -> None:
        """Have one execution environment ready for the function (its runtime starts on first invoke)."""
        function.module = remote_module(function)
        with self._available:
            if self._all.get(function.name):
                return
        self._release(function, self._acquire(function))

    def processes(self, function) -> int:
        """How many execution environments the function has had at once in this stack."""
        with self._available:
            return len([p for p in self._all.get(function.name, []) if p is not None])

    def call(self, function, event: Any) -> tuple[Any, bool]:
        process = self._acquire(function)
        try:
            status, body = process.invoke(json.dumps(event).encode("utf-8"))
        finally:
            self._release(function, process)
        return interpret(status, body)

    def invoke(self, function, event: Any, fault_hook=None) -> tuple[Any, bool]:
        """Like ``LambdaService.invoke``: ``(payload, function_error)``; raises LambdaServiceError.
        A fault hook wraps the call exactly as in-process: what it raises is the function's error."""
        from ..lambdas import LambdaServiceError

        function.invocations += 1

        def run() -> Any:
            payload, failed = self.call(function, event)
            if failed:
                raise FunctionError(payload)
            return payload

        try:
            result = fault_hook(function, event, run) if fault_hook else run()
            return json.loads(json.dumps(result)), False
        except LambdaServiceError:
            raise
        except FunctionError as exc:
            return exc.payload, True
        except Exception as exc:  # noqa: BLE001 - a fault hook's error is the function's unhandled error
            return {"errorMessage": str(exc), "errorType": getattr(exc, "error_type", type(exc).__name__),
                    "stackTrace": traceback.format_tb(exc.__traceback__)}, True


def _log_to(function, line: str) -> None:
    """A runtime's output line into its function's log (CloudWatch Logs' place), if a stack holds it."""
    if function is not None and line.strip():
        function.logs.append(line)


class FunctionError(Exception):
    """The handler failed in its runtime: the error document the runtime reported."""

    def __init__(self, payload: Any):
        super().__init__(payload.get("errorMessage") if isinstance(payload, dict) else str(payload))
        self.payload = payload


# --- changeflow local invoke -----------------------------------------------------------------------
INVOKE_EXIT_HELP = """exit status (as sam local invoke):
  0  the function ran, even if it failed or timed out (its error document is the response)
  1  it could not be run (not in the template, no event file, no Lambda runtime venv: make lambda-runtime)
  2  bad command line"""


def add_commands(command) -> None:
    """``changeflow local invoke``: added by cli.build_parser through its ``command`` helper."""
    local = command("local", "run one function in the Lambda runtime (no Docker), like sam local",
                    "Run one function of the template as Lambda runs it, without Docker: the Runtime Interface "
                    "Emulator shipped in aws-sam-cli and awslambdaric on python3.13. `changeflow local invoke "
                    "--help` says more.")
    local_commands = local.add_subparsers(dest="local_command", required=True)
    invoke = local_commands.add_parser(
        "invoke", help="invoke a function of the template once, in the Runtime Interface Emulator",
        description="Like `sam local invoke`, without Docker: the response on stdout, the function's logs "
                    "and the START/END/REPORT lines on stderr. Exit 0 when the function ran (even if it "
                    "failed: its error document is the response), 1 when it could not be run.",
        epilog=INVOKE_EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    invoke.add_argument("function", help="the function's logical id in template.yaml (or its name)")
    invoke.add_argument("-e", "--event", help="JSON event file ('-' for stdin; default {})")
    invoke.add_argument("-n", "--env-vars", help="JSON file of environment overrides, as sam local invoke reads it: "
                        '{"LogicalId": {"VAR": "value"}, "Parameters": {"VAR": "value"}}')
    invoke.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="override a template parameter")
    invoke.add_argument("-t", "--template", help="the SAM template (default: template.yaml of the project)")
    where = invoke.add_mutually_exclusive_group()
    where.add_argument("--endpoint-url", default="http://127.0.0.1:4566",
                       help="the AWS endpoint the function's clients use: a running changeflow serve "
                            "(default %(default)s)")
    where.add_argument("--stack-name", help="a stack deployed on AWS: its resources' names, real AWS endpoints")
    invoke.add_argument("--region", default=None,
                        help="AWS region of --stack-name (default: AWS_REGION or the AWS config)")
    invoke.set_defaults(func=cmd_local_invoke)


LAMBDA_RUNTIMES = ("in-process", "emulator")


def add_lambda_runtime_option(parser) -> None:
    """``--lambda-runtime`` for the commands that start an embedded stack (run, serve)."""
    parser.add_argument("--lambda-runtime", choices=LAMBDA_RUNTIMES, default=None,
                        help="where handlers run: in-process (default, fastest) or emulator (one warm Lambda "
                             "runtime process per function: python3.13, real timeouts, no Docker)")


class InvokeError(Exception):
    """The function could not be run (not in the template, no event file...): exit status 1."""


def override_environment(variables: dict[str, str], overrides: dict, logical_id: str, name: str) -> dict[str, str]:
    """SAM's ``--env-vars``: ``Parameters`` applies to every function, the function's own entry (by
    logical id or name) wins; only variables the template declares are overridden, as in SAM."""
    if not isinstance(overrides, dict):
        raise InvokeError("--env-vars: expected a JSON object")
    chosen = dict(overrides.get("Parameters") or {})
    for key in (logical_id, name):
        chosen.update(overrides.get(key) or {})
    out = dict(variables)
    for key, value in chosen.items():
        if key in out:
            out[key] = "" if isinstance(value, (dict, list)) or value is None else (
                str(value).lower() if isinstance(value, bool) else str(value))
    return out


def function_spec(template, root: Path, logical_id: str, overrides: dict | None = None) -> FunctionSpec:
    functions = template.of_type("AWS::Serverless::Function")
    if logical_id not in functions:
        by_name = {template.physical_name(f): f for f in functions}
        if logical_id not in by_name:
            raise InvokeError(f"Function {logical_id} not found in template")
        logical_id = by_name[logical_id]
    props = template.function_properties(logical_id)
    name = props.get("FunctionName") or template.physical_name(logical_id)
    variables = {k: _stringify(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()}
    variables = override_environment(variables, overrides or {}, logical_id, name)
    layers = template.of_type("AWS::Serverless::LayerVersion")
    layer_dirs = []
    for ref in props.get("Layers", []):
        for layer_id, spec in layers.items():
            if template.arn(layer_id) == ref or layer_id == ref:
                layer_dirs.append(Path(root) / template.resolve(spec["Properties"]["ContentUri"]))
    return FunctionSpec(logical_id, name, Path(root) / props["CodeUri"], props["Handler"], variables,
                        int(props.get("MemorySize", 128)), int(props.get("Timeout", 3)), layer_dirs)


def _stringify(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "" if isinstance(value, (dict, list)) or value is None else str(value)


def _read_event(path: str | None) -> bytes:
    if path is None:
        return b"{}"
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvokeError(f"{path}: {exc.strerror}") from exc


def _deployed_template(root: Path, template_path: Path, stack_name: str, region: str | None, params: dict):
    """The template with every resource's physical name taken from the deployed stack (CloudFormation
    names resources itself: ``<stack>-ChangeTable-1ABC...``)."""
    import boto3

    from ..template import Template

    cloudformation = boto3.client("cloudformation", region_name=region)
    physical = {}
    for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        for resource in page["StackResourceSummaries"]:
            physical[resource["LogicalResourceId"]] = resource["PhysicalResourceId"]

    class Deployed(Template):
        def physical_name(self, logical_id: str) -> str:
            return physical.get(logical_id) or super().physical_name(logical_id)

    return Deployed(template_path, stack_name, cloudformation.meta.region_name, params)


def cmd_local_invoke(args) -> int:
    from ...cli import parse_params
    from ..embedded import project_root
    from ..template import Template

    root = Path(args.template).resolve().parent if args.template else project_root()
    template_path = Path(args.template).resolve() if args.template else root / "template.yaml"
    try:
        params = parse_params(args.param)
        overrides = {}
        if args.env_vars:
            try:
                overrides = json.loads(Path(args.env_vars).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise InvokeError(f"--env-vars {args.env_vars}: {exc}") from exc
        if args.stack_name:
            import boto3

            template = _deployed_template(root, template_path, args.stack_name, args.region, params)
            region = template.region
            frozen = boto3.Session(region_name=region).get_credentials()
            if frozen is None:
                raise InvokeError("--stack-name: no AWS credentials found")
            frozen = frozen.get_frozen_credentials()
            credentials = {"AWS_ACCESS_KEY_ID": frozen.access_key, "AWS_SECRET_ACCESS_KEY": frozen.secret_key}
            if frozen.token:
                credentials["AWS_SESSION_TOKEN"] = frozen.token
        else:
            region = args.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
            template = Template(template_path, "changeflow", region, params)
            credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_SESSION_TOKEN": "testing", "AWS_ENDPOINT_URL": args.endpoint_url}
        spec = function_spec(template, root, args.function, overrides)
        # no X-Ray daemon runs beside the emulator (sam local invoke has none either)
        spec.environment.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
        event = _read_event(args.event)
        python = runtime_python(root)
        env = runtime_environment(spec, python, region, credentials)
        process = EmulatorProcess(spec, env, python, log=lambda line: print(line, file=sys.stderr, flush=True))
        process.start()
    except (InvokeError, RuntimeSetupError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    try:
        status, body = process.invoke(event)
    finally:
        process.stop()
    payload, _failed = interpret(status, body)
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()
    return 0
