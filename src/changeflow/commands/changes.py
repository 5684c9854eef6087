"""The change requests a command is given: JSON files holding one request or an array of them, and what
the tooling reports for a request it will not submit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from changeflow_core import wire
from changeflow_core.errors import ValidationError
from changeflow_core.validation import check_request_size

from .. import report
from ..client import Execution
from ..common.errors import ToolFailure, UsageError
from .output import dump, execution_status, known_errors, public

VIA_HELP = ("entry point: StartExecution (default: stepfunctions; the version's principal then says the workflow "
            "does not know the caller), POST /changes signed with SigV4 (api: the signer is recorded), or "
            "PutEvents to the bus (events: the event's account and source)")


def add_via(parser) -> None:
    parser.add_argument("--via", choices=["stepfunctions", "api", "events"], default="stepfunctions", help=VIA_HELP)


def load_changes(paths: list[str]) -> list[tuple[str, Any]]:
    """``(source, request)`` pairs from files holding one request object or an array of them."""
    changes = []
    for path in paths:
        try:
            data = wire.loads(Path(path).read_text(encoding="utf-8"))  # numbers exact, as written in the file
        except FileNotFoundError as exc:
            raise UsageError(f"{path}: no such file") from exc
        except IsADirectoryError as exc:
            raise UsageError(f"{path}: is a directory; give the JSON files in it ({path}/*.json)") from exc
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
            raise UsageError(f"{path}: not valid JSON ({exc})") from exc
        requests = data if isinstance(data, list) else [data]
        changes.extend((f"{path}[{i}]" if isinstance(data, list) else path, r) for i, r in enumerate(requests))
    return changes


def refused(source: str, request: Any, exc: ValidationError) -> Execution:
    """What the tooling reports for a request it will not submit (over the payload limit)."""
    return Execution(name=f"(not started: {source})", arn="", status="REFUSED", input=None,
                     error="ValidationError", cause=str(exc))


def submit_each(args, client, changes: list[tuple[str, Any]]) -> int:
    """Submit each ``(source, request)`` through the entry point ``args.via``, one after the other, print
    each execution (``--json``: one object a line) and answer the exit status (``submit``, ``redact``,
    ``adopt``)."""
    via = {"stepfunctions": client.submit, "api": client.submit_via_api, "events": client.submit_via_events}[args.via]
    results = []
    for source, request in changes:
        try:
            check_request_size(request)
            execution = via(request, timeout=args.timeout)
        except ValidationError as exc:
            execution = refused(source, request, exc)
        except TimeoutError as exc:
            raise ToolFailure(f"{source}: {exc}; wait longer with --timeout SECONDS") from exc
        results.append(execution)
        if args.json:
            dump(public(execution))
        else:
            print(report.executions([execution]))
    return execution_status(results, known_errors(client))
