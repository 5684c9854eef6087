"""Taking a chained digest (issue 35): what the digest function does each time its schedule fires.

1. Find the chain's head in the bucket: the digest of the highest sequence (each key's first version: a
   later version of a key is someone writing over it, which ``verify --digests`` reports).
2. Rebuild the tree of every head from the newest checkpoint and the digests after it, checking each
   digest's hash, its link to the one before and its root on the way. If that fails (a digest missing or
   unreadable, a root that does not match), take a full digest from the table instead, saying why
   (``restart``): the chain goes on, and the verifier reports what the function found.
3. Read only the entities changed since the head digest: the changes index (``model.CHANGES_INDEX``, a
   sparse KEYS_ONLY GSI of ``v0`` items by shard and the hour their version was recorded in) names every
   entity recorded from the hour of ``changesUpTo - OVERLAP_MS`` on (one Query per shard), and the function
   reads each one's ``v0`` (BatchGetItem, strongly consistent). The first digest, and a restart, read every
   ``v0`` (a parallel Scan) instead.
4. Update the tree (only the buckets those entities are in), and write the next digest with
   ``If-None-Match: *`` (never over another object), and a checkpoint every ``CHECKPOINT_EVERY`` digests.

The function only reads the table and the bucket and puts new objects: the bucket's default retention
(Object Lock in compliance mode) locks every one of them. It never deletes, never changes a retention,
never touches the bucket's configuration."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from botocore.exceptions import ClientError

from . import chain, digestformat, model
from .digesttree import HeadTree

# How far before the last digest's ``changesUpTo`` the changes are read again: a version's ``recordedAt`` is
# taken before its v0 write (the update step's Lambda timeout, 10 s, bounds the gap), a GSI is eventually
# consistent (updated "usually within a fraction of a second", more under throttling), and clocks differ.
# Reading a change twice is harmless (its head is the same); missing one would leave it to the next digest.
# The index is keyed by the hour, so a digest reads from the start of the hour this falls in.
OVERLAP_MS = 15 * 60 * 1000
SCAN_SEGMENTS = 16
BATCH_KEYS = 100  # BatchGetItem's most keys a request
BATCH_ATTEMPTS = 8  # requests for one batch's unprocessed keys, with a growing pause, before the run fails


class DigestKeyTaken(Exception):
    """Another run wrote this run's digest first (its sequence is in the bucket, or its key): nothing was
    written."""


@dataclass
class Stored:
    """One key under the prefix: its first version (a later one is someone writing over it)."""

    key: str
    version_id: str
    modified: Any
    digest_hash: str  # the first 16 hex digits of the hash the key names


@dataclass
class Listing:
    """Every digest and checkpoint key, by sequence, each sequence's keys in the order they were written."""

    digests: dict[int, list[Stored]] = field(default_factory=dict)
    checkpoints: dict[int, list[Stored]] = field(default_factory=dict)


class Bucket:
    """The digests' bucket and prefix, through an S3 client."""

    def __init__(self, s3, bucket: str, prefix: str):
        self.s3, self.bucket, self.prefix = s3, bucket, prefix
        self.requests: dict[str, int] = {}

    def _count(self, operation: str) -> None:
        self.requests[operation] = self.requests.get(operation, 0) + 1

    def listing(self) -> Listing:
        """Every digest and checkpoint key with its first version (ListObjectVersions, every page)."""
        found = Listing()
        versions: dict[str, list[dict]] = {}
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix}
        while True:
            self._count("ListObjectVersions")
            page = self.s3.list_object_versions(**kwargs)
            for version in page.get("Versions", []):
                versions.setdefault(version["Key"], []).append(version)
            if not page.get("IsTruncated"):
                break
            kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page.get("NextVersionIdMarker", ""))
        checkpoints = digestformat.checkpoint_prefix(self.prefix)
        for key, listed in versions.items():
            first = listed[-1]  # S3 lists a key's versions most recent first
            for prefix, into in ((self.prefix, found.digests), (checkpoints, found.checkpoints)):
                named = digestformat.parse_key(prefix, key)
                if named is not None:
                    into.setdefault(named[0], []).append(Stored(key, first["VersionId"], first["LastModified"],
                                                                named[1]))
        for into in (found.digests, found.checkpoints):
            for keys in into.values():
                keys.sort(key=lambda stored: stored.modified)
        return found

    def read(self, stored: Stored) -> Any:
        self._count("GetObject")
        body = self.s3.get_object(Bucket=self.bucket, Key=stored.key, VersionId=stored.version_id)["Body"].read()
        return json.loads(body.decode("utf-8"))

    def put_new(self, key: str, body: bytes) -> None:
        """Put ``key`` only if no object has it (S3 conditional writes: https://docs.aws.amazon.com/AmazonS3/
        latest/userguide/conditional-writes.html); the bucket's default retention locks it."""
        self._count("PutObject")
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*",
                               ContentType="application/json", ChecksumAlgorithm="SHA256")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise DigestKeyTaken(f"s3://{self.bucket}/{key} exists already") from exc
            raise


class Unrebuildable(Exception):
    """The heads cannot be rebuilt from the digests in the bucket (the message says why, in one line)."""


@dataclass
class Stack:
    table: str
    history_table: str
    state_machine_arn: str

    def names(self) -> tuple[str, str, str]:
        return self.table, self.history_table, self.state_machine_arn


def _usable(bucket: Bucket, stored: Stored, stack: Stack, sequence: int) -> dict[str, Any] | None:
    """The digest at ``stored`` if it is one of this stack's at its own key, as written; else None."""
    try:
        document = digestformat.check(bucket.read(stored))
    except (ValueError, UnicodeDecodeError, RecursionError):  # DigestInvalid is a ValueError
        return None
    if (digestformat.digest_hash(document) != document["hash"] or document["sequence"] != sequence
            or document["hash"][:16] != stored.digest_hash
            or (document["table"], document["historyTable"], document["stateMachineArn"]) != stack.names()):
        return None
    return document


def _first_usable(bucket: Bucket, keys: list[Stored], stack: Stack, sequence: int) -> dict[str, Any] | None:
    """A sequence's digest: the first written of its keys that is one (as the verifier picks it)."""
    for stored in keys:
        document = _usable(bucket, stored, stack, sequence)
        if document is not None:
            return document
    return None


def head_digest(bucket: Bucket, listing: Listing, stack: Stack) -> dict[str, Any] | None:
    """The chain's head: the digest of the highest sequence that holds one of this stack's, as written."""
    for sequence in sorted(listing.digests, reverse=True):
        document = _first_usable(bucket, listing.digests[sequence], stack, sequence)
        if document is not None:
            return document
    return None


def rebuild(bucket: Bucket, listing: Listing, stack: Stack, head: dict[str, Any]) -> HeadTree:
    """The tree after ``head``: back from it by the digests' links to the newest one with a checkpoint whose
    root it confirms (or to a full digest), then forward, each root checked. ``Unrebuildable`` says what fails."""
    chain = [head]
    tree = _checkpoint(bucket, listing, head)
    while tree is None and chain[-1]["sequence"] > 1 and chain[-1]["kind"] != digestformat.FULL:
        sequence = chain[-1]["sequence"] - 1
        previous = next((d for d in (_usable(bucket, s, stack, sequence) for s in listing.digests.get(sequence, []))
                         if d is not None and d["hash"] == chain[-1]["previous"]), None)
        if previous is None:
            raise Unrebuildable(f"digest {sequence}, the one digest {sequence + 1} follows, is not in the bucket as "
                                "written")
        chain.append(previous)
        tree = _checkpoint(bucket, listing, previous)
    if tree is not None:
        chain.pop()  # the checkpoint holds the heads after that digest
    else:
        tree = HeadTree()
    for document in reversed(chain):
        if document["kind"] == digestformat.FULL:
            tree = HeadTree()
        for entry in document["entities"]:
            tree.put(entry["entityId"], entry["version"], entry["chainHash"])
        if tree.root() != document["root"] or len(tree) != document["count"]:
            raise Unrebuildable(f"digest {document['sequence']}'s root is not the root of the heads the digests up "
                                "to it give")
    return tree


def _checkpoint(bucket: Bucket, listing: Listing, digest: dict[str, Any]) -> HeadTree | None:
    """The heads after ``digest`` from its checkpoint, if it has one whose root is the digest's."""
    for stored in listing.checkpoints.get(digest["sequence"], []):
        if stored.digest_hash != digest["hash"][:16]:
            continue
        try:
            checkpoint = digestformat.check_checkpoint(bucket.read(stored))
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        tree = HeadTree(checkpoint["entities"])
        if checkpoint["sequence"] == digest["sequence"] and tree.root() == digest["root"] == checkpoint["root"]:
            return tree
    return None


def _head_of(wire_item: dict[str, dict]) -> dict[str, Any] | None:
    """A ``v0``'s head, or None for one an insider altered past what a digest may hold (a version out of
    range, a hash that is not one): the verifier reads the table itself and reports it."""
    try:
        head = chain.head(wire_item[model.PK]["S"], wire_item)
        digestformat.check_heads([head])
        return head
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return None


def _pages(read: Callable[..., dict], pool: ThreadPoolExecutor, requests: list[dict]) -> tuple[list[dict], int]:
    """Every item that ``read`` (a Query or a Scan) returns for each of ``requests``, every page, the requests
    in parallel; and how many calls that took."""
    def pages(kwargs: dict) -> tuple[list[dict], int]:
        found, calls = [], 0
        while True:
            page = read(**kwargs)
            calls += 1
            found.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return found, calls
            kwargs = {**kwargs, "ExclusiveStartKey": page["LastEvaluatedKey"]}

    results = list(pool.map(pages, requests))
    return [item for found, _ in results for item in found], sum(calls for _, calls in results)


HEAD_ATTRIBUTES = {"ProjectionExpression": "#pk, #version, #chainHash",
                   "ExpressionAttributeNames": {"#pk": model.PK, "#version": model.VERSION,
                                                "#chainHash": model.CHAIN_HASH}}


def changed_since(dynamodb, table: str, since_ms: int, pool: ThreadPoolExecutor) -> tuple[list[dict], dict[str, int]]:
    """The heads of every ``v0`` recorded in the hour of ``since_ms`` or later: the changes index's entries
    from that hour on (keys only: one Query per shard, paged, in parallel), then each entity's ``v0`` as it is
    now (BatchGetItem, strongly consistent, ``BATCH_KEYS`` a request, in parallel). Returns the heads and the
    requests of each kind."""
    entries, queries = _pages(dynamodb.query, pool, [{
        "TableName": table, "IndexName": model.CHANGES_INDEX,
        "KeyConditionExpression": "#shard = :shard AND #hour >= :hour",
        "ExpressionAttributeNames": {"#shard": model.DIGEST_SHARD, "#hour": model.RECORDED_HOUR},
        "ExpressionAttributeValues": {":shard": {"N": str(shard)}, ":hour": {"N": str(since_ms // model.HOUR_MS)}},
    } for shard in range(model.DIGEST_SHARDS)])
    entities = sorted({entry[model.PK]["S"] for entry in entries})  # an entry that moved while paged: once
    batches = list(pool.map(lambda chunk: _latest_heads(dynamodb, table, chunk),
                            [entities[i:i + BATCH_KEYS] for i in range(0, len(entities), BATCH_KEYS)]))
    heads = [head for found, _ in batches for head in found]
    return heads, {"Query": queries, "BatchGetItem": sum(calls for _, calls in batches)}


def _latest_heads(dynamodb, table: str, entities: list[str]) -> tuple[list[dict], int]:
    """The heads of ``entities``' ``v0`` items (one BatchGetItem, and again for the keys DynamoDB leaves
    unprocessed, with a growing pause: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/
    API_BatchGetItem.html); an entity whose ``v0`` is gone (a tombstone expired) has none. The calls made."""
    keys = [{model.PK: {"S": entity}, model.SK: {"S": model.LATEST_SK}} for entity in entities]
    heads: list[dict] = []
    for attempt in range(BATCH_ATTEMPTS):
        if attempt:
            time.sleep(min(2.0, 0.05 * 2 ** attempt))
        answer = dynamodb.batch_get_item(RequestItems={table: {"Keys": keys, "ConsistentRead": True,
                                                               **HEAD_ATTRIBUTES}})
        heads.extend(h for h in map(_head_of, answer.get("Responses", {}).get(table, [])) if h is not None)
        keys = answer.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
        if not keys:
            return heads, attempt + 1
    raise RuntimeError(f"DynamoDB left {len(keys)} v0 items unread after {BATCH_ATTEMPTS} BatchGetItem requests")


def every_latest(dynamodb, table: str, pool: ThreadPoolExecutor) -> tuple[list[dict], int]:
    """The head of every ``v0`` in the table: a parallel Scan (the first digest, and a restart)."""
    items, calls = _pages(dynamodb.scan, pool, [{
        "TableName": table, "Segment": segment, "TotalSegments": SCAN_SEGMENTS,
        "FilterExpression": "#sk = :latest", **HEAD_ATTRIBUTES,
        "ExpressionAttributeNames": {**HEAD_ATTRIBUTES["ExpressionAttributeNames"], "#sk": model.SK},
        "ExpressionAttributeValues": {":latest": {"S": model.LATEST_SK}},
    } for segment in range(SCAN_SEGMENTS)])
    return [h for h in map(_head_of, items) if h is not None], calls


@dataclass
class Taken:
    """What one run did: the digest written, and what it cost in requests."""

    digest: dict[str, Any]
    key: str
    checkpoint: str | None
    requests: dict[str, int]


def take(s3, dynamodb, bucket_name: str, prefix: str, stack: Stack, clock_ms: Callable[[], int]) -> Taken:
    """Take the next digest of the stack and put it in the bucket (see the module's docstring)."""
    bucket = Bucket(s3, bucket_name, prefix)
    requests = bucket.requests
    listing = bucket.listing()
    head = head_digest(bucket, listing, stack)
    restart = None
    tree = HeadTree()
    if head is not None:
        try:
            tree = rebuild(bucket, listing, stack, head)
        except Unrebuildable as exc:
            restart = str(exc)
    with ThreadPoolExecutor(max_workers=SCAN_SEGMENTS) as pool:
        taken_ms = clock_ms()
        if head is None or restart is not None:
            heads, calls = every_latest(dynamodb, stack.table, pool)
            requests["Scan"] = calls
            kind, since, tree = digestformat.FULL, None, HeadTree()
            changed = heads
        else:
            since = max(0, head["changesUpTo"] - OVERLAP_MS) // model.HOUR_MS * model.HOUR_MS  # its hour's start
            heads, calls = changed_since(dynamodb, stack.table, since, pool)
            requests.update(calls)
            kind = digestformat.CHANGES
            changed = [h for h in _newest(heads) if _moves(tree.get(h["entityId"]), h)]
    changed = _newest(changed)
    for entry in changed:
        tree.put(entry["entityId"], entry["version"], entry["chainHash"])
    sequence = 1 if head is None else head["sequence"] + 1
    document = digestformat.make(
        sequence, kind, taken_ms, stack.table, stack.history_table, stack.state_machine_arn,
        None if head is None else head["hash"], since, taken_ms, len(tree), tree.root(), changed,
        restart if head is not None else None)
    taken_by = _taken(bucket, stack, sequence)
    if taken_by:
        raise DigestKeyTaken(f"digest {sequence} is in the bucket already ({taken_by}): another run took it")
    key = digestformat.key_of(prefix, document)
    bucket.put_new(key, digestformat.dumps(document))
    checkpoint = None
    if sequence % digestformat.CHECKPOINT_EVERY == 0:
        checkpoint = digestformat.checkpoint_key_of(prefix, document)
        bucket.put_new(checkpoint, digestformat.dumps(digestformat.make_checkpoint(document, tree.entries())))
    return Taken(document, key, checkpoint, dict(requests))


def _taken(bucket: Bucket, stack: Stack, sequence: int) -> str | None:
    """The key of a digest of ``sequence`` that another run wrote since this one listed the bucket (two runs at
    once: a retry while a slow run still works). Whatever else is at such a key (not a digest of this stack, as
    written) does not stop this run: ``verify --digests`` names it."""
    bucket._count("ListObjectVersions")
    listed = bucket.s3.list_object_versions(Bucket=bucket.bucket, Prefix=digestformat.sequence_prefix(bucket.prefix,
                                                                                                    sequence))
    for version in listed.get("Versions", []):
        named = digestformat.parse_key(bucket.prefix, version["Key"])
        stored = Stored(version["Key"], version["VersionId"], version["LastModified"], named[1] if named else "")
        if named and _usable(bucket, stored, stack, sequence) is not None:
            return version["Key"]
    return None


def _moves(known: dict[str, Any] | None, head: dict[str, Any]) -> bool:
    """Whether a head read again changes what the tree holds: a later version, or the same version with another
    hash (an altered ``v0``: committed, for the verifier to name). An earlier version (an older ``v0`` put
    back by an insider, which the verifier names from the table) is never taken back."""
    if known is None:
        return True
    return head["version"] > known["version"] or (head["version"] == known["version"] and head != known)


def _newest(heads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One head per entity (the highest version read)."""
    by_entity: dict[str, dict[str, Any]] = {}
    for head in heads:
        known = by_entity.get(head["entityId"])
        if known is None or head["version"] > known["version"]:
            by_entity[head["entityId"]] = head
    return list(by_entity.values())


def clock_ms() -> int:
    return int(time.time() * 1000)

