"""``changeflow demo`` (``make run``): the whole story on the embedded stack, every change read from
``events/workflow/``: create, update, a stale write, a redelivered duplicate, two writers racing, two
concurrent patches of different fields, a delete that leaves a tombstone, an older write that cannot
resurrect it, a newer write that revives it, a rollback and an invalid request; then the version table
and one execution's history."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from changeflow_core import wire

from . import report
from .client import Changeflow
from .common.serving import wait_until_interrupted
from .local.embedded import EmbeddedStack

STEPS = [
    ("create the entity", "01-create.json"),
    ("update it", "02-update.json"),
    ("a late write from an offline client is older than the stored version: stale", "03-stale.json"),
    ("the update is delivered again: duplicate, no new version", "04-duplicate.json"),
    ("two writers race with the same effective time (both apply, one after the other)", "05-race.json"),
    ("two patches of different fields at once: both land, each applied to the version it read", "06-patches.json"),
    ("delete: v0 becomes a tombstone that keeps the timestamp", "07-delete.json"),
    ("a write older than the delete cannot resurrect the entity", "08-resurrect-older.json"),
    ("a newer write revives it (the revived v0 has no expiry)", "09-revive.json"),
    ("roll back to version 2: its content becomes a new version", "10-rollback.json"),
    ("an invalid request: ValidationError, nothing written", "11-invalid.json"),
]
HISTORY_OF = "02-update.json"


def play(client: Changeflow, root, out=sys.stdout) -> tuple[str, object]:
    """Submit every step of the story; print each step's executions. ``(entity id, the execution shown)``."""
    folder = root / "events" / "workflow"
    entity, shown = None, None
    for title, file_name in STEPS:
        data = wire.loads((folder / file_name).read_text(encoding="utf-8"))  # numbers exact
        requests = data if isinstance(data, list) else [data]
        entity = entity or requests[0]["entityId"]
        print(f"\n== {title}  (events/workflow/{file_name})", file=out)
        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            results = list(pool.map(client.submit, requests))
        print(report.executions(results), file=out)
        if file_name == HISTORY_OF:
            shown = results[0]
    return entity, shown


def main(out=sys.stdout, serve: bool = False, port: int = 4566) -> int:
    """The story, then (``serve``) the same stack kept open behind ``changeflow serve``'s endpoint with
    the audit console at /console, until Ctrl-C."""
    from urllib.parse import urlencode

    from .local.server import EmbeddedServer

    running = EmbeddedServer(port=port, time_scale=0.001) if serve else EmbeddedStack(time_scale=0.001)
    with running:
        stack = running.stack if serve else running
        client = Changeflow.for_embedded(stack)
        entity, shown = play(client, stack.root, out)
        print("\n== the version table", file=out)
        print(report.versions(entity, client.entity(entity)), file=out)
        print(f"\n== the audit trail of one change: execution {shown.name}", file=out)
        print(report.history(list(client.history(shown.arn))), file=out)
        if not serve:
            print("\n== the audit console: `changeflow demo --serve` runs this demo and keeps its stack open;"
                  " then open http://127.0.0.1:4566/console (`changeflow serve` serves it too)", file=out)
            return 0
        print(f"\n== the audit console: {running.url}/console  (entity: {running.url}/console/entity?"
              f"{urlencode({'id': entity})})", file=out)
        print(f"   the stack's endpoint is {running.url} for the CLI and boto3; Ctrl-C stops", file=out)
        out.flush()
        wait_until_interrupted()
    return 0
