"""AWS's policy evaluation logic for one account, as the IAM user guide gives it, for the embedded stack's
requests (``iam.enforcement`` decides which requests and gathers their policies): a request is allowed when
no applicable statement denies it and an identity-based or a resource-based policy allows it; a KMS key or a
role's trust policy must allow it itself, or delegate to the account (its root principal), and then the
identity's policy must allow it as well.

- Policy evaluation logic and its flow chart (explicit deny, resource-based and identity-based policies in
  one account): https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html
- Elements: Action/NotAction and Resource/NotResource with ``*`` and ``?`` (actions case-insensitive,
  resources case-sensitive), Principal/NotPrincipal ("AWS": account, root, user, role ARNs; a role's ARN
  names its sessions too; "Service"): https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_principal.html
- Conditions: the string, ARN, Bool and Null operators, ``...IfExists``, and a key missing from the request,
  which fails every operator except the negated ones (``StringNotEquals``, ``ArnNotLike``...), which it
  satisfies: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html
- KMS: "Unless the key policy explicitly allows it, you cannot use IAM policies to allow access to a KMS key":
  https://docs.aws.amazon.com/kms/latest/developerguide/key-policy-overview.html
- A role's trust policy: https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_terms-and-concepts.html

Not modelled (the stack does not use them): permissions boundaries, session policies, SCPs and RCPs,
policy variables, numeric and date operators, multivalued keys (``ForAnyValue``/``ForAllValues``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

ALLOW, DENY = "Allow", "Deny"


@dataclass
class Principal:
    """Who makes the request: an ARN (a user, a role's session, the account), the role ARN of a session,
    or a service principal (``events.amazonaws.com``)."""

    arn: str
    account: str
    role_arn: str | None = None  # a role session's role
    service: str | None = None
    identity_policies: list[dict[str, Any]] = field(default_factory=list)

    @property
    def principal_arn(self) -> str:
        """``aws:PrincipalArn``: the role's ARN for a role session, else the principal's own."""
        return self.role_arn or self.arn


@dataclass
class Decision:
    allowed: bool
    reason: str  # how AWS's message says it: "no identity-based policy allows", "an explicit deny in ..."


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _glob(pattern: str, value: str, case_sensitive: bool) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case_sensitive else re.IGNORECASE | re.DOTALL) is not None


def _actions_match(statement: dict[str, Any], action: str) -> bool:
    if "NotAction" in statement:
        return not any(_glob(p, action, False) for p in _as_list(statement["NotAction"]))
    return any(_glob(p, action, False) for p in _as_list(statement.get("Action", [])))


def _resources_match(statement: dict[str, Any], resource: str) -> bool:
    if "NotResource" in statement:
        return not any(_glob(p, resource, True) for p in _as_list(statement["NotResource"]))
    if "Resource" not in statement:  # a trust policy: the role itself
        return True
    return any(_glob(p, resource, True) for p in _as_list(statement["Resource"]))


def _root(account: str) -> str:
    return f"arn:aws:iam::{account}:root"


def principal_matches(spec: Any, who: Principal) -> str | None:
    """How a statement's ``Principal`` names ``who``: ``"direct"`` (by its ARN, its role, a service, or
    ``*``), ``"account"`` (its account: the statement delegates to the account's own policies), or None."""
    if spec == "*":
        return "direct"
    if not isinstance(spec, dict):
        return None
    if who.service is not None:
        return "direct" if who.service in _as_list(spec.get("Service", [])) else None
    for named in _as_list(spec.get("AWS", [])):
        if named == "*":
            return "direct"
        if named in (who.arn, who.role_arn):
            return "direct"
        if named in (who.account, _root(who.account)):
            return "account"
    return None


# --- conditions ------------------------------------------------------------------------------------------
def _string(op: str, actual: str, expected: str) -> bool:
    if op in ("StringEquals", "StringNotEquals"):
        return actual == expected
    if op in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        return actual.lower() == expected.lower()
    if op in ("StringLike", "StringNotLike"):
        return _glob(expected, actual, True)
    if op in ("ArnEquals", "ArnNotEquals", "ArnLike", "ArnNotLike"):
        return _arn_like(expected, actual)
    raise ValueError(f"condition operator {op} is not modelled by the embedded stack")


def _arn_like(pattern: str, arn: str) -> bool:
    """ARN operators compare the six colon-separated parts each with ``*`` and ``?``."""
    parts, values = pattern.split(":", 5), arn.split(":", 5)
    return len(parts) == len(values) == 6 and all(_glob(p, v, True) for p, v in zip(parts, values))


def _condition_holds(operator: str, key: str, expected: Any, context: dict[str, Any]) -> bool:
    if_exists = operator.endswith("IfExists")
    op = operator[: -len("IfExists")] if if_exists else operator
    present = key in context or key.lower() in {k.lower() for k in context}
    actual = next((v for k, v in context.items() if k.lower() == key.lower()), None)
    if op == "Null":
        return (str(_as_list(expected)[0]).lower() == "true") == (not present)
    negated = "Not" in op
    if not present:
        return if_exists or negated
    if op == "Bool":
        return any(str(actual).lower() == str(e).lower() for e in _as_list(expected))
    matched = any(_string(op, str(a), str(e)) for a in _as_list(actual) for e in _as_list(expected))
    return not matched if negated else matched


def conditions_hold(statement: dict[str, Any], context: dict[str, Any]) -> bool:
    return all(_condition_holds(op, key, expected, context)
               for op, pairs in (statement.get("Condition") or {}).items() for key, expected in pairs.items())


# --- evaluation --------------------------------------------------------------------------------------------
def _statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return _as_list(policy.get("Statement", []))


def identity_effect(policies: list[dict[str, Any]], action: str, resource: str, context: dict[str, Any]) -> str | None:
    """DENY if a statement of the identity's policies denies, else ALLOW if one allows, else None."""
    effects = {s["Effect"] for p in policies for s in _statements(p)
               if _actions_match(s, action) and _resources_match(s, resource) and conditions_hold(s, context)}
    return DENY if DENY in effects else ALLOW if ALLOW in effects else None


def resource_effect(policy: dict[str, Any] | None, who: Principal, action: str, resource: str,
                    context: dict[str, Any]) -> tuple[str | None, str | None]:
    """(DENY|ALLOW|None, how the allowing statement names the principal: "direct"|"account")."""
    if not policy:
        return None, None
    allowed_by = None
    for statement in _statements(policy):
        if "NotPrincipal" in statement:
            named = None if principal_matches(statement["NotPrincipal"], who) else "direct"
        else:
            named = principal_matches(statement.get("Principal"), who)
        if named is None or not _actions_match(statement, action) or not _resources_match(statement, resource):
            continue
        if not conditions_hold(statement, context):
            continue
        if statement["Effect"] == DENY:
            return DENY, named
        allowed_by = "direct" if "direct" in (allowed_by, named) else named
    return (ALLOW, allowed_by) if allowed_by else (None, None)


def evaluate(who: Principal, action: str, resource: str, context: dict[str, Any],
             resource_policy: dict[str, Any] | None = None, authoritative: bool = False) -> Decision:
    """The decision for ``who`` doing ``action`` on ``resource``. ``authoritative``: the resource policy is
    a KMS key policy or a role's trust policy, without whose allow nothing is allowed."""
    identity = identity_effect(who.identity_policies, action, resource, context) if who.service is None else None
    by_resource, named = resource_effect(resource_policy, who, action, resource, context)
    if identity == DENY:
        return Decision(False, "with an explicit deny in an identity-based policy")
    if by_resource == DENY:
        return Decision(False, "with an explicit deny in a resource-based policy")
    if authoritative:
        if by_resource == ALLOW and (named == "direct" or identity == ALLOW):
            return Decision(True, "")
        return Decision(False, "because no resource-based policy allows the " + action + " action")
    if by_resource == ALLOW and named == "direct":
        return Decision(True, "")
    if identity == ALLOW:
        return Decision(True, "")
    return Decision(False, "because no identity-based policy allows the " + action + " action")


def parsed(document: Any) -> dict[str, Any]:
    """A policy document from moto (JSON text, URL-encoded by IAM's API, or already parsed)."""
    if isinstance(document, dict):
        return document
    text = str(document)
    if text.startswith("%7B"):
        from urllib.parse import unquote

        text = unquote(text)
    return json.loads(text)

