"""``AWS_IAM`` authorization on the embedded REST API, as API Gateway does it: every request is SigV4-signed
for ``execute-api`` in the stack's region, with a key moto's IAM issued (``iam create-access-key``) or a
role session moto's STS issued (``sts assume-role``), within SigV4's five minutes. The signature is
recomputed with botocore's own SigV4 code (``botocore.auth.SigV4Auth``: canonical request, string to sign,
signature) from the request as received, never trusted.

What a refused request gets is API Gateway's own 403 answer, body ``{"message": ...}`` and the
``x-amzn-ErrorType`` header (AWS re:Post knowledge center, "How do I troubleshoot HTTP 403 errors from
API Gateway?", https://repost.aws/knowledge-center/api-gateway-troubleshoot-403-forbidden, and "...signature
mismatch errors when making SigV4 signed requests with IAM authentication to API Gateway?",
https://repost.aws/knowledge-center/api-gateway-iam-sigv4-mismatch):

- no signature at all: ``Missing Authentication Token`` (``MissingAuthenticationTokenException``);
- a key nobody issued, or an IAM user's key made ``Inactive`` ("Inactive means that the key cannot be used":
  https://docs.aws.amazon.com/IAM/latest/APIReference/API_UpdateAccessKey.html): ``The security token included
  in the request is invalid.`` (``AccessDeniedException``: "The caller used IAM keys that aren't valid");
- an STS session past its ``Expiration`` ("After temporary credentials expire, they can't be reused":
  https://repost.aws/knowledge-center/sts-iam-token-expired): ``The security token included in the request is
  expired`` (the ``EXPIRED_TOKEN`` gateway response, 403 by default, ``ExpiredTokenException``);
- signed more than five minutes before (or after) the server's clock: ``Signature expired: <date> is now
  earlier than <limit> (<now> - 5 min.)`` (``InvalidSignatureException``);
- scoped to another region or service: ``Credential should be scoped to a valid region.`` /
  ``Credential should be scoped to correct service: 'execute-api'.`` (``InvalidSignatureException``);
- anything else that changes the signature (another secret, a changed body, path or header):
  ``The request signature we calculated does not match the signature you provided. Check your AWS Secret
  Access Key and signing method. Consult the service documentation for details.``
  (``InvalidSignatureException``).

The payload's hash in the canonical request is always the SHA-256 of the body as received: SigV4's
``HashedPayload`` is "created using the payload in the body of the HTTP request"
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html). An
``X-Amz-Content-SHA256`` header, and its ``UNSIGNED-PAYLOAD``, are Amazon S3's
(https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html: "when sending the request to
Amazon S3"): here such a header is only a header, signed or not, and never stands for the body (botocore's
``SigV4Auth`` would take it as the hash, so the canonical request's last line is replaced). A body swapped
under a signature, or a signature over ``UNSIGNED-PAYLOAD``, is a signature mismatch, as clients of
``execute-api`` who sign ``UNSIGNED-PAYLOAD`` report (aws/aws-sdk-js-v3#308).

The embedded stack's default credentials, moto's ``testing``/``testing`` (what the tests and a bare
``changeflow`` use; in the process that runs moto, its mock's ``FOOBARKEY``/``FOOBARSECRET``), are one
documented principal: the one moto's STS ``GetCallerIdentity`` names for
credentials it did not issue, ``arn:aws:sts::123456789012:user/moto`` (caller ``AKIAIOSFODNN7EXAMPLE``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

SERVICE = "execute-api"
WINDOW = timedelta(minutes=5)  # SigV4: a signature is valid for five minutes
# moto's fake credentials: "testing" (its documentation's, and the tests') and the pair its mock sets in the
# process it runs in (moto.core.models: AWS_ACCESS_KEY_ID=FOOBARKEY, AWS_SECRET_ACCESS_KEY=FOOBARSECRET)
DEFAULT_KEYS = {"testing": "testing", "FOOBARKEY": "FOOBARSECRET"}
DEFAULT_CALLER = "AKIAIOSFODNN7EXAMPLE"  # moto STS GetCallerIdentity's UserId for keys it did not issue
INVALID_TOKEN = "The security token included in the request is invalid."
EXPIRED_TOKEN = "The security token included in the request is expired"
MISMATCH = ("The request signature we calculated does not match the signature you provided. Check your AWS "
            "Secret Access Key and signing method. Consult the service documentation for details.")
_AUTH = re.compile(r"^AWS4-HMAC-SHA256 (?P<params>.+)$")
_DATE = "%Y%m%dT%H%M%SZ"


class Refused(Exception):
    """API Gateway's answer to a request it does not authenticate: status, message, x-amzn-ErrorType."""

    def __init__(self, kind: str, message: str, error_type: str, status: int = 403):
        super().__init__(message)
        self.kind, self.message, self.error_type, self.status = kind, message, error_type, status


def default_arn(account: str, partition: str = "aws") -> str:
    return f"arn:{partition}:sts::{account}:user/moto"


def utcnow() -> datetime:
    """The server's clock (a test moves it forward, as time passing would)."""
    return datetime.now(timezone.utc)


def _signer(access_key: str, headers: dict[str, str], account: str,
            now: datetime) -> tuple[Credentials, dict[str, str]]:
    """The credentials moto issued for ``access_key`` and the identity API Gateway puts in
    ``requestContext.identity``; ``Refused`` for a key nobody issued, an inactive key, a session token that
    is not the key's, or a session past its expiration."""
    token = headers.get("x-amz-security-token")
    if access_key in DEFAULT_KEYS:
        return (Credentials(access_key, DEFAULT_KEYS[access_key], token),
                {"userArn": default_arn(account), "accountId": account, "caller": DEFAULT_CALLER,
                 "user": DEFAULT_CALLER, "accessKey": access_key})
    from moto.iam.models import iam_backends
    from moto.sts.models import sts_backends

    user = iam_backends[account]["aws"].get_user_from_access_key_id(access_key)
    if user is not None and token is None:
        key = next(k for k in user.access_keys if k.access_key_id == access_key)
        if key.status != "Active":
            raise Refused("ACCESS_DENIED", INVALID_TOKEN, "AccessDeniedException")
        return (Credentials(access_key, key.secret_access_key),
                {"userArn": user.arn, "accountId": account, "caller": user.id, "user": user.id,
                 "accessKey": access_key})
    session = sts_backends[account]["aws"].get_assumed_role_from_access_key(access_key)
    if session is not None and token == session.session_token:
        if session.expiration.replace(tzinfo=timezone.utc) <= now:  # moto keeps it as naive UTC
            raise Refused("EXPIRED_TOKEN", EXPIRED_TOKEN, "ExpiredTokenException")
        return (Credentials(access_key, session.secret_access_key, token),
                {"userArn": session.arn, "accountId": account, "caller": session.user_id,
                 "user": session.user_id, "accessKey": access_key})
    raise Refused("ACCESS_DENIED", INVALID_TOKEN, "AccessDeniedException")


def _params(authorization: str) -> dict[str, str]:
    found = _AUTH.match(authorization.strip())
    if not found:
        raise Refused("INVALID_SIGNATURE", "Authorization header requires 'Credential' parameter. Authorization "
                      "header requires 'Signature' parameter. Authorization header requires 'SignedHeaders' "
                      "parameter.", "IncompleteSignatureException")
    params = {}
    for part in found.group("params").split(","):
        name, _, value = part.strip().partition("=")
        params[name] = value
    missing = [p for p in ("Credential", "SignedHeaders", "Signature") if not params.get(p)]
    if missing:
        raise Refused("INVALID_SIGNATURE", " ".join(f"Authorization header requires '{p}' parameter." for p in missing),
                      "IncompleteSignatureException")
    return params


def authenticate(method: str, raw_path: str, query: str, headers: dict[str, str], body: bytes, region: str,
                 account: str, now: datetime | None = None) -> dict[str, Any]:
    """``requestContext.identity`` of a SigV4-signed request (``headers`` lower-cased, ``raw_path`` as
    sent), or ``Refused`` with API Gateway's answer."""
    authorization = headers.get("authorization")
    if not authorization:
        raise Refused("MISSING_AUTHENTICATION_TOKEN", "Missing Authentication Token",
                      "MissingAuthenticationTokenException")
    params = _params(authorization)
    scope = params["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise Refused("INVALID_SIGNATURE", "Credential should be scoped to a valid region. ",
                      "IncompleteSignatureException")
    access_key, day, scope_region, service, _ = scope
    if scope_region != region:
        raise Refused("INVALID_SIGNATURE", "Credential should be scoped to a valid region. ",
                      "InvalidSignatureException")
    if service != SERVICE:
        raise Refused("INVALID_SIGNATURE", f"Credential should be scoped to correct service: '{SERVICE}'. ",
                      "InvalidSignatureException")
    stamp = headers.get("x-amz-date")
    try:
        signed_at = datetime.strptime(stamp or "", _DATE).replace(tzinfo=timezone.utc)
    except ValueError:
        raise Refused("INVALID_SIGNATURE", "Authorization header requires existence of either a 'X-Amz-Date' or "
                      "a 'Date' header.", "IncompleteSignatureException") from None
    now = now or utcnow()
    if signed_at < now - WINDOW:
        raise Refused("INVALID_SIGNATURE", f"Signature expired: {stamp} is now earlier than "
                      f"{(now - WINDOW).strftime(_DATE)} ({now.strftime(_DATE)} - 5 min.)", "InvalidSignatureException")
    if signed_at > now + WINDOW:
        raise Refused("INVALID_SIGNATURE", f"Signature not yet current: {stamp} is still later than "
                      f"{(now + WINDOW).strftime(_DATE)} ({now.strftime(_DATE)} + 5 min.)", "InvalidSignatureException")
    credentials, identity = _signer(access_key, headers, account, now)
    signed_names = params["SignedHeaders"].split(";")
    if "host" not in signed_names or day != stamp[:8]:
        raise Refused("INVALID_SIGNATURE", MISMATCH, "InvalidSignatureException")
    # the request as received, its signed headers only, recomputed with botocore's SigV4 code
    url = f"http://{headers.get('host', 'localhost')}{raw_path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, data=body,
                         headers={name: headers.get(name, "") for name in signed_names})
    request.context["timestamp"] = stamp
    auth = SigV4Auth(credentials, SERVICE, region)
    # the payload's hash is the body's, whatever an X-Amz-Content-SHA256 header says (see the module's doc)
    canonical = auth.canonical_request(request).rsplit("\n", 1)[0] + "\n" + hashlib.sha256(body).hexdigest()
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(expected, params["Signature"]):
        raise Refused("INVALID_SIGNATURE", MISMATCH, "InvalidSignatureException")
    return identity
