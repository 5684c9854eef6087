"""The hash chain, as an auditor checks it: an entity's versions read as stored (every number exactly),
the chain checked link by link, digests taken (each entity's head and a Merkle root) to keep outside the
account, and a later state proven against a digest. Reads only, through the same client as every other
command."""

from __future__ import annotations

import datetime
import re
from typing import Any

from changeflow_core import chain, model

from ..client import Changeflow


HEX_HASH = re.compile(r"[0-9a-f]{64}")  # a SHA-256 as the chain and digests write it: lowercase hex
_HEAD_KEYS = frozenset({"entityId", "version", "chainHash"})


class DigestInvalid(ValueError):
    """A digest file that is not what ``changeflow digest`` writes (its shape, named in one line)."""


def parse_digest(document: Any) -> dict[str, Any]:
    """A digest read from outside the account (a file an auditor kept), checked for the shape ``digest``
    writes before anything is computed from it: the format, each head (an entity id, a version from 1 to
    the largest one, a lowercase hex SHA-256 or null for a version written before the chain), each entity
    once, a hex root and the time it was taken. Whether the root matches the heads is ``root_holds``.
    Raises ``DigestInvalid``."""
    if not isinstance(document, dict):
        raise DigestInvalid("not a changeflow digest (not a JSON object; `changeflow digest --all` makes one)")
    if document.get("format") != chain.DIGEST_FORMAT:
        raise DigestInvalid(f"not a changeflow digest (format {document.get('format')!r}, "
                            f"expected {chain.DIGEST_FORMAT!r})")
    entities = document.get("entities")
    if not isinstance(entities, list):
        raise DigestInvalid("not a changeflow digest: its entities are not a list")
    seen: set[str] = set()
    for position, entry in enumerate(entities):
        where = f"entities[{position}]"
        if not isinstance(entry, dict) or set(entry) != _HEAD_KEYS:
            raise DigestInvalid(f"{where} is not an entity's head (entityId, version, chainHash)")
        entity_id, version, hashed = entry["entityId"], entry["version"], entry["chainHash"]
        if not isinstance(entity_id, str) or not entity_id:
            raise DigestInvalid(f"{where}: entityId {entity_id!r} is not an entity id")
        if type(version) is not int or not 1 <= version <= model.MAX_VERSION:
            raise DigestInvalid(f"{where}: version {version!r} is not a version number")
        if hashed is not None and not (isinstance(hashed, str) and HEX_HASH.fullmatch(hashed)):
            raise DigestInvalid(f"{where}: chainHash {hashed!r} is not a SHA-256 in lowercase hex")
        if entity_id in seen:
            raise DigestInvalid(f"{where}: entity {entity_id!r} appears twice")
        seen.add(entity_id)
    root = document.get("root")
    if not (isinstance(root, str) and HEX_HASH.fullmatch(root)):
        raise DigestInvalid(f"its root {root!r} is not a SHA-256 in lowercase hex")
    taken = document.get("takenAt")
    if not (isinstance(taken, str) and taken.isprintable()):
        raise DigestInvalid(f"it does not say when it was taken in one line of text (takenAt {taken!r})")
    return document


def root_holds(parsed: dict[str, Any]) -> bool:
    """Whether a parsed digest's root is the Merkle root of its heads (false: the file was altered)."""
    return chain.merkle_root(parsed["entities"]) == parsed["root"]


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


def _unexpired(items: list[dict[str, dict]], now_s: float) -> list[dict[str, dict]]:
    return [i for i in items if model.EXPIRES_AT not in i or int(i[model.EXPIRES_AT]["N"]) > now_s]


def verify_chain(client: Changeflow, entity_id: str, now_s: float | None = None) -> list[str]:
    """The chain's problems for one entity (empty when every link holds)."""
    return audit_chain(client, entity_id, now_s).problems


def audit_chain(client: Changeflow, entity_id: str, now_s: float | None = None) -> chain.ChainAudit:
    """The chain's problems for one entity and its notes (each redaction, each adoption)."""
    import time

    now_s = time.time() if now_s is None else now_s
    from changeflow_core import chainwork

    history = _unexpired(raw_history(client, entity_id), now_s)
    audit = chain.audit_chain(entity_id, history, raw_latest(client, entity_id), anchored=client.history_expires)
    closed = chainwork.adoption_closed(client.dynamodb, client.table)
    if closed is not None:  # no version can be legacy any more: one without a chain had it removed
        when = closed.get("closedAt", {}).get("S")
        audit.problems = [p.replace("(written before the chain, or chain attributes removed); `changeflow adopt` "
                                    "binds versions written before the chain, once",
                                    f"(chain attributes removed: adoption was closed at {when})")
                          for p in audit.problems]
    return audit


def head_of(client: Changeflow, entity_id: str) -> dict[str, Any] | None:
    latest = raw_latest(client, entity_id)
    if latest is None:
        history = raw_history(client, entity_id)
        latest = history[-1] if history else None
    return chain.head(entity_id, latest) if latest is not None else None


def digest(client: Changeflow, entity_ids: list[str], now: datetime.datetime | None = None) -> dict[str, Any]:
    """Each entity's head version and chain hash, a Merkle root over them, and when it was taken."""
    heads = [h for h in (head_of(client, e) for e in entity_ids) if h is not None]
    taken = (now or datetime.datetime.now(datetime.timezone.utc)).isoformat(timespec="seconds")
    return {"format": chain.DIGEST_FORMAT, "takenAt": taken, "stateMachineArn": client.state_machine_arn,
            "table": client.history_table, "entities": sorted(heads, key=lambda h: h["entityId"]),
            "root": chain.merkle_root(heads)}


def verify_since(client: Changeflow, taken: dict[str, Any], now_s: float | None = None) -> dict[str, list[str]]:
    """Prove that nothing recorded before the digest ``taken`` has changed since: per entity, the version
    the digest names still carries the hash it recorded, and every link from there to today holds.
    Returns the problems per entity id (an empty dict when everything is proven)."""
    import time

    now_s = time.time() if now_s is None else now_s
    if taken.get("format") != chain.DIGEST_FORMAT:
        return {"(digest)": [f"not a changeflow digest (format {taken.get('format')!r})"]}
    problems: dict[str, list[str]] = {}
    if chain.merkle_root(taken["entities"]) != taken["root"]:
        problems["(digest)"] = ["the digest's root does not match its entities: the file was altered"]
    for head in taken["entities"]:
        entity_id, version = head["entityId"], int(head["version"])
        found = []
        history = _unexpired(raw_history(client, entity_id), now_s)
        latest = raw_latest(client, entity_id)
        items = {int(i[model.VERSION]["N"]): i for i in history}
        if latest is not None:
            items.setdefault(int(latest[model.VERSION]["N"]), latest)
        recorded = items.get(version)
        if recorded is None:
            if client.history_expires and items and min(items) > version:
                found.append(f"version {version} has expired under the retention window; it can no longer be proven")
            else:
                found.append(f"version {version}, recorded in the digest, is gone")
        elif chain.stored_hash(recorded) != head["chainHash"]:
            found.append(f"version {version} no longer has the hash the digest recorded: it was rewritten")
        chain_problems, _ = chain.verify_chain(entity_id, history, latest, anchored=client.history_expires)
        found.extend(chain_problems)
        if found:
            problems[entity_id] = found
    return problems
