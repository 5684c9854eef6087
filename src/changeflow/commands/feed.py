"""``changeflow tail``: follow the change feed, history first, then the table's stream (changeflow.feed)."""

from __future__ import annotations

import json
import signal
import sys
import threading

from changeflow_core import asof
from changeflow_core.errors import ValidationError
from changeflow_core.feed import ChainBreak

from .. import report
from ..client import targets
from ..common.errors import OK, REJECTED, UsageError
from ..feed.tail import Checkpoint, Scope, Tail
from .options import COUNT, EXIT_2, EXIT_3_REMOTE, SECONDS, add_remote_options, exit_help


def add_tail(command) -> None:
    tail = command("tail", "follow the change feed: every recorded version once, in order, the hash chain checked",
                   "Print every version recorded, once, in version order per entity: the versions already in history "
                   "first, then each new one from the table's stream as it is recorded, with nothing lost and nothing "
                   "twice between the two. Each version is checked against the one before it in the hash chain; a "
                   "break stops the command with the version `changeflow verify` would name. With --checkpoint, a "
                   "tail that is stopped or killed resumes where it was (the events after its last checkpoint, at "
                   "most one batch, come again: recognise them by entity and version). --json prints the "
                   "VersionRecorded events the stack publishes, one a line (docs/feed.md).",
                   exit_help("0  stopped (Ctrl-C, SIGTERM, or --idle-exit)",
                             "1  the hash chain broke (a version changed, missing, deleted or out of place): stopped "
                             "at it", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(tail, json=False)
    which = tail.add_mutually_exclusive_group(required=True)
    which.add_argument("entity", nargs="?", help="entity id")
    which.add_argument("--all", action="store_true", help="every entity")
    start = tail.add_mutually_exclusive_group()
    start.add_argument("--from-version", type=COUNT, metavar="N", help="start at version N (one entity)")
    start.add_argument("--since", metavar="T", help="start at the first version recorded at or after T "
                                                    "(epoch ms or ISO 8601 UTC)")
    tail.add_argument("--checkpoint", metavar="FILE", help="keep the place here, and resume from it")
    tail.add_argument("--idle-exit", type=SECONDS, metavar="SECONDS",
                      help="stop once nothing new came for this long (default: follow until interrupted)")
    tail.add_argument("--json", action="store_true", help="one VersionRecorded event (JSON) a line")
    tail.set_defaults(func=cmd_tail)


def cmd_tail(args) -> int:
    if args.from_version is not None and args.all:
        raise UsageError("--from-version is for one entity; with --all, --since starts every entity at a time")
    try:
        since = asof.parse_instant("--since", args.since)
    except ValidationError as exc:
        raise UsageError(str(exc)) from None
    scope = Scope(args.entity, args.from_version, since)

    def emit(event, origin) -> None:
        print(json.dumps(event, separators=(",", ":")) if args.json else report.feed_line(event), flush=True)

    stop = threading.Event()
    follow = Tail(targets.client_for(args), scope, emit, Checkpoint(args.checkpoint) if args.checkpoint else None,
                  idle_exit=args.idle_exit)
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) \
        if threading.current_thread() is threading.main_thread() else None
    try:
        tally = follow.run(stop)
    except KeyboardInterrupt:
        tally = follow.tally
    except ChainBreak as exc:
        print(f"changeflow tail: stopped: {exc}", file=sys.stderr)
        return REJECTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    taken = tally.taken
    print(f"changeflow tail: {sum(taken.values())} versions ({taken['history']} from history, {taken['stream']} "
          f"from the stream, {taken['filled']} filled from history), {tally.duplicates} repeats dropped",
          file=sys.stderr)
    for note in tally.notes:
        print(f"  · {note}", file=sys.stderr)
    return OK
