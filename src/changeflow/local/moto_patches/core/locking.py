"""Atomic requests: every AWS API request moto serves (in-process or over HTTP) holds one lock, so that
concurrent executions see each request applied atomically, as AWS applies it: DynamoDB applies a write,
its condition included, to an item atomically
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/WorkingWithItems.html#WorkingWithItems.ConditionalUpdate).
moto is not thread-safe: without the lock two conditional updates of one item can both pass
(tests/test_embedded.py shows it with ``Atomicity.enabled = False``)."""

from __future__ import annotations

import threading

from ..originals import ORIGINALS

API_LOCK = threading.RLock()


class Atomicity:
    """``enabled`` is the embedded stack's guarantee; tests switch it off only to show what it prevents."""

    enabled: bool = True


def patch_request_lock() -> None:
    from moto.core.responses import BaseResponse

    original = ORIGINALS.setdefault("call_action", BaseResponse.call_action)

    def call_action(self):
        # StartSyncExecution runs a whole (Express) execution inside the request, and Lambda's Invoke a whole
        # handler: holding the lock there would block their own requests made from other threads, and a
        # synchronous Invoke waiting for a function busy in another thread (the stack runs one handler at a
        # time) whose requests wait for the lock would never end (a digest's parallel page reads did).
        if not Atomicity.enabled or "StartSyncExecution" in str(self.headers.get("X-Amz-Target", "")) \
                or _lambda_invoke(self):
            return original(self)
        with API_LOCK:
            return original(self)

    BaseResponse.call_action = call_action


def _lambda_invoke(response) -> bool:
    """Lambda's Invoke (``POST /2015-03-31/functions/{name}/invocations``): no data of moto's to keep atomic."""
    return type(response).__module__.startswith("moto.awslambda") and str(getattr(response, "path", "")).endswith(
        "/invocations")
