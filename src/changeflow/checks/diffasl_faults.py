"""The faults around a path of ``make diff-asl`` (``checks.diffasl``): another writer between fetch and write,
a write whose answer is lost and every read after it failing, a writer handed what its proof does not cover,
the Injector's faults and throttles. The same Lambda-side hooks in both interpreters' runs."""

from __future__ import annotations

import contextlib
from typing import Iterator


def _rival_hook(stack, times: int):
    """Before the v0 writer's first ``times`` invocations, another change to the same entity lands
    (its v0 and history written as the workflow would), so the fetched version is no longer current."""
    from changeflow_core import items, store
    from changeflow_core.validation import Change

    remaining = [times]

    def hook(function, event, invoke):
        if function.logical_id in ("UpdateLatestFunction", "DeleteTombstoneFunction") and remaining[0] > 0:
            remaining[0] -= 1
            _write_rival(stack, items, store, Change)
        return invoke()

    return hook


def _lost_then_unreadable_hook():
    """The v0 write lands and its answer is lost; every read after it fails (the Lambda service): the
    workflow cannot tell whether the change was applied (``OutcomeUnknown``)."""
    from ..local.lambdas import LambdaServiceError
    from .faults import InjectedFault

    written = []

    def hook(function, event, invoke):
        if function.logical_id == "FetchLatestFunction" and written:
            raise LambdaServiceError()
        if function.logical_id in ("UpdateLatestFunction", "DeleteTombstoneFunction") and not written:
            invoke()
            written.append(function.logical_id)
            raise InjectedFault(f"{function.logical_id} failed after its write")
        return invoke()

    return hook


def _altered_hook():
    """The v0 writer's payload changed between the steps: its content is not what the fetch step proved."""

    def hook(function, event, invoke):
        if function.logical_id in ("UpdateLatestFunction", "DeleteTombstoneFunction"):
            event["content"] = {**(event.get("content") or {}), "altered": {"S": "x"}}
        return invoke()

    return hook


def _write_rival(stack, items, store, change_type) -> None:
    outputs = stack.outputs
    table, history = outputs["ChangeTableName"], outputs["HistoryTableName"]
    dynamodb = stack.client("dynamodb")
    entity = "doc#diff"
    latest = store.fetch_latest_state(dynamodb, table, history, entity)
    rival = change_type(entityId=entity, operation="put", effectiveAt=latest["effectiveAt"] if latest else 0,
                        changeId=f"rival-{(latest or {}).get('version', 0) + 1}")
    version = (latest["version"] if latest else 0) + 1
    item = items.build_latest(rival, {"rival": True}, latest, version, 1, "arn:rival")
    store.write_latest(dynamodb, table, item, latest)
    store.put_history(dynamodb, history, items.history_of(item))


@contextlib.contextmanager
def faults(stack, scenario) -> Iterator[None]:
    from ..local.lambdas import fault_hook
    from .faults import Injector

    with contextlib.ExitStack() as stack_of_hooks:
        if scenario.rival_writes:
            stack_of_hooks.enter_context(fault_hook(stack.lambdas, _rival_hook(stack, scenario.rival_writes)))
        elif scenario.lost_then_unreadable:
            stack_of_hooks.enter_context(fault_hook(stack.lambdas, _lost_then_unreadable_hook()))
        elif scenario.altered:
            stack_of_hooks.enter_context(fault_hook(stack.lambdas, _altered_hook()))
        elif scenario.faults:
            stack_of_hooks.enter_context(Injector().around(stack.lambdas, scenario.faults))
        for logical_id, client, operation, times in scenario.throttles:
            function = stack.function(logical_id)
            stack.lambdas.load(function)
            stack_of_hooks.enter_context(Injector().throttle(function, operation, times, client=client))
        yield
