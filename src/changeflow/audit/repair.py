"""``changeflow repair``: the one repair that is always safe (the missing history item of ``v0``'s
version, written from ``v0``; the expiry a failed tag step left out), and what remains wrong and cannot be
repaired, as ``verify`` finds it."""

from __future__ import annotations

import time

from changeflow_core import items, model, store

from .verify import retention_window, untagged_versions, verify


def repair(client, entity_id: str) -> tuple[list[str], list[str]]:
    """Write the missing history item of ``v0``'s version from ``v0`` (never overwriting anything): the
    only content that is still known. Returns (what was repaired, what remains wrong and cannot be)."""
    done, cannot = [], []
    latest = store.get_item(client.dynamodb, client.table, entity_id, model.LATEST_SK)
    if latest is not None:
        version = int(latest[model.VERSION])
        outcome = store.ensure_history(client.dynamodb, client.table, client.history_table, entity_id, version)
        if outcome == "repaired":
            done.append(f"wrote history item of version {version} from v0")
    history = store.all_history(client.dynamodb, client.history_table, entity_id)
    keep_days = retention_window(client)[1]
    for version in untagged_versions(client, latest, history):
        if store.tag_expiry(client.dynamodb, client.history_table, entity_id, version,
                            int(time.time()) + keep_days * items.SECONDS_PER_DAY):
            done.append(f"tagged version {version} for expiry")
    report = verify(client, entity_id)
    cannot.extend(report.problems)
    return done, cannot
