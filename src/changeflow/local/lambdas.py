"""Lambda in-process: every function of the template, loaded from its own ``app.py`` with the environment
the template gives it, invoked the way the Lambda service invokes it (JSON in, JSON out, an unhandled
exception becomes ``FunctionError: Unhandled`` with ``errorType`` = the exception's class name). An Invoke
through moto's Lambda API is answered here once the caller may invoke the function (``lambda:InvokeFunction``:
its identity's policies or the function's resource-based policy, moto_patches.iam); ``InvocationType: Event``
is Lambda's asynchronous invocation (``async_invoke``).

What a handler prints (Powertools' JSON logs and EMF metrics), the warnings it raises and the traceback
of an unhandled error go to the function's log, like CloudWatch Logs, not to the terminal, with the lines
Lambda itself writes for each invocation, as the function's ``LoggingConfig`` filters them
(``logging_controls``). Faults can be injected around the handler from the outside.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import logging
import sys
import threading
import time
import traceback
import uuid
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote

from botocore.awsrequest import AWSResponse
from botocore.client import BaseClient
from botocore.response import StreamingBody
from moto.core.botocore_stubber import MockRawResponse

from . import environ
from .async_invoke import AsyncInvocations
from .logging_controls import LoggingControls


class LambdaServiceError(Exception):
    """Raised by a fault hook: the Lambda service itself fails the ``Invoke`` request
    (the state machine sees ``Lambda.<code>``, e.g. ``Lambda.ServiceException``)."""

    def __init__(self, code: str = "ServiceException", message: str = "Lambda was unable to process the request",
                 status: int = 500):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass
class LambdaContext:
    """The attributes of the Lambda context object that handlers and Powertools read."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_ms: int
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    log_stream_name = "embedded"

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_ms


# A fault hook is called as hook(function, event, invoke) and returns the handler's result: it may raise
# before calling invoke (the Lambda failed before its write), call it and then raise (lost response),
# or raise LambdaServiceError (the service failed).
FaultHook = Callable[["Function", Any, Callable[[], Any]], Any]


@dataclass
class Function:
    logical_id: str
    name: str
    arn: str
    code_dir: Path
    handler: str
    environment: dict[str, str]
    memory_mb: int = 128
    timeout_s: int = 3
    module: Any = None
    # the most recent log lines and AWS calls of each function: bounded, so a long `serve` does not grow
    # with them (they were about 21 KB per change at 20,000 entries each)
    logs: deque = field(default_factory=lambda: deque(maxlen=2_000))
    # (service, operation, request parameters, response) of every AWS call the handler's clients make
    api_calls: deque = field(default_factory=lambda: deque(maxlen=2_000))
    invocations: int = 0
    # "$LATEST", or the number PublishVersion gave this code and configuration
    version: str = "$LATEST"
    # the layers' code: packages found here are this function's own, even where the process imported
    # others of the same name (another release's layer)
    layer_dirs: tuple[Path, ...] = ()
    # asynchronous invocation (SAM's EventInvokeConfig): MaximumRetryAttempts, and the on-failure destination
    event_invoke: dict = field(default_factory=dict)
    runtime: str = ""  # the template's Runtime (the in-process service runs every handler on this Python)
    # LoggingConfig: which lines reach the log group (CloudWatch Logs' place: ``logs``)
    controls: LoggingControls = field(default_factory=LoggingControls)
    loggers: list = field(default_factory=list)  # the handler module's Powertools Loggers

    def log(self, line: str, level: str | None = None) -> None:
        """An application line, kept if Lambda's log-level filtering sends it (``level``: the runtime's)."""
        if self.controls.sends(line, level):
            self.logs.append(line)

    def log_invocation(self, request_id: str, seconds: float) -> None:
        """Lambda's own lines for one invocation (START, END, REPORT or their JSON records), as filtered."""
        self.logs.extend(self.controls.platform_lines(request_id, seconds * 1000, self.memory_mb))

    @property
    def qualified_arn(self) -> str:
        return self.arn if self.version == "$LATEST" else f"{self.arn}:{self.version}"

    def entry_point(self) -> Callable[[Any, Any], Any]:
        return getattr(self.module, self.handler.rsplit(".", 1)[1])


class _ThreadLocalStdout(io.TextIOBase):
    """sys.stdout that sends what a handler prints to its function's log and the rest to the terminal."""

    def __init__(self, terminal):
        self.terminal = terminal
        self.local = threading.local()

    @property
    def current(self):
        """Where text that is not a handler's goes: sys.stdout now (when something, such as a test's
        capture, has replaced the router since), else the terminal the router replaced."""
        return sys.stdout if sys.stdout is not self else self.terminal

    def write(self, text: str) -> int:
        function = getattr(self.local, "function", None)
        if function is None:
            return self.current.write(text)
        for line in text.splitlines():
            if line.strip():
                function.log(line)
        return len(text)

    def flush(self) -> None:
        self.current.flush()

    def __getattr__(self, name):
        return getattr(self.current, name)


_STDOUT = _ThreadLocalStdout(sys.stdout)
_print_to_router = functools.partial(print, file=_STDOUT)  # whatever sys.stdout is now


def _heal_log_streams() -> None:
    """Point log handlers whose stream has been closed at the router: Powertools binds its process-wide
    handler to whatever sys.stdout was when the first Logger was made (in a test run, a capture that is
    closed by now), where a Lambda process would have its own stdout."""
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    for logger in loggers:
        for handler in logger.handlers:
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
                _rebind(handler)


def _rebind(handler: logging.StreamHandler) -> None:
    """Point ``handler`` at the router without touching its old stream: ``StreamHandler.setStream``
    flushes the old stream first, which raises ``ValueError`` when that stream is closed (a test's
    capture that has ended), so the stream is replaced under the handler's lock instead."""
    handler.acquire()
    try:
        handler.stream = _STDOUT
    finally:
        handler.release()


_show_warning = warnings.showwarning


def _routed_showwarning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning raised while a handler runs (Powertools' "No application metrics to publish") goes to
    the function's log, as the Lambda runtime sends stderr to CloudWatch Logs; others as before."""
    function = getattr(_STDOUT.local, "function", None)
    if function is None or file is not None:
        return _show_warning(message, category, filename, lineno, file, line)
    function.log(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"))


def _log_unhandled(function: "Function", exc: BaseException, frames: list[str]) -> None:
    """What the Lambda Python runtime logs for an unhandled error: one log event with the error and its
    traceback (the execution history's ``cause`` keeps the error message for people)."""
    function.log(f"[ERROR] {getattr(exc, 'error_type', type(exc).__name__)}: {exc}\n"
                 "Traceback (most recent call last):\n" + "".join(frames).rstrip("\n"), level="ERROR")


def _handler_frames(exc: BaseException) -> list[str]:
    """The traceback from the handler's code on, as the Lambda runtime reports it: without the frames
    of this dispatcher, which has no counterpart on Lambda."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    return traceback.format_list(frames)


def _route_stdout() -> _ThreadLocalStdout:
    """Put the router in place as sys.stdout (again, if something swapped it since): a handler's
    logger binds the stream at import, and EMF metrics print to whatever sys.stdout is then. Warnings
    raised while a handler runs are routed to its log the same way."""
    global _show_warning
    if sys.stdout is not _STDOUT:
        _STDOUT.terminal = sys.stdout
        sys.stdout = _STDOUT
        _heal_log_streams()  # whatever replaced stdout may have been closed since, under some logger
    if warnings.showwarning is not _routed_showwarning:
        _show_warning = warnings.showwarning  # whatever is in place now (a test's capture), for other warnings
        warnings.showwarning = _routed_showwarning
    return _STDOUT


class LambdaService(AsyncInvocations):
    """The functions of one embedded stack, and the ``Invoke`` answer the interpreter's client gets."""

    # one import of a handler's module at a time (load); its environment is its thread's alone (environ.py)
    import_lock = threading.Lock()
    service_error = LambdaServiceError

    def __init__(self, layer_dirs: list[Path]):
        self.functions: dict[str, Function] = {}  # name -> $LATEST
        self.versions: dict[str, dict[str, Function]] = {}  # name -> version -> its code and configuration
        self.aliases: dict[str, dict[str, str]] = {}  # name -> alias -> version
        self.fault_hook: FaultHook | None = None
        # Powertools Metrics keeps one metric set per process (on Lambda every concurrent invocation has
        # its own process), so in one process invocations take turns. Executions still interleave
        # between steps, and every DynamoDB request is atomic, which is what the guarantees rest on.
        self.invoke_lock = threading.RLock()
        # ``--lambda-runtime emulator``: an EmulatorRuntime (changeflow.local.runtime.dispatch) runs every
        # invocation instead
        self.runtime = None
        for layer in layer_dirs:
            if str(layer) not in sys.path:
                sys.path.insert(0, str(layer))
        self.stdout = _route_stdout()
        _route_default_session()
        environ.install()  # os.environ with a per-thread overlay for a handler's import (load)
        self.async_delay_scale = 1.0  # the stack's time scale: Lambda waits 1 and 2 minutes between async attempts

    def add(self, function: Function) -> None:
        """``function`` becomes the function's ``$LATEST`` (its unqualified name and ARN)."""
        self.functions[function.name] = function

    def publish(self, function: Function, alias: str | None = None) -> str:
        """PublishVersion of ``$LATEST`` (``function``, added first): the next version number, which runs
        this code and configuration for good; ``alias`` (SAM's AutoPublishAlias) is pointed at it.
        https://docs.aws.amazon.com/lambda/latest/dg/configuration-versions.html"""
        published = self.versions.setdefault(function.name, {})
        function.version = str(len(published) + 1)
        published[function.version] = function
        if alias:
            self.aliases.setdefault(function.name, {})[alias] = function.version
        return function.version

    def find(self, name_or_arn: str, qualifier: str | None = None) -> Function | None:
        """arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER], or NAME[:QUALIFIER]: ``$LATEST`` when
        unqualified, else the version (or the alias's version); ``None`` for a version that does not exist."""
        parts = name_or_arn.split(":")
        name, rest = (parts[6], parts[7:]) if name_or_arn.startswith("arn:") else (parts[0], parts[1:])
        qualifier = rest[0] if rest else qualifier
        if qualifier in (None, "", "$LATEST"):
            return self.functions.get(name)
        qualifier = self.aliases.get(name, {}).get(qualifier, qualifier)
        return self.versions.get(name, {}).get(qualifier)

    def load(self, function: Function) -> None:
        """Import the handler's module (its cold start) with the function's environment in place."""
        if self.runtime is not None:
            return self.runtime.warm(function)
        if function.module is not None:
            return
        path = function.code_dir / (function.handler.rsplit(".", 1)[0].replace(".", "/") + ".py")
        with self.import_lock:
            if function.module is not None:  # another invocation imported it meanwhile
                return
            _route_stdout()
            environment = {k: v for k, v in function.environment.items() if k not in CREDENTIALS}
            self.stdout.local.function = function
            # its clients take its role's credentials, as from the environment of its own process on Lambda: a
            # default session of its own for this thread (the credentials stay out of its environment's overlay)
            _IMPORTING.session = _session_of(function)
            try:  # the function's environment over the process's, for this thread alone (environ.py)
                with environ.over(environment), _own_layer_packages(function.layer_dirs):
                    spec = importlib.util.spec_from_file_location(f"changeflow_lambda_{function.logical_id}_{function.version}", path)
                    module = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(module)
            finally:
                _IMPORTING.session = None
                self.stdout.local.function = None
            function.module = module
        for value in vars(module).values():
            if isinstance(value, BaseClient):
                _record_calls(value, function)
            flush = getattr(type(getattr(value, "provider", None)), "flush_metrics", None)  # Powertools' EMF print:
            if flush is not None and flush.__module__.startswith("aws_lambda_powertools"):
                flush.__globals__["print"] = _print_to_router  # to the router, not to what replaced sys.stdout
            # a Powertools Logger (known by what it offers: a test may have re-imported Powertools): its
            # process-wide stdlib logger may hold a handler bound to a stdout that predates this stack
            if hasattr(type(value), "registered_handler") and isinstance(getattr(value, "service", None), str):
                function.loggers.append(value)
                for handler in logging.getLogger(value.service).handlers:
                    if isinstance(handler, logging.StreamHandler):
                        _rebind(handler)

    def invoke(self, function: Function, event: Any) -> tuple[Any, bool]:
        """Run the handler as Lambda would: ``(payload, function_error)``. Raises LambdaServiceError."""
        if self.runtime is not None:
            return self.runtime.invoke(function, event, self.fault_hook)
        self.load(function)
        context = LambdaContext(function.name, function.qualified_arn, function.memory_mb, function.timeout_s * 1000,
                                function_version=function.version)
        with self.invoke_lock:
            _route_stdout()
            function.invocations += 1
            self.stdout.local.function = function
            started = time.perf_counter()
            # each function's own process on Lambda: its logger at its own level (in this one process, every
            # stack's Powertools Logger of a service is one stdlib logger, configured by the first)
            for logger in function.loggers:
                level = function.controls.python_level(function.environment.get("POWERTOOLS_LOG_LEVEL"))
                if logger.log_level != logging.getLevelName(level):  # setLevel clears every logger's cache
                    logger.setLevel(level)
            try:
                run = lambda: function.entry_point()(event, context)  # noqa: E731
                result = self.fault_hook(function, event, run) if self.fault_hook else run()
                return json.loads(json.dumps(result)), False
            except LambdaServiceError:
                raise
            except Exception as exc:  # noqa: BLE001 - the Lambda runtime reports every unhandled error
                frames = _handler_frames(exc)
                _log_unhandled(function, exc, frames)
                return {
                    "errorMessage": str(exc),
                    "errorType": getattr(exc, "error_type", type(exc).__name__),
                    "requestId": context.aws_request_id,
                    "stackTrace": frames,
                }, True
            finally:
                self.stdout.local.function = None
                function.log_invocation(context.aws_request_id, time.perf_counter() - started)

    # botocore ``before-call.lambda.Invoke`` (the state machine's Lambda tasks): answering here skips
    # serialising, signing and HTTP. The state machine's role is not evaluated (tests/test_template reads it).
    def before_call(self, model, params, **kwargs):
        function_ref = unquote(params["url_path"].split("/")[3])
        query = params.get("query_string")
        function = self.find(function_ref, query.get("Qualifier") if isinstance(query, dict) else None)
        if function is None:
            return _error_response(404, "ResourceNotFoundException", f"Function not found: {function_ref}")
        event = json.loads(params.get("body") or b"{}")
        try:
            payload, failed = self.invoke(function, event)
        except LambdaServiceError as exc:
            return _error_response(exc.status, exc.code, exc.message)
        data = json.dumps(payload).encode("utf-8")
        parsed = {
            "ResponseMetadata": {"RequestId": str(uuid.uuid4()), "HTTPStatusCode": 200, "HTTPHeaders": {},
                                 "RetryAttempts": 0},
            "StatusCode": 200,
            "ExecutedVersion": function.version,
            "Payload": StreamingBody(io.BytesIO(data), len(data)),
        }
        if failed:
            parsed["FunctionError"] = "Unhandled"
        return AWSResponse("https://lambda.embedded/", 200, {}, MockRawResponse(b"")), parsed

    # moto's Lambda ``Invoke`` (moto_patches.awslambda.invoke), once moto_patches.iam authorized it
    def invoke_request(self, name: str, qualifier: str | None, body: Any, invocation_type: str):
        """``(status, headers, payload)`` of an Invoke request for one of the stack's functions, else None."""
        function = self.find(name, qualifier)
        if function is None:
            return None
        if isinstance(body, bytes):
            body = body.decode("utf-8")
        event = json.loads(body) if body else {}
        headers = {"content-type": "application/json", "x-amz-executed-version": function.version}
        if invocation_type == "Event":
            self.invoke_async(function, event)
            return 202, {**headers, "status": "202"}, ""
        try:
            payload, failed = self.invoke(function, event)
        except LambdaServiceError as exc:
            return exc.status, {"x-amzn-errortype": exc.code}, json.dumps({"Type": "Service", "message": exc.message})
        if failed:
            headers["x-amz-function-error"] = "Unhandled"
        return 200, headers, json.dumps(payload)


CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_IMPORTING = threading.local()  # the session of the function whose handler this thread is importing


def _session_of(function: Function):
    """A boto3 session with the function's role credentials (its environment's), or None without them."""
    if not all(function.environment.get(k) for k in CREDENTIALS[:2]):
        return None
    import boto3

    env = function.environment
    return boto3.Session(aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                         aws_session_token=env.get("AWS_SESSION_TOKEN"), region_name=env.get("AWS_REGION"))


def _route_default_session() -> None:
    """``boto3.client(...)`` inside a handler's import is its own session's; elsewhere, the process's."""
    import boto3

    if getattr(boto3._get_default_session, "routed", False):
        return
    process_default = boto3._get_default_session

    def _get_default_session():
        session = getattr(_IMPORTING, "session", None)
        return session if session is not None else process_default()

    _get_default_session.routed = True
    boto3._get_default_session = _get_default_session


@contextlib.contextmanager
def _own_layer_packages(layer_dirs: tuple[Path, ...]):
    """Import a handler against its own layers: a package a layer holds (``changeflow_core``) that this
    process has already imported from elsewhere (another release's layer, or the checkout) is set aside
    while the handler imports, so the handler binds this layer's copy, and put back after. On Lambda every
    version has its own /opt; here one process holds several releases."""
    names = set()
    for layer in layer_dirs:
        for entry in Path(layer).iterdir() if Path(layer).is_dir() else ():
            if (entry / "__init__.py").is_file() or (entry.suffix == ".py" and entry.is_file()):
                names.add(entry.stem)
    foreign = {}
    for name in names:
        loaded = sys.modules.get(name)
        origin = Path(getattr(loaded, "__file__", None) or "").resolve()
        if loaded is not None and not any(origin.is_relative_to(Path(d).resolve()) for d in layer_dirs):
            foreign.update({key: module for key, module in sys.modules.items()
                            if key == name or key.startswith(name + ".")})
    if not foreign and all(name in sys.modules for name in names):
        yield  # the process's own layer, imported already: nothing to set aside
        return
    for key in foreign:
        del sys.modules[key]
    path = list(sys.path)
    sys.path[:0] = [str(d) for d in layer_dirs]
    try:
        yield
    finally:
        sys.path[:] = path
        if foreign:  # the handler holds what it imported; the process keeps its own
            for key in [k for k in sys.modules if k.split(".")[0] in {n.split(".")[0] for n in foreign}]:
                del sys.modules[key]
            sys.modules.update(foreign)


def _record_calls(client: BaseClient, function: Function) -> None:
    """Keep every request a handler's client makes, with its response (for least-privilege and cost)."""
    service = client.meta.service_model.service_name

    def after_call(http_response, parsed, model, **kwargs):
        function.api_calls.append((service, model.name, kwargs.get("context", {}).get("params"), parsed))

    def keep_params(params, context, **kwargs):
        context["params"] = params

    client.meta.events.register("provide-client-params", keep_params)
    client.meta.events.register("after-call", after_call)


def _error_response(status: int, code: str, message: str):
    parsed = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"RequestId": str(uuid.uuid4()), "HTTPStatusCode": status, "HTTPHeaders": {},
                             "RetryAttempts": 0},
    }
    return AWSResponse("https://lambda.embedded/", status, {}, MockRawResponse(b"")), parsed


@contextlib.contextmanager
def fault_hook(service: LambdaService, hook: FaultHook):
    """Install a fault hook for the duration of a ``with`` block."""
    previous, service.fault_hook = service.fault_hook, hook
    try:
        yield
    finally:
        service.fault_hook = previous
