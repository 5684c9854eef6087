"""Tamper evidence: every version of an entity carries a link of a hash chain.

``chainHash(n) = SHA-256(chainHash(n-1) || canonical(version n))``, and version 1 chains from a genesis
value bound to the entity id, ``SHA-256("changeflow/chain/v1/genesis" 0x00 entityId)``. Each item stores
its predecessor's hash too (``prevHash``), so that verification can start at the oldest version a
retention window kept. The write step computes both from what it already has (the fetched ``v0`` carries
the previous hash): no extra read, no extra write.

What is hashed: every attribute of the version except its key (``pk`` is bound by the genesis value,
``sk`` by the order of the chain), its expiry (``expiresAt`` is set later by TTL tagging) and the chain
attributes themselves. So the content, the operation, effectiveAt, changeId, actor, reason, recordedAt,
executionArn, deleted, version and a rollback's source version are all covered, and so is any attribute
a later version of changeflow adds.

The canonical encoding is a form of DynamoDB's own types, taken from the wire format (the same for the
client and the resource interfaces of boto3, and for every Python version), type-tagged and
length-prefixed so that no two different values share an encoding:

==========  ====================================================================================
S           ``b"S"`` + 8-byte big-endian length + the UTF-8 bytes
N           ``b"N"`` + length + the number as DynamoDB normalises it: sign, digits without leading or
            trailing zeros, ``E`` and the exponent (``-1.50`` -> ``-15E-1``; every zero -> ``0``)
B           ``b"B"`` + length + the bytes
BOOL, NULL  ``b"T"``/``b"F"``, ``b"0"``
L           ``b"L"`` + count + each element's encoding, in order
M           ``b"M"`` + count + for each key in UTF-8 byte order: length + key bytes + the value's encoding
SS, NS, BS  ``b"s"``/``b"n"``/``b"b"`` + count + the members' encodings, sorted bytewise
==========  ====================================================================================

A hash chain with no secret proves nothing against someone who can rewrite every item after the fact:
that is what digests are for. ``changeflow digest`` records each entity's head; an auditor keeps it
outside the account, and ``changeflow verify --since-digest`` proves that nothing recorded before it
has changed since.
"""

from __future__ import annotations

import base64
import hashlib
import json
from decimal import Context, Decimal
from typing import Any, Iterable

from boto3.dynamodb.types import TypeSerializer

from . import model

PREV_HASH = model.PREV_HASH
CHAIN_HASH = model.CHAIN_HASH
NOT_HASHED = frozenset({model.PK, model.SK, model.EXPIRES_AT, PREV_HASH, CHAIN_HASH})
GENESIS_TAG = b"changeflow/chain/v1/genesis\x00"
DIGEST_FORMAT = "changeflow-digest/1"
_EXACT = Context(prec=1_000)
_serializer = TypeSerializer()


def _framed(tag: bytes, payload: bytes) -> bytes:
    return tag + len(payload).to_bytes(8, "big") + payload


def canonical_number(text: str) -> str:
    """A DynamoDB number as DynamoDB normalises it: ``-15E-1`` for ``-1.50``; ``0`` for any zero."""
    number = Decimal(text)
    if number.is_zero():
        return "0"
    sign, digits, exponent = number.normalize(_EXACT).as_tuple()
    return f"{'-' if sign else ''}{''.join(map(str, digits))}E{exponent}"


def encode_value(value: dict[str, Any]) -> bytes:
    """The canonical bytes of one attribute value in wire format (``{"S": "x"}``, ``{"N": "1"}``, ...)."""
    (kind, inner), = value.items()
    if kind == "S":
        return _framed(b"S", inner.encode("utf-8"))
    if kind == "N":
        return _framed(b"N", canonical_number(inner).encode("ascii"))
    if kind == "B":
        return _framed(b"B", _bytes(inner))
    if kind == "BOOL":
        return b"T" if inner else b"F"
    if kind == "NULL":
        return b"0"
    if kind == "L":
        return b"L" + len(inner).to_bytes(8, "big") + b"".join(encode_value(v) for v in inner)
    if kind == "M":
        keys = sorted(inner, key=lambda k: k.encode("utf-8"))
        return b"M" + len(keys).to_bytes(8, "big") + b"".join(
            _framed(b"k", k.encode("utf-8")) + encode_value(inner[k]) for k in keys)
    if kind in ("SS", "NS", "BS"):
        member = {"SS": "S", "NS": "N", "BS": "B"}[kind]
        members = sorted(encode_value({member: m}) for m in inner)
        return kind[0].lower().encode() + len(members).to_bytes(8, "big") + b"".join(members)
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def _bytes(inner: Any) -> bytes:
    if isinstance(inner, str):  # the JSON wire format carries binary as base64
        return base64.b64decode(inner)
    return bytes(getattr(inner, "value", inner))  # bytes, or boto3's Binary


def to_wire(item: dict[str, Any]) -> dict[str, dict]:
    """An item of the resource interface (Python values, Decimals) in the client's wire format."""
    return {name: _serializer.serialize(value) for name, value in item.items()}


def encode_version(wire_item: dict[str, dict]) -> bytes:
    """The canonical bytes of what a version says: every attribute but the key, expiry and chain."""
    return encode_value({"M": {k: v for k, v in wire_item.items() if k not in NOT_HASHED}})


def genesis(entity_id: str) -> str:
    return hashlib.sha256(GENESIS_TAG + entity_id.encode("utf-8")).hexdigest()


def link(prev_hash: str, wire_item: dict[str, dict]) -> str:
    """The chain hash of a version whose predecessor's hash is ``prev_hash``."""
    return hashlib.sha256(bytes.fromhex(prev_hash) + encode_version(wire_item)).hexdigest()


def seal(wire_item: dict[str, dict], prev_hash: str) -> dict[str, dict]:
    """``wire_item`` with its chain attributes (a new dict): what the write step stores."""
    sealed = {k: v for k, v in wire_item.items() if k not in (PREV_HASH, CHAIN_HASH)}
    sealed[PREV_HASH] = {"S": prev_hash}
    sealed[CHAIN_HASH] = {"S": link(prev_hash, sealed)}
    return sealed


def _text(wire_item: dict[str, dict], name: str) -> str | None:
    value = wire_item.get(name)
    return value.get("S") if isinstance(value, dict) else None


def _version(wire_item: dict[str, dict]) -> int:
    return int(Decimal(wire_item[model.VERSION]["N"]))


def verify_chain(entity_id: str, history: Iterable[dict[str, dict]], latest: dict[str, dict] | None,
                 anchored: bool = False) -> tuple[list[str], int]:
    """Recompute every link of an entity's history (wire items) and ``v0``: ``(problems, verified)``.

    The first problem names the first version whose content, metadata or order no longer matches (an
    attribute changed, a version deleted, versions swapped, a version inserted, ``v0`` rewritten).
    ``anchored``: the oldest versions may have expired legitimately (a retention window), so the oldest
    one present is trusted to say what preceded it; otherwise the chain must start at version 1 from
    the genesis value.
    """
    ordered = sorted(history, key=_version)
    problems: list[str] = []
    expected_prev = genesis(entity_id)
    previous_version = 0
    for position, item in enumerate(ordered):
        version = _version(item)
        prev, stored = _text(item, PREV_HASH), _text(item, CHAIN_HASH)
        if position == 0 and anchored and version > 1 and prev is not None:
            expected_prev, previous_version = prev, version - 1  # the retention window's anchor
        if stored is None or prev is None:
            problems.append(f"version {version}: has no chain hash (written before the chain, or its chain "
                            "attributes were removed)")
            return problems, position
        if version != previous_version + 1:
            gap = (f"version {previous_version + 1} is" if version - previous_version == 2
                   else f"versions {previous_version + 1}..{version - 1} are")
            problems.append(f"version {version}: follows version {previous_version}; {gap} missing from the chain")
            return problems, position
        if prev != expected_prev:
            problems.append(f"version {version}: does not follow version {previous_version} "
                            "(its prevHash is not that version's hash: a version was removed, swapped or inserted)")
            return problems, position
        if link(prev, item) != stored:
            problems.append(f"version {version}: its content or metadata changed after it was written "
                            "(the recomputed hash differs from the stored one)")
            return problems, position
        expected_prev, previous_version = stored, version
    if latest is not None:
        version = _version(latest)
        prev, stored = _text(latest, PREV_HASH), _text(latest, CHAIN_HASH)
        if stored is None or prev is None or link(prev, latest) != stored:
            problems.append(f"v0 (version {version}): its content or metadata changed after it was written")
        elif ordered and version == previous_version and stored != expected_prev:
            problems.append(f"v0 (version {version}): differs from history item {version}")
        elif ordered and version == previous_version + 1 and prev != expected_prev:
            problems.append(f"v0 (version {version}): does not follow version {previous_version}")
    return problems, len(ordered)


# --- digests ----------------------------------------------------------------------------------------
def head(entity_id: str, wire_item: dict[str, dict]) -> dict[str, Any]:
    """What a digest records of one entity: its head version and that version's chain hash."""
    return {"entityId": entity_id, "version": _version(wire_item), "chainHash": _text(wire_item, CHAIN_HASH)}


def _leaf(entry: dict[str, Any]) -> bytes:
    payload = json.dumps([entry["entityId"], entry["version"], entry["chainHash"]], ensure_ascii=False,
                         separators=(",", ":"))
    return hashlib.sha256(b"\x00" + payload.encode("utf-8")).digest()


def merkle_root(heads: list[dict[str, Any]]) -> str:
    """The root of a Merkle tree over the heads sorted by entity id (leaves and nodes domain-separated,
    as in RFC 6962); the empty tree's root is the hash of nothing."""
    level = [_leaf(h) for h in _by_entity(heads)]
    if not level:
        return hashlib.sha256(b"").hexdigest()
    while len(level) > 1:
        level = _next_level(level)
    return level[0].hex()


def _by_entity(heads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(heads, key=lambda h: h["entityId"].encode("utf-8"))


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _next_level(level: list[bytes]) -> list[bytes]:
    """Pairs joined left to right; an odd last node is carried up unchanged."""
    paired = [_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
    return paired + ([level[-1]] if len(level) % 2 else [])


def merkle_path(heads: list[dict[str, Any]], entity_id: str) -> dict[str, Any] | None:
    """The inclusion proof of ``entity_id``'s head in ``merkle_root(heads)``: its leaf's ``index`` among the
    heads sorted by entity id, the tree's ``size``, and the sibling hashes from the leaf up (``path``, hex);
    None when the entity has no head there."""
    ordered = _by_entity(heads)
    index = next((i for i, h in enumerate(ordered) if h["entityId"] == entity_id), None)
    if index is None:
        return None
    level, position, path = [_leaf(h) for h in ordered], index, []
    while len(level) > 1:
        sibling = position - 1 if position % 2 else position + 1
        if sibling < len(level):
            path.append(level[sibling].hex())
        level, position = _next_level(level), position // 2
    return {"index": index, "size": len(ordered), "path": path}


def root_from_path(head_entry: dict[str, Any], index: int, size: int, path: list[str]) -> str | None:
    """The root that ``head_entry``'s leaf at ``index`` of a tree of ``size`` leaves reaches through the
    sibling hashes ``path`` (as ``merkle_path`` gives them); None when the path does not fit that shape.
    The tree's shape does not bind ``index`` and ``size``: whoever checks a path takes them from the digest."""
    if not 0 <= index < size:
        return None
    node, position, width, siblings = _leaf(head_entry), index, size, iter(path)
    try:
        while width > 1:
            if position % 2:
                node = _node(bytes.fromhex(next(siblings)), node)
            elif position + 1 < width:
                node = _node(node, bytes.fromhex(next(siblings)))
            position, width = position // 2, (width + 1) // 2
    except StopIteration:
        return None
    return None if next(siblings, None) is not None else node.hex()
