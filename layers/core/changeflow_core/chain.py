"""Tamper evidence: every version of an entity carries a link of a hash chain.

Two formats, told apart per item by the type of its ``chainHash`` (so no marker costs a byte):

- **Format 2** (written today; ``chainHash`` a 32-byte Binary):
  ``chainHash(n) = SHA-256("changeflow/chain/v2/link" 0x00 || chainHash(n-1) || canonical(metadata of n) ||
  contentHash(n))``, where ``contentHash = SHA-256("changeflow/chain/v2/content" 0x00 || canonical(content))``.
  The chain commits to a hash of the content, not to the content itself, so a redaction can remove a
  version's content and keep the hash in its place (``chainRedacted``): the link still verifies. The
  previous hash is stored (``prevHash``, Binary) only where a retention window may expire the versions before
  an item: it anchors verification at the oldest version kept (``CHAIN_PREV_HASH``).
- **Format 1** (written before; ``prevHash`` and ``chainHash`` hex strings, 145 bytes an item):
  ``chainHash(n) = SHA-256(chainHash(n-1) || canonical(version n))``, the content inside. Still verified.
  A redacted format-1 item cannot be recomputed: the redaction version records the hash of what remains
  of it (``itemHash``), which verification checks instead.

Version 1 chains from a genesis value bound to the entity id, ``SHA-256("changeflow/chain/v1/genesis" 0x00
entityId)`` (both formats). Versions written before the chain (no chain attributes) are bound once by an
``adopt`` version, which records the hash of a format-2 chain recomputed over them (``chainAdopts``).

What is hashed: every attribute of the version except its key (``pk`` is bound by the genesis value,
``sk`` by the order of the chain), its expiry (``expiresAt`` is set later by TTL tagging), the chain
attributes themselves, and the time indexes' keys (``priorEffective``, ``priorRecorded``: a history item's
record of the version before it, which that version's own hashed times prove; verify compares them). So the content, the operation, effectiveAt, changeId, actor, reason, recordedAt,
executionArn, deleted, version and a rollback's source version are all covered, and so is any attribute
a later version of changeflow adds. In format 2 the content (the change's own attributes and a patch's
record) goes in through its hash; every other attribute is metadata and goes in whole.

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

Public, for proofs (hashes are hex strings everywhere outside the table): ``genesis``, ``stored_hash``,
``stored_prev``, ``format_of``, ``link`` (an item's hash recomputed in its own format), ``content_hash``,
``verify_chain``, ``head``, ``merkle_root``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from decimal import Context, Decimal
from typing import Any, Iterable

from boto3.dynamodb.types import TypeSerializer

from . import model
from . import principal as principals

PREV_HASH = model.PREV_HASH
CHAIN_HASH = model.CHAIN_HASH
REDACTED, REDACTION, ADOPTION = model.REDACTED, model.REDACTION, model.ADOPTION
NOT_HASHED = frozenset({model.PK, model.SK, model.EXPIRES_AT, PREV_HASH, CHAIN_HASH, model.ADOPTED_PREV,
                        model.PRIOR_EFFECTIVE, model.PRIOR_RECORDED}  # issue 37: the time indexes' keys
                       | model.CHANGES_INDEX_KEYS)
# Format 2's metadata: what the model owns, but for a patch's record (content: it holds the values set)
METADATA = model.RESERVED - NOT_HASHED - {model.PATCH_RECORD, REDACTED}
GENESIS_TAG = b"changeflow/chain/v1/genesis\x00"
LINK_TAG = b"changeflow/chain/v2/link\x00"
CONTENT_TAG = b"changeflow/chain/v2/content\x00"
ITEM_TAG = b"changeflow/chain/v2/redacted-item\x00"
FORMAT_LEGACY, FORMAT_1, FORMAT_2 = 0, 1, 2
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
    """Format 1's canonical bytes of what a version says: every attribute but the key, expiry and chain."""
    return encode_value({"M": {k: v for k, v in wire_item.items() if k not in NOT_HASHED}})


def genesis(entity_id: str) -> str:
    return hashlib.sha256(GENESIS_TAG + entity_id.encode("utf-8")).hexdigest()


def _hash_of(value: Any) -> str | None:
    """A stored hash attribute as hex: a string in format 1, 32 bytes in format 2; ``None`` if absent."""
    if not isinstance(value, dict):
        return None
    if "S" in value:
        return value["S"]
    if "B" in value:
        return _bytes(value["B"]).hex()
    return None


def hash_text(value: Any) -> str | None:
    """A chain hash from a deserialized item (``codec.deserialize_item``: bytes, Binary, or the latin-1
    text it makes of bytes; a format-1 hex string) as hex."""
    if value is None:
        return None
    if isinstance(value, str):
        return value if len(value) == 64 else value.encode("latin-1").hex()
    return _bytes(value).hex()


def stored_hash(wire_item: dict[str, dict]) -> str | None:
    """The item's stored ``chainHash`` (hex), whatever its format."""
    return _hash_of(wire_item.get(CHAIN_HASH))


def stored_prev(wire_item: dict[str, dict]) -> str | None:
    """The item's stored ``prevHash`` (hex), if it stores one (format 2 does only under a retention window)."""
    return _hash_of(wire_item.get(PREV_HASH))


def format_of(wire_item: dict[str, dict]) -> int:
    """``FORMAT_2`` (a Binary chainHash), ``FORMAT_1`` (a string one) or ``FORMAT_LEGACY`` (no chain
    attribute at all: written before the chain, or stripped)."""
    for name in (CHAIN_HASH, PREV_HASH):
        value = wire_item.get(name)
        if isinstance(value, dict):
            return FORMAT_2 if "B" in value else FORMAT_1
    return FORMAT_LEGACY


def is_content(name: str) -> bool:
    """Format 2's content: the change's own attributes and a patch's record (which holds values set)."""
    return name not in model.RESERVED or name == model.PATCH_RECORD


def content_names(wire_item: dict[str, dict]) -> list[str]:
    return sorted(k for k in wire_item if is_content(k))


def content_hash(wire_item: dict[str, dict]) -> str:
    """SHA-256 of the content the item holds (hex): what a redaction keeps in its place."""
    content = {k: v for k, v in wire_item.items() if is_content(k)}
    return hashlib.sha256(CONTENT_TAG + encode_value({"M": content})).hexdigest()


def _content_digest(wire_item: dict[str, dict]) -> bytes:
    kept = _hash_of(wire_item.get(REDACTED))
    return bytes.fromhex(kept if kept is not None else content_hash(wire_item))


def link_v1(prev_hash: str, wire_item: dict[str, dict]) -> str:
    """Format 1: the chain hash of a version whose predecessor's hash is ``prev_hash`` (content inside)."""
    return hashlib.sha256(bytes.fromhex(prev_hash) + encode_version(wire_item)).hexdigest()


def link_v2(prev_hash: str, wire_item: dict[str, dict]) -> str:
    """Format 2: the metadata whole, the content by its hash (or the hash a redaction kept)."""
    metadata = {k: v for k, v in wire_item.items() if k in METADATA}
    return hashlib.sha256(LINK_TAG + bytes.fromhex(prev_hash) + encode_value({"M": metadata})
                          + _content_digest(wire_item)).hexdigest()


def link(prev_hash: str, wire_item: dict[str, dict]) -> str:
    """The chain hash of ``wire_item`` recomputed in its own format (format 1 for an item with no chain
    attributes, as before)."""
    return link_v2(prev_hash, wire_item) if format_of(wire_item) == FORMAT_2 else link_v1(prev_hash, wire_item)


def seal(wire_item: dict[str, dict], prev_hash: str, keep_prev: bool = True) -> dict[str, dict]:
    """``wire_item`` with its format-2 chain attributes (a new dict): what the write step stores.
    ``keep_prev``: store the previous hash too (where a retention window may expire the version before)."""
    sealed = {k: v for k, v in wire_item.items() if k not in (PREV_HASH, CHAIN_HASH)}
    if keep_prev:
        sealed[PREV_HASH] = {"B": bytes.fromhex(prev_hash)}
    sealed[CHAIN_HASH] = {"B": bytes.fromhex(link_v2(prev_hash, sealed))}
    return sealed


def seal_v1(wire_item: dict[str, dict], prev_hash: str) -> dict[str, dict]:
    """Format 1's sealing, as changeflow wrote items before format 2 (kept to build and test old items)."""
    sealed = {k: v for k, v in wire_item.items() if k not in (PREV_HASH, CHAIN_HASH)}
    sealed[PREV_HASH] = {"S": prev_hash}
    sealed[CHAIN_HASH] = {"S": link_v1(prev_hash, sealed)}
    return sealed


# --- redaction and adoption -----------------------------------------------------------------------------
def redacted_form(wire_item: dict[str, dict]) -> dict[str, dict]:
    """The item as a redaction leaves it: no content, the content's hash in its place, the rest kept."""
    kept = {k: v for k, v in wire_item.items() if not is_content(k)}
    kept[REDACTED] = {"B": bytes.fromhex(content_hash(wire_item))}
    return kept


def item_hash(wire_item: dict[str, dict]) -> str:
    """SHA-256 of a redacted item's hashed attributes: what its redaction version records of it (a
    redacted format-1 item's link cannot be recomputed without the content; this stands in for it)."""
    return hashlib.sha256(ITEM_TAG + encode_version(wire_item)).hexdigest()


def redaction_record(wire_item: dict[str, dict], copies: Iterable[dict[str, dict]] = ()) -> dict[str, Any]:
    """What a redact version records of the version it redacts (hex; the write step stores bytes), and of
    each later version that holds the same content as a copy of it (``copies``: version -> item hash), which
    the redaction erases too (issue 32.8)."""
    record = {"version": _version(wire_item), "contentHash": content_hash(wire_item),
              "itemHash": item_hash(redacted_form(wire_item))}
    copied = {str(_version(c)): item_hash(redacted_form(c)) for c in copies}
    return {**record, "copies": copied} if copied else record


def redacted_versions(record: dict[str, Any]) -> dict[int, str]:
    """The versions a redaction record erases, each with the hash its redacted item must have: the version
    it names and its copies."""
    return {int(record["version"]): record["itemHash"], **{int(k): v for k, v in (record.get("copies") or {}).items()}}


def redaction_of(wire_item: dict[str, dict] | None) -> dict[str, Any] | None:
    """The redaction record a stored redact version holds (hashes as hex), or ``None``."""
    return _record(wire_item, REDACTION)


def adoption_hash(entity_id: str, legacy: Iterable[dict[str, dict]], start: str | None = None) -> str:
    """The format-2 chain recomputed from the genesis value (or ``start``: an anchor) over versions written
    before the chain: what an adopt version records, binding them once."""
    prev = start or genesis(entity_id)
    for item in sorted(legacy, key=_version):
        prev = link_v2(prev, item)
    return prev


def adoption_anchors(entity_id: str, legacy: Iterable[dict[str, dict]]) -> dict[int, str]:
    """Each adopted version's anchor: the recomputed chain's hash before it (the genesis value before version
    1), which lets the versions after an expired one be recomputed (issue 32.10)."""
    anchors, prev = {}, genesis(entity_id)
    for item in sorted(legacy, key=_version):
        anchors[_version(item)] = prev
        prev = link_v2(prev, item)
    return anchors


def _record(wire_item: dict[str, dict] | None, name: str) -> dict[str, Any] | None:
    value = (wire_item or {}).get(name)
    if not isinstance(value, dict) or "M" not in value:
        return None
    return {k: _record_value(v) for k, v in value["M"].items()}


def _record_value(value: Any) -> Any:
    if isinstance(value, dict) and "N" in value:
        return int(Decimal(value["N"]))
    if isinstance(value, dict) and isinstance(value.get("M"), dict):  # a redaction's copies: version -> hash
        return {k: _hash_of(v) for k, v in value["M"].items()}
    return _hash_of(value)


def _text(wire_item: dict[str, dict], name: str) -> str | None:
    value = wire_item.get(name)
    return value.get("S") if isinstance(value, dict) else None


def _who(wire_item: dict[str, dict]) -> str:
    """Who made a version, as AWS authenticated it (its ``principal``), beside the actor the client claimed."""
    value = wire_item.get(model.PRINCIPAL)
    fields = value.get("M") if isinstance(value, dict) else None
    named = principals.describe({k: v.get("S") for k, v in fields.items() if isinstance(v, dict)}) if fields else None
    claimed = _text(wire_item, model.ACTOR)
    if named is None:
        return f"{claimed} (claimed; no principal recorded)" if claimed else "an unnamed actor"
    return named + (f", actor {claimed} (claimed)" if claimed else "")


def _version(wire_item: dict[str, dict]) -> int:
    return int(Decimal(wire_item[model.VERSION]["N"]))


def _span(first: int, last: int) -> str:
    return f"version {first}" if first == last else f"versions {first}..{last}"


class ChainAudit:
    """What ``audit_chain`` found: problems (the first names the version), how many items it verified, and
    notes (each redaction: "version n redacted at version m by P")."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.verified = 0


def verify_chain(entity_id: str, history: Iterable[dict[str, dict]], latest: dict[str, dict] | None,
                 anchored: bool = False) -> tuple[list[str], int]:
    """``(problems, verified)``: ``audit_chain`` without the notes."""
    audit = audit_chain(entity_id, history, latest, anchored)
    return audit.problems, audit.verified


def audit_chain(entity_id: str, history: Iterable[dict[str, dict]], latest: dict[str, dict] | None,
                anchored: bool = False) -> ChainAudit:
    """Recompute every link of an entity's history (wire items) and ``v0``, in each item's format.

    The first problem names the first version whose content, metadata or order no longer matches (an
    attribute changed, a version deleted, versions swapped, a version inserted, ``v0`` rewritten, chain
    attributes removed, content removed without a redaction version, a redaction that names a version it
    did not redact). Versions written before the chain must be bound by an adopt version.
    ``anchored``: the oldest versions may have expired legitimately (a retention window), so the oldest
    one present is trusted to say what preceded it; otherwise the chain must start at version 1 from
    the genesis value.
    """
    audit = ChainAudit()
    ordered = sorted(history, key=_version)
    legacy_count = 0
    while legacy_count < len(ordered) and format_of(ordered[legacy_count]) == FORMAT_LEGACY:
        legacy_count += 1
    legacy, chained = ordered[:legacy_count], ordered[legacy_count:]
    if legacy and not anchored and _version(legacy[0]) != 1:
        audit.problems.append(f"version {_version(legacy[0])}: follows version 0; "
                              f"{_span(1, _version(legacy[0]) - 1)} missing from the chain")
        return audit
    if not _walk(entity_id, legacy, chained, latest, anchored, audit):
        return audit
    newest = {_version(i): i for i in chained}
    if latest is not None and _version(latest) not in newest and stored_hash(latest) is not None:
        newest[_version(latest)] = latest  # its history put still pending
    records = [newest[v] for v in sorted(newest) if ADOPTION in newest[v] or REDACTION in newest[v]]
    _check_adoption(entity_id, legacy, ordered, records, anchored, audit)
    audit.problems.extend(stripped_operations(legacy))
    _check_redactions(ordered, records, audit)
    return audit


def _walk(entity_id: str, legacy: list, chained: list, latest: dict | None, anchored: bool,
          audit: ChainAudit) -> bool:
    problems = audit.problems
    expected_prev = genesis(entity_id)  # the chain starts at the genesis value, after any legacy versions
    previous_version = _version(legacy[-1]) if legacy else 0
    newest_prev = None
    for position, item in enumerate(chained):
        version = _version(item)
        prev, stored = stored_prev(item), stored_hash(item)
        if position == 0 and not legacy and anchored and version > 1:  # the retention window's anchor
            expected_prev, previous_version = prev, version - 1
        if stored is None:
            problems.append(f"version {version}: has no chain hash (written before the chain, or its chain "
                            "attributes were removed)")
            return False
        if version != previous_version + 1:
            gap = _span(previous_version + 1, version - 1) + (" is" if version - previous_version == 2 else " are")
            problems.append(f"version {version}: follows version {previous_version}; {gap} missing from the chain")
            return False
        if expected_prev is None:  # the oldest kept version stores no prevHash: its own link cannot be recomputed
            audit.notes.append(f"version {version}: the oldest version kept; stores no prevHash, so only the "
                               "versions after it are recomputed")
        elif (prev is not None or format_of(item) == FORMAT_1) and prev != expected_prev:
            problems.append(f"version {version}: does not follow version {previous_version} "
                            "(its prevHash is not that version's hash: a version was removed, swapped or inserted)")
            return False
        elif not _link_holds(expected_prev, item, stored):
            problems.append(f"version {version}: its content or metadata changed after it was written "
                            "(the recomputed hash differs from the stored one)")
            return False
        newest_prev, expected_prev, previous_version = expected_prev, stored, version
        audit.verified += 1
    if latest is not None:
        _check_latest(latest, legacy, chained, expected_prev, newest_prev, previous_version, audit)
    return not problems


def _check_latest(latest: dict, legacy: list, chained: list, expected_prev: str | None, newest_prev: str | None,
                  previous_version: int, audit: ChainAudit) -> None:
    """``v0``: the newest history item again (same hash), or the version after it (its history put pending)."""
    version, stored = _version(latest), stored_hash(latest)
    name = f"v0 (version {version})"
    if stored is None:
        if chained or version > previous_version:
            audit.problems.append(f"{name}: has no chain hash (its chain attributes were removed)")
        return
    if version == previous_version and chained:
        prev = newest_prev
    elif version == previous_version + 1:
        prev = expected_prev
    else:
        prev = stored_prev(latest)
    if prev is not None and not _link_holds(prev, latest, stored):
        audit.problems.append(f"{name}: its content or metadata changed after it was written")
    elif version == previous_version and chained and stored != expected_prev:
        audit.problems.append(f"{name}: differs from history item {version}")
    elif version == previous_version + 1 and stored_prev(latest) not in (None, expected_prev):
        audit.problems.append(f"{name}: does not follow version {previous_version}")


def _link_holds(prev: str, item: dict[str, dict], stored: str) -> bool:
    if format_of(item) == FORMAT_1 and REDACTED in item:
        return True  # a redacted format-1 item: its redaction version's itemHash stands in (_check_redactions)
    return link(prev, item) == stored


def stripped_operations(legacy: list[dict[str, dict]]) -> list[str]:
    """A version of the chain's own operations (adopt, redact) is never written without the chain: one
    among the versions without chain attributes had them removed (issue 32.9: an adoption stripped, so as
    to adopt the entity again)."""
    return [f"version {_version(i)}: an {_text(i, model.OPERATION)} version without chain attributes: its chain "
            "was removed (the chain's own operations are never written without it)"
            for i in legacy if _text(i, model.OPERATION) in model.CHAIN_OPERATIONS]


def _check_adoption(entity_id: str, legacy: list, ordered: list, records: list, anchored: bool,
                    audit: ChainAudit) -> None:
    adopts = [(_version(r), _record(r, ADOPTION)) for r in records if ADOPTION in r]
    if not legacy:
        for m, record in adopts:
            bound = [i for i in ordered if _version(i) <= record["versions"]]
            if bound:
                audit.problems.append(f"version {m}: adopts versions 1..{record['versions']}, but they carry a chain "
                                      "(an adopt version binds only versions written before the chain)")
        return
    first, last = _version(legacy[0]), _version(legacy[-1])
    if not adopts:
        audit.problems.append(f"{_span(first, last)}: no chain hash (written before the chain, or chain attributes "
                              "removed); `changeflow adopt` binds versions written before the chain, once")
        return
    m, record = adopts[0]
    if record["versions"] != last:
        audit.problems.append(f"version {first}: version {m} adopted versions 1..{record['versions']}, but "
                              f"{_span(first, last)} carry no chain hash")
    elif first > 1:
        _check_anchored_adoption(legacy, m, record, audit)
    elif adoption_hash(entity_id, legacy) != record["chainHash"]:
        audit.problems.append(f"version {first}: {_span(first, last)}, adopted at version {m}, changed since "
                              "(their recomputed chain differs from the one the adopt version recorded)")
    else:
        audit.notes.append(f"{_span(first, last)} (written before the chain) adopted at version {m}")


def _check_anchored_adoption(legacy: list, m: int, record: dict, audit: ChainAudit) -> None:
    """Adopted versions whose oldest expired: recomputed from the anchor of the oldest kept (an adoption
    that recorded ``anchors``); one made before anchors existed is only noted."""
    first, last = _version(legacy[0]), _version(legacy[-1])
    anchor = _hash_of(legacy[0].get(model.ADOPTED_PREV))
    if not record.get("anchors"):
        audit.notes.append(f"{_span(first, last)}: adopted at version {m}; the oldest expired, so they are no "
                           "longer recomputed (an adoption made before anchors were recorded)")
    elif anchor is None:
        audit.problems.append(f"version {first}: adopted at version {m}, which anchored every version it bound, "
                              "but it has no anchor (removed), so it cannot be recomputed")
    elif adoption_hash("", legacy, start=anchor) != record["chainHash"]:
        audit.problems.append(f"version {first}: {_span(first, last)}, adopted at version {m}, changed since "
                              "(their chain recomputed from the oldest kept one's anchor differs from the one the "
                              "adopt version recorded)")
    else:
        audit.notes.append(f"{_span(first, last)} (written before the chain) adopted at version {m}; recomputed "
                           f"from version {first}'s anchor (the oldest expired)")


def _check_redactions(ordered: list, records: list, audit: ChainAudit) -> None:
    """Each version a redaction record names (the version and its copies) is redacted as recorded; a version
    without content that no record names is a redact or adopt version born without it (``_born_redacted``),
    or its content was removed without a redaction version."""
    present = {_version(i): i for i in ordered}
    redacts = _redaction_targets(records, audit)
    for k in sorted(set(present) | set(redacts)):
        item = present.get(k)
        if item is None:
            continue  # expired under the retention window (a gap is the walk's problem)
        if k in redacts:
            _check_redacted(item, k, *redacts[k], audit)
        elif REDACTED in item and not _born_redacted(item, present):
            audit.problems.append(f"version {k}: its content was removed without a redaction version")


def _redaction_targets(records: list, audit: ChainAudit) -> dict[int, tuple]:
    """``{version: (redact version item, record, item hash)}`` for every version a redaction erases."""
    redacts: dict[int, tuple] = {}
    for r in records:
        record = _record(r, REDACTION)
        if record is None:
            continue
        m, n = _version(r), record["version"]
        targets = redacted_versions(record)
        if any(k >= m or k < n or k in redacts for k in targets):
            audit.problems.append(f"version {m}: redacts version {n}, which it cannot (not an earlier version, or "
                                  "redacted already)")
            continue
        redacts.update({k: (r, record, expected) for k, expected in targets.items()})
        if m - 1 in targets and content_names(r):
            audit.problems.append(f"version {m}: redacts the version before it, but still holds content")
    return redacts


def _check_redacted(item: dict, k: int, r: dict, record: dict, expected: str, audit: ChainAudit) -> None:
    m, n = _version(r), record["version"]
    if REDACTED not in item:
        audit.problems.append(f"version {k}: holds content that version {m} redacted (the redaction did not "
                              "finish: `changeflow repair` finishes it; or the content was restored)")
    elif content_names(item):
        audit.problems.append(f"version {k}: holds content again after its redaction at version {m}")
    elif (_hash_of(item[REDACTED]), item_hash(item)) != (record["contentHash"], expected):
        audit.problems.append(f"version {k}: is not the version that version {m} redacted (its hashes differ "
                              "from the redaction record)")
    elif k != n:
        audit.notes.append(f"version {k}, a copy of version {n}, redacted with it at version {m}")
    else:
        why = _text(r, model.REASON)
        audit.notes.append(f"version {n} redacted at version {m} by {_who(r)}" + (f": {why}" if why else ""))


def _born_redacted(item: dict, present: dict) -> bool:
    """A redact or adopt version carries the content of the version before it; where that content was
    redacted (by this very redaction, or earlier) it carries its redacted form instead: the same hash."""
    if _text(item, model.OPERATION) not in model.CHAIN_OPERATIONS:
        return False
    kept, own = _hash_of(item[REDACTED]), _record(item, REDACTION)
    if own is not None and _version(item) - 1 in redacted_versions(own):
        return kept == own["contentHash"]
    before = present.get(_version(item) - 1)
    return before is None or _hash_of(before.get(REDACTED)) == kept  # None: expired under a retention window


# --- digests ----------------------------------------------------------------------------------------
def head(entity_id: str, wire_item: dict[str, dict]) -> dict[str, Any]:
    """What a digest records of one entity: its head version and that version's chain hash."""
    return {"entityId": entity_id, "version": _version(wire_item), "chainHash": stored_hash(wire_item)}


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
