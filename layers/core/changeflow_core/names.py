"""Execution names: one rule for every entry point that names an execution (the API's front function,
the CLI), so the same change gets the same name wherever it is submitted.

A name is a readable prefix plus a digest of the exact ``(entityId, changeId)`` pair:
``<entity>--<change>--<32 hex digits of SHA-256>``, then ``-r<n>`` for the n-th attempt (n >= 2). The
prefix is for people searching the console; the digest makes the name a one-to-one function of the pair
(two pairs share a name only on a 128-bit SHA-256 collision), which no readable prefix cut to 80
characters can be: ``doc#1`` / ``doc/1`` / ``doc 1``, ``ユーザー1`` / ``データー1``, two ids with a long
shared prefix, ``a--b``+``c`` / ``a``+``b--c`` all differ in the digest.

With entity ids hashed (the ``HashEntityIds`` parameter: ``CHANGEFLOW_HASH_ENTITY_IDS=true`` in every
function, read at cold start and passed here), the prefix holds no part of the entity id: ``h--<change>--<digest>``. An execution's name
and ARN go where the table's access control does not reach: the execution log (every record), CloudTrail,
the console's lists. ``entity_ref`` is how the id itself is shown in logs and traces then.

Only ``0-9A-Za-z-_`` is used: Step Functions accepts more in a name, but CloudWatch Logs logging of
executions needs these (Step Functions API reference, StartExecution ``name``: "To enable logging with
CloudWatch Logs, the name should only contain 0-9, A-Z, a-z, - and _"). At most 77 of the 80 characters
(1-80, StartExecution ``name``) are used with attempt numbers up to 999.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import re

MAX_NAME = 80
MAX_ATTEMPT = 999
ENTITY_CHARS, CHANGE_CHARS, DIGEST_CHARS = 20, 16, 32
ALLOWED = re.compile(r"[0-9A-Za-z_-]{1,80}")
_UNSAFE = re.compile(r"[^0-9A-Za-z_]+")


def readable(text: str, limit: int) -> str:
    """``text`` with every run of other characters as one ``-``, cut to ``limit`` ("x" if nothing is left)."""
    return _UNSAFE.sub("-", text).strip("-")[:limit].strip("-") or "x"


def digest(entity_id: str, change_id: str) -> str:
    """SHA-256 of the pair as a JSON array (unambiguous whatever either string holds), 128 bits in hex."""
    key = json.dumps([entity_id, change_id], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def entity_ref(entity_id: str, hashed: bool = False) -> str:
    """The entity id as logs and traces show it: itself, or with ``HashEntityIds`` ``sha256:`` and 128
    bits of its SHA-256 (compute it from a known id to search; a guessable id can be confirmed so)."""
    if not hashed:
        return entity_id
    return "sha256:" + hashlib.sha256(entity_id.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


# How this invocation names an entity in what leaves the table: each handler sets it first, from its
# HashEntityIds (a context variable, not a module setting: on the embedded stack one process runs the
# versions of several releases, whose settings differ).
_HASHED = contextvars.ContextVar("changeflow_entity_ids_hashed", default=False)


def hash_entity_ids(hashed: bool) -> None:
    """Set for the invocation under way (its context) whether ``shown`` hashes entity ids (issue 33.5)."""
    _HASHED.set(hashed)


def shown(entity_id: str) -> str:
    """The entity id as an error message names it: quoted, or with ``HashEntityIds`` its ``entity_ref``. A
    message goes where the table's access control does not reach: the function's log (the runtime's
    ``[ERROR]`` line), X-Ray (Tracer records the exception) and the execution history's ``cause``."""
    return entity_ref(entity_id, True) if _HASHED.get() else repr(entity_id)


def hashing() -> bool:
    """Whether the invocation under way hashes entity ids (``hash_entity_ids``)."""
    return _HASHED.get()


def execution_name(entity_id: str, change_id: str, attempt: int = 1, hashed: bool = False) -> str:
    """The name of the ``attempt``-th execution of change ``change_id`` of entity ``entity_id`` (with
    ``hashed``, the stack's ``HashEntityIds``, no part of the entity id is readable in it)."""
    if not 1 <= attempt <= MAX_ATTEMPT:
        raise ValueError(f"attempt must be between 1 and {MAX_ATTEMPT}, not {attempt}")
    shown = "h" if hashed else readable(entity_id, ENTITY_CHARS)
    name = f"{shown}--{readable(change_id, CHANGE_CHARS)}--{digest(entity_id, change_id)}"
    return name if attempt == 1 else f"{name}-r{attempt}"


def event_execution_name(event_id: str) -> str:
    """The name of the execution an event starts (the event bus rule's function): ``ev--`` and the event's id,
    which EventBridge gives every event and keeps when it delivers one again, so a redelivery finds the
    execution of its first delivery instead of starting another (Standard workflows). No entity id in it."""
    return f"ev--{readable(str(event_id), MAX_NAME - 4 - DIGEST_CHARS - 2)}--" \
           f"{hashlib.sha256(str(event_id).encode('utf-8', 'surrogatepass')).hexdigest()[:DIGEST_CHARS]}"
