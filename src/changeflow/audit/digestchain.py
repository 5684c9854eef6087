"""The chain of digests the stack keeps in its compliance-locked bucket (issue 35), read back and checked as an
auditor checks it, with nothing but the bucket: ``changeflow verify --digests s3://bucket/prefix``.

Every object version under the prefix is read (ListObjectVersions, then GetObject of each version, which also
says its Object Lock mode and date), so that nothing an administrator did in the bucket goes unseen: a
version written over a digest, a delete marker hiding one, an object that is not a digest, a digest that
is not locked. The chain is made of each key's first version (a locked version cannot be deleted or
overwritten; whatever came after it was written by someone else), and checked link by link:

- each digest as the function writes it (``digestformat.check``), its hash its own, of this stack's table
  and state machine, at the key of its sequence;
- one digest per sequence from 1 (``DigestForked``, ``DigestMissing``), each naming the one before by its
  hash (``ChainBroken``), taken later than it (``TakenAtNotIncreasing``), and written when it says it was
  taken (``TakenAtAltered``: S3 records when each version was written, and nobody can change that);
- the heads rebuilt digest by digest: each digest's root must be the root of every head up to it
  (``RootMismatch``), and a head never goes back (``HeadWentBack``, ``HeadRewritten``: the same version
  with another hash) nor disappears (``EntityDropped``);
- the newest digest recent enough for the stack's schedule (``DigestsStopped``).

What the table must still hold for each head committed is ``committed``'s (against the table)."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass, field
from typing import Any

from changeflow_core import digestformat
from changeflow_core.digesttree import HeadTree

S3_URL = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(.*)", re.DOTALL)
RUN_SLACK = datetime.timedelta(minutes=20)  # the function's 15-minute timeout, and clocks
CLOCK_SLACK = datetime.timedelta(minutes=5)
_RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")


class NotALocation(ValueError):
    """An ``s3://`` address that is not one (one line)."""


def parse_location(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix/`` -> ``("bucket", "prefix/")``; a prefix that does not end in ``/`` gets one,
    unless it names a digest (``.../000000000042-<16 hex>.json``, or ``.../000000000042.json``)."""
    match = S3_URL.fullmatch(url)
    if not match:
        raise NotALocation(f"{url!r} is not an s3://bucket/prefix/ address")
    bucket, prefix = match.groups()
    if prefix and not prefix.endswith(("/", ".json")):
        prefix += "/"
    return bucket, prefix


_NAMED = re.compile(r"(\d{%d})(-[0-9a-f]{16})?\.json" % digestformat.KEY_DIGITS)


def split_digest_key(prefix_or_key: str) -> tuple[str, int | None]:
    """``prefix/000000000042-<hash>.json`` (or ``prefix/000000000042.json``: that sequence's digest in the
    chain) -> ``("prefix/", 42)``; a prefix -> ``(prefix, None)``."""
    if prefix_or_key.endswith(".json"):
        prefix, _, name = prefix_or_key.rpartition("/")
        match = _NAMED.fullmatch(name)
        if not match:
            raise NotALocation(f"{prefix_or_key!r} is not a digest's key (<prefix>/<12 digits>-<16 hex>.json)")
        return (prefix + "/" if prefix else ""), int(match.group(1))
    return prefix_or_key, None


@dataclass
class Finding:
    """One thing found, by name (one word), in one line."""

    name: str
    message: str

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


@dataclass
class Stored:
    """One object version under the prefix, as S3 recorded it."""

    key: str
    version_id: str
    modified: datetime.datetime
    lock_mode: str | None = None
    lock_until: datetime.datetime | None = None
    body: bytes | None = None


@dataclass
class Digest:
    sequence: int
    stored: Stored
    document: dict[str, Any]

    @property
    def taken(self) -> datetime.datetime:
        return datetime.datetime.fromisoformat(self.document["takenAt"].replace("Z", "+00:00"))

    def named(self) -> str:
        return f"digest #{self.sequence} (taken {self.document['takenAt']})"


@dataclass
class Commitment:
    """A head one digest committed to, where it changed from the digests before."""

    sequence: int
    taken_at: str
    version: int
    chain_hash: str | None


@dataclass
class Chain:
    """What the bucket holds, checked: the digests of the chain in order, what was found, every head each
    entity was committed to (``commitments``), and the heads after the last digest read (``tree``)."""

    location: str
    digests: list[Digest] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    commitments: dict[str, list[Commitment]] = field(default_factory=dict)
    tree: HeadTree = field(default_factory=HeadTree)
    objects: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def add(self, name: str, message: str) -> None:
        self.findings.append(Finding(name, message))


@dataclass
class Expected:
    """What the stack says its digests must be: its table, history table and state machine, how long its
    bucket locks them (None: a bucket of another account), how often they are taken (None: a cron)."""

    table: str
    history_table: str
    state_machine_arn: str
    retention_days: int | None = None
    period: datetime.timedelta | None = None

    @classmethod
    def of(cls, client) -> "Expected":
        outputs = client.outputs or {}
        days = int(outputs.get("DigestRetentionDays") or 0)  # 0: a bucket of another account, its own retention
        rate = _RATE.fullmatch(str(outputs.get("DigestSchedule", "")))
        period = None
        if rate:
            unit = {"minute": 60, "hour": 3600, "day": 86400}[rate.group(2).rstrip("s")]
            period = datetime.timedelta(seconds=int(rate.group(1)) * unit)
        return cls(client.table, client.history_table, client.state_machine_arn, days or None, period)


def _versions(s3, bucket: str, prefix: str) -> tuple[dict[str, list[dict]], list[dict]]:
    versions: dict[str, list[dict]] = {}
    markers: list[dict] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = s3.list_object_versions(**kwargs)
        for version in page.get("Versions", []):
            versions.setdefault(version["Key"], []).append(version)
        markers.extend(page.get("DeleteMarkers", []))
        if not page.get("IsTruncated"):
            return versions, markers
        kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page.get("NextVersionIdMarker", ""))


def _read(s3, bucket: str, key: str, listed: dict) -> Stored:
    got = s3.get_object(Bucket=bucket, Key=key, VersionId=listed["VersionId"])
    until = got.get("ObjectLockRetainUntilDate")
    return Stored(key, listed["VersionId"], listed["LastModified"], got.get("ObjectLockMode"), until,
                  got["Body"].read())


def load(s3, bucket: str, prefix: str, expected: Expected, upto: int | None = None,
         now: datetime.datetime | None = None) -> Chain:
    """Read and check the chain under ``s3://bucket/prefix`` (up to digest ``upto``, when given)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    chain = Chain(f"s3://{bucket}/{prefix}")
    versions, markers = _versions(s3, bucket, prefix)
    checkpoints = digestformat.checkpoint_prefix(prefix)
    candidates: dict[int, list[Digest]] = {}
    for key in sorted(versions):
        listed = versions[key][::-1]  # S3 lists a key's versions most recent first: oldest first here
        chain.objects += len(listed)
        for later in listed[1:]:
            chain.add("DigestOverwritten", f"{key}: a version written at {_when(later['LastModified'])} over the "
                      f"one written at {_when(listed[0]['LastModified'])} (the first, locked, is the one read)")
        if key.startswith(checkpoints):
            continue  # the function's own rebuilding aid: its root is its digest's, checked where it is used
        named = digestformat.parse_key(prefix, key)
        sequence = named[0] if named else None
        if upto is not None and (sequence is None or sequence > upto):
            continue
        for position, version in enumerate(listed):
            stored = _read(s3, bucket, key, version)
            _check_lock(chain, stored, expected, now)
            document = _document(chain, stored, expected)
            if document is None or position > 0:
                continue  # a later version is reported above; its document is never read as the digest
            if named != (document["sequence"], document["hash"][:16]):
                chain.add("DigestMisplaced", f"{key} holds digest #{document['sequence']} (taken "
                          f"{document['takenAt']}): a digest is only ever written at its own key")
            if upto is None or document["sequence"] <= upto:
                candidates.setdefault(document["sequence"], []).append(Digest(document["sequence"], stored, document))
    for marker in markers:
        chain.add("DigestHidden", f"{marker['Key']}: a delete marker written at {_when(marker['LastModified'])} "
                  "hides it (the locked versions under it are read all the same)")
    _link(chain, candidates, upto)
    _replay(chain)
    if expected.period is not None and chain.digests and upto is None:
        newest = chain.digests[-1]
        if newest.taken + 2 * expected.period + RUN_SLACK < now:
            chain.add("DigestsStopped", f"the newest digest, {newest.named()}, is older than two periods of the "
                      f"schedule ({expected.period}): digests stopped being taken (DigestFailedAlarm), or newer "
                      "ones were written somewhere else")
    return chain


def _when(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_lock(chain: Chain, stored: Stored, expected: Expected, now: datetime.datetime) -> None:
    where = f"{stored.key} (version written at {_when(stored.modified)})"
    if stored.lock_mode != "COMPLIANCE" or stored.lock_until is None:
        chain.add("DigestNotLocked", f"{where} is not locked in compliance mode (mode {stored.lock_mode}): anyone "
                  "with s3:DeleteObjectVersion can delete it")
        return
    least = stored.modified + datetime.timedelta(days=expected.retention_days or 0) - datetime.timedelta(days=1)
    if stored.lock_until <= now or (expected.retention_days and stored.lock_until < least):
        chain.add("DigestNotLocked", f"{where} is locked only until {_when(stored.lock_until)}, not for "
                  f"{expected.retention_days or 'the bucket'}'s days of retention")


def _document(chain: Chain, stored: Stored, expected: Expected) -> dict[str, Any] | None:
    try:
        document = digestformat.check(json.loads((stored.body or b"").decode("utf-8")))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # DigestInvalid is a ValueError
        chain.add("NotADigest", f"{stored.key} is not a changeflow-digest/2 digest ({str(exc).splitlines()[0][:200]})")
        return None
    if digestformat.digest_hash(document) != document["hash"]:
        chain.add("DigestAltered", f"{stored.key}: its hash is not the hash of its fields")
        return None
    names = (document["table"], document["historyTable"], document["stateMachineArn"])
    if names != (expected.table, expected.history_table, expected.state_machine_arn):
        chain.add("OtherStack", f"{stored.key} is a digest of table {document['table']!r} and state machine "
                  f"{document['stateMachineArn']!r}, not of this stack's ({expected.table!r}, "
                  f"{expected.state_machine_arn!r})")
        return None
    taken = datetime.datetime.fromisoformat(document["takenAt"].replace("Z", "+00:00"))
    if not taken - CLOCK_SLACK <= stored.modified <= taken + RUN_SLACK:
        chain.add("TakenAtAltered", f"{stored.key} says it was taken at {document['takenAt']}, but S3 recorded it "
                  f"written at {_when(stored.modified)}: its time was altered, or an old digest was written again")
    return document


def _link(chain: Chain, candidates: dict[int, list[Digest]], upto: int | None) -> None:
    """The chain: the first-written digest of each sequence, 1 to the highest, each naming the one before."""
    if not candidates:
        return
    last = max(candidates) if upto is None else upto
    previous: Digest | None = None
    for sequence in range(1, last + 1):
        found = sorted(candidates.get(sequence, []), key=lambda d: d.stored.modified)
        if not found:
            chain.add("DigestMissing", f"digest #{sequence} is not in the bucket (between "
                      f"{previous.named() if previous else 'the start'} and the next): the chain has a gap")
            previous = None
            continue
        first = found[0]
        for other in found[1:]:
            chain.add("DigestForked", f"{other.stored.key} (written {_when(other.stored.modified)}) is another "
                      f"digest #{sequence} than {first.stored.key} (written {_when(first.stored.modified)}): only "
                      "the first one written is in the chain")
        if previous is not None:
            if first.document["previous"] != previous.document["hash"]:
                chain.add("ChainBroken", f"{first.named()} does not follow {previous.named()}: its previous is not "
                          "that digest's hash")
            if first.taken <= previous.taken:
                chain.add("TakenAtNotIncreasing", f"{first.named()} is not later than {previous.named()}")
        chain.digests.append(first)
        previous = first


def _replay(chain: Chain) -> None:
    """Every head, digest by digest: each root checked, each head moving only forward."""
    tree = HeadTree()
    for digest in chain.digests:
        document = digest.document
        heads = {h["entityId"]: h for h in document["entities"]}
        before = tree
        if document["kind"] == digestformat.FULL:  # every head, read from the table: the tree starts again
            if "restart" in document:
                chain.add("DigestRestarted", f"{digest.named()} was taken from the table again: {document['restart']}")
            dropped = [e for e in before.heads if e not in heads]
            if dropped:
                chain.add("EntityDropped", f"{digest.named()} no longer holds {len(dropped)} entities the digests "
                          f"before it did (first {dropped[0]!r})")
            tree = HeadTree()
        for entity_id, head in heads.items():
            known = before.get(entity_id)
            tree.put(entity_id, head["version"], head["chainHash"])
            if known == head:
                continue
            if known is not None and head["version"] < known["version"]:
                chain.add("HeadWentBack", f"{digest.named()} commits version {head['version']} of {entity_id!r}, "
                          f"before version {known['version']} an earlier digest committed")
            elif known is not None and head["version"] == known["version"]:
                chain.add("HeadRewritten", f"{digest.named()} commits version {head['version']} of {entity_id!r} with "
                          "another hash than an earlier digest did: it does not extend it")
            chain.commitments.setdefault(entity_id, []).append(
                Commitment(digest.sequence, document["takenAt"], head["version"], head["chainHash"]))
        if tree.root() != document["root"] or len(tree) != document["count"]:
            chain.add("RootMismatch", f"{digest.named()}'s root is not the root of the heads the digests up to it "
                      f"give ({len(tree)} entities, it says {document['count']}): it commits to heads it does not "
                      "list")
    chain.tree = tree
