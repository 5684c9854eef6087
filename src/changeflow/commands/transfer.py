"""``changeflow import`` and ``changeflow export``: a data set into a stack through the workflow, and the
audit out of it as files (the parts: ``changeflow.transfer``)."""

from __future__ import annotations

import sys
from pathlib import Path

from changeflow_core import asof

from ..client import targets
from ..common.errors import OK, REJECTED, UsageError
from ..transfer import exporter, sources
from ..transfer.importer import DEFAULT_RATE, Checkpoint, Importer, Plan, Rejects, default_checkpoint, entry_point
from ..transfer.progress import Progress, summary_text
from .options import COUNT, EXIT_2, EXIT_3_REMOTE, _number, add_remote_options, exit_help
from .output import dump

RATE = _number(float, 0.01, 100_000.0, what="a number of executions a second")
INTERRUPTED = 130  # what a shell reports for Ctrl-C (main returns it for any command interrupted)


def cmd_import(args) -> int:
    if (args.effective_at is None) == (args.effective_at_field is None):
        raise UsageError("give --effective-at-field NAME or --effective-at T (e.g. when the data was exported): "
                         "the effective time decides which of two writes to an entity wins")
    try:
        fixed = asof.parse_instant("--effective-at", args.effective_at)
    except Exception as exc:  # a ValidationError naming the option
        raise UsageError(str(exc)) from None
    if args.actor is not None and args.actor_field is not None:
        raise UsageError("give --actor NAME or --actor-field FIELD, not both")
    plan = Plan(args.id_field, args.effective_at_field, fixed, args.actor, args.reason or f"import from {args.source}",
                tuple(args.drop_field or ()), args.change_id_field, args.actor_field)
    kind = sources.describe(args.source)  # a missing file is a usage error before any stack is reached
    client = targets.client_for(args)
    if kind == "table":
        sources.check_table(client.dynamodb, args.source)  # a table that is not there, before anything is written
    start, wait = entry_point(client, args.via, args.timeout)
    checkpoint_path = Path(args.checkpoint) if args.checkpoint else default_checkpoint(args.source)
    rejects_path = Path(args.rejects) if args.rejects else checkpoint_path.with_suffix(".rejects.jsonl")
    distinct_files(args.source if kind != "table" else None, checkpoint_path, rejects_path)
    for path, what in ((checkpoint_path, "the checkpoint"), (rejects_path, "the rejects file")):
        if not exporter.writable(path):  # said before either is written, not after the checkpoint is
            raise UsageError(f"{path}: cannot write {what} there (no such directory, or not writable)")
    checkpoint = Checkpoint(checkpoint_path, {"source": args.source, **plan.settings()})
    rejects = Rejects(rejects_path)
    progress = Progress(None if kind == "table" else sources.count(args.source), every=args.progress_every,
                        enabled=not args.quiet)
    importer = Importer(start, wait, plan, checkpoint, rejects, rate=args.rate, concurrency=args.concurrency,
                        on_progress=progress.update)
    summary = importer.run(sources.read(args.source, client.dynamodb, args.segments))
    progress.close(summary)
    if args.json:
        dump({**summary.to_json(), "source": args.source, "checkpoint": str(checkpoint_path),
              "rejects": str(rejects.path)})
    else:
        print(f"import of {args.source}: {summary_text(summary)}")
        if not_applied(summary):
            print(f"the records not applied, with why: {rejects.path}")
    if summary.stopped:
        print(f"stopped: nothing is half-done. Resume with the same command: the checkpoint {checkpoint_path} "
              "skips what is done", file=sys.stderr)
        return INTERRUPTED
    return REJECTED if not_applied(summary) else OK


def distinct_files(source: str | None, checkpoint: Path, rejects: Path) -> None:
    """The source, the checkpoint and the rejects file are three files: the rejects file is written anew
    (a source named as it would be emptied before it is read) and the checkpoint appended to."""
    named = {"the source": Path(source) if source else None, "--checkpoint": checkpoint, "--rejects": rejects}
    seen: dict[Path, str] = {}
    for what, path in named.items():
        if path is None:
            continue
        key = path.resolve()
        if key in seen:
            raise UsageError(f"{seen[key]} and {what} are the same file, {path}: give each its own")
        seen[key] = what


def not_applied(summary) -> int:
    """Records the import could not apply, or cannot say it applied: rejected, failed, outcome unknown."""
    return summary.counts["rejected"] + summary.counts["failed"] + summary.counts["unknown"]


def cmd_export(args) -> int:
    if bool(args.entity) == bool(args.all):
        raise UsageError("give an ENTITY or --all")
    client = targets.client_for(args)
    to_stdout = args.output == "-"  # the lines on standard output: what is said about them goes to stderr
    if to_stdout and args.json:
        raise UsageError("--output - writes the lines to standard output: --json has nowhere to go")
    written = exporter.export(client, [args.entity] if args.entity else None, None if to_stdout else Path(args.output),
                              Path(args.digest) if args.digest else None)
    if args.json:
        dump(written)
    else:
        print(f"exported {written['versions']:,} versions of {written['entities']:,} entities to "
              f"{'standard output' if to_stdout else args.output}"
              + (f"; digest (root {written['root']}) to {args.digest}" if args.digest else ""),
              file=sys.stderr if to_stdout else sys.stdout)
    return OK


def cmd_verify_export(args) -> int:
    problems, checked = exporter.verify_file(Path(args.file), Path(args.digest))
    if args.json:
        dump({"ok": not problems, "problems": problems, **checked})
    else:
        for line in problems:
            print(line)
        print(("ok: " if not problems else "PROBLEMS: ") + f"{checked['versions']:,} versions of "
              f"{checked['entities']:,} entities checked against the digest")
    return OK if not problems else REJECTED


def add_import(command) -> None:
    parser = command(
        "import", "import a data set: each record a put through the workflow, once",
        "Each record of SOURCE (a JSON Lines file, a DynamoDB export-to-S3 data file, gzip or not, or "
        "dynamodb://TABLE) becomes a put of one entity through the workflow. Idempotent (a record's change id "
        "is derived from its entity, time and content) and resumable (--checkpoint); bad records go to the "
        "rejects file with their reason and the import goes on. Ctrl-C lets the changes in flight end, "
        "then stops (exit status 130) and says how to resume. docs/transfer.md",
        exit_help("0  every record applied (or duplicate, stale, or done by an earlier run)",
                  "1  some records were rejected, failed or have an unknown outcome: see the rejects file (a "
                  "resumed run retries the failed and unknown ones)", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(parser)
    parser.add_argument("source", help="a .jsonl file, a DynamoDB export data file (.json.gz), or dynamodb://TABLE")
    parser.add_argument("--id-field", required=True, metavar="NAME", help="the field that holds each entity's id")
    parser.add_argument("--effective-at-field", metavar="NAME", help="the field that holds each record's effective "
                        "time (epoch ms)")
    parser.add_argument("--effective-at", metavar="T", help="one effective time for every record (epoch ms or ISO "
                        "8601 UTC)")
    parser.add_argument("--actor", help="who the changes are on behalf of (the client's claim, as in a request)")
    parser.add_argument("--actor-field", metavar="NAME", help="the field that holds each record's actor instead")
    parser.add_argument("--change-id-field", metavar="NAME", help="the field that holds each record's change id "
                        "(default: derived from the record's entity, effective time and content)")
    parser.add_argument("--reason", help="why (default: import from SOURCE)")
    parser.add_argument("--drop-field", action="append", metavar="NAME", help="a field not to import (repeatable), "
                        "e.g. the source table's own sort key")
    parser.add_argument("--via", choices=["stepfunctions", "api", "events"], default="stepfunctions",
                        help="entry point, as for submit (default: %(default)s)")
    parser.add_argument("--segments", type=COUNT, default=4, help="parallel Scan segments for dynamodb://TABLE "
                        "(default %(default)s)")
    parser.add_argument("--rate", type=RATE, default=DEFAULT_RATE, help="executions started per second at most, "
                        "lowered while throttled (default %(default)s: what Step Functions' default StartExecution "
                        "and StateTransition buckets refill, docs/transfer.md)")
    parser.add_argument("--concurrency", type=COUNT, default=16,
                        help="changes in flight at once (default %(default)s); the rate reached is at most this "
                        "over an execution's duration: on AWS give about --rate times an execution's seconds")
    parser.add_argument("--checkpoint", metavar="FILE", help="what is done, for resuming (default: SOURCE's name "
                        "+ .checkpoint, here)")
    parser.add_argument("--rejects", metavar="FILE", help="records not applied, with why (default: beside the "
                        "checkpoint, .rejects.jsonl)")
    parser.add_argument("--timeout", type=_number(float, 0.1, what="a number of seconds"), default=300.0,
                        help="seconds to wait for each execution (default %(default)s)")
    parser.add_argument("--progress-every", type=_number(float, 0.0, what="a number of seconds"), default=10.0,
                        help="seconds between progress lines when stderr is not a terminal (default %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(func=cmd_import)


def add_export(command) -> None:
    parser = command(
        "export", "every version of the audit as JSON Lines, with its chain hashes",
        "Write every version of ENTITY (or of every entity, --all) as JSON Lines: its item exactly as stored "
        "(DynamoDB JSON), with its chain hashes, principal, actor and execution ARN. With --digest, also the "
        "digest of the heads exported, which `changeflow verify-export` checks the file against, offline.",
        exit_help("0  exported", "1  no such entity", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(parser)
    parser.add_argument("entity", nargs="?", help="one entity id")
    parser.add_argument("--all", action="store_true", help="every entity")
    parser.add_argument("--output", required=True, metavar="FILE", help="the JSON Lines file to write (- for "
                        "standard output)")
    parser.add_argument("--digest", metavar="FILE", help="also write the digest of what was exported")
    parser.set_defaults(func=cmd_export)


def add_verify_export(command) -> None:
    parser = command(
        "verify-export", "check an exported file against its digest, offline",
        "Recompute every entity's hash chain from the exported items and compare each head with the digest "
        "(and the digest with its own root). No stack is needed.",
        exit_help("0  every version in the file is what the digest committed to", "1  problems found (each named)",
                  EXIT_2))
    parser.add_argument("file", help="a file `changeflow export` wrote")
    parser.add_argument("--digest", required=True, metavar="FILE", help="the digest written with it")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=cmd_verify_export)
