"""Every DynamoDB call changeflow makes, written the way Powertools writes them: named sub-conditions,
``ExpressionAttributeNames`` for every attribute, consistent reads where the latest is read, and the old
item returned with a failed condition so that no extra read is needed to tell why it failed.

Clients are passed in (handlers create them once, at module level).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from . import codec, items, model, names
from .errors import HistoryConflict, NotFound

class ConditionFailed(Exception):
    """A conditional write met an item that did not satisfy it; ``old_item`` is that item (plain JSON)."""

    def __init__(self, old_item: dict[str, Any] | None):
        self.old_item = old_item
        super().__init__("conditional check failed")


def _key(entity_id: str, sk: str) -> dict[str, dict]:
    return {model.PK: {"S": entity_id}, model.SK: {"S": sk}}


def _is_condition_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def get_item(client, table: str, entity_id: str, sk: str) -> dict[str, Any] | None:
    """One item by key, strongly consistent: the latest committed write is seen."""
    response = client.get_item(TableName=table, Key=_key(entity_id, sk), ConsistentRead=True)
    return codec.deserialize_item(response.get("Item"))


def fetch_latest_state(client, table: str, history_table: str, entity_id: str) -> dict[str, Any] | None:
    """What a decision needs about the entity: ``v0`` read consistently, or when no ``v0`` exists (never
    written, or its tombstone expired) the newest history version, so numbering and the ratchet go on."""
    return fetch_latest(client, table, history_table, entity_id)[1]


def fetch_latest(client, table: str, history_table: str, entity_id: str) -> tuple[dict | None, dict | None]:
    """``(v0 item or None, the decision's state)``: ``read_latest`` without what it repaired."""
    item, latest, _ = read_latest(client, table, history_table, entity_id)
    return item, latest


def read_latest(client, table: str, history_table: str, entity_id: str) -> tuple[dict | None, dict | None, int | None]:
    """``(v0 item or None, the decision's state, the version whose history item it wrote or None)``.

    The rule that keeps every version: whoever moves ``v0`` from n to n+1 first makes sure history has
    version n. ``v0`` holds n's whole item, so when history lacks it (its writer's history put has not
    run, or never will: a lost response, a failed execution) it is written here, from ``v0``, before any
    decision: a conditional put, idempotent, the same item the writer would have put.

    One request tells both: history sort keys ``v#0000000042`` sort before ``v0`` (``#`` < ``0``), so one
    consistent Query of the partition, newest first, ``Limit=2``, returns ``v0`` and the newest history
    item (DynamoDB charges a Query the sum of the items' sizes rounded up to 4 KB: for small items what
    the GetItem of ``v0`` cost). With a separate history table it takes a second read there.
    An expired history item is still there until TTL deletes it; versions below n are not looked at
    (the retention window expires them): only n, the one ``v0`` holds, is ever written back."""
    if table == history_table:
        response = client.query(
            TableName=table,
            KeyConditionExpression="#pk = :pk AND #sk BETWEEN :history AND :latest",
            ExpressionAttributeNames={"#pk": model.PK, "#sk": model.SK},
            ExpressionAttributeValues={":pk": {"S": entity_id}, ":history": {"S": model.HISTORY_PREFIX},
                                       ":latest": {"S": model.LATEST_SK}},
            ScanIndexForward=False,
            Limit=2,
            ConsistentRead=True,
        )
        found = response.get("Items", [])
        wire_latest = next((i for i in found if i[model.SK]["S"] == model.LATEST_SK), None)
        wire_newest = next((i for i in found if i[model.SK]["S"] != model.LATEST_SK), None)
    else:
        wire_latest = client.get_item(TableName=table, Key=_key(entity_id, model.LATEST_SK),
                                      ConsistentRead=True).get("Item")
        found, _ = query_history(client, history_table, entity_id, newest_first=True, limit=1, consistent=True,
                                 raw=True)
        wire_newest = found[0] if found else None
    if wire_latest is None:
        return None, items.latest_state(codec.deserialize_item(wire_newest), present=False), None
    helped = None
    version = int(wire_latest[model.VERSION]["N"])
    newest = model.version_of_sk(wire_newest[model.SK]["S"]) if wire_newest is not None else 0
    if newest < version:
        put_history_wire(client, history_table, history_wire(wire_latest, wire_newest))
        helped = version
    latest = codec.deserialize_item(wire_latest)
    return latest, items.latest_state(latest), helped


def history_wire(wire_latest: dict[str, dict], wire_prior: dict[str, dict] | None = None) -> dict[str, dict]:
    """The history item of the version a ``v0`` item (DynamoDB JSON) holds: the same attributes, its
    history sort key, no tombstone expiry (``items.history_of``, without a round trip through Python
    values: every number as DynamoDB returned it), and the time indexes' keys from ``wire_prior``, the
    history item of the version before it (none if it is another)."""
    item = {k: v for k, v in wire_latest.items() if k not in items.LATEST_ONLY}
    version = int(wire_latest[model.VERSION]["N"])
    item[model.SK] = {"S": model.history_sk(version)}
    prior = items.latest_state(codec.deserialize_item(wire_prior)) if wire_prior else None
    item.update({name: {"N": str(key)} for name, key in items.index_keys(version, prior).items()})
    return item


def rollback_content(client, history_table: str, entity_id: str, version: int) -> dict[str, Any]:
    """The content of version ``version``, or ``NotFound`` if it is missing, expired or a tombstone."""
    item = get_item(client, history_table, entity_id, model.history_sk(version))
    if item is None or items.is_expired(item):
        raise NotFound(f"the entity has no version {version}")
    if item.get(model.DELETED):
        raise NotFound(f"version {version} of the entity is a deletion; it has no content")
    return items.content_of(item)


def write_latest(client, table: str, item: dict[str, Any], latest: dict[str, Any] | None) -> None:
    """PutItem of the whole ``v0`` item, only if ``v0`` is still what the decision was made on."""
    if latest and latest["present"]:
        condition = " AND ".join(
            [
                # optimistic concurrency: nobody wrote v0 since it was read
                "#version = :fetchedVersion",
                # the timestamp ratchet: never overwrite newer data (equal times are accepted)
                "#effectiveAt <= :effectiveAt",
            ]
        )
        values = {
            ":fetchedVersion": {"N": str(latest["version"])},
            ":effectiveAt": {"N": str(item[model.EFFECTIVE_AT])},
        }
        names = {"#version": model.VERSION, "#effectiveAt": model.EFFECTIVE_AT}
        extra = {"ExpressionAttributeValues": values}
    else:
        # creation (or re-creation after an expired tombstone): nobody created v0 in between
        condition = "attribute_not_exists(#pk)"
        names = {"#pk": model.PK}
        extra = {}
    try:
        client.put_item(
            TableName=table,
            Item=codec.serialize_item(item),
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **extra,
        )
    except ClientError as exc:
        if _is_condition_failure(exc):
            raise ConditionFailed(codec.deserialize_item(exc.response.get("Item"))) from exc
        raise


def put_history(client, history_table: str, item: dict[str, Any]) -> bool:
    """PutItem of history item n, never overwriting: ``True`` if written now, ``False`` if this change
    had already written it (a retry or a redrive). Another change's item there is a ``HistoryConflict``."""
    return put_history_wire(client, history_table, codec.serialize_item(item))


def put_history_wire(client, history_table: str, item: dict[str, dict]) -> bool:
    """``put_history`` of an item already in DynamoDB JSON."""
    try:
        client.put_item(
            TableName=history_table,
            Item=item,
            # history is immutable: version n is written once
            ConditionExpression="attribute_not_exists(#pk)",
            ExpressionAttributeNames={"#pk": model.PK},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return True
    except ClientError as exc:
        if not _is_condition_failure(exc):
            raise
        old = exc.response.get("Item") or {}
        change_id = item[model.CHANGE_ID]["S"]
        if old.get(model.CHANGE_ID, {}).get("S") == change_id:
            return False
        raise HistoryConflict(
            f"version {item[model.VERSION]['N']} of {names.shown(item[model.PK]['S'])} was written by change "
            f"{old.get(model.CHANGE_ID, {}).get('S')!r}, not {change_id!r}"
        ) from exc


def ensure_history(client, table: str, history_table: str, entity_id: str, version: int) -> str:
    """Make sure history item ``version`` exists: ``present``, ``repaired`` (copied from ``v0``, which
    still holds that version) or ``unrepairable`` (``v0`` has moved on; its content is not known)."""
    return settle_history(client, table, history_table, entity_id, version)[0]


def settle_history(client, table: str, history_table: str, entity_id: str,
                   version: int) -> tuple[str, dict[str, Any] | None]:
    """``ensure_history`` and the history item it found or wrote (plain JSON; ``None`` if unrepairable)."""
    item = get_item(client, history_table, entity_id, model.history_sk(version))
    if item is not None:
        return "present", item
    wire_latest = client.get_item(TableName=table, Key=_key(entity_id, model.LATEST_SK),
                                  ConsistentRead=True).get("Item")
    if wire_latest is None or int(wire_latest[model.VERSION]["N"]) != version:
        return "unrepairable", None
    prior = client.get_item(TableName=history_table, Key=_key(entity_id, model.history_sk(version - 1)),
                            ConsistentRead=True).get("Item") if version > 1 else None
    wire = history_wire(wire_latest, prior)
    put_history_wire(client, history_table, wire)
    return "repaired", codec.deserialize_item(wire)


def tag_expiry(client, history_table: str, entity_id: str, version: int, expires_at: int) -> bool:
    """Set the expiry of history item ``version`` once: ``False`` if it is gone or already tagged."""
    try:
        client.update_item(
            TableName=history_table,
            Key=_key(entity_id, model.history_sk(version)),
            UpdateExpression="SET #expiresAt = :expiresAt",
            ConditionExpression=" AND ".join(
                [
                    # never create an item: a version that expired already stays gone
                    "attribute_exists(#pk)",
                    # idempotent: a re-run keeps the first expiry
                    "attribute_not_exists(#expiresAt)",
                ]
            ),
            ExpressionAttributeNames={"#pk": model.PK, "#expiresAt": model.EXPIRES_AT},
            ExpressionAttributeValues={":expiresAt": {"N": str(expires_at)}},
        )
        return True
    except ClientError as exc:
        if _is_condition_failure(exc):
            return False
        raise


def query_history(
    client, history_table: str, entity_id: str, *, newest_first: bool = True, limit: int | None = None,
    start_key: dict | None = None, consistent: bool = False, unexpired_at: int | None = None, raw: bool = False,
    versions: tuple[int, int] | None = None,
) -> tuple[list[dict[str, Any]], dict | None]:
    """One page of history items (plain JSON; ``raw``: DynamoDB JSON) and the key to continue from
    (``None`` at the end); ``versions=(first, last)`` keeps to that range of version numbers.
    With ``unexpired_at`` (epoch seconds), items whose expiry has passed are filtered out: DynamoDB
    deletes expired items lazily, and it filters after ``limit``, so such a page may be short."""
    kwargs: dict[str, Any] = dict(
        TableName=history_table,
        KeyConditionExpression="#pk = :pk AND begins_with(#sk, :history)",
        ExpressionAttributeNames={"#pk": model.PK, "#sk": model.SK},
        ExpressionAttributeValues={":pk": {"S": entity_id}, ":history": {"S": model.HISTORY_PREFIX}},
        ScanIndexForward=not newest_first,
        ConsistentRead=consistent,
    )
    if versions is not None:
        kwargs["KeyConditionExpression"] = "#pk = :pk AND #sk BETWEEN :first AND :last"
        del kwargs["ExpressionAttributeValues"][":history"]
        kwargs["ExpressionAttributeValues"].update({":first": {"S": model.history_sk(versions[0])},
                                                    ":last": {"S": model.history_sk(versions[1])}})
    if unexpired_at is not None:
        kwargs["FilterExpression"] = "attribute_not_exists(#expiresAt) OR #expiresAt > :now"
        kwargs["ExpressionAttributeNames"]["#expiresAt"] = model.EXPIRES_AT
        kwargs["ExpressionAttributeValues"][":now"] = {"N": str(unexpired_at)}
    if limit:
        kwargs["Limit"] = limit
    if start_key:
        kwargs["ExclusiveStartKey"] = start_key
    response = client.query(**kwargs)
    found = response.get("Items", [])
    return (found if raw else [codec.deserialize_item(i) for i in found]), response.get("LastEvaluatedKey")


def all_history(client, history_table: str, entity_id: str, consistent: bool = True) -> list[dict[str, Any]]:
    """Every history item of an entity, oldest first, following the pages to the end."""
    found, start = [], None
    while True:
        page, start = query_history(
            client, history_table, entity_id, newest_first=False, start_key=start, consistent=consistent
        )
        found.extend(page)
        if not start:
            return found
