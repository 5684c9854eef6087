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
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from urllib.error import URLError

from botocore.exceptions import (BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError,
                                 NoRegionError)
from changeflow_core import wire
from changeflow_core.errors import ValidationError
from changeflow_core.validation import check_request_size

from . import report
from .local.runtime import emulator as runtime
from .client import Changeflow, Execution
from .local.template import TemplateError

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"

# Exit statuses, the same for every command (each command's --help says which it uses).
OK = 0        # done; every execution SUCCEEDED (stale and duplicate outcomes are successes)
REJECTED = 1  # the stack answered no: a change failed with one of the workflow's named errors or was
              # refused before it started; no such entity or execution; verify found problems
USAGE = 2     # the command line or a file is wrong (argparse uses 2 as well)
FAILED = 3    # the tool could not do its job: no endpoint or stack, AWS refused, an execution ended
              # with an error the workflow does not name, timed out or was aborted


class UsageError(Exception):
    """A problem with what the user gave the tool (a file, a parameter, a name): exit status 2."""


class NotFound(Exception):
    """What the user asked about does not exist on the stack (an entity, an execution): exit status 1."""


class ToolFailure(Exception):
    """The tool could not do its job (the stack, the endpoint, AWS): exit status 3."""


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
                     error="ValidationError", cause=str(exc))


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


# --- exit statuses ----------------------------------------------------------------------------------
def execution_status(results: list[Execution], known: set[str], history_hint: str = "changeflow history {name}") -> int:
    """One rule for ``run`` and ``submit``: 0 when every execution SUCCEEDED; 1 when a change was rejected
    (FAILED with one of the workflow's named errors, refused before it started, or a 4xx from the API);
    3 when an execution ended otherwise (an error the workflow does not name, TIMED_OUT, ABORTED)."""
    failures = [e for e in results if not _rejected(e, known) and e.status != "SUCCEEDED"]
    for e in failures:
        print(f"changeflow: execution {e.name} ended {e.status} with {e.error!r}, not one of the workflow's "
              f"named errors: see its history (`{history_hint.format(name=e.name)}`)", file=sys.stderr)
    if failures:
        return FAILED
    return REJECTED if any(e.status != "SUCCEEDED" for e in results) else OK


def _rejected(e: Execution, known: set[str]) -> bool:
    if e.status == "REJECTED":  # POST /changes answered with an error status
        return (e.error or "").startswith("HTTP 4")
    return e.status == "REFUSED" or (e.status == "FAILED" and e.error in known)


def _public(e: Execution, arn: bool = True) -> dict[str, Any]:
    """An execution for --json: ``cause`` is the error message (the traceback stays in the function's log)."""
    shown = e.to_json()
    shown["cause"] = report.error_message(e.cause)
    if not arn:
        shown.pop("arn")
    return shown


def _dump(document: Any) -> None:
    sys.stdout.write(wire.dumps(document, default=str))  # numbers with every digit, never through float
    sys.stdout.write("\n")


def known_errors(client: Changeflow) -> set[str]:
    definition = json.loads(client.sfn.describe_state_machine(stateMachineArn=client.state_machine_arn)["definition"])
    return named_errors(definition) | {"ValidationError"}


# --- commands ---------------------------------------------------------------------------------------
# run's time scale when none is given: 0.001 one change at a time (Waits and back-offs almost vanish), 0.1
# with --concurrency above 1: at 0.001 the workflow's back-off before reading again (seconds, scaled) is
# shorter than one embedded step, so a writer that lost a race reads again at once instead of after the
# winner, and under load writers can use up their attempts and end VersionConflict (README, "Contention":
# 1 of 50 at 0.02 on a loaded machine). At 0.1 the back-off keeps its place relative to the steps.
RUN_TIME_SCALE, RUN_TIME_SCALE_CONCURRENT = 0.001, 0.1


def run_time_scale(args) -> float:
    if args.time_scale is not None:
        return args.time_scale
    return RUN_TIME_SCALE_CONCURRENT if args.concurrency > 1 else RUN_TIME_SCALE


def cmd_run(args) -> int:
    from .local.embedded import EmbeddedStack

    changes = load_changes(args.files)
    with EmbeddedStack(parameters=parse_params(args.param), time_scale=run_time_scale(args),
                       lambda_runtime=args.lambda_runtime) as stack:
        client = Changeflow.for_embedded(stack)
        results = submit_all(client, changes, args.concurrency, progress=not args.json)
        entities = {e: client.entity(e) for e in touched_entities(changes)}
        known = known_errors(client)
        names = [e.name for e in results if e.arn]
        unknown = [name for name in args.history if name not in names]
        if unknown:
            raise UsageError(f"--history {unknown[0]}: no execution of this run has that name; "
                             f"its executions are: {', '.join(names) or '(none)'}")
        histories = {e.name: list(client.history(e.arn)) for e in results if e.arn and e.name in args.history}
    if args.json:
        document = {"executions": [_public(e, arn=False) for e in results], "entities": entities}
        if args.history:
            document["histories"] = histories
        _dump(document)
    else:
        print(report.executions(results))
        for entity_id, entity in entities.items():
            print()
            print(report.versions(entity_id, entity))
        for name, events in histories.items():
            print(f"\nexecution history of {name}")
            print(report.history(events))
    return execution_status(results, known, history_hint="changeflow run ... --history {name}")


def target(args) -> Changeflow:
    if args.stack_name:
        import boto3

        if not (args.region or boto3.session.Session().region_name):
            raise UsageError("--stack-name needs a region: pass --region REGION or set AWS_REGION")
        return Changeflow.for_aws_stack(args.stack_name, args.region)
    return Changeflow.for_aws_stack("changeflow", args.region or "us-east-1", endpoint_url=args.endpoint_url)


def cmd_submit(args) -> int:
    changes = load_changes(args.files)
    client = target(args)
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
            _dump(_public(execution))
        else:
            print(report.executions([execution]))
    return execution_status(results, known_errors(client))


def _no_such_entity(entity_id: str) -> NotFound:
    return NotFound(f"no such entity: {entity_id!r} has no v0 and no version in history "
                    "(`changeflow verify --all` lists every entity)")


def cmd_versions(args) -> int:
    entity = target(args).entity(args.entity)
    if entity["latest"] is None and not entity["versions"]:
        raise _no_such_entity(args.entity)
    print(wire.dumps(entity) if args.json else report.versions(args.entity, entity))
    return OK


def cmd_history(args) -> int:
    client = target(args)
    arn = args.execution
    if not arn.startswith("arn:"):
        arn = client.state_machine_arn.replace(":stateMachine:", ":execution:") + ":" + arn
    try:
        events = list(client.history(arn))
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("ExecutionDoesNotExist", "InvalidArn"):
            raise NotFound(f"no such execution: {args.execution!r} (`changeflow executions` lists them)") from exc
        raise
    print(wire.dumps(events, ensure_ascii=True, default=str) if args.json else report.history(events))
    return OK


def cmd_executions(args) -> int:
    found = target(args).executions(args.limit)
    if args.json:
        _dump([{"name": e["name"], "executionArn": e["executionArn"], "status": e["status"],
                "startDate": e["startDate"], "stopDate": e.get("stopDate")} for e in found])
        return OK
    rows = [[e["name"], e["status"], e["startDate"], e.get("stopDate")] for e in found]
    print(report.table(["execution", "status", "started", "stopped"], rows, max_width=90))
    return OK


def _versions_span(r) -> str:
    if not r.versions:
        return "no versions"
    text = f"versions {report.ranges(r.versions)}"
    return text + (f"; missing {report.ranges(r.missing)}" if r.missing else "")


def cmd_verify(args) -> int:
    from .audit import verify as integrity

    client = target(args)
    if args.since_digest:
        return _verify_since_digest(client, args)
    ids = integrity.entities(client) if args.all else [args.entity]
    reports = [integrity.verify(client, entity_id) for entity_id in ids]
    if not args.all and not reports[0].found:
        raise _no_such_entity(args.entity)
    if args.executions:
        from .audit import digests as audit

        for r in reports:
            r.problems.extend(audit.check_executions(client, r.entity_id))
    if args.json:
        _dump([{"entityId": r.entity_id, "ok": r.ok, "versions": r.versions, "missing": r.missing,
                "problems": r.problems} for r in reports])
    else:
        for r in reports:
            print(f"{r.entity_id}: {'ok' if r.ok else 'PROBLEMS'} ({_versions_span(r)})")
            for problem in r.problems:
                print(f"  - {problem}")
    return OK if all(r.ok for r in reports) else REJECTED


def _verify_since_digest(client: Changeflow, args) -> int:
    """Prove that nothing recorded before a digest has changed since (every entity the digest names)."""
    from changeflow_core import chain

    from .audit import digests as audit

    try:
        taken = wire.loads(Path(args.since_digest).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{args.since_digest}: cannot read it ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise UsageError(f"{args.since_digest}: not a JSON digest ({exc})") from exc
    if not isinstance(taken, dict) or not isinstance(taken.get("entities"), list):
        raise UsageError(f"{args.since_digest}: not a changeflow digest (`changeflow digest --all` makes one)")
    wanted = None if args.all or not args.entity else {args.entity}
    if wanted is not None:
        taken = {**taken, "entities": [h for h in taken["entities"] if h["entityId"] in wanted]}
        taken["root"] = chain.merkle_root(taken["entities"])  # the proof is of these entities' heads
    problems = audit.verify_since(client, taken)
    if args.json:
        _dump({"digest": args.since_digest, "takenAt": taken.get("takenAt"), "entities": len(taken["entities"]),
               "ok": not problems, "problems": problems})
    else:
        print(f"since the digest of {taken.get('takenAt')}: {len(taken['entities'])} entities, "
              f"{'nothing recorded before it has changed' if not problems else 'CHANGED'}")
        for entity_id, found in problems.items():
            for problem in found:
                print(f"  {entity_id}: {problem}")
    return OK if not problems else REJECTED


def cmd_digest(args) -> int:
    from .audit import digests as audit
    from .audit import verify as integrity

    client = target(args)
    ids = integrity.entities(client) if args.all else [args.entity]
    taken = audit.digest(client, ids)
    if not args.all and not taken["entities"]:
        raise _no_such_entity(args.entity)
    text = wire.dumps(taken)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(f"digest of {len(taken['entities'])} entities, root {taken['root']}, written to {args.output}")
    else:
        print(text)
    return OK


def cmd_repair(args) -> int:
    from .audit import verify as integrity

    client = target(args)
    if not integrity.verify(client, args.entity).found:
        raise _no_such_entity(args.entity)
    done, cannot = integrity.repair(client, args.entity)
    if args.json:
        _dump({"entityId": args.entity, "repaired": done, "cannotRepair": cannot})
    else:
        for line in done:
            print(f"repaired: {line}")
        for line in cannot:
            print(f"cannot repair: {line}")
        if not done and not cannot:
            print(f"{args.entity}: nothing to repair")
    return REJECTED if cannot else OK


def cmd_serve(args) -> int:
    import socket

    from .local.server import serve

    parameters = parse_params(args.param)
    if args.port:  # werkzeug would print its own lines and exit: say it in one
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", args.port))
            except OSError as exc:
                raise ToolFailure(f"port {args.port} on 127.0.0.1 is taken ({exc.strerror}): "
                                  "pass --port PORT, or --port 0 for a free one") from exc
    serve(port=args.port, parameters=parameters, time_scale=args.time_scale, lambda_runtime=args.lambda_runtime)
    return OK


def cmd_demo(args) -> int:
    from .demo import main

    return main(serve=args.serve, port=args.port)


# --- the parser -------------------------------------------------------------------------------------
def _number(kind, low, high=None, what="a number"):
    """An argparse type: ``kind`` within ``[low, high]``, else argparse's one-line error and status 2."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {what} {bound}")
        return value
    return parse


PORT = _number(int, 0, 65535, "a port number")
COUNT = _number(int, 1, what="a whole number")
FACTOR = _number(float, 0.0, what="a number")
SECONDS = _number(float, 0.0, what="a number of seconds")


def _exit_help(*lines: str) -> str:
    """The ``exit status`` section of a command's --help: its own meanings of 1 and 3, and 0 and 2."""
    return "exit status:\n" + "\n".join(textwrap.fill(line, 100, initial_indent="  ", subsequent_indent="     ")
                                         for line in lines)


EXIT_2 = "2  bad command line or file (unreadable, not JSON, bad --param, --stack-name without a region)"
EXIT_3_REMOTE = "3  could not reach the endpoint or the stack, or AWS refused the request"
EXIT_DEFAULT = _exit_help("0  done", "1  rejected: the stack answered no", EXIT_2, "3  could not do it")
EXIT_HELP = {
    "run": _exit_help(
        "0  every execution SUCCEEDED (stale and duplicate outcomes included)",
        "1  a change was rejected: FAILED with one of the workflow's named errors (ValidationError, NotFound, "
        "VersionConflict, ...), or over 256 KiB and never started (REFUSED)",
        EXIT_2 + "; an unknown --history name",
        "3  an execution ended with an error the workflow does not name, TIMED_OUT or ABORTED"),
    "demo": _exit_help("0  the demonstration ran", "2  bad command line", "3  the embedded stack could not start"),
    "serve": _exit_help("0  stopped with Ctrl-C or SIGTERM", "2  bad command line or --param",
                        "3  the port is taken"),
    "submit": _exit_help(
        "0  every execution SUCCEEDED (stale and duplicate outcomes included)",
        "1  a change was rejected: FAILED with one of the workflow's named errors, over 256 KiB and never "
        "started (REFUSED), or POST /changes answered 4xx (REJECTED)",
        EXIT_2,
        EXIT_3_REMOTE + "; an execution ended with an error the workflow does not name, TIMED_OUT or "
        "ABORTED, or was still running after --timeout"),
    "local": _exit_help("0  the function ran (see `changeflow local invoke --help`: as sam local invoke)",
                        "1  it could not be run", "2  bad command line"),
    "console": _exit_help("0  stopped with Ctrl-C or SIGTERM", EXIT_2, "3  the port is taken, or the endpoint or "
                          "stack cannot be reached"),
    "digest": _exit_help("0  the digest was printed or written", "1  no such entity", EXIT_2, EXIT_3_REMOTE),
    "versions": _exit_help("0  the entity's versions were printed", "1  no such entity", EXIT_2, EXIT_3_REMOTE),
    "history": _exit_help("0  the history was printed", "1  no such execution", EXIT_2, EXIT_3_REMOTE),
    "executions": _exit_help("0  the executions were printed (none is not an error)", EXIT_2, EXIT_3_REMOTE),
    "verify": _exit_help("0  every entity checked is consistent (and unchanged since --since-digest)",
                         "1  problems found (a gap, a broken hash chain, a change since the digest, a version "
                         "no execution wrote), or no such entity",
                         EXIT_2, EXIT_3_REMOTE),
    "repair": _exit_help("0  repaired, or nothing to repair", "1  something cannot be repaired (listed), or no such "
                         "entity", EXIT_2, EXIT_3_REMOTE),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="changeflow", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status, every command: 0 done, 1 rejected (the stack answered no), 2 bad command line or "
               "file, 3 could not do it.\nEach command's --help says what they mean for it.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, description: str | None = None) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help_text, description=textwrap.fill(description or help_text, 100),
                                   epilog=EXIT_HELP.get(name, EXIT_DEFAULT), formatter_class=argparse.RawDescriptionHelpFormatter)

    run = command("run", "run changes on the embedded stack in this process",
                  "Start the embedded stack in this process, run the changes in FILEs in order (or --concurrency "
                  "at once), print each execution and the version table of every entity they touched.")
    run.add_argument("files", nargs="+", metavar="FILE", help="JSON file: one change request, or an array of them")
    run.add_argument("--json", action="store_true",
                     help="print one JSON document {executions, entities[, histories]} instead of the report")
    run.add_argument("--concurrency", type=COUNT, default=1,
                     help="executions in flight at once (default %(default)s: one after the other, in file order)")
    run.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                     help="override a template parameter, e.g. HistoryRetentionVersions=2 (repeatable)")
    run.add_argument("--time-scale", type=FACTOR, default=None, metavar="FACTOR",
                     help=f"multiply Wait and retry back-off times (default {RUN_TIME_SCALE}; "
                          f"{RUN_TIME_SCALE_CONCURRENT} with --concurrency above 1)")
    run.add_argument("--history", action="append", default=[], metavar="EXECUTION",
                     help="also print the execution history of this execution of the run, by name (repeatable)")
    runtime.add_lambda_runtime_option(run)
    run.set_defaults(func=cmd_run)

    demo = command("demo", "the demonstration (make run): every path on the embedded stack",
                   "Run the demonstration on the embedded stack: create, update, a stale write, a duplicate, "
                   "two writers racing, two concurrent patches, delete, a write that cannot resurrect, revive, "
                   "rollback and an invalid request, each from its file in events/workflow/; then the version "
                   "table and one execution's history; with --serve, then keep the stack and its console open.")
    demo.add_argument("--serve", action="store_true",
                      help="then keep the stack, its endpoint and its console open on 127.0.0.1 until Ctrl-C")
    demo.add_argument("--port", type=PORT, default=4566,
                      help="TCP port of --serve on 127.0.0.1 (default %(default)s)")
    demo.set_defaults(func=cmd_demo)

    serve = command("serve", "serve the embedded stack on 127.0.0.1 (AWS-compatible endpoint)",
                    "Serve the embedded stack on 127.0.0.1 until Ctrl-C: every AWS API the stack uses (boto3 or "
                    "the AWS CLI with --endpoint-url) and the stack's REST API under /<stage>/.")
    serve.add_argument("--port", type=PORT, default=4566,
                       help="TCP port on 127.0.0.1 (default %(default)s; 0 picks a free one and prints it)")
    serve.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                       help="override a template parameter, e.g. HistoryRetentionVersions=2 (repeatable)")
    serve.add_argument("--time-scale", type=FACTOR, default=1.0, metavar="FACTOR",
                       help="multiply Wait and retry back-off times (default %(default)s: real time)")
    runtime.add_lambda_runtime_option(serve)
    serve.set_defaults(func=cmd_serve)
    runtime.add_commands(command)  # changeflow local invoke

    def remote(name: str, help_text: str, description: str | None = None):
        sub = command(name, help_text, description)
        where = sub.add_mutually_exclusive_group()
        where.add_argument("--endpoint-url", default=DEFAULT_ENDPOINT, metavar="URL",
                           help="a running `changeflow serve` (default %(default)s)")
        where.add_argument("--stack-name", metavar="NAME",
                           help="a stack deployed on AWS (sam deploy); needs a region and AWS credentials")
        sub.add_argument("--region", default=None,
                         help="AWS region of --stack-name (default: AWS_REGION or the AWS config; "
                              "us-east-1 for --endpoint-url)")
        sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
        return sub

    submit = remote("submit", "start executions from files and wait for each",
                    "Start one execution per change request in FILEs, one after the other, and wait for each to "
                    "end. With --json, one JSON object per execution, one per line.")
    submit.add_argument("files", nargs="+", metavar="FILE", help="JSON file: one change request, or an array of them")
    submit.add_argument("--timeout", type=SECONDS, default=300.0, metavar="SECONDS",
                        help="how long to wait for each execution to end, in seconds (default %(default)g)")
    submit.add_argument("--via", choices=["stepfunctions", "api", "events"], default="stepfunctions",
                        help="entry point: StartExecution (default: stepfunctions), POST /changes (api), or PutEvents to "
                             "the bus (events)")
    submit.set_defaults(func=cmd_submit)
    versions = remote("versions", "an entity's table of versions")
    versions.add_argument("entity", help="entity id, e.g. user#1001")
    versions.set_defaults(func=cmd_versions)
    history = remote("history", "an execution's history, as the console shows it")
    history.add_argument("execution", help="execution name or ARN")
    history.set_defaults(func=cmd_history)
    executions = remote("executions", "recent executions with their status")
    executions.add_argument("--limit", type=COUNT, default=50, help="at most this many, newest first (default %(default)s)")
    executions.set_defaults(func=cmd_executions)
    verify = remote("verify", "check an entity's versions (contiguous, consistent, v0 matches history)")
    which = verify.add_mutually_exclusive_group(required=True)
    which.add_argument("entity", nargs="?", help="entity id")
    which.add_argument("--all", action="store_true", help="every entity (scans the tables)")
    verify.add_argument("--since-digest", metavar="FILE",
                        help="prove that nothing recorded before this digest (changeflow digest) has changed since")
    verify.add_argument("--executions", action="store_true",
                        help="also check that each version's executionArn names the execution that wrote it "
                             "(one DescribeExecution per version)")
    verify.set_defaults(func=cmd_verify)
    digest = remote("digest", "each entity's head version and chain hash, with a Merkle root: keep it elsewhere",
                    "Print a digest: per entity, its head version and that version's chain hash; with --all, a "
                    "Merkle root over every entity's head and the time it was taken. Keep it outside the account "
                    "(another account, an S3 bucket with Object Lock); `changeflow verify --since-digest FILE` "
                    "later proves that nothing recorded before it has changed.")
    which = digest.add_mutually_exclusive_group(required=True)
    which.add_argument("entity", nargs="?", help="entity id")
    which.add_argument("--all", action="store_true", help="every entity (scans the tables)")
    digest.add_argument("--output", metavar="FILE", help="write the digest to FILE instead of standard output")
    digest.set_defaults(func=cmd_digest)
    repair = remote("repair", "write v0's missing history item; say what cannot be repaired")
    repair.add_argument("entity", help="entity id")
    repair.set_defaults(func=cmd_repair)
    from .console import add_command as add_console_command  # the audit console (changeflow.console)
    add_console_command(command, DEFAULT_ENDPOINT)
    return parser


def explain(exc: BaseException, args) -> tuple[str, int] | None:
    """The one line a user sees for an error, and the exit status; None for a defect in the tool (which
    keeps its traceback, so that it gets reported)."""
    endpoint = getattr(args, "stack_name", None) or getattr(args, "endpoint_url", None)
    if isinstance(exc, (UsageError, TemplateError)):
        return str(exc), USAGE
    if isinstance(exc, NotFound):
        return str(exc), REJECTED
    if isinstance(exc, ToolFailure):
        return str(exc), FAILED
    if isinstance(exc, NoRegionError):
        return "no AWS region: pass --region REGION or set AWS_REGION", USAGE
    if isinstance(exc, NoCredentialsError):
        return ("no AWS credentials: configure them (aws configure, AWS_PROFILE) for --stack-name, "
                "or use --endpoint-url with `changeflow serve`"), FAILED
    if isinstance(exc, EndpointConnectionError):
        return f"cannot reach {exc.kwargs.get('endpoint_url')}: is `changeflow serve` running there?", FAILED
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), error.get("Message", "")
        if exc.operation_name == "DescribeStacks" and "does not exist" in message:
            return f"no stack {endpoint if args.stack_name else 'changeflow'}: {message}", FAILED
        return f"{exc.operation_name} failed: {code}: {message}", FAILED
    if isinstance(exc, BotoCoreError):
        return str(exc), FAILED
    if isinstance(exc, URLError):
        return f"cannot reach the REST API: {exc.reason}", FAILED
    if isinstance(exc, (TimeoutError, RuntimeError)):
        return str(exc), FAILED
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # a bad command line: argparse's usage line and exit status 2
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        explained = explain(exc, args)
        if explained is None:
            raise
        message, status = explained
        print(f"changeflow: {message}", file=sys.stderr)
        return status
