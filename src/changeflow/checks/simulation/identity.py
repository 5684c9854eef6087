"""Credentials that change, on ``changeflow serve`` (docs/identity.md): each kind of request below is a
signed ``POST /changes`` of a change of its own, and the sim knows what AWS would answer it.

Every signer's IAM policy allows ``execute-api:Invoke`` (what ``AWS_IAM`` asks of it on AWS and on the
embedded API).

- ``user``: an IAM user ``ops-…`` signs with an active key: authenticated, admitted by the policy's
  ``arn:aws:iam::*:user/ops-*``, recorded with the user's ARN.
- ``role-session``: a session of the role ``writer`` (``sts assume-role``): recorded with the session's ARN.
- ``inactive-key``: the key was made ``Inactive`` (``iam update-access-key``): AWS refuses it (403).
- ``expired-session``: the session's expiration has passed: AWS refuses it (403).
- ``path-user``: the user ``alice`` under the IAM path ``/ops/``: the policy's ``user/ops/*`` admits her.
- ``path-lookalike``: the user ``mallory`` whose IAM path is ``/ops-team/``: ``user/ops-*`` admits her, as
  IAM's ``ArnLike`` would (docs/identity.md: ``*`` crosses ``/``, a user's ARN holds its path).
- ``name-lookalike``: the user ``opsadmin`` at the path ``/``: no pattern admits ``user/opsadmin``: refused.
- ``body-swap``: a user signs a change with ``X-Amz-Content-SHA256`` set to its body's hash; the request is
  replayed with another body under the same headers: SigV4 covers the body (API Gateway hashes the body it
  received), so AWS refuses it.
- ``unsigned-payload``: signed with ``X-Amz-Content-SHA256: UNSIGNED-PAYLOAD`` (the body not covered by the
  signature): the body could be anything; refused.
- ``policy-tightened``: a user whose IAM policy now also denies ``execute-api:Invoke``: AWS refuses it (403), and
  so does the embedded API, which evaluates the signer's policies (issue 33, docs/parity.md).

**No principal recorded that AWS would not have authenticated (or the policy not admitted)**: a change of a
refused request must have no version. A change of an accepted one must record its signer's ARN. What the
stack's ``AuthorizationPolicy`` admits is read from its documentation: its ARN patterns matched as IAM's
``ArnLike`` matches (each of the six colon-separated components on its own, ``*`` any run of characters,
``?`` one), the one authority the page cites. (Before issue 32's fix the page offered ``user/ops-*`` as the
ops users, and this check held the stack to that: seam 14, a user whose path is ``/ops-team/`` admitted.
The fix documented IAM's meaning instead, which admits her.)"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .plan import T0, cid
from .world import World, sign

ACCOUNT = "123456789012"
REFUSED = {  # kind -> the violation code if it gets a version anyway
    "inactive-key": "principals.inactive-or-expired", "expired-session": "principals.inactive-or-expired",
    "body-swap": "principals.body-swapped", "unsigned-payload": "principals.body-swapped",
    "policy-tightened": "principals.iam-denied-recorded",
}
USERS = {"path-user": ("alice", "/ops/"), "path-lookalike": ("mallory", "/ops-team/"),
         "name-lookalike": ("opsadmin", "/")}
TRUST = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {
    "AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "sts:AssumeRole"}]})
INVOKE = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "execute-api:Invoke",
                                                             "Resource": "*"}]})  # what AWS_IAM asks of a signer
DENY = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Action": "execute-api:Invoke",
                                                           "Resource": "*"}]})


class Credentials:
    """The IAM and STS calls that make (and change) the signers, against the stack's moto."""

    def __init__(self, world: World, tag: str) -> None:
        self.world, self.tag = world, tag
        self.iam, self.sts = world.cf.make("iam"), world.cf.make("sts")

    def user(self, name: str, path: str = "/") -> tuple[tuple[str, str, None], str]:
        arn = self.iam.create_user(UserName=name, Path=path)["User"]["Arn"]
        self.iam.put_user_policy(UserName=name, PolicyName="invoke", PolicyDocument=INVOKE)
        key = self.iam.create_access_key(UserName=name)["AccessKey"]
        return (key["AccessKeyId"], key["SecretAccessKey"], None), arn

    def session(self, expired: bool = False) -> tuple[tuple[str, str, str], str]:
        try:
            self.iam.create_role(RoleName="writer", AssumeRolePolicyDocument=TRUST)
            self.iam.put_role_policy(RoleName="writer", PolicyName="invoke", PolicyDocument=INVOKE)
        except self.iam.exceptions.EntityAlreadyExistsException:
            pass
        got = self.sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/writer", RoleSessionName=self.tag,
                                   DurationSeconds=900)
        creds = got["Credentials"]
        if expired:  # fifteen minutes later: the world's clock, as moto's STS keeps it
            import datetime

            from moto.sts.models import sts_backends

            for session in sts_backends[ACCOUNT]["aws"].assumed_roles:
                if session.access_key_id == creds["AccessKeyId"]:
                    session.expiration = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) \
                        - datetime.timedelta(seconds=1)
        return (creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"]), got["AssumedRoleUser"]["Arn"]


def _component(pattern: str, text: str) -> bool:
    return re.fullmatch("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), text,
                        re.DOTALL) is not None


def arn_like(pattern: str, arn: str) -> bool:
    """IAM's ArnLike: the six colon-separated components matched one by one, case-sensitive, ``*`` any run
    of characters (``/`` included), ``?`` one (https://docs.aws.amazon.com/IAM/latest/UserGuide/
    reference_policies_elements_condition_operators.html#Conditions_ARN)."""
    patterns, parts = pattern.split(":", 5), arn.split(":", 5)
    return len(patterns) == len(parts) == 6 and all(_component(p, a) for p, a in zip(patterns, parts))


def admitted(policy: str | None, arn: str) -> bool:
    """Whether the stack's policy (none: everyone authenticated) admits ``arn`` to put any entity."""
    if not policy:
        return True
    return any("put" in rule["operations"] and any(arn_like(pattern, arn) for pattern in rule["principals"]
                                                   if pattern.startswith("arn:"))
               for rule in json.loads(policy))


def _request(entity: str, kind: str, number: int, **attributes) -> dict[str, Any]:
    """A change of its own for each request, each newer than the one before (none is stale)."""
    return {"entityId": entity, "operation": "put", "changeId": cid(entity, kind),
            "attributes": attributes or {"by": kind}, "effectiveAt": T0 + number}


def run_identity(world: World, op: dict[str, Any]) -> None:
    entity = op["entity"]
    made = Credentials(world, f"s{world.seed}o{world.op}")
    expected: dict[str, tuple[str | None, str]] = {}  # change id -> (the signer's ARN if accepted, the kind)
    for number, kind in enumerate(op["requests"]):
        request = _request(entity, kind, number)
        body = json.dumps(request).encode("utf-8")
        headers: dict[str, str] | None = None
        credentials = None
        arn: str | None = None
        if kind == "user":
            credentials, arn = made.user(f"ops-{world.op}-{number}")
        elif kind == "role-session":
            credentials, arn = made.session()
        elif kind == "inactive-key":
            credentials, _ = made.user(f"ops-{world.op}-{number}")
            made.iam.update_access_key(UserName=f"ops-{world.op}-{number}", AccessKeyId=credentials[0],
                                       Status="Inactive")
        elif kind == "expired-session":
            credentials, _ = made.session(expired=True)
        elif kind in USERS:
            name, path = USERS[kind]
            credentials, arn = made.user(f"{name}-{world.op}", path=path)
        elif kind == "policy-tightened":
            credentials, _ = made.user(f"ops-{world.op}-{number}")
            made.iam.put_user_policy(UserName=f"ops-{world.op}-{number}", PolicyName="deny", PolicyDocument=DENY)
        elif kind in ("body-swap", "unsigned-payload"):
            (key, secret, _), _ = made.user(f"ops-{world.op}-{number}")
            url = world.api + "/changes"
            payload = hashlib.sha256(body).hexdigest() if kind == "body-swap" else "UNSIGNED-PAYLOAD"
            headers = sign("POST", url, body, {"Content-Type": "application/json"}, key, secret,
                           payload_header=payload)
            if kind == "body-swap":  # the victim's signed change, replayed with another body
                request = _request(entity, "swapped", number, pay="mallory", amount=1_000_000)
                body = json.dumps(request).encode("utf-8")
        if arn is not None and not admitted(world.config.get("AuthorizationPolicy"), arn):
            arn = None  # authenticated, but the policy does not admit it
        expected[request["changeId"]] = (arn, kind)
        status, answer = world.http("POST", "/changes", body, headers, credentials=credentials if headers is None
                                    else None)
        world.log.append(f"op {world.op}: {kind}: POST /changes answered {status} {str(answer)[:200]}")
        if status == 200 and isinstance(answer, dict) and answer.get("executionArn"):
            world.cf.wait(answer["executionArn"], 300)
    world.scheduler.idle(60)
    check_principals(world, entity, expected)


def check_principals(world: World, entity: str, expected: dict[str, tuple[str | None, str]]) -> None:
    from changeflow_core import principal

    for version in world.cf.entity(entity)["versions"]:
        want = expected.get(version.get("changeId"))
        if want is None:
            continue
        arn, kind = want
        recorded = principal.describe(version.get("principal"))
        if arn is None:
            code = REFUSED.get(kind, "principals.path-admitted" if kind in USERS else "principals.unauthenticated")
            world.violation("principals", code,
                            f"the {kind} request was recorded as version {version['version']} with principal "
                            f"{recorded}: AWS would have refused it", entity)
        elif recorded != arn:
            world.violation("principals", "principals.unauthenticated", f"the {kind} request's version "
                            f"{version['version']} records {recorded}, not its signer {arn}", entity)
