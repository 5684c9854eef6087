"""The changeflow command line.

- ``changeflow run FILE...``: start the embedded stack in this process, submit the changes in the files,
  print a report (or ``--json``).
- ``changeflow serve``: the embedded stack behind an AWS-compatible endpoint on 127.0.0.1.
- ``changeflow submit|versions|history|executions|verify|repair``: against ``changeflow serve``
  (``--endpoint-url``, the default) or a stack deployed on AWS (``--stack-name``), one code path.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from urllib.error import URLError

from botocore.exceptions import EndpointConnectionError, NoCredentialsError
from changeflow_core.errors import ValidationError
from changeflow_core.validation import check_request_size

from . import report
from .client import Changeflow, Execution
from .template import TemplateError

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"


class UsageError(Exception):
    """A problem with what the user gave the tool (a file, a parameter): exit status 2."""


def load_changes(paths: list[str]) -> list[tuple[str, Any]]:
    """``(source, request)`` pairs from files holding one request object or an array of them."""
    changes = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise UsageError(f"{path}: no such file") from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: not valid JSON ({exc})") from exc
        requests = data if isinstance(data, list) else [data]
        changes.extend((f"{path}[{i}]" if isinstance(data, list) else path, r) for i, r in enumerate(requests))
    return changes


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--param {pair!r}: expected KEY=VALUE")
        params[key] = value
    return params


def refused(source: str, request: Any, exc: ValidationError) -> Execution:
    """What the tooling reports for a request it will not submit (over the payload limit)."""
    return Execution(name=f"(not started: {source})", arn="", status="REFUSED", input=None,
                     error="ValidationError", cause=json.dumps({"errorMessage": str(exc)}))


def submit_all(client: Changeflow, changes: list[tuple[str, Any]], concurrency: int, progress: bool) -> list[Execution]:
    bar = _progress(len(changes), enabled=progress)

    def one(change: tuple[str, Any]) -> Execution:
        source, request = change
        try:
            check_request_size(request)
            return client.submit(request)
        except ValidationError as exc:
            return refused(source, request, exc)
        finally:
            bar.update(1)

    try:
        if concurrency <= 1:
            return [one(c) for c in changes]
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(one, changes))
    finally:
        bar.close()


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="change", file=sys.stderr, disable=not enabled or not sys.stderr.isatty(),
                leave=False)


def named_errors(definition: dict) -> set[str]:
    """The errors the workflow names: its Fail states' ``Error`` values."""
    return {s["Error"] for s in definition["States"].values() if s["Type"] == "Fail" and "Error" in s}


def touched_entities(changes: list[tuple[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}  # first-seen order; a dict, so that each change costs O(1), not O(entities)
    for _, request in changes:
        entity = request.get("entityId") if isinstance(request, dict) else None
        if isinstance(entity, str) and entity:
            seen.setdefault(entity)
    return list(seen)


# --- commands ---------------------------------------------------------------------------------------
def cmd_run(args) -> int:
    from .embedded import EmbeddedStack

    changes = load_changes(args.files)
    with EmbeddedStack(parameters=parse_params(args.param), time_scale=args.time_scale) as stack:
        client = Changeflow.for_embedded(stack)
        results = submit_all(client, changes, args.concurrency, progress=not args.json)
        entities = {e: client.entity(e) for e in touched_entities(changes)}
        definition = json.loads(client.sfn.describe_state_machine(
            stateMachineArn=client.state_machine_arn)["definition"])
        histories = {}
        if args.history and not args.json:
            histories = {e.name: list(client.history(e.arn)) for e in results if e.arn and e.name in args.history}
    if args.json:
        json.dump({"executions": [_public(e) for e in results], "entities": entities}, sys.stdout,
                  ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print(report.executions(results))
        for entity_id, entity in entities.items():
            print()
            print(report.versions(entity_id, entity))
        for name, events in histories.items():
            print(f"\nexecution history of {name}")
            print(report.history(events))
    known = named_errors(definition) | {"ValidationError"}
    tool_failures = [e for e in results if e.status not in ("SUCCEEDED", "FAILED", "REFUSED")
                     or (e.status == "FAILED" and e.error not in known)]
    for e in tool_failures:
        print(f"changeflow: execution {e.name} ended {e.status} with {e.error!r}: not a workflow error",
              file=sys.stderr)
    return 1 if tool_failures else 0


def _public(e: Execution) -> dict[str, Any]:
    return {k: v for k, v in e.to_json().items() if k != "arn"}


def target(args) -> Changeflow:
    if args.stack_name:
        return Changeflow.for_aws_stack(args.stack_name, args.region)
    return Changeflow.for_aws_stack("changeflow", args.region or "us-east-1", endpoint_url=args.endpoint_url)


def cmd_submit(args) -> int:
    client = target(args)
    via = {"stepfunctions": client.submit, "api": client.submit_via_api, "events": client.submit_via_events}[args.via]
    status = 0
    for source, request in load_changes(args.files):
        try:
            check_request_size(request)
        except ValidationError as exc:
            print(f"{source}: refused: ValidationError: {exc}", file=sys.stderr)
            status = 1
            continue
        execution = via(request, timeout=args.timeout)
        if args.json:
            print(json.dumps(execution.to_json(), ensure_ascii=False))
        else:
            print(report.executions([execution]))
        status = status or (0 if execution.status == "SUCCEEDED" else 1)
    return status


def cmd_versions(args) -> int:
    entity = target(args).entity(args.entity)
    print(json.dumps(entity, ensure_ascii=False) if args.json else report.versions(args.entity, entity))
    return 0


def cmd_history(args) -> int:
    client = target(args)
    arn = args.execution
    if not arn.startswith("arn:"):
        arn = client.state_machine_arn.replace(":stateMachine:", ":execution:") + ":" + arn
    events = list(client.history(arn))
    print(json.dumps(events, default=str) if args.json else report.history(events))
    return 0


def cmd_executions(args) -> int:
    found = target(args).executions(args.limit)
    rows = [[e["name"], e["status"], e["startDate"], e.get("stopDate")] for e in found]
    print(report.table(["execution", "status", "started", "stopped"], rows, max_width=90))
    return 0


def cmd_verify(args) -> int:
    from . import integrity

    client = target(args)
    ids = integrity.entities(client) if args.all else [args.entity]
    reports = [integrity.verify(client, entity_id) for entity_id in ids]
    if args.json:
        print(json.dumps([{"entityId": r.entity_id, "ok": r.ok, "versions": r.versions, "problems": r.problems}
                          for r in reports]))
    else:
        for r in reports:
            span = f"versions {r.versions[0]}..{r.versions[-1]}" if r.versions else "no versions"
            print(f"{r.entity_id}: {'ok' if r.ok else 'PROBLEMS'} ({span})")
            for problem in r.problems:
                print(f"  - {problem}")
    return 0 if all(r.ok for r in reports) else 1


def cmd_repair(args) -> int:
    from . import integrity

    done, cannot = integrity.repair(target(args), args.entity)
    for line in done:
        print(f"repaired: {line}")
    for line in cannot:
        print(f"cannot repair: {line}")
    if not done and not cannot:
        print(f"{args.entity}: nothing to repair")
    return 1 if cannot else 0


def cmd_serve(args) -> int:
    from .server import serve

    serve(port=args.port, parameters=parse_params(args.param), time_scale=args.time_scale)
    return 0


def cmd_demo(args) -> int:
    from .demo import main

    return main()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="changeflow", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run changes on the embedded stack in this process")
    run.add_argument("files", nargs="+", help="JSON files: one change request, or an array of them")
    run.add_argument("--json", action="store_true", help="print one JSON document instead of the report")
    run.add_argument("--concurrency", type=int, default=1, help="executions in flight at once (default 1: in order)")
    run.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="override a template parameter")
    run.add_argument("--time-scale", type=float, default=0.001,
                     help="multiply Wait and retry back-off times (default 0.001)")
    run.add_argument("--history", action="append", default=[], metavar="EXECUTION",
                     help="also print the execution history of this execution name")
    run.set_defaults(func=cmd_run)

    demo = commands.add_parser("demo", help="the demonstration (make run): every path on the embedded stack")
    demo.set_defaults(func=cmd_demo)

    serve = commands.add_parser("serve", help="serve the embedded stack on 127.0.0.1 (AWS-compatible endpoint)")
    serve.add_argument("--port", type=int, default=4566)
    serve.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    serve.add_argument("--time-scale", type=float, default=1.0, help="default 1: Waits and back-offs in real time")
    serve.set_defaults(func=cmd_serve)

    def remote(name: str, help_text: str):
        sub = commands.add_parser(name, help=help_text)
        where = sub.add_mutually_exclusive_group()
        where.add_argument("--endpoint-url", default=DEFAULT_ENDPOINT, help=f"changeflow serve (default {DEFAULT_ENDPOINT})")
        where.add_argument("--stack-name", help="a stack deployed on AWS (sam deploy)")
        sub.add_argument("--region", default=None)
        sub.add_argument("--json", action="store_true")
        return sub

    submit = remote("submit", "start executions from files and wait for each")
    submit.add_argument("files", nargs="+")
    submit.add_argument("--timeout", type=float, default=300.0)
    submit.add_argument("--via", choices=["stepfunctions", "api", "events"], default="stepfunctions",
                        help="entry point: StartExecution (default), POST /changes, or PutEvents to the bus")
    submit.set_defaults(func=cmd_submit)
    versions = remote("versions", "an entity's table of versions")
    versions.add_argument("entity")
    versions.set_defaults(func=cmd_versions)
    history = remote("history", "an execution's history, as the console shows it")
    history.add_argument("execution", help="execution name or ARN")
    history.set_defaults(func=cmd_history)
    executions = remote("executions", "recent executions with their status")
    executions.add_argument("--limit", type=int, default=50)
    executions.set_defaults(func=cmd_executions)
    verify = remote("verify", "check an entity's versions (contiguous, consistent, v0 matches history)")
    which = verify.add_mutually_exclusive_group(required=True)
    which.add_argument("entity", nargs="?")
    which.add_argument("--all", action="store_true", help="every entity (scans the tables)")
    verify.set_defaults(func=cmd_verify)
    repair = remote("repair", "write v0's missing history item; say what cannot be repaired")
    repair.add_argument("entity")
    repair.set_defaults(func=cmd_repair)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, TemplateError) as exc:
        print(f"changeflow: {exc}", file=sys.stderr)
        return 2
    except (EndpointConnectionError, NoCredentialsError, URLError, RuntimeError) as exc:
        print(f"changeflow: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
