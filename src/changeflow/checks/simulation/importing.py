"""``changeflow import`` as a team runs it, on odd input, killed and resumed, and its promise checked
(docs/transfer.md, the command's own help):

**An import applies each record exactly once, the file's last record last; odd input is refused by name.**
With one ``--effective-at`` every record of an entity must end as exactly one version (equal times are never
stale), and the entity must end at its last record in the file; with an effective-time field an older
record may be ``stale``, but none is applied twice and the newest ends last. Whatever the runs: first, a
Ctrl-C after some executions ended and a resume from the checkpoint, a run again without the checkpoint
(its records ``duplicate``), a resume from a checkpoint holding a line that is not a checkpoint entry. A
line that is not UTF-8, or nested past the workflow's depth, goes to the rejects file with its reason and
the import goes on (exit 1), never imported, never an abort; exit 3 means the stack could not be reached.
A checkpoint that is not one is exit 2 with one line, never a traceback. Records that failed for reasons
not theirs (a conflict past the workflow's retries) are tried again by a resume, as the summary says."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

from .check_writes import check_versions
from .plan import T0
from .world import Result, World
from .writes import policy

# All at once, the importer's threads start the executions on their own: a choice waits until none was
# created for this long (one at a time, the oldest goes first and nothing needs to wait)
QUIET = 0.3
RESUMES = 3  # a run that left failed records is resumed, as its summary tells the user, at most this often


def _source(world: World, op: dict[str, Any]) -> Path:
    path = world.workdir / f"{op['name']}.jsonl"
    lines = []
    at = "" if op["fixed"] else f', "at": {T0}'  # every field a record needs but the odd one
    for entry in op["records"]:
        if "record" in entry:
            lines.append(json.dumps(entry["record"]).encode("utf-8"))
        elif "deep" in entry:
            depth = entry["deep"]
            lines.append(('{"id": %s%s, "deep": ' % (json.dumps(entry["id"]), at) + '{"n": ' * depth + "1"
                          + "}" * depth + "}").encode("utf-8"))
        elif "latin1" in entry:  # the same text, in Latin-1: not UTF-8
            lines.append(('{"id": %s%s, "name": "%s"}' % (json.dumps(entry["id"]), at, entry["latin1"]))
                         .encode("latin-1"))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _args(world: World, op: dict[str, Any], source: Path, checkpoint: Path) -> list[Any]:
    args = ["import", source, "--id-field", "id", "--checkpoint", checkpoint, "--quiet", "--json",
            "--concurrency", op["concurrency"], "--rejects", checkpoint.with_suffix(".rejects.jsonl")]
    args += ["--effective-at", T0 + 5] if op["fixed"] else ["--effective-at-field", "at"]
    return args + (["--change-id-field", "seq"] if op["changeIdField"] else [])


def _run(world: World, args: list[Any], kill_after: int | None = None) -> Result:
    quiet = 0.0 if world.scheduler.policy.oldest_first else QUIET
    """The command, its executions scheduled; ``kill_after``: Ctrl-C once that many of them have ended
    (SIGINT to this, the main, thread, as a terminal sends it)."""
    main = threading.main_thread()
    if kill_after is None or threading.current_thread() is not main:
        with world.scheduler.external(quiet):
            return world.cli(*args)
    ended, armed = [0], [True]

    def on_end(_name: str) -> None:
        ended[0] += 1
        if ended[0] == kill_after and armed[0]:
            signal.pthread_kill(main.ident, signal.SIGINT)

    def interrupted(signum, frame) -> None:
        if armed[0]:  # a Ctrl-C that arrives once the command is over is not this command's
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupted)
    world.scheduler.on_end.append(on_end)
    try:
        with world.scheduler.external(quiet):
            result = world.cli(*args)
    finally:
        armed[0] = False
        world.scheduler.on_end.remove(on_end)
        signal.signal(signal.SIGINT, previous)
    return result


def run_import(world: World, op: dict[str, Any]) -> None:
    world.scheduler.policy = policy(op)
    # one record at a time: each execution runs to its end before the next (which the importer starts only
    # once it has seen the last one applied); all at once: the adversary interleaves them
    world.scheduler.policy.oldest_first = op["concurrency"] == 1
    source = _source(world, op)
    checkpoint = world.workdir / f"{op['name']}.checkpoint"
    odd = {"deep": any("deep" in e for e in op["records"]), "latin1": any("latin1" in e for e in op["records"])}
    results: list[tuple[str, Result]] = []
    for step in op["runs"]:
        kind = step["run"]
        if kind == "break-checkpoint":
            if not checkpoint.exists():
                continue
            kept = checkpoint.read_bytes()
            checkpoint.write_bytes(kept + step["line"].encode() + b"\n")
            results.append((kind, _run(world, _args(world, op, source, checkpoint))))
            checkpoint.write_bytes(kept)  # the user mends it and resumes
            continue
        path = world.workdir / f"{op['name']}-again.checkpoint" if kind == "again-without-checkpoint" else checkpoint
        kill = step.get("after") if kind == "kill" else None
        results.append((kind, _run(world, _args(world, op, source, path), kill)))
    for _ in range(RESUMES):  # what the last run left failed, resumed as its summary says
        summary = results[-1][1].json() if results else None
        if not (isinstance(summary, dict) and summary.get("failed")):
            break
        results.append(("resume-failed", _run(world, _args(world, op, source, checkpoint))))
    world.scheduler.idle(120)
    for kind, result in results:
        world.log.append(f"op {world.op}: import ({kind}) -> {result.status} {result.out[-300:]!r}"
                         + (f" {result.err.strip()[-200:]!r}" if result.err.strip() else ""))
    check_runs(world, op, results, odd)
    if any(result.status == 3 for _, result in results):  # an abort's consequences are the abort's
        world.log.append(f"op {world.op}: an import run aborted: its records are not checked one by one")
        return
    check_records(world, op, results)


def check_runs(world: World, op: dict[str, Any], results: list[tuple[str, Result]], odd: dict[str, bool]) -> None:
    for kind, result in results:
        said = f"import ({kind}) exited {result.status}"
        if kind == "break-checkpoint":
            if result.crashed:
                world.violation("import", "import.bad-checkpoint-traceback",
                                f"a checkpoint with a broken line: a traceback: {result.crashed[-300:]}")
            elif result.status != 2 or len(result.err.strip().splitlines()) != 1:
                world.violation("import", "import.bad-checkpoint-accepted", f"a checkpoint with a broken line: "
                                f"{said} with {result.err.strip()[-300:]!r}, not exit 2 with one line")
            continue
        if result.crashed:
            world.violation("import", "import.crash", f"import ({kind}) crashed: {result.crashed[-300:]}")
        elif result.status == 3:
            code = "import.deep-aborts" if odd["deep"] else "import.exit-status"
            world.violation("import", code, f"{said} (the stack is reachable): {result.err.strip()[-300:]!r}")
        elif result.status not in (0, 1, 130) or (result.status == 130 and kind != "kill"):
            world.violation("import", "import.exit-status", f"{said}: {result.err.strip()[-300:]!r}")


def check_records(world: World, op: dict[str, Any], results: list[tuple[str, Result]]) -> None:
    skipped = sum(int((r.json() or {}).get("skipped", 0)) for _, r in results if isinstance(r.json(), dict))
    per_entity: dict[str, list[dict]] = {}
    for entry in op["records"]:
        if "record" in entry:
            per_entity.setdefault(entry["record"]["id"], []).append(entry["record"])
    for entry in op["records"]:
        if "latin1" in entry:
            state = world.cf.entity(entry["id"])
            if state["versions"] or state["latest"]:
                shown = (state["latest"] or {}).get("attributes")
                world.violation("import", "import.not-utf8-applied", f"a Latin-1 line was imported as {shown} "
                                "instead of being refused by name", entry["id"])
    for entity, records in per_entity.items():
        state = world.cf.entity(entity)
        versions = state["versions"]
        for record in records:
            attributes = {k: v for k, v in record.items() if k != "id"}
            count = sum(1 for v in versions if v["attributes"] == attributes)
            if count > 1:
                world.violation("import", "import.applied-twice", f"record {record['n']} ({record['v']}) was applied "
                                f"{count} times", entity)
            elif count == 0 and op["fixed"]:
                code = "import.skipped-never-applied" if op["changeIdField"] and skipped else "import.record-missing"
                world.violation("import", code, f"record {record['n']} ({record['v']}, change id "
                                f"{record.get('seq', '(derived)')}) was never applied (runs skipped {skipped} "
                                "records as done)", entity)
        last = {k: v for k, v in records[-1].items() if k != "id"}
        final = (state["latest"] or {}).get("attributes")
        if final != last:
            n = next((r["n"] for r in records if {k: v for k, v in r.items() if k != "id"} == final), "?")
            world.violation("import", "import.not-last", f"the entity ends at record {n}, not the file's last, "
                            f"record {records[-1]['n']}", entity)
        check_versions(world, entity, imported=True)
