"""Execution names for the CLI, by the one rule every entry point uses (``changeflow_core.names``, which
the API's front function uses too): the same change gets the same name through the CLI and the API."""

from __future__ import annotations

import json
import uuid
from typing import Any

from changeflow_core.names import MAX_NAME, execution_name as name_of  # noqa: F401 - re-exported

__all__ = ["MAX_NAME", "execution_name", "redelivery_name", "name_of"]


def execution_name(request: Any, hashed: bool = False) -> str:
    """The first attempt's name of ``request``'s change. A request without a string changeId gets a fresh
    one (a new UUID) so that the name is still unique; its changeId then defaults to this name. With
    ``hashed`` (the stack's ``HashEntityIds`` output), no part of the entity id is readable in it."""
    if not isinstance(request, dict):
        return f"invalid--{uuid.uuid4().hex}"
    entity, change = request.get("entityId"), request.get("changeId")
    if not isinstance(change, str) or not change:
        change = uuid.uuid4().hex
    if not isinstance(entity, str):  # validation refuses it by name; the name only has to be unique
        entity = json.dumps(entity, sort_keys=True, default=str)
    return name_of(entity, change, hashed=hashed)


def redelivery_name(name: str, delivery: int) -> str:
    """The name of the ``delivery``-th delivery (2, 3, ...) of the change first named ``name``: the same
    ``-r<n>`` suffix the API uses for the n-th attempt."""
    return f"{name}-r{delivery}"
