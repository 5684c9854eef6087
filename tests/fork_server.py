"""``make test``'s fork server: the imports every test file pays, paid once; then a fresh child per file.

A test process spent about 1 CPU s starting pytest (0.7 of it importing hypothesis, which its plugin does
in every process), 0.5 importing boto3, moto and the project, and 1.3 more in its first embedded stack
importing moto's backends and parsing botocore's data: about 3 CPU s a file, 200 of the suite's. This
process (started by ``tests/run_files.py``, in a process group of its own) imports them once
(``PRELOAD``, ``import_rewritten``) and fills the pure caches (``warm_loader``, ``warm_moto``,
``warm_definitions``), then forks a child for each file it is asked to run: the child is in its own process
group, has its stdout and stderr in the job's log, stdin on ``/dev/null``, and runs ``pytest.main`` on the
job's arguments; its state is a copy of this process's, which has run no test and started no thread, so
every file still starts from nothing of any other file (what ``make test`` checks). What a fork does not
give a child: a hash seed of its own (``PYTHONHASHSEED``: one per run, not one per file).

Protocol, one JSON object a line: requests on stdin, ``{"id", "argv", "cwd", "env", "log"}`` (run
``argv[1:]`` under pytest) or ``{"kill": id}`` (SIGKILL the child's process group); replies on stdout,
``{"id", "pid"}`` once the child is forked and ``{"id", "status", "cpu"}`` when it ends (status as
``subprocess`` gives it: negative for a signal; cpu in user + system seconds, its reaped children
included). At the end of stdin every child still running is killed, and the server exits.

It must not fork with a second thread running (a lock held by another thread stays held in the child
for ever): it starts none, imports nothing that starts one, and checks before each fork.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("CHANGEFLOW_BIN", ROOT / ".venv" / "bin"))
# What test processes import (pytest's plugins excepted: pytest imports those itself, with its assertion
# rewriting installed): pytest; the AWS SDK; moto and the backends an embedded stack starts; the project's
# packages and the Powertools its handlers import. Anything left out is imported by the child, as before.
PRELOAD = (
    "pytest", "_pytest.python", "_pytest.runner", "_pytest.fixtures", "_pytest.monkeypatch", "_pytest.tmpdir",
    "boto3", "boto3.s3.transfer", "botocore.session", "botocore.auth",
    "moto", "moto.backends", "moto.core.responses", "moto.cloudformation.parsing",
    *(f"moto.{service}.{part}" for service in ("apigateway", "awslambda", "cloudwatch", "dynamodb", "dynamodbstreams",
                                               "events", "iam", "kinesis", "kms", "logs", "pipes", "s3", "scheduler",
                                               "secretsmanager", "sns", "sqs", "ssm", "stepfunctions", "sts")
      for part in ("models", "responses", "urls")),
    "moto.stepfunctions.parser.models", "moto.stepfunctions.parser.asl.parse.asl_parser",
    "moto.stepfunctions.parser.backend.execution_worker",
    "aws_lambda_powertools", "aws_lambda_powertools.logging", "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.tracing", "aws_xray_sdk.core",
    "changeflow_core", "changeflow.local.embedded", "changeflow.local.server", "changeflow.client", "changeflow.cli",
)
# The services whose botocore data an embedded stack's clients load (each client's model, rules, paginators).
CLIENTS = ("dynamodb", "dynamodbstreams", "events", "iam", "kinesis", "kms", "lambda", "logs", "pipes", "s3",
           "scheduler", "secretsmanager", "sqs", "stepfunctions", "sts", "apigateway", "cloudwatch")


def preload() -> None:
    """Import ``PRELOAD`` as the job's pytest would (its script's directory first on the path, not this
    file's), then warm the loader; refuse to serve if any of it started a thread."""
    sys.path[0] = str(BIN)
    for name in PRELOAD:
        importlib.import_module(name)
    import_rewritten("hypothesis", "_hypothesis_globals")
    warm_loader()
    warm_moto()
    warm_definitions()
    if threading.active_count() != 1:
        raise SystemExit(f"fork server: the preload started threads {threading.enumerate()}: forking is unsafe")


def import_rewritten(name: str, *also: str) -> None:
    """Import a pytest plugin's package with its asserts rewritten, as pytest in the child would have (pytest
    rewrites every module of a plugin's distribution; one imported before it, unrewritten, gets a warning in
    every file's summary). Hypothesis's plugin imports hypothesis in every test process, at its summary: about
    0.7 CPU s a file, its 85 modules rewritten and compiled (no pyc is written under
    PYTHONDONTWRITEBYTECODE); its plugin supports hypothesis imported before it."""
    from _pytest.assertion import AssertionState
    from _pytest.assertion.rewrite import AssertionRewritingHook, assertstate_key
    from _pytest.config import get_config

    config = get_config()  # pytest's built-in plugins and ini defaults; no arguments, no conftest
    config.stash[assertstate_key] = AssertionState(config, "rewrite")
    hook = AssertionRewritingHook(config)
    hook.mark_rewrite(name, *also)
    sys.meta_path.insert(0, hook)
    try:
        importlib.import_module(name)
    finally:
        sys.meta_path.remove(hook)


def warm_loader() -> None:
    """The embedded stack's shared botocore loader (``changeflow.local.botocore_loader``: created here, not
    installed; a stack installs it as before, one with ``caches=False`` never uses it) with the data files
    of the stack's clients already parsed. A pure cache: the same files give the same data."""
    from botocore.session import Session

    from changeflow.local import botocore_loader

    session = Session()
    session.register_component("data_loader", botocore_loader.shared_loader(os.environ.get("AWS_DATA_PATH")))
    for service in CLIENTS:
        session.create_client(service, region_name="us-east-1", aws_access_key_id="warm", aws_secret_access_key="warm")


def warm_moto() -> None:
    """moto's cache of each service's botocore model (``get_service_model``: a loader of its own per call, not
    the shared one), filled as a first embedded stack's requests would."""
    from moto.core.utils import get_service_model

    for service in ("cloudformation", *CLIENTS):
        get_service_model(service)


def warm_definitions() -> None:
    """moto's parse of each state machine a new embedded stack creates, by its text (the definition with its
    substitutions, as ``EmbeddedStack`` makes it): a pure cache (``parse_cache.parsed``), which the stack's
    CreateStateMachine and executions find there instead of parsing it again (about 0.2 CPU s a file)."""
    from changeflow.local.embedded import EmbeddedStack, definition_of
    from changeflow.local.moto_patches.stepfunctions import parse_cache

    try:
        stack = EmbeddedStack(ROOT)  # not started: its template, as a stack reads it
        for spec in stack.template.of_type("AWS::Serverless::StateMachine").values():
            parse_cache.parsed(definition_of(stack.template, stack.root, spec)[1])
    except Exception:  # noqa: BLE001 - a template or definition the stack refuses: its tests say why, not the server
        return


def start_child(request: dict, closing: list[int]) -> list[str]:
    """In the forked child: its own process group, the job's log, directory and environment."""
    os.setpgid(0, 0)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # in place of the requests
    os.dup2(log, 1)
    os.dup2(log, 2)
    for fd in {log, null, *closing} - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    return sys.argv


def serve(requests: int, replies: int) -> list[str] | None:
    """The server's loop. Returns in a forked child (the argv it is to run); returns None in the server at
    the end of ``requests``, once its children have ended."""
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (request id, pid)
    by_id: dict[int, int] = {}  # request id -> pid, while the child runs
    pending = b""
    closed = False

    def reply(message: dict) -> None:
        os.write(replies, (json.dumps(message) + "\n").encode())

    while not closed or children:
        ready, _, _ = select.select(([] if closed else [requests]) + list(children), [], [])
        for fd in ready:
            if fd in children:
                ident, pid = children.pop(fd)
                os.close(fd)
                by_id.pop(ident, None)
                _, status, usage = os.wait4(pid, 0)
                reply({"id": ident, "status": os.waitstatus_to_exitcode(status),
                       "cpu": round(usage.ru_utime + usage.ru_stime, 2)})
                continue
            chunk = os.read(requests, 1 << 16)
            if not chunk:
                closed = True
                for pid in by_id.values():
                    kill_group(pid)
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                request = json.loads(line)
                if "kill" in request:
                    if request["kill"] in by_id:  # not reaped yet: the pid (and its group) is still the child's
                        kill_group(by_id[request["kill"]])
                    continue
                if threading.active_count() != 1:
                    raise SystemExit(f"fork server: threads {threading.enumerate()}: forking is unsafe")
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    return start_child(request, [requests, replies, *children])
                try:
                    os.setpgid(pid, pid)  # as the child does: set before anyone can signal the group
                except (PermissionError, ProcessLookupError):
                    pass  # the child set it first (or has ended)
                children[os.pidfd_open(pid)] = (request["id"], pid)
                by_id[request["id"]] = pid
                reply({"id": request["id"], "pid": pid})
    return None


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # every process of the group has ended
        pass


class Client:
    """``run_files``' end: the server started, ``run`` from any of its job threads, ``close`` at the end."""

    def __init__(self, python: Path = BIN / "python"):
        # its own process group: a Ctrl-C at the terminal reaches run_files, which ends the server and its
        # children (close), not the server while it is forking
        self.process = subprocess.Popen([str(python), __file__], cwd=ROOT, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, process_group=0)
        self.lock = threading.Lock()
        self.jobs: dict[int, dict] = {}  # request id -> what the server said of it, and an Event set at its end
        threading.Thread(target=self._read, name="fork-server-replies", daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            message = json.loads(line)
            with self.lock:
                job = self.jobs[message["id"]]
            job.update(message)
            job["forked" if "pid" in message else "done"].set()
        with self.lock:  # the server has gone (its error is on stderr): no job of it will end by itself
            for job in self.jobs.values():
                job.setdefault("status", None)
                job["forked"].set()
                job["done"].set()

    def _send(self, message: dict) -> None:
        with self.lock:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()

    def run(self, argv: list[str], env: dict[str, str], log: Path, timeout: float) -> tuple[int | None, float, bool]:
        """Run ``argv`` (a pytest command) in a child; ``(status, cpu seconds, killed at the timeout)``. The
        status is None if the server ended before the child did. The timeout runs from the fork (the first
        jobs wait for the server's preload)."""
        with self.lock:
            ident = len(self.jobs)
            job = self.jobs[ident] = {"forked": threading.Event(), "done": threading.Event()}
        try:
            self._send({"id": ident, "argv": argv, "cwd": str(ROOT), "env": env, "log": str(log)})
        except (BrokenPipeError, ValueError):
            return None, 0.0, False
        job["forked"].wait(timeout)
        killed = not job["done"].wait(timeout)
        if killed:
            try:
                self._send({"kill": ident})
            except (BrokenPipeError, ValueError):
                pass  # the server has gone, and killed its children as it went
            job["done"].wait()
        return job["status"], job.get("cpu", 0.0), killed

    def close(self) -> None:
        """The end of the requests: the server kills any child still running, and exits."""
        try:
            self.process.stdin.close()
        except BrokenPipeError:
            pass
        self.process.wait()


def main() -> int:
    replies = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, not into the replies
    preload()
    gc.collect()
    gc.freeze()  # the preloaded objects: never scanned (nor their pages copied) by a child's collector
    argv = serve(0, replies)
    if argv is None:
        return 0
    import pytest

    return int(pytest.main(argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
