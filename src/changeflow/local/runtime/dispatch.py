"""The embedded stack's Lambda dispatch with ``--lambda-runtime emulator``: warm execution environments per
function (one more whenever all are busy, as Lambda adds execution environments), the handlers' AWS calls
going to the endpoint of the same embedded stack, and environments kept warm across stacks in one process."""

from __future__ import annotations

import json
import threading
import traceback
from pathlib import Path
from typing import Any

from ..lambdas import LambdaServiceError
from .emulator import (EmulatorProcess, FunctionSpec, emulator_binary, interpret, runtime_environment,
                       runtime_python, runtime_version_cached)
from .endpoint import handler_endpoint, remote_module


class _WarmPool:
    """Execution environments kept warm across embedded stacks in one process (a test run starts a stack
    per test): one whose command and environment are exactly those a new stack asks for is reused, as
    Lambda reuses a warm environment of an unchanged function. At most ``limit`` are kept. A stack of the
    emulator issues its functions' role sessions and generated secrets as the process's earlier stacks did
    (``access.KEPT``), so the environments match and what a reused handler holds is still valid."""

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
    stops (``keep_warm=False`` stops them instead). Once stopped, it starts none: an invocation still
    arriving (a thread of the stopping stack) is refused, as by a Lambda service that is gone.
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
        self._stopped = False

    def start(self) -> "EmulatorRuntime":
        self.endpoint_url = handler_endpoint()
        return self

    def stop(self) -> None:
        with self._available:
            self._stopped = True
            self._available.notify_all()  # an invocation waiting for an environment is refused
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
                if self._stopped:  # an environment started now would be in no pool: nothing would stop it
                    raise LambdaServiceError(message=f"{function.name}: the stack has stopped")
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


SYSTEM_LINES = ("START RequestId:", "END RequestId:", "REPORT RequestId:", "XRAY TraceId:", "INIT_START ")


def _log_to(function, line: str) -> None:
    """A runtime's output line into its function's log (CloudWatch Logs' place), if a stack holds it and the
    function's LoggingConfig sends it: the emulator's START, END and REPORT lines are Lambda's own (INFO)."""
    if function is None or not line.strip():
        return
    if line.startswith(SYSTEM_LINES):
        if function.controls.sends_system("INFO"):
            function.logs.append(line)
    else:
        function.log(line)


class FunctionError(Exception):
    """The handler failed in its runtime: the error document the runtime reported."""

    def __init__(self, payload: Any):
        super().__init__(payload.get("errorMessage") if isinstance(payload, dict) else str(payload))
        self.payload = payload
