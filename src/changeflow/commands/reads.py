"""``changeflow versions``, ``history`` and ``executions``: what a stack holds, read through the client,
against ``changeflow serve`` or a stack deployed on AWS."""

from __future__ import annotations

from botocore.exceptions import ClientError
from changeflow_core import wire

from .. import report
from ..client import targets
from ..common.errors import OK, NotFound
from .options import COUNT, EXIT_2, EXIT_3_REMOTE, add_remote_options, exit_help
from .output import dump, no_such_entity


def cmd_versions(args) -> int:
    entity = targets.client_for(args).entity(args.entity)
    if entity["latest"] is None and not entity["versions"]:
        raise no_such_entity(args.entity)
    print(wire.dumps(entity) if args.json else report.versions(args.entity, entity))
    return OK


def cmd_history(args) -> int:
    client = targets.client_for(args)
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
    found = targets.client_for(args).executions(args.limit)
    if args.json:
        dump([{"name": e["name"], "executionArn": e["executionArn"], "status": e["status"],
               "startDate": e["startDate"], "stopDate": e.get("stopDate")} for e in found])
        return OK
    rows = [[e["name"], e["status"], e["startDate"], e.get("stopDate")] for e in found]
    print(report.table(["execution", "status", "started", "stopped"], rows, max_width=90))
    return OK


def add_versions(command) -> None:
    versions = command("versions", "an entity's table of versions", exits=exit_help(
        "0  the entity's versions were printed", "1  no such entity", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(versions)
    versions.add_argument("entity", help="entity id, e.g. user#1001")
    versions.set_defaults(func=cmd_versions)


def add_history(command) -> None:
    history = command("history", "an execution's history, as the console shows it", exits=exit_help(
        "0  the history was printed", "1  no such execution", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(history)
    history.add_argument("execution", help="execution name or ARN")
    history.set_defaults(func=cmd_history)


def add_executions(command) -> None:
    executions = command("executions", "recent executions with their status", exits=exit_help(
        "0  the executions were printed (none is not an error)", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(executions)
    executions.add_argument("--limit", type=COUNT, default=50,
                            help="at most this many, newest first (default %(default)s)")
    executions.set_defaults(func=cmd_executions)
