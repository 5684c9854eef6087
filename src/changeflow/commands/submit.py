"""``changeflow submit``: start executions from files against ``changeflow serve`` or a stack deployed on
AWS, through Step Functions, the REST API or the event bus, and wait for each."""

from __future__ import annotations

from changeflow_core.errors import ValidationError
from changeflow_core.validation import check_request_size

from .. import report
from ..client import targets
from ..common.errors import ToolFailure
from .changes import load_changes, refused
from .options import EXIT_0_EXECUTIONS, EXIT_2, EXIT_3_REMOTE, SECONDS, add_remote_options, exit_help
from .output import dump, execution_status, known_errors, public


def cmd_submit(args) -> int:
    changes = load_changes(args.files)
    client = targets.client_for(args)
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


def add_submit(command) -> None:
    submit = command("submit", "start executions from files and wait for each",
                     "Start one execution per change request in FILEs, one after the other, and wait for each to "
                     "end. With --json, one JSON object per execution, one per line.",
                     exit_help(
                         EXIT_0_EXECUTIONS,
                         "1  a change was rejected: FAILED with one of the workflow's named errors, over 256 KiB "
                         "and never started (REFUSED), or POST /changes answered 4xx (REJECTED)",
                         EXIT_2,
                         EXIT_3_REMOTE + "; an execution ended with an error the workflow does not name, TIMED_OUT "
                         "or ABORTED, or was still running after --timeout"))
    add_remote_options(submit)
    submit.add_argument("files", nargs="+", metavar="FILE", help="JSON file: one change request, or an array of them")
    submit.add_argument("--timeout", type=SECONDS, default=300.0, metavar="SECONDS",
                        help="how long to wait for each execution to end, in seconds (default %(default)g)")
    submit.add_argument("--via", choices=["stepfunctions", "api", "events"], default="stepfunctions",
                        help="entry point: StartExecution (default: stepfunctions; the version's principal then says "
                             "the workflow does not know the caller), POST /changes signed with SigV4 (api: the signer "
                             "is recorded), or PutEvents to the bus (events: the event's account and source)")
    submit.set_defaults(func=cmd_submit)
