"""``changeflow repair``: the one repair that is always safe (the missing history item of ``v0``'s
version, written from ``v0``; the expiry tag the history step missed), and what remains wrong and cannot be
repaired, as ``verify`` finds it."""

from __future__ import annotations

import time

from changeflow_core import chain, chainwork, items, model, store

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
    done.extend(finish_redactions(client, entity_id))
    history = store.all_history(client.dynamodb, client.history_table, entity_id)
    keep_days = retention_window(client)[1]
    for version in untagged_versions(client, latest, history):
        if store.tag_expiry(client.dynamodb, client.history_table, entity_id, version,
                            int(time.time()) + keep_days * items.SECONDS_PER_DAY):
            done.append(f"tagged version {version} for expiry")
    report = verify(client, entity_id)
    cannot.extend(report.problems)
    return done, cannot


def finish_redactions(client, entity_id: str) -> list[str]:
    """Redact each version that a redact version (verified in the chain) names and that still holds its
    content: an execution that wrote version m and failed before its history step removed the content.
    Only what the chain authorises: nothing is redacted unless the chain up to version m holds."""
    from .digests import audit_chain, raw_history, raw_latest

    if audit_chain(client, entity_id).problems and not _only_unfinished(client, entity_id):
        return []
    done = []
    found = raw_history(client, entity_id)
    latest = raw_latest(client, entity_id)
    if latest is not None and all(int(i[model.VERSION]["N"]) != int(latest[model.VERSION]["N"]) for i in found):
        found.append(latest)
    for item in found:
        record = chain.redaction_of(item)  # the version it names and its copies (issue 32.8)
        if record is None:
            continue
        if chainwork.redact(client.dynamodb, client.history_table, entity_id, record) == "redacted":
            done.append(f"removed the content of version {record['version']}, as version "
                        f"{item[model.VERSION]['N']} redacted it")
    return done


def _only_unfinished(client, entity_id: str) -> bool:
    from .digests import audit_chain

    return all(" holds content that version " in p for p in audit_chain(client, entity_id).problems)
