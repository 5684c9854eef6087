"""Execution names: valid for Step Functions (1-80 characters; no whitespace, brackets, wildcards,
control characters or ``"#%\\^|~`$&,;:/``), derived deterministically from the entity id and change id so
that a retried submission reuses the name (Standard workflows then start no second execution) and the
console's execution list can be searched by entity."""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

MAX_NAME = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-") or "x"


def execution_name(request: Any) -> str:
    """``<entity>--<change>--<hash>``, at most 80 characters. A request without a changeId gets a
    fresh one (a new UUID) so the name is still unique; its changeId then defaults to this name."""
    if not isinstance(request, dict):
        return f"invalid--{uuid.uuid4().hex}"
    entity = request.get("entityId")
    change = request.get("changeId")
    if not isinstance(change, str) or not change:
        change = uuid.uuid4().hex
    digest = hashlib.sha256(json_key(entity, change).encode("utf-8")).hexdigest()[:12]
    head = f"{_safe(str(entity))[:28]}--{_safe(change)[:28]}"
    return f"{head}--{digest}"  # at most 28 + 2 + 28 + 2 + 12 = 72: room for a redelivery suffix


def redelivery_name(name: str, delivery: int) -> str:
    """The name of the ``delivery``-th delivery (2, 3, ...) of the same change: a new execution."""
    return f"{name[:MAX_NAME - 4]}-r{delivery}"[:MAX_NAME]


def json_key(entity: Any, change: str) -> str:
    return f"{entity!r}\x00{change}"
