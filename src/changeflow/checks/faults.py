"""Faults injected from the outside, never with switches inside the production handlers: around a
function's invocation (the embedded stack's Lambda dispatch) and inside its AWS SDK calls (botocore
event hooks on the handler's own clients).

- ``fail_before``: the Lambda fails before its DynamoDB write (nothing written).
- ``lose_response``: the handler runs (its write lands) but the Lambda fails or times out before answering.
- ``service_error``: the Lambda service fails the Invoke (``Lambda.ServiceException``).
- ``throttle``: DynamoDB answers ``ProvisionedThroughputExceededException`` / ``ThrottlingException``
  to one of the handler's clients a number of times (the SDK's own retries see them, as on AWS): its
  ``dynamodb`` client, or another it names (the history step's ``tagging`` client of its expiry tags).
- ``writer_in_window``: one of the faults above on one change, and other writers started at that moment,
  run to their end inside the window the fault opens (the faulted execution's back-off or Retry waits
  for them: the clock's ``Holds``), every time.
- ``planned``: a list of ``Planned`` faults, each for one change at one step (after letting that step's first
  ``skip`` invocations for the change through), of any kind above, ``times`` invocations in a row: the
  simulation's (``checks/simulation``), where which change suffers what is drawn from the seed.
- ``feed_target`` (issue 36): the feed's pipe meets its target failing: ``throttle`` (the PutEvents or
  PutRecords request refused, nothing delivered) or ``lost`` (the events delivered, the answer lost: the pipe
  sends them again, so consumers see them twice).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from botocore.awsrequest import AWSResponse
from moto.core.botocore_stubber import MockRawResponse

from changeflow_core import principal

from ..local.lambdas import Function, LambdaService, LambdaServiceError, fault_hook
from ..local.moto_patches.pipes.runner import Deliveries
from ..local.moto_patches.stepfunctions.clock import Holds
from ..local.moto_patches.stepfunctions.termination import wait_for_termination

THROTTLE_CODES = ("ProvisionedThroughputExceededException", "ThrottlingException")
THROTTLED_REQUESTS = {"throttle": 4, "throttle-out": 12}  # a planned throttle: absorbed by the SDK, or not
BEFORE_THE_HANDLER = ("service", "before")  # in this order, as a Lambda invocation meets them
AFTER_THE_HANDLER = ("lost", "timeout")


class InjectedFault(Exception):
    """What an injected Lambda failure raises (its class name is the error the state machine sees)."""


class LambdaTimeout(Exception):
    """A function that ran out of time: the Lambda runtime reports it as ``Sandbox.Timedout``."""

    error_type = "Sandbox.Timedout"


FAULT_NAMES = {"before": "failure before the write", "lost": "lost response after the write",
               "timeout": "timeout after the write", "service": "lambda service exception"}


def change_id_of(event: Any) -> str | None:
    """The change a step's event is about: the state's change, the (retired) tag step's own field, or (the
    first fetch) the request the execution started with."""
    if not isinstance(event, dict):
        return None
    if isinstance(event.get("change"), dict):
        return event["change"].get("changeId")
    if "changeId" in event:
        return event["changeId"]
    if "request" in event:
        try:
            request = principal.request_in(event["request"])
        except Exception:  # noqa: BLE001 - a request the workflow refuses names no change here
            return None
        return request.get("changeId") if isinstance(request, dict) else None
    return None


@dataclass(frozen=True)
class Planned:
    """``kind`` at ``step`` (a function's logical id, or ``*``: any step) for change ``change_id``: its
    invocations ``skip+1`` to ``skip+times`` (of that step, or of all) suffer it. Kinds: before, lost,
    timeout, service (as ``around``), ``throttle`` (the handler's next 4 DynamoDB requests are throttled: the
    SDK's own retries absorb them) and ``throttle-out`` (its next 12: past DynamoDB's 10 SDK attempts, the
    Lambda fails)."""

    change_id: str
    step: str
    kind: str
    times: int = 1
    skip: int = 0


class Injector:
    """Counts what it injects, so a campaign can report faults injected."""

    def __init__(self) -> None:
        self.injected: Counter = Counter()
        self._lock = threading.Lock()

    def count(self, kind: str) -> None:
        with self._lock:
            self.injected[kind] += 1

    def inject(self, function: Function, kind: str) -> None:
        """Count fault ``kind`` and raise it: instead of the handler (service, before) or after it (lost,
        timeout)."""
        self.count(FAULT_NAMES[kind])
        if kind == "service":
            raise LambdaServiceError()
        if kind in ("before", "lost"):
            raise InjectedFault(f"{function.logical_id} failed {'before' if kind == 'before' else 'after'} its write")
        raise LambdaTimeout(f"Task timed out after {function.timeout_s}.00 seconds")

    @contextlib.contextmanager
    def around(self, lambdas: LambdaService, rules: list[tuple[str, str, int]]) -> Iterator[None]:
        """``rules``: (function logical id, fault kind, times). Kinds: before, lost, timeout, service."""
        remaining = {(f, k): n for f, k, n in rules}
        lock = threading.Lock()

        def take(function: Function, kind: str) -> bool:
            with lock:
                key = (function.logical_id, kind)
                if remaining.get(key, 0) > 0:
                    remaining[key] -= 1
                    return True
            return False

        def hook(function: Function, event: Any, invoke: Callable[[], Any]) -> Any:
            for kind in BEFORE_THE_HANDLER:
                if take(function, kind):
                    self.inject(function, kind)
            result = invoke()
            for kind in AFTER_THE_HANDLER:
                if take(function, kind):
                    self.inject(function, kind)
            return result

        with fault_hook(lambdas, hook):
            yield

    @contextlib.contextmanager
    def writer_in_window(self, lambdas: LambdaService, step: str, kind: str, change_id: str,
                         start_others: Callable[[], list[str]], timeout: float = 120.0) -> Iterator[list[str]]:
        """Inject ``kind`` (before, lost, timeout, service) once into ``step`` for change ``change_id``;
        at that moment ``start_others()`` starts other executions (their ARNs), and the faulted execution's
        next wait lasts until they have all ended. Yields the list the ARNs are added to."""
        started: list[str] = []
        fired = threading.Lock()

        def window(event: Any) -> None:
            if not fired.acquire(blocking=False):
                return
            started.extend(start_others())
            self.count(f"{FAULT_NAMES[kind]}, another writer in its window")
            Holds.hold(event["execution"]["name"],
                       lambda: all(wait_for_termination(arn, timeout) for arn in list(started)))

        def hook(function: Function, event: Any, invoke: Callable[[], Any]) -> Any:
            if function.logical_id != step or change_id_of(event) != change_id or fired.locked():
                return invoke()
            if kind in ("service", "before"):
                window(event)
                if kind == "service":
                    raise LambdaServiceError()
                raise InjectedFault(f"{function.logical_id} failed before its write")
            invoke()  # the write lands; its answer is what the fault loses
            window(event)
            if kind == "timeout":
                raise LambdaTimeout(f"Task timed out after {function.timeout_s}.00 seconds")
            raise InjectedFault(f"{function.logical_id} failed after its write")

        with fault_hook(lambdas, hook):
            yield started

    @contextlib.contextmanager
    def planned(self, lambdas: LambdaService, plan: list[Planned]) -> Iterator[None]:
        """Inject each ``Planned`` fault where and when it says (see the class). A fault after the write
        (lost, timeout) counts the invocations that returned (a write refused as a conflict is not one)."""
        seen: Counter = Counter()  # (change, step, before the handler or after it) -> invocations so far
        lock = threading.Lock()

        def due(change: Any, function: Function, after: bool) -> dict[str, Planned]:
            with lock:
                for step in (function.logical_id, "*"):
                    seen[(change, step, after)] += 1
                counts = {step: seen[(change, step, after)] for step in (function.logical_id, "*")}
            return {p.kind: p for p in plan if p.change_id == change and p.step in counts
                    and (p.kind in AFTER_THE_HANDLER) == after and p.skip < counts[p.step] <= p.skip + p.times}

        def hook(function: Function, event: Any, invoke: Callable[[], Any]) -> Any:
            change = change_id_of(event)
            faults = due(change, function, after=False)
            for kind in BEFORE_THE_HANDLER:
                if kind in faults:
                    self.inject(function, kind)
            throttles = max((THROTTLED_REQUESTS.get(k, 0) for k in faults), default=0)
            with self.throttle(function, None, throttles) if throttles else contextlib.nullcontext():
                result = invoke()
            faults = due(change, function, after=True)
            for kind in AFTER_THE_HANDLER:
                if kind in faults:
                    self.inject(function, kind)
            return result

        with fault_hook(lambdas, hook):
            yield

    @contextlib.contextmanager
    def throttle(self, function: Function, operation: str | None, times: int,
                 code: str = THROTTLE_CODES[0], client: str = "dynamodb") -> Iterator[None]:
        """The next ``times`` calls of ``operation`` (None: of any operation) by the function's DynamoDB
        client (the module attribute ``client``) are throttled."""
        client = getattr(function.module, client)
        remaining = [times]
        lock = threading.Lock()

        def before_send(request, **kwargs):
            with lock:
                if remaining[0] <= 0:
                    return None
                remaining[0] -= 1
            self.count(f"DynamoDB {code}")
            # DynamoDB never processes a throttled request. botocore emits before-send to every handler and
            # takes the first answer, so moto's stubber (a later handler) would still process this one (a
            # throttle would then be a landed write whose answer was lost): give it a URL it does not serve.
            request.url = "https://throttled.invalid/"
            body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}",
                               "message": "Rate of requests exceeds the allowed throughput."}).encode()
            return AWSResponse(request.url, 400, {"x-amzn-ErrorType": code}, MockRawResponse(body))

        event = f"before-send.dynamodb.{operation}" if operation else "before-send.dynamodb"
        client.meta.events.register_first(event, before_send)
        try:
            yield
        finally:
            client.meta.events.unregister(event, before_send)

    @contextlib.contextmanager
    def feed_target(self, rules: list[tuple[str, int]]) -> Iterator[None]:
        """``rules``: (kind, times), kinds ``throttle`` and ``lost``, taken in turn on the pipes' target requests."""
        remaining = [[kind, times] for kind, times in rules]
        lock = threading.Lock()

        def hook(pipe_name: str, events: list, put: Callable[[list], list[bool]]) -> list[bool]:
            with lock:
                rule = next((r for r in remaining if r[1] > 0), None)
                if rule is not None:
                    rule[1] -= 1
            if rule is None:
                return put(events)
            if rule[0] == "throttle":
                self.count("feed target throttled")
                raise InjectedFault(f"{pipe_name}: the target throttled the request")
            taken = put(events)
            self.count("feed target answer lost")
            raise InjectedFault(f"{pipe_name}: {sum(taken)} events delivered, the answer lost")

        previous, Deliveries.hook = Deliveries.hook, hook
        try:
            yield
        finally:
            Deliveries.hook = previous
