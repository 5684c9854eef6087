"""The embedded stack's own clients (those it makes its resources with, ``EmbeddedStack._client``), made once
per process instead of once per stack. Speed only: each was a new botocore client, about 4 ms of CPU to make
and more for its first request (the caches a client fills as it goes); a stack made 11, half of its start.

A client holds none of moto's state. moto answers the requests of every client in the process from one
``before-send`` handler (``moto.core.models.botocore_stubber``, in botocore's ``BUILTIN_HANDLERS`` from the
moment moto is imported, so in every session made since), which answers while a mock runs and from the
backends of that moment (``BackendDict``, emptied when a mock starts and when it stops). A client made for
one stack therefore talks to the next stack's new backends, exactly as a client made for it would.

What makes two clients differ is the key: the service, the region and the configuration; every environment
variable botocore and boto3 read (credentials, profile, endpoints, retry settings, data path: every ``AWS_*``
and ``BOTO*`` variable, and the ``*_PROXY`` ones); the shared config and credentials files (path, size and
time of change); and botocore's built-in handlers. The credentials a client signs with are those a new
client would take, so IAM (``moto_patches.iam``) is evaluated for the same signer.

What a client could carry from one stack to the next is ruled out: a client on whose event system a handler
was registered or unregistered after it was made, or that answered an error or retried a request (the only
ways its retry quota or its S3 region cache change), is not handed out again: a new one is made in its place.
A stack keeps the clients it was given until it stops.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import boto3
from botocore.config import Config
from botocore.handlers import BUILTIN_HANDLERS

# botocore's names of the shared files, and the variables that move them
FILES = (("AWS_CONFIG_FILE", "~/.aws/config"), ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"))
MAX_CLIENTS = 64  # a bound: each new environment (other credentials, say) makes a set of its own

_POOL: dict[tuple, "_Pooled"] = {}
_SESSIONS: dict[tuple, Any] = {}  # the environment's part of the key -> the session its clients are made in
_LOCK = threading.RLock()


class _Pooled:
    """A client and whether it is still as it was made."""

    def __init__(self, client: Any):
        self.client = client
        self.clean = True


def client(service: str, region: str, **config: Any):
    """The process's client of ``service`` in ``region`` with botocore ``Config(**config)`` for this
    environment: the one made before if it is still as it was made, else a new one."""
    environment = _environment()
    key = (service, region, json.dumps(config, sort_keys=True), environment)
    with _LOCK:
        pooled = _POOL.get(key)
        if pooled is None or not pooled.clean:
            if len(_POOL) >= MAX_CLIENTS:
                clear()
            if environment not in _SESSIONS:  # as the new default session each mock starts, which boto3.client
                _SESSIONS[environment] = boto3.session.Session()  # uses: it reads the same variables and files
            config = json.loads(key[2])  # a copy: botocore edits the retries it is given
            pooled = _POOL[key] = _made(_SESSIONS[environment], service, region, config)
        return pooled.client


def clear() -> None:
    """Forget every client (the next ``client`` call makes a new one)."""
    with _LOCK:
        _POOL.clear()
        _SESSIONS.clear()


def _environment() -> tuple:
    """What a new session reads: the environment's variables, the shared files, botocore's built-in handlers."""
    variables = tuple(sorted((name, value) for name, value in os.environ.items()
                             if name.startswith(("AWS_", "BOTO")) or name.upper().endswith("_PROXY")))
    files = tuple(_file(os.environ.get(variable, default)) for variable, default in FILES)
    return variables, files, tuple(BUILTIN_HANDLERS)


def _file(path: str) -> tuple:
    path = os.path.expanduser(path)
    try:
        stat = os.stat(path)
    except OSError:
        return (path,)
    return (path, stat.st_size, stat.st_mtime_ns)


def _made(session, service: str, region: str, config: dict[str, Any]) -> _Pooled:
    """A new client of ``session``, watched for what would make it differ from a new one."""
    made = session.client(service, region_name=region, config=Config(**config))
    pooled = _Pooled(made)
    events = made.meta.events

    def answered(http_response, parsed, **kwargs) -> None:
        if http_response.status_code >= 300 or (parsed or {}).get("ResponseMetadata", {}).get("RetryAttempts"):
            pooled.clean = False

    def failed(**kwargs) -> None:
        pooled.clean = False

    events.register("after-call", answered, unique_id="changeflow-pooled-client-answered")
    events.register("after-call-error", failed, unique_id="changeflow-pooled-client-failed")
    for name in ("register", "register_first", "register_last", "unregister"):
        setattr(events, name, _marking(pooled, getattr(events, name)))
    return pooled


def _marking(pooled: _Pooled, method):
    """``method`` of the client's event system, which marks the client changed first."""
    def changed(*args, **kwargs):
        pooled.clean = False
        return method(*args, **kwargs)

    return changed
