"""A chained digest (``changeflow-digest/2``, issue 35): what the stack's digest function writes to the
compliance-locked bucket on a schedule, and what ``changeflow verify --digests`` reads back.

A digest is one JSON object:

==================  ======================================================================================
``format``          ``changeflow-digest/2``
``sequence``        1 for the first digest of a stack, then each one more than the digest it follows
``kind``            ``changes``: ``entities`` holds the heads that changed since the digest before;
                    ``full``: every head (the first digest, and one taken after the function could not
                    rebuild the heads from the digests before it: ``restart`` says why)
``takenAt``         when the function started reading the table (its clock, UTC, milliseconds)
``table``           the table that holds ``v0``; ``historyTable`` the one that holds history
``stateMachineArn`` the state machine whose executions write the versions
``previous``        the ``hash`` of the digest before it (null for sequence 1): digests form a chain
``changesSince``    every ``v0`` recorded (``recordedAt``, epoch ms) from this time on was read: the start of
                    the hour the changes index reads from (null for a full digest)
``changesUpTo``     the function's clock (epoch ms) when it read them
``count``           how many entities the tree holds
``root``            the root of the tree of every head (``digesttree``), after this digest's changes
``restart``         (a full digest that follows others only) why the heads were read from the table again
``hash``            SHA-256 of ``"changeflow/digest/v2" 0x00`` and every field above in canonical JSON
``entities``        the heads (``{entityId, version, chainHash}``), sorted by entity id
==================  ======================================================================================

The hash binds everything a digest claims: a digest whose time, table, state machine, place in the chain or
root was changed no longer has the hash its successor records. The heads are bound through the root:
``root`` is the tree over the heads of every digest before it with this one's changes applied.

Digests are stored at ``<prefix><sequence, 12 digits>-<the hash's first 16 hex digits>.json``: the key says
where the digest is in the chain, and no two digests can ever want one key (a second digest of a sequence, a
fork, is a second key that the verifier reports, never a write refused). Every ``CHECKPOINT_EVERY``-th digest
also writes every head at ``<prefix>heads/<sequence>-<hash>.json`` (``checkpoint``), so that the function
rebuilds the tree from one checkpoint and the digests after it instead of from the first digest. A checkpoint
is checked against its digest's root before it is used."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from . import model, validation

FORMAT = "changeflow-digest/2"
CHECKPOINT_FORMAT = "changeflow-digest-heads/2"
HASH_TAG = b"changeflow/digest/v2\x00"
CHANGES, FULL = "changes", "full"
CHECKPOINT_EVERY = 24  # hourly digests: a checkpoint a day
KEY_DIGITS = 12
HASHED_FIELDS = ("format", "sequence", "kind", "takenAt", "table", "historyTable", "stateMachineArn", "previous",
                 "changesSince", "changesUpTo", "count", "root", "restart")
FIELDS = frozenset(HASHED_FIELDS) | {"hash", "entities"}
REQUIRED = FIELDS - {"restart"}
_HEX64 = re.compile(r"[0-9a-f]{64}")
_TAKEN_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_KEY = re.compile(r"(\d{%d})-([0-9a-f]{16})\.json" % KEY_DIGITS)


class DigestInvalid(ValueError):
    """A digest that is not what the digest function writes: one line naming the field."""


def digest_hash(document: dict[str, Any]) -> str:
    """The hash of a digest's fields (``HASHED_FIELDS``; ``restart`` only when present)."""
    fields = {name: document[name] for name in HASHED_FIELDS if name in document}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(HASH_TAG + text.encode("utf-8", "surrogatepass")).hexdigest()


def taken_at(epoch_ms: int) -> str:
    """``takenAt`` of an epoch-millisecond time: ``2026-11-25T21:00:03.412Z``."""
    import datetime

    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def epoch_ms_of(text: str) -> int:
    """Epoch milliseconds of a ``takenAt``."""
    return validation.epoch_ms(text)


def sequence_prefix(prefix: str, sequence: int) -> str:
    """What every key of a sequence's digests starts with (one, or a fork's several)."""
    return f"{prefix}{sequence:0{KEY_DIGITS}d}-"


def key_of(prefix: str, document: dict[str, Any]) -> str:
    return f"{sequence_prefix(prefix, document['sequence'])}{document['hash'][:16]}.json"


def checkpoint_prefix(prefix: str) -> str:
    return f"{prefix}heads/"


def checkpoint_key_of(prefix: str, document: dict[str, Any]) -> str:
    return key_of(checkpoint_prefix(prefix), document)


def parse_key(prefix: str, key: str) -> tuple[int, str] | None:
    """The sequence and the hash's first 16 digits a digest's key names, or None for another key."""
    match = _KEY.fullmatch(key[len(prefix):]) if key.startswith(prefix) else None
    return (int(match.group(1)), match.group(2)) if match else None


def make(sequence: int, kind: str, taken_ms: int, table: str, history_table: str, state_machine_arn: str,
         previous: str | None, changes_since: int | None, changes_up_to: int, count: int, root: str,
         entities: list[dict[str, Any]], restart: str | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "format": FORMAT, "sequence": sequence, "kind": kind, "takenAt": taken_at(taken_ms), "table": table,
        "historyTable": history_table, "stateMachineArn": state_machine_arn, "previous": previous,
        "changesSince": changes_since, "changesUpTo": changes_up_to, "count": count, "root": root,
    }
    if restart is not None:
        document["restart"] = restart
    document["hash"] = digest_hash(document)
    document["entities"] = sorted(entities, key=lambda h: h["entityId"].encode("utf-8", "surrogatepass"))
    return document


def dumps(document: dict[str, Any]) -> bytes:
    """A digest or checkpoint as stored: UTF-8 JSON, its fields in a fixed order, the heads last."""
    return (json.dumps(document, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")


def shown(value: Any) -> str:
    """A value from a file, quoted short enough for one line (a number read by ``wire.loads`` as it was written)."""
    try:
        text = repr(getattr(value, "text", value))
    except ValueError:  # an int past Python's 4,300-digit conversion limit
        text = f"a number of {value.bit_length()} bits"
    return text if len(text) <= 60 else text[:57] + "..."


def _count(document: dict, name: str, low: int) -> int:
    value = document.get(name)
    if type(value) is not int or value < low:
        raise DigestInvalid(f"{name} is {shown(value)}, not an integer of at least {low}")
    return value


def check_heads(heads: Any, where: str = "entities") -> list[dict[str, Any]]:
    """Heads read from outside, each checked: ``{entityId, version, chainHash}``, an id the workflow accepts,
    a version of the history key's range, a SHA-256 in lowercase hex (or null: written before the chain),
    no entity twice. The one check of a digest's heads, of either format (``audit.digests.check_digest``)."""
    if not isinstance(heads, list):
        raise DigestInvalid(f"{where} is {shown(heads)}, not a list")
    seen: set[str] = set()
    for position, head in enumerate(heads):
        at = f"{where}[{position}]"
        if not isinstance(head, dict) or set(head) != {"entityId", "version", "chainHash"}:
            raise DigestInvalid(f"{at} is {shown(head)}, not {{entityId, version, chainHash}}")
        try:
            entity_id = validation.check_entity_id(head["entityId"])
        except validation.ValidationError as exc:
            raise DigestInvalid(f"{at}.entityId is {shown(head['entityId'])}: {exc}") from None
        version = head["version"]
        if type(version) is not int or not 1 <= version <= model.MAX_VERSION:
            raise DigestInvalid(f"{at}.version is {shown(version)}, not a version number (1 to {model.MAX_VERSION})")
        if head["chainHash"] is not None and not (isinstance(head["chainHash"], str)
                                                  and _HEX64.fullmatch(head["chainHash"])):
            raise DigestInvalid(f"{at}.chainHash is {shown(head['chainHash'])}, not a SHA-256 hash in hex")
        if entity_id in seen:
            raise DigestInvalid(f"{at}.entityId {shown(entity_id)} is in the digest twice")
        seen.add(entity_id)
    return heads


def check(document: Any) -> dict[str, Any]:
    """A digest read from outside, every field checked (``DigestInvalid`` names the first that is not as the
    function writes it). Whether its hash, root and place in the chain hold is the verifier's finding."""
    if not isinstance(document, dict):
        raise DigestInvalid("not a JSON object")
    if document.get("format") != FORMAT:
        raise DigestInvalid(f"format is {shown(document.get('format'))}, not {FORMAT!r}")
    missing, extra = REQUIRED - set(document), set(document) - FIELDS
    if missing or extra:
        raise DigestInvalid(f"fields {sorted(missing)} missing" if missing else f"fields {sorted(extra)} unknown")
    _count(document, "sequence", 1)
    if document["kind"] not in (CHANGES, FULL):
        raise DigestInvalid(f"kind is {shown(document['kind'])}, not {CHANGES!r} or {FULL!r}")
    if not (isinstance(document["takenAt"], str) and _TAKEN_AT.fullmatch(document["takenAt"])):
        raise DigestInvalid(f"takenAt is {shown(document['takenAt'])}, not a time such as 2026-11-25T21:00:03.412Z")
    for name in ("table", "historyTable", "stateMachineArn"):
        if not (isinstance(document[name], str) and document[name] and document[name].isprintable()):
            raise DigestInvalid(f"{name} is {shown(document[name])}, not a name")
    for name in ("previous", "root", "hash"):
        value = document[name]
        if not (isinstance(value, str) and _HEX64.fullmatch(value)) and not (name == "previous" and value is None):
            raise DigestInvalid(f"{name} is {shown(value)}, not a SHA-256 in lowercase hex")
    if (document["previous"] is None) != (document["sequence"] == 1):
        raise DigestInvalid(f"previous is {shown(document['previous'])} at sequence {document['sequence']} "
                            "(null at sequence 1 only)")
    if document["changesSince"] is not None:
        _count(document, "changesSince", 0)
    _count(document, "changesUpTo", 0)
    _count(document, "count", 0)
    if "restart" in document and not (isinstance(document["restart"], str) and document["restart"].isprintable()):
        raise DigestInvalid(f"restart is {shown(document['restart'])}, not one line of text")
    check_heads(document["entities"])
    return document


def make_checkpoint(digest: dict[str, Any], heads: list[dict[str, Any]]) -> dict[str, Any]:
    """Every head after ``digest``: what the function rebuilds its tree from (checked against the root)."""
    return {"format": CHECKPOINT_FORMAT, "sequence": digest["sequence"], "root": digest["root"],
            "entities": heads}


def check_checkpoint(document: Any) -> dict[str, Any]:
    if not isinstance(document, dict) or document.get("format") != CHECKPOINT_FORMAT:
        raise DigestInvalid(f"not a checkpoint of heads (format {CHECKPOINT_FORMAT!r})")
    if set(document) != {"format", "sequence", "root", "entities"}:
        raise DigestInvalid(f"a checkpoint's fields are {sorted(document)}")
    _count(document, "sequence", 1)
    if not (isinstance(document["root"], str) and _HEX64.fullmatch(document["root"])):
        raise DigestInvalid("root is not a SHA-256 in lowercase hex")
    check_heads(document["entities"])
    return document
