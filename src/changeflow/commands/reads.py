"""``changeflow versions``, ``history``, ``executions`` and ``api``: what a stack holds, read through the client
(``api``: through its REST API, signed), against ``changeflow serve`` or a stack deployed on AWS."""

from __future__ import annotations

import sys
from pathlib import Path

from botocore.exceptions import ClientError
from changeflow_core import asof, wire
from changeflow_core.errors import NotFound as CoreNotFound
from changeflow_core.errors import ValidationError

from .. import report
from ..client import rest, shown_status, targets
from ..common.errors import FAILED, OK, REJECTED, NotFound, UsageError
from .options import COUNT, EXIT_2, EXIT_3_REMOTE, add_remote_options, exit_help
from .output import dump, no_such_entity


def cmd_versions(args) -> int:
    try:
        as_of, known_at = asof.parse_instant("--as-of", args.as_of), asof.parse_instant("--known-at", args.known_at)
        start, end = asof.parse_instant("--from", args.start), asof.parse_instant("--to", args.end)
    except ValidationError as exc:
        raise UsageError(str(exc)) from None
    if (start is None) != (end is None):
        raise UsageError("--from and --to go together")
    if start is not None and (as_of is not None or known_at is not None):
        raise UsageError("--from/--to list versions; --as-of/--known-at answer one: give one or the other")
    if as_of is not None or known_at is not None:
        return version_at(args, as_of, known_at)
    if start is not None:
        return versions_during(args, start, end)
    entity = targets.client_for(args).entity(args.entity)
    if entity["latest"] is None and not entity["versions"]:
        raise no_such_entity(args.entity)
    print(wire.dumps(entity) if args.json else report.versions(args.entity, entity))
    return OK


def version_at(args, as_of: int | None, known_at: int | None) -> int:
    """``--as-of`` / ``--known-at``: the version in effect then, found as the read API finds it."""
    client = targets.client_for(args)
    try:
        found, _ = asof.version_at(client.dynamodb, client.table, client.history_table, args.entity, as_of, known_at)
    except (CoreNotFound, asof.Gone) as exc:
        raise NotFound(str(exc)) from None
    print(wire.dumps(found) if args.json else report.versions(args.entity, {"latest": None, "versions": [found]},
                                                              head=f"entity {args.entity} {when(as_of, known_at)}"))
    return OK


def versions_during(args, start: int, end: int) -> int:
    """``--from``/``--to``: every version in effect during the interval, oldest first."""
    client = targets.client_for(args)
    try:
        first, last, _ = asof.versions_during(client.dynamodb, client.table, client.history_table, args.entity, start, end)
    except ValidationError as exc:
        raise UsageError(f"--from: {exc.problem}") from None
    found, key = [], None
    while last:
        page = asof.versions_page_during(client.dynamodb, client.table, client.history_table, args.entity,
                                         start, end, 100, key)
        found.extend(page["items"])
        key = page["nextCursor"]
        if not key:
            break
    found.reverse()
    head = f"entity {args.entity} from {asof.utc(start)} to {asof.utc(end)}: " + (
        f"versions {first} to {last}" if last else "no version in effect")
    print(wire.dumps({"first": first or None, "last": last or None, "versions": found}) if args.json
          else report.versions(args.entity, {"latest": None, "versions": found}, head=head))
    return OK


def when(as_of: int | None, known_at: int | None) -> str:
    return " and ".join(part for part in (as_of is not None and f"as of {asof.utc(as_of)}",
                                          known_at is not None and f"as known at {asof.utc(known_at)}") if part)


def cmd_history(args) -> int:
    client = targets.client_for(args)
    arn = args.execution
    if not arn.startswith("arn:"):
        arn = client.state_machine_arn.replace(":stateMachine:", ":execution:") + ":" + arn
    try:
        events = list(client.history(arn))
    except ClientError as exc:
        aged = client.from_versions(arn, args.entity) if getattr(args, "entity", None) and \
            exc.response["Error"]["Code"] == "ExecutionDoesNotExist" else None
        if aged is not None:  # aged out, not in the execution log (docs/privacy.md): what the table keeps
            print(wire.dumps(aged, ensure_ascii=True, default=str) if args.json else report.aged_out(aged))
            return OK
        if exc.response["Error"]["Code"] in ("ExecutionDoesNotExist", "InvalidArn"):
            raise NotFound(f"no such execution: {args.execution!r} (`changeflow executions` lists them)") from exc
        raise
    print(wire.dumps(events, ensure_ascii=True, default=str) if args.json else report.history(events))
    return OK


def cmd_executions(args) -> int:
    found = targets.client_for(args).executions(args.limit, errors=not args.json)
    if args.json:
        dump([{"name": e["name"], "executionArn": e["executionArn"], "status": e["status"],
               "startDate": e["startDate"], "stopDate": e.get("stopDate")} for e in found])
        return OK
    rows = [[e["name"], shown_status(e["status"], e.get("error")), e["startDate"], e.get("stopDate")]
            for e in found]
    print(report.table(["execution", "status", "started", "stopped"], rows, max_width=90))
    return OK


def cmd_api(args) -> int:
    try:
        path = rest.route(args.path, args.id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    body = None
    if args.data is not None:
        try:
            body = sys.stdin.buffer.read() if args.data == "-" else Path(args.data).read_bytes()
        except OSError as exc:
            raise UsageError(f"{args.data}: cannot read it ({exc.strerror or exc})") from None
    answer = targets.client_for(args).api("POST" if body is not None else "GET", path, body)
    if answer.status >= 300:  # the API's own message, on one line: 4xx the stack said no, else it failed
        message = report.error_message(answer.body.decode("utf-8", "replace")) or ""
        print(f"changeflow: {path} answered {answer.status}: {' '.join(message.split())}", file=sys.stderr)
        return REJECTED if answer.status < 500 else FAILED
    sys.stdout.write(answer.body.decode("utf-8", "replace").rstrip("\n") + "\n")  # as the API sent it
    return OK


def add_api(command) -> None:
    api = command("api", "call the REST API, signed (SigV4) with the same credentials: GET, or POST with --data",
                  "Call a route of the stack's REST API (docs/api.md) as an AWS_IAM client does: signed with SigV4 "
                  "for execute-api with the credentials the other commands use (on `changeflow serve`, testing/"
                  "testing), and print the JSON it answers. PATH is under the API's stage; an entity id goes in "
                  "it percent-encoded (user%231001), or as {id} with --id, which encodes any id.",
                  exits=exit_help("0  the API answered 2xx (its body on stdout)", "1  the API answered 4xx (its "
                                  "message on stderr; a --data body that is not JSON is the API's 400)",
                                  "2  bad command line, or a --data FILE that cannot be read",
                                  EXIT_3_REMOTE + "; the API answered 5xx"))
    add_remote_options(api, json=False)
    api.add_argument("path", metavar="PATH", help="e.g. /entities/{id}/versions?limit=2 with --id 'user#1001', "
                     "or /entities/user%%231001")
    api.add_argument("--id", metavar="ENTITY", help="the entity id that {id} in PATH stands for (encoded here)")
    api.add_argument("--data", metavar="FILE", help="POST FILE as the body (- for stdin), as it is: e.g. a change's JSON to /changes")
    api.set_defaults(func=cmd_api)


def add_versions(command) -> None:
    versions = command("versions", "an entity's table of versions", exits=exit_help(
        "0  the entity's versions were printed", "1  no such entity; or it did not exist, was deleted, or its version "
        "then has expired, at --as-of / --known-at", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(versions)
    versions.add_argument("entity", help="entity id, e.g. user#1001")
    times = "epoch milliseconds or ISO 8601 in UTC, e.g. 2026-01-01T00:00:00Z"
    versions.add_argument("--as-of", metavar="T", help=f"only the version in effect at effective time T ({times})")
    versions.add_argument("--known-at", metavar="T", help="only what the table held at recorded time T (with "
                          "--as-of: what was believed at T about the state at --as-of)")
    versions.add_argument("--from", dest="start", metavar="T1", help="with --to: the versions in effect during "
                          "[T1, T2], including the one in effect at T1")
    versions.add_argument("--to", dest="end", metavar="T2", help="see --from")
    versions.set_defaults(func=cmd_versions)


def add_history(command) -> None:
    history = command("history", "an execution's history, as the console shows it", exits=exit_help(
        "0  the history was printed", "1  no such execution", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(history)
    history.add_argument("execution", help="execution name or ARN")
    history.add_argument("--entity", help="the entity it changed: once Step Functions and the execution log no "
                                          "longer hold the execution, show what the table keeps of it (the "
                                          "versions it wrote, their audit fields)")
    history.set_defaults(func=cmd_history)


def add_executions(command) -> None:
    executions = command("executions", "recent executions with their status", exits=exit_help(
        "0  the executions were printed (none is not an error)", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(executions)
    executions.add_argument("--limit", type=COUNT, default=50,
                            help="at most this many, newest first (default %(default)s)")
    executions.set_defaults(func=cmd_executions)
