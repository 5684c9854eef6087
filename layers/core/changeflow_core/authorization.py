"""Authorization (optional, off by default): which principals may change or read which entities.

Off (the template parameter ``AuthorizationPolicy`` empty, the default): any principal the entry points
authenticate may change and read any entity. That is what IAM on the API and on the bus already decide.
On: the parameter is a JSON list of rules, and a request is allowed only if one rule matches it:

``[{"principals": ["arn:aws:iam::123456789012:user/ops/*", "events:123456789012/changeflow.client"],
    "entities": ["doc#", "invoice#"], "operations": ["put", "patch", "delete", "rollback", "read"]}]``

- ``principals``: patterns over the principal as ``principal.describe`` writes it, each naming its kind:
  ``arn:...`` for the API's IAM signer (an assumed role: the session's ARN, so
  ``arn:aws:sts::123456789012:assumed-role/writer/*``), ``events:<account>/<source>`` for the event bus,
  ``lambda:<id>`` / ``cognito:<sub>`` for an authorizer. An ARN pattern is matched as IAM's ``ArnLike``
  matches (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html#Conditions_ARN):
  "case-sensitive matching of the ARN. Each of the six colon-delimited components of the ARN is checked
  separately and each can include multi-character match wildcards (*) or single-character match wildcards
  (?)"; so ``*`` never crosses a ``:`` but does cross ``/``, and a user's ARN includes its path
  (``arn:aws:iam::123456789012:user/division_abc/subdivision_xyz/Bob``, IAM identifiers): ``user/ops/*`` is
  every user under the path ``/ops/``, at any depth, and ``user/ops-*`` is a user named ``ops-...`` at the
  path ``/`` *and* every user whose path starts ``/ops-`` (``user/ops-team/mallory``). Other kinds are
  matched whole, with the same two wildcards (``[`` is itself, not a set as in ``fnmatch``). A pattern that
  names no kind (``*``), or an ARN pattern of other than six components (``arn:*`` aside: any ARN), is
  refused when the policy is read;
- ``entities``: entity id prefixes (``""`` is every entity);
- ``operations``: the change operations and ``read`` (the read routes).

A denied change: ``POST /changes`` answers 403 and starts nothing; an execution (the event bus's) fails
with the named error ``Forbidden`` in the fetch step, before anything is written. A denied read is a 403.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Callable

from . import model, names, principal as principals
from .errors import ChangeflowError

READ = "read"
OPERATIONS = (*model.OPERATIONS, READ)  # every change the workflow makes (redact and adopt too), and reads
KINDS = ("arn:", "events:", "lambda:", "cognito:")  # how principal.describe begins each kind of principal
ANY_ARN = "arn:*"


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
    for rule in rules:
        for pattern in rule["principals"]:
            matcher(pattern)
    return rules


def _glob(text: str) -> re.Pattern:
    """IAM's wildcards: ``*`` any run of characters, ``?`` one character, every other character itself."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text), re.DOTALL)


@lru_cache(maxsize=1024)
def matcher(pattern: str) -> Callable[[str], bool]:
    """Whether a principal (as ``principal.describe`` writes it) matches ``pattern``; ``ValueError`` for a
    pattern that means nothing precise."""
    if not pattern.startswith(KINDS):
        raise ValueError(f"AuthorizationPolicy principal {pattern!r} names no kind of principal: begin it with "
                         f"{', '.join(KINDS)} (arn:* is any IAM principal)")
    if pattern == ANY_ARN:
        return lambda who: who.startswith("arn:")
    if pattern.startswith("arn:"):
        parts = pattern.split(":", 5)
        if len(parts) != 6:
            raise ValueError(f"AuthorizationPolicy principal {pattern!r} is not an ARN pattern: it has six colon-"
                             "separated components, each matched on its own (arn:partition:service:region:account:"
                             "resource, as IAM's ArnLike), or is arn:*")
        components = [_glob(part) for part in parts]

        def arn_like(who: str) -> bool:
            got = who.split(":", 5)
            return len(got) == 6 and all(c.fullmatch(g) for c, g in zip(components, got))

        return arn_like
    whole = _glob(pattern)
    return lambda who: whole.fullmatch(who) is not None


def allowed(policy: list[dict[str, Any]] | None, principal: dict[str, Any] | None, entity_id: str,
            operation: str) -> bool:
    if policy is None:
        return True
    who = principals.describe(principal)
    return any(operation in rule["operations"]
               and any(matcher(pattern)(who) for pattern in rule["principals"])
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

