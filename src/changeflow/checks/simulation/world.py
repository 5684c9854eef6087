"""The world one seed runs in: ``changeflow serve``'s server in this process (the embedded stack behind
HTTP on 127.0.0.1), the scheduler and the fault injector installed on it, a working directory for the
files (digests, exports, proofs, import sources and checkpoints), and what the run has recorded so far.

The surfaces the checkers read are public ones: the client (``Changeflow``), the ``changeflow`` command (its
console-script entry point, run in this process, its commands pointed at this stack through
``client.targets``, the one seam the tests use), ``serve``'s REST API over HTTP (signed with SigV4), and the
files the commands write."""

from __future__ import annotations

import contextlib
import io
import json
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...client import Changeflow, Execution
from ..faults import Injector
from .findings import Violation
from .scheduler import Scheduler

TIME_SCALE = 0.0005  # back-offs and Wait states compressed (their length is the scheduler's choice anyway)
DEFAULT_KEY = ("testing", "testing", None)  # serve's default principal (docs/identity.md)


@dataclass
class Run:
    """One execution the simulation started (or a command started for it), and what it was told."""

    op: int
    request: dict[str, Any]
    arn: str
    name: str
    execution: Execution | None = None
    told: list[tuple[str, str | None]] = field(default_factory=list)  # (status, outcome or error), each end


@dataclass
class Result:
    """A command's exit status and output (``crashed``: the traceback of an exception the command let out)."""

    status: int | None
    out: str
    err: str
    crashed: str | None = None

    def json(self) -> Any:
        try:
            return json.loads(self.out)
        except ValueError:
            return None


class _Sink:
    """Where the command's printing goes: the stack's stdout router sends a thread's writes to the "function"
    set for that thread, line by line (``log``), as it does for a handler's."""

    def __init__(self) -> None:
        self.logs: deque = deque()

    def log(self, line: str, level: str | None = None) -> None:
        self.logs.append(line)


class World:
    def __init__(self, seed: int, config: dict[str, str], workdir: Path) -> None:
        self.seed, self.config, self.workdir = seed, dict(config), Path(workdir)
        self.runs: list[Run] = []
        self.violations: list[Violation] = []
        self.tampered: set[str] = set()  # entities an insider edited: the audit checker's, not the others'
        self.files: dict[str, Path] = {}  # name -> a file a command wrote (digest, export, proof)
        self.auditor: dict[str, bytes] = {}  # the auditor's own copies, kept outside the account
        self.contents: dict[tuple[str, int], dict] = {}  # (entity, version) -> content as first read
        self.redacted: dict[str, set[int]] = {}  # entity -> the versions a redaction applied to
        self.legacy: set[str] = set()  # entities written before the chain
        self.closed = False  # adopt --all --close succeeded
        self.proven: dict[str, tuple[str, int, str]] = {}  # proof name -> (entity, version, digest name)
        self.log: list[str] = []  # what happened, for the report
        self.op = -1
        self._stack = contextlib.ExitStack()

    # --- lifecycle ---------------------------------------------------------------------------------------
    def __enter__(self) -> "World":
        from ...client import targets
        from ...local.server import EmbeddedServer

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.server = EmbeddedServer(port=0, parameters=self.config, time_scale=TIME_SCALE)
        self._stack.enter_context(self.server)
        self.stack = self.server.stack
        self.cf = Changeflow.for_embedded(self.stack)
        self.api = f"{self.server.url}/{self.server.routes[0].stage}"
        self.scheduler = self._stack.enter_context(Scheduler(self.stack).installed())
        self.injector = Injector()
        original = targets.client_for
        targets.client_for = lambda args: self.cf
        self._stack.callback(setattr, targets, "client_for", original)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.scheduler.idle(60)
        finally:
            self._stack.close()

    def violation(self, promise: str, code: str, text: str, entity: str | None = None) -> None:
        self.violations.append(Violation(promise, code, text, op=self.op, entity=entity))

    # --- the command line ----------------------------------------------------------------------------------
    def cli(self, *args: Any) -> Result:
        """``changeflow ARGS`` in this process, against this stack; its output captured on this thread."""
        main = changeflow_command()
        router, sink = self.stack.lambdas.stdout, _Sink()
        err = io.StringIO()
        router.local.function = sink
        crashed = None
        try:
            with contextlib.redirect_stderr(err):
                try:
                    status = main([str(a) for a in args])
                except SystemExit as exc:  # argparse
                    status = exc.code if isinstance(exc.code, int) else 2
                except Exception as exc:  # noqa: BLE001 - a traceback the user would see
                    import traceback

                    status, crashed = None, "".join(traceback.format_exception(exc))[-2000:]
        finally:
            router.local.function = None
        return Result(status, "\n".join(sink.logs), err.getvalue(), crashed)

    # --- serve over HTTP -------------------------------------------------------------------------------------
    def http(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
             credentials: tuple[str, str, str | None] | None = DEFAULT_KEY) -> tuple[int, Any]:
        """A request to serve's REST API, SigV4-signed with ``credentials`` (None: as given)."""
        url = self.api + path
        headers = dict(headers or {})
        if body is not None:
            headers.setdefault("Content-Type", "application/json")
        if credentials is not None:
            headers = sign(method, url, body, headers, *credentials)
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - serve on 127.0.0.1
                return response.status, _json(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _json(exc.read())

    def entity_path(self, entity: str) -> str:
        return "/entities/" + urllib.parse.quote(entity, safe="")

    # --- executions ----------------------------------------------------------------------------------------
    def ended(self, run: Run) -> Execution:
        """The execution's end (waits for it), recorded as one more thing it was told."""
        execution = self.cf.wait(run.arn, 300)
        run.execution = execution
        said = (execution.output or {}).get("outcome") if execution.status == "SUCCEEDED" else execution.error
        run.told.append((execution.status, said))
        return execution

    def adopted(self, entity: str) -> bool:
        """Whether a version of ``entity`` adopted its versions written before the chain."""
        return any(v.get("adopts") for v in self.cf.entity(entity)["versions"])

    def executions_of(self, entity: str) -> list[Run]:
        return [r for r in self.runs if r.request.get("entityId") == entity]


def changeflow_command():
    """The ``changeflow`` command as a user's shell finds it: its console-script entry point (pyproject.toml),
    run in this process for speed. The command line sits above the checks (docs/architecture.md), so it is
    reached the way a user reaches it, never imported from below."""
    from importlib.metadata import entry_points

    found = entry_points(group="console_scripts", name="changeflow")
    if not found:
        raise RuntimeError("the changeflow command is not installed (pip install -e .)")
    return next(iter(found)).load()


def sign(method: str, url: str, body: bytes | None, headers: dict[str, str], key: str, secret: str,
         token: str | None = None, region: str = "us-east-1", service: str = "execute-api",
         payload_header: str | None = None) -> dict[str, str]:
    """``headers`` with SigV4's for ``execute-api``, as botocore's signer makes them; ``payload_header``
    also signs ``X-Amz-Content-SHA256`` with that value (what an S3-style client sends)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=url, data=body or b"", headers=dict(headers))
    if payload_header is not None:
        request.headers["X-Amz-Content-SHA256"] = payload_header
    SigV4Auth(Credentials(key, secret, token), service, region).add_auth(request)
    return dict(request.headers.items())


def _json(data: bytes) -> Any:
    try:
        return json.loads(data or b"null")
    except ValueError:
        return data.decode("utf-8", "replace")
