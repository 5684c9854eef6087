"""``changeflow run`` and ``changeflow demo``: the embedded stack in this process."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from changeflow_core.errors import ValidationError
from changeflow_core.validation import check_request_size

from .. import report
from ..client import Changeflow, Execution
from ..common.errors import UsageError
from ..common.params import parse_params
from .changes import load_changes, refused
from .options import (COUNT, EXIT_0_EXECUTIONS, EXIT_2, FACTOR, PORT, TOO_LARGE, add_lambda_runtime_option,
                      add_param_option, check_port_free, exit_help)
from .output import dump, execution_status, known_errors, public

# run's time scale when none is given: 0.001 one change at a time (Waits and back-offs almost vanish), 0.1
# with --concurrency above 1: at 0.001 the workflow's back-off before reading again (seconds, scaled) is
# shorter than one embedded step, so a writer that lost a race reads again at once instead of after the
# winner, and under load writers can use up their attempts and end VersionConflict (docs/cost.md, "Contention":
# 1 of 50 at 0.02 on a loaded machine). At 0.1 the back-off keeps its place relative to the steps.
RUN_TIME_SCALE, RUN_TIME_SCALE_CONCURRENT = 0.001, 0.1


def run_time_scale(args) -> float:
    if args.time_scale is not None:
        return args.time_scale
    return RUN_TIME_SCALE_CONCURRENT if args.concurrency > 1 else RUN_TIME_SCALE


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


def touched_entities(changes: list[tuple[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}  # first-seen order; a dict, so that each change costs O(1), not O(entities)
    for _, request in changes:
        entity = request.get("entityId") if isinstance(request, dict) else None
        if isinstance(entity, str) and entity:
            seen.setdefault(entity)
    return list(seen)


def cmd_run(args) -> int:
    from ..local.embedded import EmbeddedStack  # moto and the handlers load only when a stack starts

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
        document = {"executions": [public(e, arn=False) for e in results], "entities": entities}
        if args.history:
            document["histories"] = histories
        dump(document)
    else:
        print(report.executions(results))
        for entity_id, entity in entities.items():
            print()
            print(report.versions(entity_id, entity))
        for name, events in histories.items():
            print(f"\nexecution history of {name}")
            print(report.history(events))
    return execution_status(results, known, history_hint="changeflow run ... --history {name}")


def cmd_demo(args) -> int:
    from .. import demo

    if args.serve:
        check_port_free(args.port)  # before the demo runs, not after
    return demo.main(serve=args.serve, port=args.port)


def add_run(command) -> None:
    run = command("run", "run changes on the embedded stack in this process",
                  "Start the embedded stack in this process, run the changes in FILEs in order (or --concurrency "
                  "at once), print each execution and the version table of every entity they touched.",
                  exit_help(
                      EXIT_0_EXECUTIONS,
                      "1  a change was rejected: FAILED with one of the workflow's named errors (ValidationError, "
                      "NotFound, VersionConflict, ...), or " + TOO_LARGE + " and never started (REFUSED)",
                      EXIT_2 + "; an unknown --history name",
                      "3  an execution ended with an error the workflow does not name, TIMED_OUT or ABORTED, or its "
                      "outcome is UNKNOWN (OutcomeUnknown: send the same change id again)"))
    run.add_argument("files", nargs="+", metavar="FILE", help="JSON file: one change request, or an array of them")
    run.add_argument("--json", action="store_true",
                     help="print one JSON document {executions, entities[, histories]} instead of the report")
    run.add_argument("--concurrency", type=COUNT, default=1,
                     help="executions in flight at once (default %(default)s: one after the other, in file order)")
    add_param_option(run)
    run.add_argument("--time-scale", type=FACTOR, default=None, metavar="FACTOR",
                     help=f"multiply Wait and retry back-off times (default {RUN_TIME_SCALE}; "
                          f"{RUN_TIME_SCALE_CONCURRENT} with --concurrency above 1)")
    run.add_argument("--history", action="append", default=[], metavar="EXECUTION",
                     help="also print the execution history of this execution of the run, by name (repeatable)")
    add_lambda_runtime_option(run)
    run.set_defaults(func=cmd_run)


def add_demo(command) -> None:
    demo_command = command(
        "demo", "the demonstration (make run): every path on the embedded stack",
        "Run the demonstration on the embedded stack: create, update, a stale write, a duplicate, two writers "
        "racing, two concurrent patches, delete, a write that cannot resurrect, revive, rollback and an invalid "
        "request, each from its file in events/workflow/; then the version table and one execution's history; "
        "with --serve, then keep the stack and its console open.",
        exit_help("0  the demonstration ran", "2  bad command line", "3  the embedded stack could not start"))
    demo_command.add_argument("--serve", action="store_true",
                              help="then keep the stack, its endpoint and its console open on 127.0.0.1 until Ctrl-C")
    demo_command.add_argument("--port", type=PORT, default=4566,
                              help="TCP port of --serve on 127.0.0.1 (default %(default)s)")
    demo_command.set_defaults(func=cmd_demo)
