"""The item model: key design and attribute names, in one place.

One partition per entity. Sort key ``v0`` holds the latest state; ``v#0000000042`` holds version 42.
History sort keys are zero-padded so that one Query returns the history in version order, newest first
with ``ScanIndexForward=False``, and ``begins_with(sk, "v#")`` never matches ``v0``.
"""

PK = "pk"
SK = "sk"
LATEST_SK = "v0"
HISTORY_PREFIX = "v#"
VERSION_DIGITS = 10
MAX_VERSION = 10**VERSION_DIGITS - 1

# Attributes the model owns; a change's own attributes may not use these names.
VERSION = "version"
EFFECTIVE_AT = "effectiveAt"
CHANGE_ID = "changeId"
CHANGE_IDS = "changeIds"  # {changeId: version} of the last RECENT_CHANGE_IDS changes applied, any effectiveAt
OPERATION = "operation"
ACTOR = "actor"  # who the client says it acts for: its claim
PRINCIPAL = "principal"  # who AWS authenticated for the request (changeflow_core.principal)
REASON = "reason"
EXECUTION = "executionArn"
RECORDED_AT = "recordedAt"
DELETED = "deleted"
EXPIRES_AT = "expiresAt"  # the table's TTL attribute, epoch seconds
SOURCE_VERSION = "sourceVersion"  # rollback: the version whose content was restored
PREV_HASH = "prevHash"  # the hash chain (changeflow_core.chain): the previous version's chain hash
CHAIN_HASH = "chainHash"  # and this version's
PATCH_RECORD = "patch"  # a patch: what it set and removed ({"set": {...}, "remove": [...]}), beside the full content
REDACTED = "chainRedacted"  # a redacted version: the hash of the content it no longer holds (changeflow_core.chain)
REDACTION = "chainRedacts"  # a redact version: {"version", "contentHash", "itemHash"} of the version it redacted
ADOPTION = "chainAdopts"  # an adopt version: {"versions", "chainHash"}: the legacy versions it bound into the chain
REDACT_VERSION = "redactVersion"  # a redact request: the version whose content it removes

# Issue 35 (digests on a schedule): v0 only (never history, never hashed: index plumbing, as expiresAt is)
# carries the keys of the changes index, a sparse KEYS_ONLY GSI from which the digest function finds the
# entities changed since its last digest instead of scanning the table: the entity's shard, and the hour its
# version was recorded in. A write in the hour of the version before it leaves both keys as they were, and
# DynamoDB writes nothing to the index for it; the first write of an hour moves the entry (two index writes).
DIGEST_SHARD = "digestShard"
DIGEST_SHARDS = 16
RECORDED_HOUR = "recordedHour"  # recordedAt // HOUR_MS: hours since the epoch
HOUR_MS = 3_600_000
CHANGES_INDEX = "ChangesIndex"
CHANGES_INDEX_KEYS = frozenset({DIGEST_SHARD, RECORDED_HOUR})

# Issue 32.10: under a retention window, an adoption anchors each version it bound (the hash of the chain
# recomputed over the versions before it, as prevHash anchors a chained version), so the versions kept are
# still recomputed once the oldest expire. Written after the fact, like expiresAt: not hashed (chain.NOT_HASHED).
ADOPTED_PREV = "chainAdoptedPrev"

# How many change ids v0 remembers: a change whose id is among them is a duplicate whatever its effectiveAt.
# Bounded, so v0 and the state stay small; past it, a resend keeps its first receipt as its default
# effectiveAt, so it is stale at worst (docs/identity.md, the resend window).
RECENT_CHANGE_IDS = 16

RESERVED = frozenset(
    {
        PK, SK, VERSION, EFFECTIVE_AT, CHANGE_ID, CHANGE_IDS, OPERATION, ACTOR, PRINCIPAL, REASON,
        EXECUTION, RECORDED_AT, DELETED, EXPIRES_AT, SOURCE_VERSION, PREV_HASH, CHAIN_HASH, PATCH_RECORD,
        REDACTED, REDACTION, ADOPTION,
        DIGEST_SHARD, RECORDED_HOUR,  # issue 35
        ADOPTED_PREV,  # issue 32.10
    }
)

# Field clocks (issue 34, changeflow_core.clocks): each top-level field's effective time, so concurrent patches
# merge by field. Stored as deltas below the version's effectiveAt (ms), omitted where they say nothing; reserved,
# so the chain seals them as metadata.
FIELD_CLOCKS = "fieldClocks"  # {field: effectiveAt - its time} for the fields a patch wrote whose time is not the base
FIELD_CLOCK_BASE = "fieldClockBase"  # effectiveAt - the time of every other field (the last put, rollback or delete)
RESERVED = RESERVED | {FIELD_CLOCKS, FIELD_CLOCK_BASE}

PUT, PATCH, DELETE, ROLLBACK = "put", "patch", "delete", "rollback"
REDACT, ADOPT = "redact", "adopt"  # the chain's own operations: content removed, legacy versions bound
OPERATIONS = (PUT, PATCH, DELETE, ROLLBACK, REDACT, ADOPT)
CHAIN_OPERATIONS = (REDACT, ADOPT)  # they carry the content of the version before them (a redact: none, if it
# redacts that version) and keep a deleted entity deleted

APPLIED, STALE, DUPLICATE, CONFLICT = "applied", "stale", "duplicate", "conflict"


# The table's own record, under a key no entity id can take (validation refuses control characters):
# ``changeflow adopt --all --close`` writes it once every entity is adopted; from then on a version with
# no chain attributes had them removed, and adopt refuses (changeflow_core.chainwork).
TABLE_PK = "\x1fchangeflow"
ADOPTION_CLOSED_SK = "chain-adoption-closed"


def digest_shard(entity_id: str) -> int:
    """The changes index's shard of an entity (``DIGEST_SHARD``): writes spread over ``DIGEST_SHARDS``."""
    import hashlib

    return hashlib.sha256(entity_id.encode("utf-8", "surrogatepass")).digest()[0] % DIGEST_SHARDS


def changes_index_keys(entity_id: str, recorded_at: int) -> dict[str, int]:
    """What ``v0`` carries for the changes index (``CHANGES_INDEX_KEYS``): its shard and its version's hour."""
    return {DIGEST_SHARD: digest_shard(entity_id), RECORDED_HOUR: recorded_at // HOUR_MS}


def history_sk(version: int) -> str:
    """Sort key of version ``version`` (1-based)."""
    return f"{HISTORY_PREFIX}{version:0{VERSION_DIGITS}d}"


def version_of_sk(sk: str) -> int:
    """Inverse of ``history_sk``."""
    return int(sk[len(HISTORY_PREFIX):])


# Time indexes (issue 37, changeflow_core.timeindex): the table that holds history has a local secondary index per
# clock (TimeIndexes=true), keyed by what each history item records of the version before it: that version's time
# on the clock and its number, as one number (``prior_key``; version 1 records 0). Only history items carry them:
# v0 would be written into both indexes again on every change. Derived from the version before, so the chain does
# not hash them (verify checks them against it); reserved, so no change can set them.
PRIOR_EFFECTIVE = "priorEffective"
PRIOR_RECORDED = "priorRecorded"
EFFECTIVE_INDEX = "EffectiveIndex"
RECORDED_INDEX = "RecordedIndex"
RESERVED = RESERVED | {PRIOR_EFFECTIVE, PRIOR_RECORDED}


def prior_key(time_ms: int, version: int) -> int:
    """A time index's key: ``time_ms`` then ``version``, in one number (DynamoDB keeps 38 digits: 25 used)."""
    return int(time_ms) * 10**VERSION_DIGITS + int(version)


def of_prior_key(key) -> tuple[int, int]:
    """Inverse of ``prior_key``: ``(time_ms, version)``."""
    time_ms, version = divmod(int(key), 10**VERSION_DIGITS)
    return time_ms, version
