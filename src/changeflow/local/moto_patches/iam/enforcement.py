"""IAM on the embedded stack (issue 33 item 2): a request to moto signed with credentials that moto's IAM or STS
issued (an IAM user's access key, a role session's) is authorized as AWS authorizes it, by
``iam.evaluation``: the identity's policies, the resource's policy (a KMS key's, a secret's, a queue's, an
event bus's, a role's trust policy, an in-process function's) and their conditions, with the context keys
the request carries. moto 5.2.5 authorizes nothing by default (``INITIAL_NO_AUTH_ACTION_COUNT`` is
infinite), and when it does, it reads identity policies only, matches every request against ``Resource
"*"`` and evaluates no resource policy (``moto/iam/access_control.py``, its own TODO list).

Credentials moto did not issue (the ``testing`` keys of the tests and of a bare ``changeflow``) are the
account's administrator, as a user whose policy allows everything: resource policies still apply to them
(an explicit deny; a KMS key that does not delegate to the account), as they apply to an administrator on AWS.

What a request asks for is read from its parameters with botocore's names (``TableName``, ``stateMachineArn``,
``KeyId``, ``SecretId``, ``RoleArn``...) and the resource ARN formats of the Service Authorization Reference
(https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html);
an action without a resource here is matched against ``"*"``. Some requests need more than one permission,
as on AWS: a target's role (``iam:PassRole``, https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_use_passrole.html),
a secret under a customer managed key (``kms:Decrypt`` or ``kms:GenerateDataKey`` through Secrets Manager,
https://docs.aws.amazon.com/secretsmanager/latest/userguide/security-encryption.html).
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

from ..originals import ORIGINALS
from .evaluation import Principal, evaluate, parsed

ADMIN_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
QUERY_SERVICES = {"sts", "iam", "cloudformation"}  # their errors are XML, code AccessDenied
IAM_PREFIX = {"monitoring": "cloudwatch"}  # signing name -> the action prefix IAM uses

# extra context keys some credentials carry: Lambda puts the function's ARN into the context of its execution
# role's credentials (lambda:SourceFunctionArn, https://docs.aws.amazon.com/lambda/latest/dg/permissions-source-function-arn.html)
_CREDENTIAL_CONTEXT: dict[str, dict[str, str]] = {}
# resource-based policies of the functions the embedded stack runs in-process (moto's Lambda does not hold them)
_FUNCTION_POLICIES: dict[str, dict[str, Any]] = {}
_SERVICE = threading.local()


class Denied(Exception):
    """The request is refused: AWS's message (``User: ... is not authorized to perform: ...``)."""


@dataclass
class Check:
    """One permission a request needs."""

    action: str
    resource: str = "*"
    policy: dict[str, Any] | None = None  # the resource's policy
    authoritative: bool = False  # a KMS key policy, a trust policy
    context: dict[str, Any] = field(default_factory=dict)
    entry: int | None = None  # a PutEvents entry's index: refused alone, the call goes on (``refused_entries``)


# --- what the stack tells this module ----------------------------------------------------------------------
def credential_context(access_key_id: str, **keys: str) -> None:
    """Context keys every request signed with ``access_key_id`` carries (a function's session)."""
    _CREDENTIAL_CONTEXT[access_key_id] = dict(keys)


def set_function_policy(function_arn: str, statements: list[dict[str, Any]]) -> None:
    """An in-process function's resource-based policy (its AddPermission statements), replaced whole."""
    _FUNCTION_POLICIES[function_arn] = {"Version": "2012-10-17", "Statement": list(statements)}


def forget() -> None:
    """A new mock: the credentials and functions of the last one are gone."""
    _CREDENTIAL_CONTEXT.clear()
    _FUNCTION_POLICIES.clear()


@contextlib.contextmanager
def acting_as(service: str, source_arn: str, source_account: str) -> Iterator[None]:
    """Requests made in this block are a service's on behalf of a resource (``events.amazonaws.com`` for a
    rule: ``aws:SourceArn``, ``aws:SourceAccount``, https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html)."""
    previous = getattr(_SERVICE, "acting", None)
    _SERVICE.acting = (service, source_arn, source_account)
    try:
        yield
    finally:
        _SERVICE.acting = previous


def service_acting() -> tuple[str, str, str] | None:
    return getattr(_SERVICE, "acting", None)


# --- who signed ---------------------------------------------------------------------------------------------
def identify(account: str, access_key_id: str | None, session_token: str | None = None) -> Principal:
    """The principal whose credentials these are: an IAM user, a role session, else the administrator."""
    from moto.iam.models import iam_backends
    from moto.sts.models import sts_backends

    iam = iam_backends[account]["aws"]
    for user in iam.users.values():
        for key in user.access_keys:
            if key.access_key_id == access_key_id and key.status == "Active":
                policies = [parsed(p.get("policy_document") if isinstance(p, dict) else _document(p))
                            for p in _user_policies(iam, user.name)]
                return Principal(user.arn, account, identity_policies=policies)
    for session in sts_backends[account]["aws"].assumed_roles:
        if session.access_key_id == access_key_id and session_token in (None, session.session_token):
            role_name = session.role_arn.split("/")[-1]
            arn = f"arn:aws:sts::{account}:assumed-role/{role_name}/{session.session_name}"
            try:
                role = iam.get_role(role_name)
            except Exception:  # noqa: BLE001 - a session of a role since deleted has no permissions
                return Principal(arn, account, role_arn=session.role_arn)
            policies = [parsed(doc) for doc in role.policies.values()]
            policies += [parsed(_document(p)) for p in role.managed_policies.values()]
            return Principal(arn, account, role_arn=session.role_arn, identity_policies=policies)
    return Principal(f"arn:aws:iam::{account}:user/moto", account, identity_policies=[ADMIN_POLICY])


def _user_policies(iam, name: str) -> list:
    user = iam.get_user(name)
    found = [{"policy_document": doc} for doc in user.policies.values()] + list(user.managed_policies.values())
    for group in iam.get_groups_for_user(name):
        found += [{"policy_document": doc} for doc in group.policies.values()] + list(group.managed_policies.values())
    return found


def _document(policy) -> Any:
    version = next((v for v in getattr(policy, "versions", []) if v.is_default), None)
    return version.document if version is not None else policy.document


# --- authorizing ---------------------------------------------------------------------------------------------
def authorize(who: Principal, checks: list[Check], access_key_id: str | None = None) -> dict[int, tuple[str, str]]:
    """``Denied`` unless every check is allowed for ``who``; the entries of a PutEvents a resource policy's
    deny refuses (index: error code, message), each failing alone as on AWS (``PutEventsResultEntry``:
    ``NotAuthorizedForSourceException``, ``NotAuthorizedForDetailTypeException``, ``AccessDeniedException``,
    https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsResultEntry.html). A caller no
    policy lets call PutEvents at all is refused the call."""
    base = {"aws:PrincipalArn": who.principal_arn, "aws:PrincipalAccount": who.account,
            "kms:CallerAccount": who.account, **_CREDENTIAL_CONTEXT.get(access_key_id or "", {})}
    acting = service_acting() if who.service else None
    if acting is not None:
        base.update({"aws:SourceArn": acting[1], "aws:SourceAccount": acting[2]})
    refused: dict[int, tuple[str, str]] = {}
    for check in checks:
        context = {**base, **check.context}
        decision = evaluate(who, check.action, check.resource, context, check.policy, check.authoritative)
        if decision.allowed:
            continue
        on = f" on resource: {check.resource}" if check.resource != "*" else ""
        message = f"User: {who.arn} is not authorized to perform: {check.action}{on} {decision.reason}"
        if check.entry is None or "explicit deny" not in decision.reason:
            raise Denied(message)
        refused[check.entry] = (_refused_for(who, check, context), message)
    return refused


def _refused_for(who: Principal, check: Check, context: dict[str, Any]) -> str:
    """The error code of a refused PutEvents entry: the condition key whose statements refuse it."""
    for key, code in (("events:source", "NotAuthorizedForSourceException"),
                      ("events:detail-type", "NotAuthorizedForDetailTypeException")):
        def keyed(document: dict[str, Any] | None) -> dict[str, Any] | None:
            if not document:
                return document
            statements = document.get("Statement")
            statements = statements if isinstance(statements, list) else [statements]
            return {**document, "Statement": [s for s in statements if key not in json.dumps(s.get("Condition", {}))]}

        without = replace(who, identity_policies=[keyed(p) for p in who.identity_policies])
        if evaluate(without, check.action, check.resource, context, keyed(check.policy), check.authoritative).allowed:
            return code
    return "AccessDeniedException"


def service_principal(service: str, account: str) -> Principal:
    return Principal(f"{service}", account, service=service)


def function_policy(function_arn: str) -> dict[str, Any] | None:
    """The resource-based policy of an in-process function (its unqualified ARN)."""
    return _FUNCTION_POLICIES.get(function_arn)


def is_in_process(function_arn: str) -> bool:
    """Whether the embedded stack runs this function (a policy, perhaps with no statement, is registered)."""
    return function_arn in _FUNCTION_POLICIES


def assume_role_as_service(service: str, account: str, role_arn: str) -> None:
    """``Denied`` unless ``role_arn``'s trust policy lets ``service`` assume it for the resource acting
    (``acting_as``): EventBridge assumes a target's role so, with the rule's ARN as ``aws:SourceArn``."""
    from moto.iam.models import iam_backends

    try:
        role = iam_backends[account]["aws"].get_role_by_arn(role_arn)
    except Exception as exc:  # noqa: BLE001 - no such role: nobody can assume it
        raise Denied(f"{service} cannot assume {role_arn}: no such role") from exc
    authorize(service_principal(service, account),
              [Check("sts:AssumeRole", role_arn, parsed(role.assume_role_policy_document), True)])


# --- the patch ---------------------------------------------------------------------------------------------------
def patch_request_authorization(checks_of: Callable[[Any, str, str, dict, str], list[Check]],
                                s3_checks: Callable[..., list[Check]]) -> None:
    """Every request moto answers is authorized by its signer (``ActionAuthenticatorMixin``, which every
    service's responses inherit) against the ``Check`` list ``checks_of(response, service, action, params,
    account)`` gives for it; S3's requests, which moto authorizes on a path of their own, against
    ``s3_checks(action, bucket, key, query)``."""
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.core.exceptions import AccessDeniedError, JsonRESTError

    ORIGINALS.setdefault("authorize_action", ActionAuthenticatorMixin._authenticate_and_authorize_normal_action)
    ORIGINALS.setdefault("authorize_s3_action", ActionAuthenticatorMixin._authenticate_and_authorize_s3_action)

    class AccessDeniedException(JsonRESTError):
        code = 403

    def authorized(self, checks_for: Callable[[str, str, str], list[Check]]) -> None:
        header = self.headers.get("Authorization") or ""
        if "Credential=" not in header:
            return  # unsigned (presigned or internal): moto's own business
        scope = header.split("Credential=", 1)[1].split(",", 1)[0].split("/")
        key, service = scope[0], IAM_PREFIX.get(scope[3], scope[3])
        account = self.current_account
        acting = service_acting()  # a service acting for one of its resources (a rule's target)
        who = service_principal(acting[0], account) if acting else \
            identify(account, key, self.headers.get("X-Amz-Security-Token"))
        action = self._get_action() if service != "s3" else self.data.get("Action", "?")  # S3's: moto's name
        action = action[0] if isinstance(action, list) else action
        try:
            checks = checks_for(service, action, account)
            self.refused_entries = authorize(who, checks, key)
        except Denied as denied:
            if service in QUERY_SERVICES:
                raise AccessDeniedError(user_arn=who.arn, action=f"{service}:{action}") from None
            if service == "s3":  # S3's error: code AccessDenied, status 403, an XML body
                from moto.s3.exceptions import S3ClientError

                raise S3ClientError("AccessDenied", str(denied)) from None
            raise AccessDeniedException("AccessDenied" if service == "sqs" else "AccessDeniedException",
                                        str(denied)) from None

    def authorize_request(self, resource: str = "*") -> None:
        authorized(self, lambda service, action, account: checks_of(self, service, action, _params(self), account))

    def authorize_s3_request(self, bucket_name: str | None = None, key_name: str | None = None) -> None:
        """S3's requests take this path in moto (``_authenticate_and_authorize_s3_action``): the IAM action
        moto names (``ListBucketVersions``, ``GetObjectVersion``, ``PutObject``...), the bucket's or the
        object's ARN, the bucket's policy, and ``s3:prefix`` for a listing."""
        def checks(service: str, action: str, account: str) -> list[Check]:
            return s3_checks(action, bucket_name, key_name, {k: v[0] for k, v in (self.querystring or {}).items()
                                                             if isinstance(v, list) and v})

        authorized(self, checks)

    ActionAuthenticatorMixin._authenticate_and_authorize_normal_action = authorize_request
    ActionAuthenticatorMixin._authenticate_and_authorize_s3_action = authorize_s3_request
    _patch_put_events_entry_by_entry()


def _patch_put_events_entry_by_entry() -> None:
    """PutEvents sends the entries ``authorize`` let through; a refused one answers its error in its place."""
    from moto.events.responses import EventsHandler

    original = ORIGINALS.setdefault("events_put_events", EventsHandler.put_events)

    def put_events(self) -> str:
        refused = getattr(self, "refused_entries", None)
        if not refused:
            return original(self)
        entries = self._get_param("Entries")
        sent = iter(self.events_backend.put_events([e for i, e in enumerate(entries) if i not in refused]))
        results = [{"ErrorCode": refused[i][0], "ErrorMessage": refused[i][1]} if i in refused else next(sent)
                   for i in range(len(entries))]
        return json.dumps({"FailedEntryCount": sum("ErrorCode" in r for r in results), "Entries": results})

    EventsHandler.put_events = put_events


def _params(response) -> dict[str, Any]:
    """The request's parameters: its JSON body, its query, and (REST APIs) those in its path."""
    params = {**_body(response), **(getattr(response, "uri_match", None) or {})}
    for name, values in (response.querystring or {}).items():
        params.setdefault(name, values[0] if isinstance(values, list) and len(values) == 1 else values)
    return params


def _body(response) -> dict[str, Any]:
    body = response.body
    if isinstance(body, dict):  # parsed already (moto_patches.dynamodb.perf)
        return body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if body and body.lstrip().startswith("{"):
        try:
            parsed_body = json.loads(body)
            return parsed_body if isinstance(parsed_body, dict) else {}
        except ValueError:
            pass
    return {}
