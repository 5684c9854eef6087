"""The hash chain, as an auditor checks it: an entity's versions read as stored (every number exactly),
the chain checked link by link, digests taken (each entity's head and a Merkle root) to keep outside the
account, and a later state proven against a digest. Reads only, through the same client as every other
command."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from changeflow_core import chain, digestformat, model

from ..client import Changeflow
from .retention import retention_window, unexplained_absences

_shown = digestformat.shown  # a value from a file, quoted short enough for one line


def raw_history(client: Changeflow, entity_id: str) -> list[dict[str, dict]]:
    """Every history item of an entity in DynamoDB's wire format (numbers exactly as stored), oldest first."""
    found, start = [], None
    while True:
        kwargs: dict[str, Any] = dict(
            TableName=client.history_table,
            KeyConditionExpression="#pk = :pk AND begins_with(#sk, :history)",
            ExpressionAttributeNames={"#pk": model.PK, "#sk": model.SK},
            ExpressionAttributeValues={":pk": {"S": entity_id}, ":history": {"S": model.HISTORY_PREFIX}},
            ConsistentRead=True,
        )
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = client.dynamodb.query(**kwargs)
        found.extend(page.get("Items", []))
        start = page.get("LastEvaluatedKey")
        if not start:
            return found


def raw_latest(client: Changeflow, entity_id: str) -> dict[str, dict] | None:
    key = {model.PK: {"S": entity_id}, model.SK: {"S": model.LATEST_SK}}
    return client.dynamodb.get_item(TableName=client.table, Key=key, ConsistentRead=True).get("Item")


def _number(wire_item: dict[str, dict], name: str) -> int | None:
    """An integer attribute of a stored item, or None when it is missing or not one (an insider can write
    anything: what the audit reads from the table is input too)."""
    value = wire_item.get(name)
    try:
        return int(Decimal(value["N"])) if isinstance(value, dict) and isinstance(value.get("N"), str) else None
    except (ArithmeticError, ValueError):
        return None


def numbered(items: list[dict[str, dict]]) -> tuple[list[dict[str, dict]], list[str]]:
    """The history items that carry a version number, and a problem for each that does not."""
    kept, problems = [], []
    for item in items:
        if _number(item, model.VERSION) is None:
            problems.append(f"history item {item.get(model.SK, {}).get('S')!r} has no version number: it was altered")
        else:
            kept.append(item)
    return kept, problems


def _unexpired(items: list[dict[str, dict]], now_s: float) -> list[dict[str, dict]]:
    return [i for i in items if model.EXPIRES_AT not in i or (_number(i, model.EXPIRES_AT) or now_s + 1) > now_s]


def verify_chain(client: Changeflow, entity_id: str, now_s: float | None = None) -> list[str]:
    """The chain's problems for one entity (empty when every link holds)."""
    return audit_chain(client, entity_id, now_s).problems


def audit_chain(client: Changeflow, entity_id: str, now_s: float | None = None) -> chain.ChainAudit:
    """The chain's problems for one entity and its notes (each redaction, each adoption)."""
    import time

    now_s = time.time() if now_s is None else now_s
    history, unnumbered = numbered(_unexpired(raw_history(client, entity_id), now_s))
    latest = raw_latest(client, entity_id)
    if latest is not None and _number(latest, model.VERSION) is None:
        altered = chain.ChainAudit()
        altered.problems = unnumbered + ["v0 has no version number: it was altered"]
        return altered
    audit = chain.audit_chain(entity_id, history, latest, anchored=client.history_expires)
    audit.problems[:0] = unnumbered
    closed = closed_adoption(client)
    if closed is not None:  # no version can be legacy any more: one without a chain had it removed
        audit.problems = [p.replace("(written before the chain, or chain attributes removed); `changeflow adopt` "
                                    "binds versions written before the chain, once",
                                    f"(chain attributes removed: {closed})")
                          for p in audit.problems]
    return audit


def closed_adoption(client: Changeflow) -> str | None:
    """Why no version may lack a chain any more, or ``None``: the stack was deployed with
    ``ChainAdoptionClosed=true`` (which no table edit undoes), or ``adopt --all --close`` recorded it in the
    table (which an insider who deletes the record undoes: docs/audit.md)."""
    from changeflow_core import chainwork

    if str((client.outputs or {}).get("ChainAdoptionClosed", "false")).lower() == "true":
        return "adoption is closed for this stack (ChainAdoptionClosed=true)"
    record = chainwork.adoption_closed(client.dynamodb, client.table)
    return f"adoption was closed at {record.get('closedAt', {}).get('S')}" if record is not None else None


def head_of(client: Changeflow, entity_id: str) -> dict[str, Any] | None:
    latest = raw_latest(client, entity_id)
    if latest is None or _number(latest, model.VERSION) is None:  # gone, or altered: history's newest
        history, _ = numbered(raw_history(client, entity_id))
        latest = max(history, key=_version_of) if history else None
    return chain.head(entity_id, latest) if latest is not None else None


def digest(client: Changeflow, entity_ids: list[str], now: datetime.datetime | None = None) -> dict[str, Any]:
    """Each entity's head version and chain hash, a Merkle root over them, and when it was taken."""
    return digest_of(client, [h for h in (head_of(client, e) for e in entity_ids) if h is not None], now)


def digest_of(client: Changeflow, heads: list[dict[str, Any]], now: datetime.datetime | None = None) -> dict[str, Any]:
    """The digest of heads already read (``chain.head`` of each entity): what ``changeflow export --digest``
    writes from the versions it exported, in the same format as ``digest``."""
    taken = (now or datetime.datetime.now(datetime.timezone.utc)).isoformat(timespec="seconds")
    return {"format": chain.DIGEST_FORMAT, "takenAt": taken, "stateMachineArn": client.state_machine_arn,
            "table": client.history_table, "entities": sorted(heads, key=lambda h: h["entityId"]),
            "root": chain.merkle_root(heads)}


class NotADigest(ValueError):
    """A digest file that is not what ``digest`` writes (one line saying what is wrong, naming the field)."""


_HEX64 = frozenset("0123456789abcdef")


def _is_hash(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX64


def check_digest(taken: Any) -> list[dict[str, Any]]:
    """The heads of a digest read from outside (JSON parsed by ``wire.loads``), each checked as ``digest``
    writes it: ``NotADigest`` names the first field that is not. A digest is input like any other: every
    type, every range, no entity twice. Whether its root matches its heads is ``verify_since``'s finding
    (an altered file), not a malformed one."""
    if not isinstance(taken, dict):
        raise NotADigest("not a changeflow digest (`changeflow digest --all` makes one): not a JSON object")
    if taken.get("format") == digestformat.FORMAT:  # the stack's chained digests
        raise NotADigest("a changeflow-digest/2 digest (the stack's own, chained) holds only the heads that changed "
                         "since the one before it: give its s3:// address instead of a file (changeflow verify "
                         "--since-digest s3://bucket/prefix/NNNNNNNNNNNN.json)")
    if taken.get("format") != chain.DIGEST_FORMAT:
        raise NotADigest(f"not a changeflow digest: format is {_shown(taken.get('format'))}, "
                         f"not {chain.DIGEST_FORMAT!r}")
    if not _is_hash(taken.get("root")):
        raise NotADigest(f"root is {_shown(taken.get('root'))}, not a SHA-256 hash in hex")
    if "takenAt" in taken and not isinstance(taken["takenAt"], str):
        raise NotADigest(f"takenAt is {_shown(taken['takenAt'])}, not a time")
    try:
        return digestformat.check_heads(taken.get("entities"))
    except digestformat.DigestInvalid as exc:
        raise NotADigest(str(exc)) from None


def parse_digest(document: Any) -> dict[str, Any]:
    """A digest a proof is made or checked against: ``check_digest``'s checks, and a ``takenAt`` in one line
    of text (a proof names its digest by its root and that time). Raises ``NotADigest``."""
    check_digest(document)
    taken = document.get("takenAt")
    if not (isinstance(taken, str) and taken.isprintable()):
        raise NotADigest(f"takenAt is {_shown(taken)}, not a time in one line of text")
    return document


def root_holds(parsed: dict[str, Any]) -> bool:
    """Whether a checked digest's root is the Merkle root of its heads (false: the file was altered)."""
    return chain.merkle_root(parsed["entities"]) == parsed["root"]


def verify_since(client: Changeflow, taken: dict[str, Any], now_s: float | None = None) -> dict[str, list[str]]:
    """Prove that nothing recorded before the digest ``taken`` has changed since: per entity, every version
    up to the one the digest names is still in history (unless the retention window has let it go:
    audit.retention), the chain recomputed from the oldest kept version reaches the hash the digest
    recorded, and every version and link from there to today holds. Returns the problems per entity id
    (an empty dict when everything is proven); a malformed digest is a problem of ``(digest)``."""
    import time

    now_s = time.time() if now_s is None else now_s
    try:
        heads = check_digest(taken)
    except NotADigest as exc:
        return {"(digest)": [str(exc)]}
    problems: dict[str, list[str]] = {}
    if chain.merkle_root(heads) != taken["root"]:
        problems["(digest)"] = ["the digest's root does not match its entities: the file was altered"]
    window = retention_window(client)
    for head_ in heads:
        found = _since_head(client, head_["entityId"], head_["version"], head_["chainHash"], window, now_s)
        if found:
            problems[head_["entityId"]] = found
    return problems


def _since_head(client: Changeflow, entity_id: str, version: int, recorded_hash: str, window: tuple[int, int],
                now_s: float) -> list[str]:
    """What changed in one entity since a digest recorded ``version`` with ``recorded_hash``."""
    return since_head_in(entity_id, raw_history(client, entity_id), raw_latest(client, entity_id), version,
                         recorded_hash, window, now_s)


def since_head_in(entity_id: str, raw: list[dict[str, dict]], latest: dict[str, dict] | None, version: int,
                  recorded_hash: str | None, window: tuple[int, int], now_s: float) -> list[str]:
    """``_since_head`` of an entity's items already read (``raw_history``, ``raw_latest``)."""
    stored, found = numbered(raw)
    history = _unexpired(stored, now_s)
    if latest is not None and _number(latest, model.VERSION) is None:
        found.append("v0 has no version number: it was altered")
        latest = None
    kept = {_version_of(i): i for i in history}
    everything = stored + ([latest] if latest is not None else [])
    if not everything:
        return found + [f"version {version}, recorded in the digest, is gone: nothing of the entity is left"]
    current = max(_version_of(i) for i in everything)
    recorded_ms = {_version_of(i): _number(i, model.RECORDED_AT) for i in everything
                   if _number(i, model.RECORDED_AT) is not None}
    if current < version:
        found.append(f"the entity is at version {current}, before version {version} the digest recorded: "
                     "versions were removed")
    absent = unexplained_absences(window, kept, recorded_ms, current, now_s)
    before = [v for v in absent if v <= version]
    after = [v for v in absent if v > version]
    for versions, when in ((before, "recorded in the digest"), (after, "written since the digest")):
        if versions:
            found.append(f"{_versions(versions)}, {when}, {'is' if len(versions) == 1 else 'are'} gone from history")
    recorded = kept.get(version)
    if recorded is None and latest is not None and _version_of(latest) == version:
        recorded = latest  # its history item is gone (reported above); v0 still says what it was
    if recorded_hash is None:  # the digest took a version written before the chain: it commits to nothing
        found.append(f"the digest recorded no chain hash for version {version} (written before the chain): "
                     "nothing proves it")
    elif recorded is None:
        if version not in before and current >= version:
            found.append(f"version {version} has expired under the retention window; it can no longer be proven")
    elif chain.stored_hash(recorded) != recorded_hash:
        found.append(f"version {version} no longer has the hash the digest recorded: it was rewritten")
    chain_problems, _ = chain.verify_chain(entity_id, history, latest, anchored=bool(window[0] or window[1]))
    found.extend(chain_problems)
    return found


def _version_of(wire_item: dict[str, dict]) -> int:
    return _number(wire_item, model.VERSION)  # type: ignore[return-value] - numbered() kept only these


def _versions(numbers: list[int]) -> str:
    """``[3, 4, 5]`` -> ``"versions 3..5"``; ``[4]`` -> ``"version 4"``."""
    from ..report import ranges

    return f"version {numbers[0]}" if len(numbers) == 1 else f"versions {ranges(numbers)}"
