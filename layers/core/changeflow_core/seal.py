"""The seal (issue 33): an HMAC-SHA256 that only this stack's own functions can make, so that no one else in
the account, whatever IAM lets them call, gets a version recorded under a principal of their choosing.

- The entry points (``POST /changes``' front function, the event bus rule's function) seal every execution
  input they build: the request, the principal AWS authenticated, when it was received and the execution's
  name (``principal.sealed_envelope``). The fetch step refuses an ``api`` or ``events`` principal whose seal
  is missing or does not match (``ValidationError`` naming ``seal``): a hand-built envelope sent with
  ``states:StartExecution`` writes nothing. A direct StartExecution needs no seal: its principal says that
  its caller is not known (``{"via": "stepfunctions"}``), which is true.
- The steps pass a proof along (``STEP``: the change, its content and the ``v0`` it was decided against
  (``latest``), bound to the execution's name; the
  write step's ``WRITTEN``: the version it wrote; the history step's ``REPORT``): a writer invoked directly
  (``lambda:InvokeFunction``) without the proof of the step before it writes nothing (``Unproven``).

The key is 64 random characters in a Secrets Manager secret (template.yaml ``SealKeySecret``) encrypted
under a KMS key (``SealKey``) whose policy lets only these functions' roles decrypt it, and only through
Secrets Manager; the secret's own policy denies every other reader and every writer. Each execution
environment reads it once (``SecretKey``: one ``GetSecretValue``, one KMS ``Decrypt`` inside Secrets
Manager, at its first invocation) and keeps it in memory: no KMS request per change. docs/identity.md says who can
still forge (those who change these policies or the functions' code) and how that shows.

A MAC is over a domain and the value's canonical JSON (sorted keys, no spaces, UTF-8), so a MAC made for
one purpose never passes for another, and a value that went through Step Functions' JSON gets the same MAC.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from typing import Any

from .errors import ChangeflowError

SECRET_ENV = "SEAL_SECRET_ID"  # the secret's name, in the environment of every function that seals or checks
ENVELOPE = "changeflow/envelope"  # an entry point's execution input
STEP = "changeflow/step"  # the fetch step's change and content, for the writers
WRITTEN = "changeflow/written"  # the v0 write's result, for the history step
REPORT = "changeflow/report"  # the history step's report, for the expiry tags
MAC_CHARS = 43  # 32 bytes, base64url without padding


class Unproven(ChangeflowError):
    """A step was invoked without the proof of the step before it (or with one that does not match its
    input): it was not invoked by this stack's state machine with what the fetch step validated. Nothing
    is written."""


def canonical(value: Any) -> bytes:
    """The bytes a MAC covers: JSON with sorted keys and no spaces, UTF-8 (as Step Functions passes it on)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8", "surrogatepass")


class Key:
    """The stack's seal key in memory."""

    def __init__(self, material: bytes):
        if len(material) < 32:
            raise ValueError("the seal key must be at least 32 bytes")
        self._material = material

    def mac(self, domain: str, value: Any) -> str:
        digest = hmac.new(self._material, domain.encode("ascii") + b"\n" + canonical(value), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def matches(self, domain: str, value: Any, mac: Any) -> bool:
        return isinstance(mac, str) and hmac.compare_digest(self.mac(domain, value), mac)

    def prove(self, domain: str, value: Any) -> str:
        """The MAC of ``value`` as the next step will receive it (after a JSON round trip)."""
        return self.mac(domain, json.loads(json.dumps(value)))

    def require(self, domain: str, value: Any, mac: Any, what: str) -> None:
        """``Unproven`` unless ``mac`` is this key's MAC of ``value``."""
        if mac is None:
            raise Unproven(f"{what}: no proof: this step writes only what the fetch step of this stack's state "
                           "machine validated (a direct invocation writes nothing)")
        if not self.matches(domain, value, mac):
            raise Unproven(f"{what}: the proof does not match: the input was not made by this stack's steps, "
                           "or was changed after (nothing written)")


class SecretKey:
    """The key, read from Secrets Manager at the first invocation of this execution environment (its cold
    start's), then kept: ``get()``. A function that may not read it fails that invocation, by name."""

    def __init__(self, client: Any, secret_id: str):
        self._client, self._secret_id = client, secret_id
        self._key: Key | None = None
        self._lock = threading.Lock()

    def get(self) -> Key:
        if self._key is None:
            with self._lock:
                if self._key is None:
                    value = self._client.get_secret_value(SecretId=self._secret_id)["SecretString"]
                    self._key = Key(value.encode("utf-8"))
        return self._key
