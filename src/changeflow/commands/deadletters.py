"""``changeflow dead-letters``: the events the bus's rule could not start an execution for, listed, and
replayed with their first receipt time and principal (the logic: ``changeflow.client.deadletters``)."""

from __future__ import annotations

from .. import report
from ..client import targets
from ..client.deadletters import DeadLetters
from ..common.errors import NotFound, UsageError
from .options import EXIT_2, EXIT_3_REMOTE, SECONDS, add_remote_options, exit_help
from .output import dump, execution_status, known_errors, public


def cmd_dead_letters(args) -> int:
    if args.message_ids and args.all:
        raise UsageError("give MESSAGE_IDs or --all, not both")
    if (args.message_ids or args.all) and not args.replay:
        raise UsageError("MESSAGE_IDs and --all choose what --replay replays")
    if args.replay and not (args.message_ids or args.all):
        raise UsageError("--replay needs the MESSAGE_IDs to replay, or --all")
    client = targets.client_for(args)
    queue = DeadLetters(client)
    if not args.replay:
        letters = [letter.to_json() for letter in queue.list()]
        if args.json:
            dump(letters)
        else:
            print(report.table(["message", "event", "received", "source", "entity", "change", "error"],
                               [[d["messageId"], d["eventId"], d["time"], d["source"], d["entityId"], d["changeId"],
                                 d["error"]] for d in letters], max_width=120))
        return 0
    started, missing = queue.replay(None if args.all else args.message_ids)
    results = [client.wait(arn, args.timeout) for _, arn in started]
    if args.json:
        for (letter, _), result in zip(started, results):
            dump({"messageId": letter.message_id, **public(result)})
    else:
        print(report.table(["message", "execution", "status", "outcome or error"],
                           [[letter.message_id, r.name, r.status, (r.output or {}).get("outcome") or r.error]
                            for (letter, _), r in zip(started, results)], max_width=120))
    if missing:
        raise NotFound(f"not in the dead-letter queue (replayed already, or held by another reader): {', '.join(missing)}")
    return execution_status(results, known_errors(client))


def add_dead_letters(command) -> None:
    dead_letters = command(
        "dead-letters", "list or replay the events the bus's rule could not start an execution for",
        "List the messages of the rule's dead-letter queue (ChangeEventsDeadLetterQueueUrl): each event, when it was "
        "received and why EventBridge gave up. With --replay, start each chosen event's execution as the rule would "
        "have (the event's principal; its time, never later than when it was dead-lettered, as the change's first "
        "receipt), delete its message, and wait for the outcome.",
        exit_help("0  listed; or every replayed execution SUCCEEDED (stale and duplicate included)",
                  "1  a replayed change was rejected (a named workflow error), or a MESSAGE_ID is not in the queue",
                  EXIT_2, EXIT_3_REMOTE + "; a replayed execution ended with an error the workflow does not name"))
    add_remote_options(dead_letters)
    dead_letters.add_argument("message_ids", nargs="*", metavar="MESSAGE_ID", help="with --replay: the messages to replay")
    dead_letters.add_argument("--replay", action="store_true", help="replay MESSAGE_IDs (or --all) instead of listing")
    dead_letters.add_argument("--all", action="store_true", help="with --replay: every message in the queue")
    dead_letters.add_argument("--timeout", type=SECONDS, default=300.0, metavar="SECONDS",
                              help="how long to wait for each replayed execution, in seconds (default %(default)g)")
    dead_letters.set_defaults(func=cmd_dead_letters)
