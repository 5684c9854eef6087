"""A call to a stack's REST API as a client of an ``AWS_IAM`` API makes it: SigV4-signed for ``execute-api``
with the credentials the rest of the client uses (on ``changeflow serve``, its default ``testing``/``testing``).

botocore's signer builds the canonical request as API Gateway checks it: each path segment URI-encoded once
more, so the ``%23`` of ``user%231001`` is signed as ``%2523`` ("Each path segment must be URI-encoded
twice", Signature Version 4, "Create a canonical request", except for S3). curl's ``--aws-sigv4`` (7.88)
signs the path as sent, so every id whose path has a ``%`` is refused (403): ``changeflow api`` is the
signed call that works for every id (docs/api.md).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

ID = "{id}"  # a route's placeholder for an entity id, filled in as one percent-encoded path segment


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str


def route(path: str, entity_id: str | None = None) -> str:
    """``path`` under the API's stage (``/entities/user%231001``, or ``/entities/{id}`` with ``entity_id``,
    which is percent-encoded whole: its ``/``, ``#``, ``?`` and ``%`` included). Raises ValueError with what
    to change."""
    if not path.startswith("/"):
        raise ValueError(f"{path!r} is not a route: give the path under the API's stage, e.g. /entities/{ID}")
    if entity_id is not None:
        if ID not in path:
            raise ValueError(f"--id fills {ID} in the path, and {path!r} has none (e.g. /entities/{ID}/versions)")
        return ascii_url(path.replace(ID, segment(entity_id)))
    if ID in path:
        raise ValueError(f"{path!r} has {ID}: give the entity id with --id")
    if "#" in path:  # a URL's fragment: the id would stop at it
        raise ValueError(f"{path!r} has a '#', which ends a URL's path: percent-encode the id ({path.replace('#', '%23')}) "
                         f"or give it with --id and {ID} in the path")
    return ascii_url(path)


def ascii_url(path: str) -> str:
    """A URL is ASCII (RFC 3986, 2.1): any other character of ``path`` (``²``, a space) is sent as its UTF-8
    bytes percent-encoded, as a browser sends it; printable ASCII, escapes already made included, as given."""
    return urllib.parse.quote(path, safe="".join(map(chr, range(0x21, 0x7F))))


def segment(entity_id: str) -> str:
    """An id as one path segment: every character but the unreserved ones percent-encoded, and an id of
    dots alone (``.``, ``..``) too, which a URL would otherwise resolve as a step up (RFC 3986, 5.2.4)."""
    encoded = urllib.parse.quote(entity_id, safe="")
    return "%2E" * len(encoded) if encoded in (".", "..") else encoded


def call(session, region: str, api_url: str, method: str, path: str, body: bytes | None = None,
         timeout: float = 60) -> Answer:
    """``method`` ``api_url`` + ``path``, signed with ``session``'s credentials (unsigned when it has none); an
    error status is an answer, not an exception."""
    url = api_url.rstrip("/") + path
    headers = {"Content-Type": "application/json"} if body is not None else {}
    signed = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
    credentials = session.get_credentials() if session is not None else None
    if credentials is not None:
        SigV4Auth(credentials, "execute-api", region).add_auth(signed)
    request = urllib.request.Request(url, data=body, method=method, headers=dict(signed.headers.items()))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the stack's own API
            return Answer(response.status, response.read(), response.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(), exc.headers.get("Content-Type", ""))
