"""The read side: what users see of an entity. Tombstones and expired items are suppressed (DynamoDB
deletes expired items lazily), pages of versions come newest first behind an opaque cursor."""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from typing import Any

from . import asof, items, model, store
from .errors import NotFound, ValidationError

MAX_PAGE = 100


def latest(client, table: str, entity_id: str) -> dict[str, Any]:
    """The live latest version; ``NotFound`` for nothing, a tombstone or an expired item. A tombstone's
    message says when the entity was deleted (its version and effective time), never its content."""
    item = store.get_item(client, table, entity_id, model.LATEST_SK)
    if item is None or items.is_expired(item):
        raise NotFound(f"entity {entity_id!r} does not exist")
    if item.get(model.DELETED):
        raise NotFound(f"entity {entity_id!r} was deleted at version {int(item[model.VERSION])} "
                       f"on {asof.utc(int(item[model.EFFECTIVE_AT]))}")
    if item.get(model.REDACTED) is not None:  # issue 32.8: a 410, never the redacted content
        raise asof.Gone(f"entity {entity_id!r} has no current content: it was redacted (v0 is version "
                        f"{int(item[model.VERSION])}, a {item.get(model.OPERATION)}); a put gives it content again")
    return items.view(item)


def state(client, table: str, history_table: str, entity_id: str, as_of: str | None = None,
          known_at: str | None = None) -> dict[str, Any]:
    """``GET /entities/{id}``: the live latest version, or with ``asOf``/``knownAt`` (epoch ms or ISO 8601
    UTC) the version in effect then (``asof.version_at``: ``NotFound``, or ``asof.Gone`` for a 410)."""
    as_of_ms, known_at_ms = asof.parse_instant("asOf", as_of), asof.parse_instant("knownAt", known_at)
    if as_of_ms is None and known_at_ms is None:
        return latest(client, table, entity_id)
    return asof.version_at(client, table, history_table, entity_id, as_of_ms, known_at_ms)[0]


def versions(client, table: str, history_table: str, entity_id: str, limit: int, cursor: str | None,
             start: str | None = None, end: str | None = None) -> dict[str, Any]:
    """``GET /entities/{id}/versions``: a page of versions newest first, or with ``from`` and ``to`` a page
    of the versions in effect during that interval (``asof.versions_page_during``)."""
    start_ms, end_ms = asof.parse_instant("from", start), asof.parse_instant("to", end)
    if start_ms is None and end_ms is None:
        return versions_page(client, history_table, entity_id, limit, cursor)
    if start_ms is None or end_ms is None:
        raise ValidationError("from" if start_ms is None else "to", "from and to go together")
    page = asof.versions_page_during(client, table, history_table, entity_id, start_ms, end_ms, limit,
                                     decode_cursor(cursor, entity_id))
    return {**page, "nextCursor": encode_cursor(page["nextCursor"])}


def _digits(text: str | None) -> bool:
    """ASCII digits only: str.isdigit() also accepts "²" and "١", which int() refuses or reads otherwise."""
    return text is not None and re.fullmatch(r"[0-9]{1,12}", text) is not None


def version_number(text: str) -> int:
    if not _digits(text) or not 1 <= int(text) <= model.MAX_VERSION:
        raise ValidationError("version", "must be a positive integer")
    return int(text)


def page_limit(text: str | None) -> int:
    if text is None:
        return 20
    if not _digits(text) or not 1 <= int(text) <= MAX_PAGE:
        raise ValidationError("limit", f"must be between 1 and {MAX_PAGE}")
    return int(text)


def version(client, history_table: str, entity_id: str, number: int) -> dict[str, Any]:
    """Version ``number`` (a deletion shows ``deleted: true``); ``NotFound`` if missing or expired."""
    item = store.get_item(client, history_table, entity_id, model.history_sk(number))
    if item is None or items.is_expired(item):
        raise NotFound(f"entity {entity_id!r} has no version {number}")
    return items.view(item)


def encode_cursor(key: dict | None) -> str | None:
    if not key:
        return None
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode().rstrip("=")


HISTORY_SK = re.compile(rf"{re.escape(model.HISTORY_PREFIX)}[0-9]{{{model.VERSION_DIGITS}}}")


def decode_cursor(cursor: str | None, entity_id: str) -> dict | None:
    """The ``ExclusiveStartKey`` a cursor this API returned stands for, or a ``ValidationError`` naming
    ``cursor``: exactly this entity's partition key and a history sort key (``v#`` and ten digits), each
    one string value. A forged key is refused here, never sent: DynamoDB refuses an attribute value with
    two types, and a sort key over 1,024 bytes, with a ValidationException (a 5xx to our caller)."""
    if not cursor:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError, binascii.Error, RecursionError) as exc:  # RecursionError: nested too deep
        raise ValidationError("cursor", "is not a cursor this API returned") from exc
    if not (isinstance(key, dict) and set(key) == {model.PK, model.SK}
            and all(isinstance(key[k], dict) and set(key[k]) == {"S"} and isinstance(key[k]["S"], str) for k in key)
            and HISTORY_SK.fullmatch(key[model.SK]["S"])):
        raise ValidationError("cursor", "is not a cursor this API returned")
    if key[model.PK]["S"] != entity_id:
        raise ValidationError("cursor", "belongs to another entity")
    return key


def versions_page(client, history_table: str, entity_id: str, limit: int, cursor: str | None) -> dict[str, Any]:
    """One page of versions, newest first: ``{"items": [...], "nextCursor": str|None}``. Expired versions
    are filtered out by DynamoDB after the limit is applied, so a page may be short; follow nextCursor."""
    found, last_key = store.query_history(
        client, history_table, entity_id, newest_first=True, limit=limit,
        start_key=decode_cursor(cursor, entity_id), unexpired_at=int(time.time()),
    )
    return {"items": [items.view(item) for item in found], "nextCursor": encode_cursor(last_key)}
