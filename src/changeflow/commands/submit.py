"""``changeflow submit``: start executions from files against ``changeflow serve`` or a stack deployed on
AWS, through Step Functions, the REST API or the event bus, and wait for each."""

from __future__ import annotations

from ..client import targets
from .changes import add_via, load_changes, submit_each
from .options import EXIT_0_EXECUTIONS, EXIT_2, EXIT_3_REMOTE, SECONDS, TOO_LARGE, add_remote_options, exit_help


def cmd_submit(args) -> int:
    changes = load_changes(args.files)
    return submit_each(args, targets.client_for(args), changes)


def add_submit(command) -> None:
    submit = command("submit", "start executions from files and wait for each",
                     "Start one execution per change request in FILEs, one after the other, and wait for each to "
                     "end. With --json, one JSON object per execution, one per line.",
                     exit_help(
                         EXIT_0_EXECUTIONS,
                         "1  a change was rejected: FAILED with one of the workflow's named errors, " + TOO_LARGE +
                         " and never started (REFUSED), or POST /changes answered 4xx (REJECTED)",
                         EXIT_2,
                         EXIT_3_REMOTE + "; an execution ended with an error the workflow does not name, TIMED_OUT "
                         "or ABORTED, or was still running after --timeout; or its outcome is UNKNOWN (OutcomeUnknown: "
                         "a write whose answer was lost may have landed; send the same change id again)"))
    add_remote_options(submit)
    submit.add_argument("files", nargs="+", metavar="FILE", help="JSON file: one change request, or an array of them")
    submit.add_argument("--timeout", type=SECONDS, default=300.0, metavar="SECONDS",
                        help="how long to wait for each execution to end, in seconds (default %(default)g)")
    add_via(submit)
    submit.set_defaults(func=cmd_submit)
