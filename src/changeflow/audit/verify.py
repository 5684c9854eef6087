"""``changeflow verify``: what an auditor checks about an entity's versions (contiguous, consistent with
each other and with ``v0``, each patch its predecessor with the patch applied, expiries where the retention
window puts them, and the hash chain). Reads only, through the same client on the embedded stack,
``changeflow serve`` or AWS."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from changeflow_core import items, model, store

from .digests import audit_chain
from .fieldclocks import clock_problems
from .retention import retention_window, unexplained_absences

# Attributes that may differ between v0 and its history item: the key, v0's tombstone expiry and its keys
# of the changes index (issue 35), and the history item's time index keys (issue 37: v0 has none).
NOT_CONTENT = {model.SK, model.EXPIRES_AT, model.PRIOR_EFFECTIVE, model.PRIOR_RECORDED} | model.CHANGES_INDEX_KEYS


@dataclass
class Report:
    entity_id: str
    versions: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)  # versions that should be in history and are not
    found: bool = True  # False: no v0 and no (unexpired) history item
    notes: list[str] = field(default_factory=list)  # not problems: each redaction and adoption the chain records

    @property
    def ok(self) -> bool:
        return not self.problems


def _same_version(a: dict[str, Any], b: dict[str, Any]) -> bool:
    strip = lambda item: {k: v for k, v in item.items() if k not in NOT_CONTENT}  # noqa: E731
    return strip(a) == strip(b)


def verify(client, entity_id: str, now_s: float | None = None) -> Report:
    """Check one entity: versions contiguous (from 1 unless the stack has a retention window), each history item consistent with its successor (the ratchet
    never goes back, recorded times move forward, a rollback restores its source's content), the newest
    history item equal to ``v0``, and no live ``v0`` carrying an expiry. Expired items count as gone."""
    now_s = time.time() if now_s is None else now_s
    report = Report(entity_id)
    latest = store.get_item(client.dynamodb, client.table, entity_id, model.LATEST_SK)
    stored, altered = _numbered(store.all_history(client.dynamodb, client.history_table, entity_id))
    history = [h for h in stored if not _expired(h, now_s)]
    report.versions = [int(h[model.VERSION]) for h in history]
    by_version = {int(h[model.VERSION]): h for h in history}
    if latest is not None and _integer(latest.get(model.VERSION)) is None:
        altered.append("v0 has no version number: it was altered")
        latest = None
    report.problems.extend(altered)
    if latest is None and not history:  # nothing to check: the CLI says "no such entity"
        report.found = bool(altered)
        return report

    # only the retention window may let a version go, and only once its tag has come due (audit.retention)
    newest = report.versions[-1] if report.versions else 0
    current = max(newest, int(latest[model.VERSION]) if latest is not None else 0)
    recorded = {int(i[model.VERSION]): _integer(i.get(model.RECORDED_AT)) for i in [*stored, latest or {}]
                if i.get(model.VERSION) is not None and _integer(i.get(model.RECORDED_AT)) is not None}
    absent = unexplained_absences(retention_window(client), report.versions, recorded, current, now_s)
    missing = [v for v in absent if v < newest]
    report.missing.extend(missing)
    if missing:
        report.problems.append(f"versions missing from history: {missing}")
    # an insider can write any type anywhere: a check that meets one reports it, and the chain still runs
    _guarded(report, lambda: _history_checks(client, report, latest, history, by_version))
    audited = audit_chain(client, entity_id, now_s)  # the hash chain: names the first altered version
    report.problems.extend(audited.problems)
    report.notes.extend(audited.notes)
    _guarded(report, lambda: _latest_checks(report, latest, history, by_version, [v for v in absent if v > newest]))
    return report


def _guarded(report: Report, check) -> None:
    try:
        check()
    except (TypeError, KeyError, ValueError, ArithmeticError, AttributeError) as exc:
        report.problems.append(f"an item lacks an attribute or holds one of the wrong type ({type(exc).__name__}: "
                               f"{str(exc)[:100]}): it was altered")


def _history_checks(client, report: Report, latest: dict[str, Any] | None, history: list[dict[str, Any]],
                    by_version: dict[int, dict[str, Any]]) -> None:
    for h in history:
        if model.history_sk(int(h[model.VERSION])) != h[model.SK]:
            report.problems.append(f"history item {h[model.SK]} holds version {h[model.VERSION]}")
    for older, newer in zip(history, history[1:]):
        n = newer[model.VERSION]
        if newer[model.EFFECTIVE_AT] < older[model.EFFECTIVE_AT]:
            report.problems.append(f"version {n} is older (effectiveAt) than version {older[model.VERSION]}")
        if newer[model.RECORDED_AT] < older[model.RECORDED_AT]:
            report.problems.append(f"version {n} was recorded before version {older[model.VERSION]}")
        if newer[model.CHANGE_ID] == older[model.CHANGE_ID]:
            report.problems.append(f"change {newer[model.CHANGE_ID]!r} wrote versions {older[model.VERSION]} and {n}")
    first_of: dict[str, int] = {}  # a change id reused after v0 forgot it: any two versions, not only neighbours
    for h in history:
        change_id, n = h[model.CHANGE_ID], int(h[model.VERSION])
        if change_id in first_of and first_of[change_id] != n - 1:
            report.problems.append(f"change {change_id!r} wrote versions {first_of[change_id]} and {n}")
        first_of.setdefault(change_id, n)
    for h in history:
        source = h.get(model.SOURCE_VERSION)
        if source is not None and int(source) in by_version and not _redacted(h, by_version[int(source)]):
            if items.content_of(by_version[int(source)]) != items.content_of(h):
                report.problems.append(f"rollback version {h[model.VERSION]} differs from its source {source}")
    report.problems.extend(patch_problems(history, by_version))
    report.problems.extend(clock_problems(history, by_version))  # the field clocks (issue 34)
    report.problems.extend(index_key_problems(history, by_version))  # the time indexes' keys (issue 37)

    missed = untagged_versions(client, latest, history)
    if missed:
        report.problems.append(f"versions outside the retention window without an expiry: {missed}")
    early = early_expiries(client, latest, history)
    if early:
        report.problems.append(f"versions the retention window keeps carry an expiry (TTL would delete them): {early}")


def _latest_checks(report: Report, latest: dict[str, Any] | None, history: list[dict[str, Any]],
                   by_version: dict[int, dict[str, Any]], gap: list[int]) -> None:
    if latest is None:
        if history and not history[-1].get(model.DELETED):
            report.problems.append("no v0, but the newest version is not a deletion")
        return
    current = int(latest[model.VERSION])
    if not latest.get(model.DELETED) and latest.get(model.EXPIRES_AT) is not None:
        report.problems.append(f"live v0 (version {current}) carries an expiry")
    if latest.get(model.DELETED) and latest.get(model.EXPIRES_AT) is None:
        report.problems.append(f"tombstone v0 (version {current}) has no expiry")
    if report.versions and report.versions[-1] > current:
        report.problems.append(f"history has version {report.versions[-1]}, beyond v0's {current}")
    indexed = {k: latest[k] for k in model.CHANGES_INDEX_KEYS if latest.get(k) is not None}  # none: written before
    if indexed and indexed != model.changes_index_keys(report.entity_id, int(latest[model.RECORDED_AT])):
        shown = ", ".join(f"{k} {indexed[k]}" for k in sorted(indexed))
        report.problems.append(f"v0's keys in the changes index ({shown}) are not those of its id and recordedAt: "
                               "it was altered, and the scheduled digests do not see it change")
    if current in by_version:
        if not _same_version(latest, by_version[current]):
            report.problems.append(f"history item of version {current} differs from v0")
    else:
        report.missing.extend(gap)
        report.problems.append(f"versions missing from history: {gap} (v0 is at version {current})")


def _integer(value: Any) -> int | None:
    """A stored integer (a Decimal from the table), or None when the item holds something else there."""
    try:
        return int(value) if isinstance(value, (int, Decimal)) and value == int(value) else None
    except (ArithmeticError, ValueError):
        return None


def _numbered(history: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """History items that carry a version number, and a problem for each that does not (an insider can
    write anything: the audit reads the table as input)."""
    kept = [h for h in history if _integer(h.get(model.VERSION)) is not None]
    return kept, [f"history item {h.get(model.SK)!r} has no version number: it was altered"
                  for h in history if _integer(h.get(model.VERSION)) is None]


def _expired(item: dict[str, Any], now_s: float) -> bool:
    expires = item.get(model.EXPIRES_AT)
    return expires is not None and _integer(expires) is not None and _integer(expires) <= now_s


def index_key_problems(history: list[dict[str, Any]], by_version: dict[int, dict[str, Any]]) -> list[str]:
    """The time indexes' keys (issue 37): each history item records the times of the version before it,
    and as-of reads trust that record where that version is no longer held. The chain does not hash them (v0
    has none), so each is checked against the version before it wherever history holds that one."""
    problems = []
    for h in history:
        n = int(h[model.VERSION])
        for clock, key in ((model.EFFECTIVE_AT, model.PRIOR_EFFECTIVE), (model.RECORDED_AT, model.PRIOR_RECORDED)):
            if h.get(key) is None:
                continue  # written before the indexes, or after a version history lacked: the binary search reads it
            before = by_version.get(n - 1)
            expected = 0 if n == 1 else (model.prior_key(before[clock], n - 1)
                                         if before is not None and before.get(clock) is not None else None)
            if (expected is None and model.of_prior_key(h[key])[1] != n - 1) or (
                    expected is not None and int(h[key]) != expected):
                problems.append(f"version {n}: its {key} ({h[key]}) is not version {n - 1}'s {clock} (the time "
                                "index would answer with another version)")
    return problems


def patch_problems(history: list[dict[str, Any]], by_version: dict[int, dict[str, Any]]) -> list[str]:
    """Each patch version must be its predecessor's content with its recorded patch applied, but for the
    fields it records as superseded (a patch whose predecessor has expired cannot be checked, and is not)."""
    problems = []
    for h in history:
        if h.get(model.OPERATION) != model.PATCH:
            continue
        n, record = int(h[model.VERSION]), h.get(model.PATCH_RECORD)
        before = by_version.get(n - 1)
        if _redacted(h, before):
            continue  # the content is gone from one of the two: the chain checks what remains
        if not isinstance(record, dict):
            problems.append(f"patch version {n} does not record its patch")
        elif n == 1 or (before is not None and before.get(model.DELETED)):
            problems.append(f"patch version {n} has no live version before it to patch")
        elif before is not None and items.content_of(h) != items.apply_patch(
                items.content_of(before), *_applied(record)):
            problems.append(f"patch version {n} is not version {n - 1} with its patch applied")
    return problems


def _applied(record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A patch record's ``(set, remove)`` but for the fields a newer change had written (issue 34)."""
    lost = set(record.get("superseded") or [])
    return ({k: v for k, v in (record.get("set") or {}).items() if k not in lost},
            [name for name in record.get("remove") or [] if name not in lost])


def _redacted(*found: dict[str, Any] | None) -> bool:
    return any(item is not None and item.get(model.REDACTED) is not None for item in found)


def untagged_versions(client, latest: dict[str, Any] | None, history: list[dict[str, Any]]) -> list[int]:
    """History versions the retention window has left that carry no expiry: a tag the history step missed
    (``ExpiryTagsMissed``; the next change heals one such miss; repair heals any)."""
    keep_versions, keep_days = retention_window(client)
    if latest is None or not (keep_versions or keep_days):
        return []
    boundary = int(latest[model.VERSION]) - (keep_versions if keep_versions else 1)
    return [int(h[model.VERSION]) for h in history
            if int(h[model.VERSION]) <= boundary and h.get(model.EXPIRES_AT) is None]


def early_expiries(client, latest: dict[str, Any] | None, history: list[dict[str, Any]]) -> list[int]:
    """History versions that carry an expiry (or something else in its place) though no expiry tag or repair
    ever gives them one: every version without a retention window; inside it, the newest K (with days only,
    the newest). Someone set it, and TTL would delete the version."""
    keep_versions, keep_days = retention_window(client)
    newest = max([int(h[model.VERSION]) for h in history] + ([int(latest[model.VERSION])] if latest else []))
    lag = keep_versions if keep_versions > 0 else (1 if keep_days > 0 else None)
    return [int(h[model.VERSION]) for h in history if h.get(model.EXPIRES_AT) is not None
            and (lag is None or int(h[model.VERSION]) > newest - lag or _integer(h[model.EXPIRES_AT]) is None)]


def entities(client) -> list[str]:
    """Every entity id with a ``v0`` or a history item (a full scan: for audits, not for the hot path)."""
    found = set()
    tables = {client.table, client.history_table}
    for table in tables:
        start = None
        while True:
            kwargs = {"TableName": table, "ProjectionExpression": "#pk", "ExpressionAttributeNames": {"#pk": model.PK}}
            if start:
                kwargs["ExclusiveStartKey"] = start
            page = client.dynamodb.scan(**kwargs)
            found.update(i[model.PK]["S"] for i in page.get("Items", []) if i[model.PK]["S"] != model.TABLE_PK)
            start = page.get("LastEvaluatedKey")
            if not start:
                break
    return sorted(found)
