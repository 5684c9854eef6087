"""``changeflow redact`` and ``changeflow adopt``: the hash chain's own operations, each a change that runs
through the workflow like any other (its execution, actor and reason recorded in a new version):
``redact`` removes one version's content and keeps its hash; ``adopt`` binds the versions written before
the chain into it, once (docs/audit.md)."""

from __future__ import annotations

import time

from changeflow_core import chain, model

from ..client import targets
from ..common.errors import UsageError
from .changes import add_via, submit_each
from .options import COUNT, EXIT_0_EXECUTIONS, EXIT_2, EXIT_3_REMOTE, SECONDS, add_remote_options, exit_help


def _run(args, requests: list[dict]) -> int:
    return submit_each(args, targets.client_for(args), [(r["entityId"], r) for r in requests])


def _who(args) -> dict:
    return {k: v for k, v in (("actor", args.actor), ("reason", args.reason)) if v is not None}


def cmd_redact(args) -> int:
    # one change id per redaction (a version is redacted once): a resend is a duplicate, and POST /changes needs one
    return _run(args, [{"entityId": args.entity, "operation": model.REDACT, "redactVersion": args.version,
                        "changeId": f"redact-v{args.version}", **_who(args)}])


def cmd_adopt(args) -> int:
    from ..audit import digests, verify

    if args.close and not args.all:
        raise UsageError("--close goes with --all: adoption is closed for the whole table, once")
    client = targets.client_for(args)
    if args.all:  # the entities whose oldest version has no chain attributes and that no version adopted
        ids = []
        for entity_id in verify.entities(client):
            found = digests.raw_history(client, entity_id)
            if (found and chain.format_of(found[0]) == chain.FORMAT_LEGACY
                    and not any(model.ADOPTION in item for item in found)):
                ids.append(entity_id)
    else:
        ids = [args.entity]
    status = 0
    if ids:
        # a change id per run: an adoption already made is refused by name, never answered as a duplicate
        change_id = f"adopt-{time.time_ns() // 1_000_000}"
        status = _run(args, [{"entityId": e, "operation": model.ADOPT, "changeId": change_id, **_who(args)} for e in ids])
    else:
        print("no entity has versions written before the chain: nothing to adopt")
    if args.close and status == 0:
        print(close_adoption(client, len(ids)))
    return status


def close_adoption(client, adopted: int) -> str:
    """Record in the table that every entity is adopted (once): from then on a version without chain
    attributes had them removed, verify says so, and adopt refuses. Who and when, as AWS says them."""
    import datetime

    from changeflow_core import chainwork

    closed = chainwork.adoption_closed(client.dynamodb, client.table)
    if closed is not None:
        return f"adoption was closed already, at {closed['closedAt']['S']}"
    try:
        who = client.session.client("sts").get_caller_identity()["Arn"] if client.session else None
    except Exception:  # noqa: BLE001 - the identity is a record, not a condition
        who = None
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    record = {model.PK: {"S": model.TABLE_PK}, model.SK: {"S": model.ADOPTION_CLOSED_SK}, "closedAt": {"S": now},
              "entitiesAdoptedLast": {"N": str(adopted)}, **({"closedBy": {"S": who}} if who else {})}
    client.dynamodb.put_item(TableName=client.table, Item=record, ConditionExpression="attribute_not_exists(#pk)",
                             ExpressionAttributeNames={"#pk": model.PK})
    done = f"adoption closed at {now}: a version without a chain is now reported as stripped, and adopt refuses"
    if str((client.outputs or {}).get("ChainAdoptionClosed", "false")).lower() == "true":
        return done
    # the record is an item of the table: whoever may delete items may delete it, and adopt again (issue 32.9)
    return (f"{done}. The record is an item of the table: to close adoption so that no table edit undoes it, "
            "deploy with ChainAdoptionClosed=true")


def _common(parser) -> None:
    add_remote_options(parser)
    parser.add_argument("--actor", help="who asks for it (recorded in the new version as the actor's claim)")
    parser.add_argument("--timeout", type=SECONDS, default=300.0, metavar="SECONDS",
                        help="how long to wait for each execution to end, in seconds (default %(default)g)")
    add_via(parser)  # api or events: the version records the principal AWS authenticated, not only the claim


def add_redact(command) -> None:
    redact = command("redact", "remove one version's content, keeping its hash: the chain still verifies",
                     "Start a redact change: a new version records who redacted which version and why, and the "
                     "redacted version's content is removed from history (and from v0 if it is the current one); "
                     "its hash stays, so `changeflow verify` still passes and reports the redaction. The same "
                     "data in other versions stays until they are redacted too.",
                     exit_help(EXIT_0_EXECUTIONS, "1  refused: no such version, a deletion, redacted already, "
                               "no --reason", EXIT_2, EXIT_3_REMOTE))
    _common(redact)
    redact.add_argument("entity", help="entity id")
    redact.add_argument("version", type=COUNT, help="the version whose content to remove (1 or more)")
    redact.add_argument("--reason", required=True, help="why (recorded in the new version)")
    redact.set_defaults(func=cmd_redact)


def add_adopt(command) -> None:
    adopt = command("adopt", "bind an entity's versions written before the chain into it, once",
                    "Start an adopt change: a new version records how many versions were written before the "
                    "chain and the hash of a chain recomputed over them, so that they are verified from then on "
                    "and stripping the chain from any item is caught. Refused for an entity with no such "
                    "versions, one adopted already, or one whose unchained versions follow chained ones (its "
                    "chain was stripped: not legacy).",
                    exit_help(EXIT_0_EXECUTIONS, "1  refused (named)", EXIT_2, EXIT_3_REMOTE))
    _common(adopt)
    which = adopt.add_mutually_exclusive_group(required=True)
    which.add_argument("entity", nargs="?", help="entity id")
    which.add_argument("--all", action="store_true", help="every entity that verify finds versions written "
                                                          "before the chain in (scans the tables)")
    adopt.add_argument("--reason", help="why (recorded in the new version)")
    adopt.add_argument("--close", action="store_true",
                       help="with --all: then record in the table that adoption is closed (once): from then on a "
                            "version without chain attributes is reported as stripped, and adopt refuses")
    adopt.set_defaults(func=cmd_adopt)
