"""RedriveExecution, which moto 5.2.5 does not have (its backend has no such action: a call is refused as
not implemented). As AWS documents it:

- Only a Standard execution that did not succeed (FAILED, ABORTED or TIMED_OUT) can be redriven; any other
  gets ``ExecutionNotRedrivable``.
- "it continues the failed execution from the unsuccessful step and uses the same input. Step Functions
  preserves the results and execution history of the successful steps, and doesn't rerun these steps":
  the state the execution entered last and never left runs again, with the input it entered with.
- "Redriven executions use the same state machine definition and execution ARN as the original execution
  attempt": the execution's own snapshot of the definition, whatever the machine holds now.
- The history goes on after the earlier events: ``ExecutionRedriven`` (``redriveCount``), then the rerun's
  events. ``$$.Execution.RedriveCount`` is the number of redrives, and DescribeExecution reports
  ``redriveCount`` and ``redriveDate``.

https://docs.aws.amazon.com/step-functions/latest/apireference/API_RedriveExecution.html
https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html
https://docs.aws.amazon.com/step-functions/latest/apireference/API_ExecutionRedrivenEventDetails.html
https://docs.aws.amazon.com/step-functions/latest/dg/input-output-contextobject.html

Not modelled: the 14-day redrivable period, Map and Parallel branches (changeflow has none)."""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any

from ..originals import ORIGINALS
from .termination import Termination

REDRIVABLE = ("FAILED", "ABORTED", "TIMED_OUT")


def unsuccessful_state(events: list[dict[str, Any]]) -> tuple[str, Any] | None:
    """The state the execution entered last and did not exit, and the input it entered with."""
    entered: list[tuple[str, Any]] = []
    for event in events:
        kind = str(getattr(event["type"], "value", event["type"]))
        if kind.endswith("StateEntered"):
            details = event["stateEnteredEventDetails"]
            entered.append((details["name"], json.loads(details.get("input") or "null")))
        elif kind.endswith("StateExited"):
            name = event["stateExitedEventDetails"]["name"]
            for i in range(len(entered) - 1, -1, -1):
                if entered[i][0] == name:
                    del entered[i]
                    break
    return entered[-1] if entered else None


def patch_redrive_execution() -> None:
    from moto.core.exceptions import AWSError
    from moto.core.responses import ActionResult
    from moto.stepfunctions import responses
    from moto.stepfunctions.parser import models
    from moto.stepfunctions.parser.api import ExecutionRedrivenEventDetails, ExecutionStatus, HistoryEventType
    from moto.stepfunctions.parser.asl.component.common.flow.start_at import StartAt
    from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
    from moto.stepfunctions.parser.asl.eval.event.event_manager import EventHistoryContext
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    from .execution_log import logging_session

    class RedriveWorker(ExecutionWorker):
        """The execution's interpreter again, entering ``state`` with ``state_input`` after ``earlier``."""

        def __init__(self, *args, state: str, state_input: Any, earlier: list, redrive_count: int,
                     redrive_date: datetime.datetime, **kwargs):
            super().__init__(*args, **kwargs)
            self.state, self.state_input, self.earlier = state, state_input, earlier
            self.redrive_count, self.redrive_date = redrive_count, redrive_date

        def _get_evaluation_entrypoint(self):
            program = copy.copy(super()._get_evaluation_entrypoint())  # the states are shared, unchanged
            program.start_at = StartAt(self.state)
            return program

        def _get_evaluation_environment(self):
            env = super()._get_evaluation_environment()
            context = env.states.context_object.context_object_data["Execution"]
            context["RedriveCount"] = self.redrive_count
            context["RedriveTime"] = self.redrive_date.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            env.states.reset(input_value=self.state_input)
            manager = env.event_manager
            manager._history_event_list.extend(self.earlier)
            last = max((int(e["id"]) for e in self.earlier), default=0)
            manager._event_id_gen._next_id = last + 1
            env.event_history_context = EventHistoryContext(previous_event_id=last)
            return env

        def _execution_logic(self):
            program = self._get_evaluation_entrypoint()
            self.env = self._get_evaluation_environment()
            self.env.event_manager.add_event(
                context=self.env.event_history_context,
                event_type=HistoryEventType.ExecutionRedriven,
                event_details=EventDetails(executionRedrivenEventDetails=ExecutionRedrivenEventDetails(
                    redriveCount=self.redrive_count)),
            )
            program.eval(self.env)
            self._execution_communication.terminated()

    def redrive_execution(self, execution_arn: str):
        execution = self.describe_execution(execution_arn)  # ExecutionDoesNotExist, InvalidArn
        status = getattr(execution.exec_status, "value", execution.exec_status)
        if str(getattr(execution.sm_type, "value", execution.sm_type)) != "STANDARD":
            raise AWSError("Redrive is not supported for EXPRESS state machines", "ExecutionNotRedrivable")
        if status not in REDRIVABLE:
            raise AWSError(f"Execution {execution_arn} is {status} and cannot be redriven",
                           "ExecutionNotRedrivable")
        earlier = execution.exec_worker.env.event_manager.get_event_history()
        start_at = json.loads(execution.state_machine.definition)["StartAt"]
        state, state_input = unsuccessful_state(earlier) or (start_at, execution.input_data)
        count = getattr(execution, "redrive_count", 0) + 1
        now = datetime.datetime.now(tz=datetime.timezone.utc)
        base = execution._get_start_execution_worker()  # the evaluation details, from the execution itself
        worker = RedriveWorker(
            evaluation_details=base._evaluation_details,
            exec_comm=execution._get_start_execution_worker_comm(),
            cloud_watch_logging_session=logging_session(execution.state_machine, execution.exec_arn),
            activity_store=execution._activity_store or {},
            state=state, state_input=state_input, earlier=earlier, redrive_count=count, redrive_date=now,
        )
        with Termination.lock:
            Termination.ended.discard(execution.exec_arn)
        execution.redrive_count, execution.redrive_date = count, now
        execution.exec_status, execution.stop_date = ExecutionStatus.RUNNING, None
        execution.error = execution.cause = execution.output = None
        execution.exec_worker = worker
        worker.start()
        return execution

    models.StepFunctionsParserBackend.redrive_execution = redrive_execution

    def redrive_execution_response(self):
        execution = self.stepfunction_backend.redrive_execution(self._get_param("executionArn"))
        return ActionResult({"redriveDate": execution.redrive_date})

    responses.StepFunctionResponse.redrive_execution = redrive_execution_response

    original_describe = ORIGINALS.setdefault("redrive_describe_execution",
                                             responses.StepFunctionResponse.describe_execution)

    def describe_execution(self):
        result = original_describe(self)
        execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
        if isinstance(result.result, dict):
            result.result["redriveCount"] = getattr(execution, "redrive_count", 0)
            if getattr(execution, "redrive_date", None) is not None:
                result.result["redriveDate"] = execution.redrive_date
        return result

    responses.StepFunctionResponse.describe_execution = describe_execution
