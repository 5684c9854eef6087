"""The hash chain, as an auditor checks it: an entity's versions read as stored (every number exactly),
the chain checked link by link, digests taken (each entity's head and a Merkle root) to keep outside the
account, and a later state proven against a digest. Reads only, through the same client as every other
command."""

from __future__ import annotations

import datetime
from typing import Any

from changeflow_core import chain, model

from ..client import Changeflow


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
    import time

    now_s = time.time() if now_s is None else now_s
    history = _unexpired(raw_history(client, entity_id), now_s)
    problems, _ = chain.verify_chain(entity_id, history, raw_latest(client, entity_id),
                                     anchored=client.history_expires)
    return problems


def head_of(client: Changeflow, entity_id: str) -> dict[str, Any] | None:
    latest = raw_latest(client, entity_id)
    if latest is None:
        history = raw_history(client, entity_id)
        latest = history[-1] if history else None
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
        elif recorded.get(chain.CHAIN_HASH, {}).get("S") != head["chainHash"]:
            found.append(f"version {version} no longer has the hash the digest recorded: it was rewritten")
        chain_problems, _ = chain.verify_chain(entity_id, history, latest, anchored=client.history_expires)
        found.extend(chain_problems)
        if found:
            problems[entity_id] = found
    return problems
