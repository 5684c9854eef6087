"""Authorization (optional, off by default): which principals may change or read which entities.

Off (the template parameter ``AuthorizationPolicy`` empty, the default): any principal the entry points
authenticate may change and read any entity. That is what IAM on the API and on the bus already decide.
On: the parameter is a JSON list of rules, and a request is allowed only if one rule matches it:

``[{"principals": ["arn:aws:iam::*:user/ops-*", "events:123456789012/changeflow.client"],
    "entities": ["doc#", "invoice#"], "operations": ["put", "patch", "delete", "rollback", "read"]}]``

- ``principals``: globs (``fnmatch``, ``*`` and ``?``) over the principal as ``principal.describe`` writes it:
  the ARN for the API (an assumed role: the session's ARN, so ``arn:aws:sts::*:assumed-role/writer/*``),
  ``events:<account>/<source>`` for the event bus, ``lambda:<id>`` / ``cognito:<sub>`` for an authorizer;
- ``entities``: entity id prefixes (``""`` is every entity);
- ``operations``: the change operations and ``read`` (the read routes).

A denied change: ``POST /changes`` answers 403 and starts nothing; an execution (the event bus's) fails
with the named error ``Forbidden`` in the fetch step, before anything is written. A denied read is a 403.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from typing import Any

from . import model, names, principal as principals
from .errors import ChangeflowError

READ = "read"
OPERATIONS = (*model.OPERATIONS, READ)  # every change the workflow makes (redact and adopt too), and reads


class Forbidden(ChangeflowError):
    """The principal may not make this change (or this read) under the stack's authorization policy."""


def parse(text: str) -> list[dict[str, Any]] | None:
    """The policy of the ``AuthorizationPolicy`` parameter: ``None`` when it is empty (authorization off).
    A policy that is not a list of rules with the three lists fails at cold start, never open."""
    if not text.strip():
        return None
    rules = json.loads(text)
    if not isinstance(rules, list) or not all(
            isinstance(r, dict) and all(isinstance(r.get(k), list) and all(isinstance(x, str) for x in r[k])
                                        for k in ("principals", "entities", "operations")) for r in rules):
        raise ValueError("AuthorizationPolicy must be a JSON list of {principals, entities, operations} lists")
    unknown = sorted({op for r in rules for op in r["operations"]} - set(OPERATIONS))
    if unknown:
        raise ValueError(f"AuthorizationPolicy names an unknown operation: {unknown[0]}")
    return rules


def allowed(policy: list[dict[str, Any]] | None, principal: dict[str, Any] | None, entity_id: str,
            operation: str) -> bool:
    if policy is None:
        return True
    who = principals.describe(principal)
    return any(operation in rule["operations"]
               and any(fnmatchcase(who, pattern) for pattern in rule["principals"])
               and any(entity_id.startswith(prefix) for prefix in rule["entities"]) for rule in policy)


def check(policy: list[dict[str, Any]] | None, principal: dict[str, Any] | None, entity_id: Any,
          operation: Any) -> None:
    """``Forbidden`` unless the policy allows it. A request validation refuses (no id, an operation the
    workflow does not make) is validation's to name; anything else is checked, so a new operation is
    denied until a rule names it."""
    if not isinstance(entity_id, str) or (operation not in OPERATIONS and operation not in model.OPERATIONS):
        return
    if not allowed(policy, principal, entity_id, operation):
        raise Forbidden(f"{principals.describe(principal)} may not {operation} entity {names.shown(entity_id)} "
                        "under the stack's AuthorizationPolicy")

