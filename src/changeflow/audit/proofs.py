"""A proof of one version against a digest, as QLDB's ``GetRevision`` gave one: self-contained, and checked
with no access to the table (an auditor runs ``changeflow verify-proof`` on a laptop, with the digest they
kept outside the account).

A proof holds:

- ``item``: the version as the chain covers it (every attribute but the key and the expiry, which
  ``chain.NOT_HASHED`` leaves out, so that nothing in the proof is unchecked), with its ``chainHash`` and
  its predecessor's hash as ``prevHash`` (added from the version before where the item stores none, as
  format 2 does outside a retention window: without it, the version's own link could not be recomputed);
- ``links``: every later version up to the entity's head at the digest, the same way (in its own chain
  format): a link is a SHA-256 over the previous hash and the version, with no shortcut, so each carries
  what it hashes (a format-2 version's content only by its hash once redacted);
- ``merkle``: the head's leaf ``index`` among the digest's heads, the tree's ``size`` and the sibling hashes
  from the leaf to the root (``chain.merkle_path``);
- ``digest``: the root and the time of the digest it was made against.

Against a chained digest (``changeflow-digest/2``, issue 35, which lists only the heads that changed since
the digest before it) the proof is ``changeflow-proof/2``: its ``merkle`` also holds ``top``, the 16 sibling
hashes from the entity's bucket to the root (``digesttree``), and its ``digest`` the digest's ``sequence``
and ``hash``. The head it proves is the one its last link reaches: the path from that head must lead to the
digest's root, which commits every head.

Every hash is computed by ``changeflow_core.chain`` (``verify_chain``, ``root_from_path``): a change to the
chain's format there is a change here. What this module adds is strictness: a proof is read only in the
one form ``dumps`` writes (UTF-8 JSON, keys sorted, one indentation), every number in DynamoDB's plain
form, every binary in canonical base64 and every hash in lowercase hex, so that no two texts prove the
same thing and every single-bit change to a proof is refused (``tests/test_proofs.py`` flips each one).
"""

from __future__ import annotations

import base64
import datetime
import binascii
import json
import re
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from changeflow_core import chain, digestformat, digesttree, model

from ..client import Changeflow
from .digests import NotADigest, parse_digest, raw_latest, root_holds

FORMAT = "changeflow-proof/1"
FORMAT2 = "changeflow-proof/2"  # against a changeflow-digest/2 digest
_KEYS = frozenset({"format", "entityId", "version", "item", "links", "merkle", "digest"})
_CHAIN_ATTRIBUTES = frozenset({chain.PREV_HASH, chain.CHAIN_HASH})
LEFT_OUT = chain.NOT_HASHED - _CHAIN_ATTRIBUTES  # the key and the expiry: not part of what a version says
_EXACT = Context(prec=1_000)
_SET_MEMBER = {"SS": "S", "NS": "N", "BS": "B"}
HEX_HASH = re.compile(r"[0-9a-f]{64}")  # a SHA-256 as digests and format 1 write it: lowercase hex
_VERSION_NUMBER = re.compile(r"[1-9][0-9]{0,%d}" % (model.VERSION_DIGITS - 1))


class ProofInvalid(ValueError):
    """A file that is not a changeflow proof in the form ``changeflow proof`` writes (exit status 2)."""


class ProofRejected(Exception):
    """The proof does not prove the version against the digest: ``name`` says why in one word, the message
    in one line (exit status 1)."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name


# --- the proof's one textual form ------------------------------------------------------------------------
def dumps(proof: dict[str, Any]) -> str:
    """The proof's one textual form: what ``changeflow proof`` writes and ``loads`` accepts, byte for byte."""
    return json.dumps(proof, ensure_ascii=False, sort_keys=True, indent=1) + "\n"


def loads(data: bytes | str) -> dict[str, Any]:
    """A proof read from a file: UTF-8 JSON of a proof's shape, in exactly the form ``dumps`` writes."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        proof = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, too deep
        raise ProofInvalid(f"not a changeflow proof (not UTF-8 JSON: {exc})") from None
    check_shape(proof)
    if dumps(proof) != text:
        raise ProofInvalid("not in the one form `changeflow proof` writes (keys sorted, indented by one space, "
                           "a final newline): a proof is checked byte for byte, keep it as written")
    return proof


def plain_number(text: str) -> str:
    """A DynamoDB number in one textual form: no exponent, no leading or trailing zeros (``1.5``, ``-2``,
    ``0``, ``100`` for ``1E+2``), the value the chain hashes unchanged. ValueError for what DynamoDB
    would not hold."""
    try:
        number = Decimal(text)
    except (InvalidOperation, TypeError):
        raise ValueError(f"{text!r} is not a number") from None
    if not number.is_finite():
        raise ValueError(f"{text!r} is not a finite number")
    if number.is_zero():
        return "0"
    if not -130 <= number.adjusted() <= 125:
        raise ValueError(f"{text!r} is outside DynamoDB's number range")
    return format(number.normalize(_EXACT), "f")


def _base64(raw: Any) -> str:
    if isinstance(raw, str):  # the JSON wire format carries binary as base64
        raw = base64.b64decode(raw, validate=True)
    return base64.b64encode(bytes(getattr(raw, "value", raw))).decode("ascii")


def portable(value: dict[str, Any]) -> dict[str, Any]:
    """An attribute value as the client returns it (bytes for binary, numbers as stored) in the proof's
    form: numbers plain, binary base64, set members sorted."""
    (kind, inner), = value.items()
    if kind == "N":
        return {"N": plain_number(inner)}
    if kind == "B":
        return {"B": _base64(inner)}
    if kind in _SET_MEMBER:
        return {kind: sorted({next(iter(portable({_SET_MEMBER[kind]: m}).values())) for m in inner})}
    if kind == "L":
        return {"L": [portable(v) for v in inner]}
    if kind == "M":
        return {"M": {k: portable(v) for k, v in inner.items()}}
    return {kind: inner}


def proof_item(wire_item: dict[str, Any]) -> dict[str, Any]:
    """A stored version as a proof carries it: what the chain covers and the chain attributes."""
    return {name: portable(value) for name, value in wire_item.items() if name not in LEFT_OUT}


# --- the shape ----------------------------------------------------------------------------------------------
def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ProofInvalid(f"{where} is not a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProofInvalid(f"{where} is not valid Unicode (a lone surrogate)") from None
    return value


def _check_value(value: Any, where: str) -> None:
    """One attribute value in the proof's form (``portable``'s), else ProofInvalid naming where."""
    if not isinstance(value, dict) or len(value) != 1:
        raise ProofInvalid(f"{where} is not a DynamoDB attribute value")
    (kind, inner), = value.items()
    if kind == "S":
        _text(inner, where)
    elif kind == "N":
        try:
            plain = plain_number(_text(inner, where))
        except ProofInvalid:
            raise
        except ValueError as exc:
            raise ProofInvalid(f"{where}: {exc}") from None
        if plain != inner:
            raise ProofInvalid(f"{where}: number {inner!r} is not in plain form ({plain!r})")
    elif kind == "B":
        try:
            canonical = _base64(_text(inner, where))
        except (binascii.Error, ValueError):
            canonical = None
        if canonical != inner:
            raise ProofInvalid(f"{where}: binary {inner!r} is not canonical base64")
    elif kind == "BOOL":
        if not isinstance(inner, bool):
            raise ProofInvalid(f"{where}: BOOL {inner!r} is not true or false")
    elif kind == "NULL":
        if inner is not True:
            raise ProofInvalid(f"{where}: NULL {inner!r} is not true")
    elif kind == "L":
        if not isinstance(inner, list):
            raise ProofInvalid(f"{where}: L is not a list")
        for i, element in enumerate(inner):
            _check_value(element, f"{where}[{i}]")
    elif kind == "M":
        if not isinstance(inner, dict):
            raise ProofInvalid(f"{where}: M is not a map")
        for key, element in inner.items():
            _check_value(element, f"{where}.{_text(key, f'a key of {where}')}")
    elif kind in _SET_MEMBER:
        if not isinstance(inner, list) or not inner:
            raise ProofInvalid(f"{where}: {kind} is not a non-empty list")
        for i, member in enumerate(inner):
            _check_value({_SET_MEMBER[kind]: member}, f"{where}[{i}]")
        if inner != sorted(set(inner)):
            raise ProofInvalid(f"{where}: {kind}'s members are not distinct and sorted")
    else:
        raise ProofInvalid(f"{where}: {kind!r} is not a DynamoDB type")


def _check_item(item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise ProofInvalid(f"{where} is not an item")
    for name, value in item.items():
        if _text(name, f"an attribute name in {where}") in LEFT_OUT or not name:
            raise ProofInvalid(f"{where} holds {name!r}, which a proof leaves out (the chain does not cover it)")
        _check_value(value, f"{where}.{name}")
    version = item.get(model.VERSION, {}).get("N")
    if version is None or not _VERSION_NUMBER.fullmatch(version):
        raise ProofInvalid(f"{where} has no version number")
    for name in _CHAIN_ATTRIBUTES & set(item):  # format 1: lowercase hex; format 2: 32 bytes
        (kind, hashed), = item[name].items()
        if not ((kind == "S" and HEX_HASH.fullmatch(hashed)) or (kind == "B" and len(base64.b64decode(hashed)) == 32)):
            raise ProofInvalid(f"{where}.{name} is not a SHA-256 (lowercase hex, or 32 bytes)")


def _is_count(value: Any, low: int) -> bool:
    return type(value) is int and low <= value <= model.MAX_VERSION


def check_shape(proof: Any) -> None:
    """A proof's shape and every value's form (ProofInvalid); what it proves is ``verify_proof``'s."""
    if not isinstance(proof, dict) or proof.get("format") not in (FORMAT, FORMAT2):
        found = proof.get("format") if isinstance(proof, dict) else type(proof).__name__
        raise ProofInvalid(f"not a changeflow proof (format {found!r}, expected {FORMAT!r} or {FORMAT2!r})")
    chained = proof["format"] == FORMAT2
    if set(proof) != _KEYS:
        raise ProofInvalid(f"not a changeflow proof: its fields are {sorted(proof)}, expected {sorted(_KEYS)}")
    if not _text(proof["entityId"], "entityId"):
        raise ProofInvalid("entityId is empty")
    if not _is_count(proof["version"], 1):
        raise ProofInvalid(f"version {proof['version']!r} is not a version number")
    _check_item(proof["item"], "item")
    if not isinstance(proof["links"], list):
        raise ProofInvalid("links is not a list")
    for i, link in enumerate(proof["links"]):
        _check_item(link, f"links[{i}]")
    merkle = proof["merkle"]
    merkle_keys = {"index", "size", "path"} | ({"top"} if chained else set())
    if not isinstance(merkle, dict) or set(merkle) != merkle_keys:
        raise ProofInvalid(f"merkle is not {{{', '.join(sorted(merkle_keys))}}}")
    if not (_is_count(merkle["index"], 0) and _is_count(merkle["size"], 1) and isinstance(merkle["path"], list)
            and all(isinstance(h, str) and HEX_HASH.fullmatch(h) for h in merkle["path"])):
        raise ProofInvalid("merkle's index, size or path is not of its form (path: SHA-256s in lowercase hex)")
    if chained and not (isinstance(merkle["top"], list) and len(merkle["top"]) == digesttree.BUCKET_BITS
                        and all(isinstance(h, str) and HEX_HASH.fullmatch(h) for h in merkle["top"])):
        raise ProofInvalid(f"merkle's top is not {digesttree.BUCKET_BITS} SHA-256s in lowercase hex")
    digest = proof["digest"]
    digest_keys = {"root", "takenAt"} | ({"sequence", "hash"} if chained else set())
    if not isinstance(digest, dict) or set(digest) != digest_keys:
        raise ProofInvalid(f"digest is not {{{', '.join(sorted(digest_keys))}}}")
    if chained and not (_is_count(digest["sequence"], 1) and isinstance(digest["hash"], str)
                        and HEX_HASH.fullmatch(digest["hash"])):
        raise ProofInvalid("digest's sequence or hash is not of its form")
    if not (isinstance(digest["root"], str) and HEX_HASH.fullmatch(digest["root"])):
        raise ProofInvalid("digest.root is not a SHA-256 in lowercase hex")
    if not _text(digest["takenAt"], "digest.takenAt").isprintable():
        raise ProofInvalid(f"digest.takenAt {digest['takenAt']!r} is not one line of text")


# --- making and checking a proof -----------------------------------------------------------------------------
def _head_in(digest: dict[str, Any], entity_id: str, version: int,
             tree: digesttree.HeadTree | None = None) -> dict[str, Any]:
    """The digest's head of ``entity_id``, once the digest holds and the version is not after it (of a
    chained digest: from ``tree``, the heads its chain gives, checked against its root when it was read)."""
    if tree is not None:
        entry = tree.get(entity_id)
    elif not root_holds(digest):
        raise ProofRejected("DigestAltered", "the digest's root does not match its entities: the file was altered")
    else:
        entry = next((h for h in digest["entities"] if h["entityId"] == entity_id), None)
    if entry is None:
        raise ProofRejected("EntityNotInDigest", f"{entity_id!r} is not in the digest taken {digest['takenAt']} "
                            "(it was created after it, or the digest is of another stack)")
    if version > entry["version"]:
        raise ProofRejected("VersionAfterDigest", f"version {version} of {entity_id!r} was written after the digest "
                            f"taken {digest['takenAt']}, which recorded version {entry['version']}: prove it against "
                            "a later digest")
    if entry["chainHash"] is None:
        raise ProofRejected("NoChainAtDigest", f"the digest recorded version {entry['version']} of {entity_id!r} "
                            "with no chain hash (written before the chain): nothing can be proven against it")
    return entry


def _with_prev(item: dict[str, Any], prev_hash: str) -> dict[str, Any]:
    """``item`` carrying its predecessor's hash in its own format (format 2 stores it only under a retention
    window): what lets its own link be recomputed. Not hashed, so the stored hash still holds."""
    if chain.format_of(item) == chain.FORMAT_2:
        return {**item, chain.PREV_HASH: {"B": bytes.fromhex(prev_hash)}}
    return {**item, chain.PREV_HASH: {"S": prev_hash}}


def make_proof(entity_id: str, version: int, items: list[dict[str, Any]], digest: dict[str, Any],
               before: dict[str, Any] | None = None, tree: digesttree.HeadTree | None = None) -> dict[str, Any]:
    """The proof of ``version`` of ``entity_id`` from its stored items (wire format, the version and every
    later one up to the digest's head, oldest first), the version before it (``before``: its hash is the
    first link's predecessor, where that item stores none) and a parsed digest. Not yet checked:
    ``verify_proof``."""
    chained = digest.get("format") == digestformat.FORMAT
    path = tree.path(entity_id) if chained and tree is not None else chain.merkle_path(digest["entities"], entity_id)
    first = items[0] if items else {}
    if items and chain.stored_prev(first) is None:
        prev = chain.genesis(entity_id) if version == 1 else chain.stored_hash(before or {})
        if prev is not None:
            first = _with_prev(first, prev)
    carried = [proof_item(i) for i in [first, *items[1:]]] if items else [{}]
    made_for = {"root": digest["root"], "takenAt": digest["takenAt"]}
    if chained:
        made_for.update(sequence=digest["sequence"], hash=digest["hash"])
    return {"format": FORMAT2 if chained else FORMAT, "entityId": entity_id, "version": version,
            "item": carried[0], "links": carried[1:], "merkle": path, "digest": made_for}


def verify_proof(proof: dict[str, Any], digest: dict[str, Any], entity_id: str | None = None,
                 version: int | None = None) -> dict[str, Any]:
    """Check a proof (``loads``) against a parsed digest (``digests.parse_digest``), with nothing else: no
    table, no client. ``entity_id`` and ``version``: what the auditor asked to see proven. Returns what was
    proven; raises ``ProofRejected`` naming the first thing that does not hold."""
    check_shape(proof)
    claimed, number = proof["entityId"], proof["version"]
    if entity_id is not None and claimed != entity_id:
        raise ProofRejected("OtherEntity", f"the proof is of {claimed!r}, not {entity_id!r}")
    if version is not None and number != version:
        raise ProofRejected("OtherVersion", f"the proof is of version {number} of {claimed!r}, not version {version}")
    chained = digest.get("format") == digestformat.FORMAT
    if chained != (proof["format"] == FORMAT2):
        raise ProofRejected("OtherDigest", f"a {proof['format']} proof is made against a "
                            f"{'changeflow-digest/1' if proof['format'] == FORMAT else digestformat.FORMAT} digest, "
                            f"not a {digest.get('format')} one")
    if chained and digestformat.digest_hash(digest) != digest["hash"]:
        raise ProofRejected("DigestAltered", "the digest's hash is not the hash of its fields: the file was altered")
    entry = _claimed_head(proof) if chained else _head_in(digest, claimed, number)
    made_for = proof["digest"]
    if {k: made_for[k] for k in made_for} != {k: digest[k] for k in made_for}:
        raise ProofRejected("OtherDigest", f"the proof was made against the digest taken {made_for['takenAt']} "
                            f"(root {made_for['root'][:16]}...), not this one, taken {digest['takenAt']} "
                            f"(root {digest['root'][:16]}...)")
    versions = [proof["item"], *proof["links"]]
    numbers = [int(i[model.VERSION]["N"]) for i in versions]
    if numbers[0] != number:
        raise ProofRejected("ChainBroken", f"the proof's item is version {numbers[0]}, not version {number}")
    if numbers != list(range(number, number + len(numbers))):
        raise ProofRejected("ChainBroken", f"the links are not the versions after {number}, in order: {numbers}")
    if numbers[-1] < entry["version"]:
        raise ProofRejected("ChainTruncated", f"the chain stops at version {numbers[-1]}, before the head the "
                            f"digest recorded (version {entry['version']})")
    if numbers[-1] > entry["version"]:
        raise ProofRejected("ChainPastHead", f"the chain goes on to version {numbers[-1]}, past the head the digest "
                            f"recorded (version {entry['version']})")
    if chain.stored_prev(versions[0]) is None:
        raise ProofRejected("ChainBroken", f"version {number} carries no prevHash: its own link cannot be recomputed")
    problems, _ = chain.verify_chain(claimed, versions, None, anchored=True)
    if problems:
        raise ProofRejected("ChainBroken", problems[0])
    if chain.stored_hash(versions[-1]) != entry["chainHash"]:
        raise ProofRejected("HeadMismatch", f"version {entry['version']}'s hash is not the one the digest recorded "
                            f"for {claimed!r}")
    merkle = proof["merkle"]
    if chained:
        _check_tree_path(entry, merkle, digest)
        return _proven(proof, entry, digest)
    position = [h["entityId"] for h in sorted(digest["entities"], key=lambda h: h["entityId"].encode("utf-8"))]
    if (merkle["index"], merkle["size"]) != (position.index(claimed), len(position)):
        raise ProofRejected("MerklePathMismatch", f"the path is for leaf {merkle['index']} of {merkle['size']}; "
                            f"{claimed!r} is leaf {position.index(claimed)} of {len(position)} in the digest")
    if chain.root_from_path(entry, merkle["index"], merkle["size"], merkle["path"]) != digest["root"]:
        raise ProofRejected("MerklePathMismatch", f"the Merkle path does not lead from {claimed!r}'s head to the "
                            "digest's root")
    return _proven(proof, entry, digest)


def _claimed_head(proof: dict[str, Any]) -> dict[str, Any]:
    """The head a proof against a chained digest reaches: its last link (its path must lead from it)."""
    last = [proof["item"], *proof["links"]][-1]
    return {"entityId": proof["entityId"], "version": int(last[model.VERSION]["N"]), "chainHash": chain.stored_hash(last)}


def _check_tree_path(entry: dict[str, Any], merkle: dict[str, Any], digest: dict[str, Any]) -> None:
    bucket_root = chain.root_from_path(entry, merkle["index"], merkle["size"], merkle["path"])
    reached = None if bucket_root is None else digesttree.root_from_top(
        bytes.fromhex(bucket_root), digesttree.bucket_of(entry["entityId"]), merkle["top"])
    if reached != digest["root"]:
        raise ProofRejected("MerklePathMismatch", f"the path from {entry['entityId']!r}'s version {entry['version']} "
                            f"does not lead to the root of digest #{digest['sequence']}: it committed another head "
                            "of the entity (an earlier one: prove it against a later digest), or none")


def _proven(proof: dict[str, Any], entry: dict[str, Any], digest: dict[str, Any]) -> dict[str, Any]:
    item, claimed, number = proof["item"], proof["entityId"], proof["version"]
    return {"entityId": claimed, "recorded": _utc(item.get(model.RECORDED_AT, {}).get("N", "")), "version": number,
            "head": entry["version"], "takenAt": digest["takenAt"],
            "root": digest["root"], "changeId": item.get(model.CHANGE_ID, {}).get("S"),
            "recordedAt": item.get(model.RECORDED_AT, {}).get("N"),
            "effectiveAt": item.get(model.EFFECTIVE_AT, {}).get("N"), "item": item}


def _utc(epoch_ms: str) -> str:
    try:
        return datetime.datetime.fromtimestamp(int(epoch_ms) / 1000, datetime.timezone.utc).isoformat(
            timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return f"at {epoch_ms or 'an unknown time'}"


# --- from the table ------------------------------------------------------------------------------------------
def _stored_versions(client: Changeflow, entity_id: str, first: int, last: int) -> dict[int, dict[str, Any]]:
    """The history items ``first``..``last`` of an entity (one Query, paged), by version."""
    found: dict[int, dict[str, Any]] = {}
    start = None
    while True:
        kwargs: dict[str, Any] = dict(
            TableName=client.history_table,
            KeyConditionExpression="#pk = :pk AND #sk BETWEEN :first AND :last",
            ExpressionAttributeNames={"#pk": model.PK, "#sk": model.SK},
            ExpressionAttributeValues={":pk": {"S": entity_id}, ":first": {"S": model.history_sk(first)},
                                       ":last": {"S": model.history_sk(last)}},
            ConsistentRead=True)
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = client.dynamodb.query(**kwargs)
        found.update({model.version_of_sk(i[model.SK]["S"]): i for i in page.get("Items", [])})
        start = page.get("LastEvaluatedKey")
        if not start:
            return found


def _check_written(client: Changeflow, entity_id: str, version: int) -> None:
    """A version past the digest's head that the entity never reached is not "written after the digest":
    ``NoSuchVersion``, naming the entity's latest version."""
    latest = raw_latest(client, entity_id)
    newest = int(Decimal(latest[model.VERSION]["N"])) if latest is not None else 0
    if version > newest:
        raise ProofRejected("NoSuchVersion", f"{entity_id!r} has no version {version}: its latest is version "
                            f"{newest}" if newest else f"{entity_id!r} has no version {version}: it has no v0")


def parse_any_digest(document: Any) -> dict[str, Any]:
    """A digest a proof is made or checked against, of either format: ``changeflow-digest/2`` (the stack's
    chained digests, ``digestformat.check``) or ``changeflow-digest/1`` (``parse_digest``). Raises
    ``NotADigest`` naming the field."""
    if isinstance(document, dict) and document.get("format") == digestformat.FORMAT:
        try:
            return digestformat.check(document)
        except digestformat.DigestInvalid as exc:
            raise NotADigest(f"not a changeflow-digest/2 digest: {exc}") from None
    return parse_digest(document)


def prove(client: Changeflow, entity_id: str, version: int, digest_document: Any,
          tree: digesttree.HeadTree | None = None) -> dict[str, Any]:
    """The proof of ``version`` of ``entity_id`` against a digest (as read from its file), from the table:
    the version and every later one up to the head the digest recorded. It is checked before it is returned,
    so that a table that no longer matches the digest is refused here (ProofRejected) rather than later.
    A chained digest (format 2) comes with ``tree``: the heads its chain gives (``digestchain.load``)."""
    digest = parse_any_digest(digest_document)
    try:
        head = _head_in(digest, entity_id, version, tree)["version"]
    except ProofRejected as exc:
        if exc.name == "VersionAfterDigest":  # or never written at all: the table says which
            _check_written(client, entity_id, version)
        raise
    stored = _stored_versions(client, entity_id, max(version - 1, 1), head)
    if head not in stored:  # the history put of the newest version may not have happened yet
        latest = raw_latest(client, entity_id)
        if latest is not None and int(Decimal(latest[model.VERSION]["N"])) == head:
            stored[head] = latest
    missing = [v for v in range(version, head + 1) if v not in stored]
    if missing:
        raise ProofRejected("VersionGone", f"version {missing[0]} of {entity_id!r} is not in the table (deleted, "
                            "or expired under the retention window): the chain to the digest cannot be shown")
    chained = [stored[v] for v in range(version, head + 1)]
    covered = {v for i in chained if chain.REDACTION in i for v in chain.redacted_versions(chain.redaction_of(i))}
    emptied = [v for v in range(version, head + 1) if chain.REDACTED in stored[v] and v not in covered
               and stored[v].get(model.OPERATION, {}).get("S") not in model.CHAIN_OPERATIONS]  # born without it
    if emptied:
        raise ProofRejected("RedactedAfterDigest", f"version {emptied[0]} of {entity_id!r} holds no content (redacted "
                            f"after the digest taken {digest['takenAt']}, or removed): the digest does not cover "
                            "its redaction; prove it against a digest taken since")
    if version > 1 and version - 1 not in stored and chain.stored_prev(stored[version]) is None:
        raise ProofRejected("VersionGone", f"version {version - 1} of {entity_id!r} is not in the table and version "
                            f"{version} stores no prevHash: its link cannot be recomputed")
    proof = make_proof(entity_id, version, [stored[v] for v in range(version, head + 1)], digest,
                       before=stored.get(version - 1), tree=tree)
    try:
        verify_proof(proof, digest)
    except ProofRejected as exc:
        raise ProofRejected(exc.name, f"the table no longer matches the digest: {str(exc)[len(exc.name) + 2:]}"
                            ) from None
    except ProofInvalid as exc:  # a stored version of a form the chain never writes (a hash not in hex)
        raise ProofRejected("ChainBroken", f"the table no longer matches the digest: {exc}") from None
    return proof
