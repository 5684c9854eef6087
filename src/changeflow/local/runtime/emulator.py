"""One Lambda execution environment without Docker: the Lambda Runtime Interface Emulator (the
``aws-lambda-rie`` binary that ships inside the aws-sam-cli package, the one ``sam local invoke`` runs inside
its container) with the runtime interface client ``awslambdaric`` beneath it, on the Python of
``.venv-lambda`` (python3.13, Lambda's runtime, where pyenv has it); and what the emulator's answer means.

The function's process sees what a Lambda execution environment has (not this process's environment):
the template's variables with ``Globals`` merged, ``AWS_LAMBDA_FUNCTION_*`` (name, memory size, timeout,
version), ``AWS_REGION``, ``LAMBDA_TASK_ROOT`` (the CodeUri folder, its working directory), the layers'
code where ``/opt/python`` puts it on ``sys.path`` (after the task root, before the runtime's own
packages), and credentials. https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html
https://docs.aws.amazon.com/lambda/latest/dg/python-layers.html (layer paths).
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import socket
import subprocess
import threading
import time
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
