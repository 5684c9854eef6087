"""Express workflows as AWS runs them: names are not deduplicated and each execution has its own
``express:`` ARN; DescribeExecution, GetExecutionHistory, StopExecution and ListExecutions refuse them (the
execution log is their history); and an execution past five minutes, or past its state machine's
``TimeoutSeconds``, ends TIMED_OUT, counting the time the definition asked for. Each patch names its page.
https://docs.aws.amazon.com/step-functions/latest/dg/choosing-workflow-type.html"""

from __future__ import annotations

import threading
from typing import Any

from ..originals import ORIGINALS
from .clock import Virtual

EXPRESS_MAX_SECONDS = 300  # Express workflows: maximum duration of an execution
EXPRESS_ARN_ERROR = "Invalid Arn: 'Resource type not valid in this context: express'"


TIMED_OUT_GRACE_SECONDS = 5.0  # wall time a timed-out execution's worker gets to record ExecutionTimedOut


def is_express_arn(arn: Any) -> bool:
    return isinstance(arn, str) and ":express:" in arn


def patch_express_names_not_deduped() -> None:
    """Express: StartExecution never dedupes names (no idempotency, no ExecutionAlreadyExists), and each
    execution gets its own ARN ``arn:<partition>:states:<region>:<account>:express:<machine>:<name>:<id>``.
    https://docs.aws.amazon.com/step-functions/latest/dg/choosing-workflow-type.html (Express: at-least-once;
    execution names are not unique). Witness: LocalStack's recorded AWS response
    tests/aws/services/stepfunctions/v2/test_sfn_api_express.snapshot.json (the ``express:`` ARN)."""
    import uuid

    from moto.stepfunctions import models as base_models
    from moto.stepfunctions.parser import models

    original_dedupe = ORIGINALS.setdefault("name_idempotency", base_models.StateMachine._handle_name_input_idempotency)

    def _handle_name_input_idempotency(self, name, execution_input):
        if getattr(self, "type", "STANDARD") == "EXPRESS":
            return None
        return original_dedupe(self, name, execution_input)

    base_models.StateMachine._handle_name_input_idempotency = _handle_name_input_idempotency

    original_execution = ORIGINALS.setdefault("parser_execution_class", models.Execution)

    class ExpressAwareExecution(original_execution):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            machine = kwargs.get("state_machine")
            if getattr(machine, "type", "STANDARD") == "EXPRESS" and ":execution:" in kwargs.get("exec_arn", ""):
                kwargs["exec_arn"] = kwargs["exec_arn"].replace(":execution:", ":express:", 1) + ":" + str(uuid.uuid4())
            super().__init__(*args, **kwargs)

    models.Execution = ExpressAwareExecution


def patch_express_apis_unavailable() -> None:
    """Express: DescribeExecution, GetExecutionHistory and StopExecution refuse an Express execution's ARN
    (InvalidArn), and ListExecutions refuses an Express state machine (StateMachineTypeNotSupported); an
    Express execution's history is in its execution log (CloudWatch Logs).
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_DescribeExecution.html
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_GetExecutionHistory.html
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_ListExecutions.html
    Witness: LocalStack's test_sfn_api_express.snapshot.json (test_start_async_describe_history_execution)."""
    from moto.core.exceptions import AWSError
    from moto.stepfunctions import responses
    from moto.stepfunctions.exceptions import InvalidArn

    response = responses.StepFunctionResponse
    for action in ("describe_execution", "get_execution_history", "stop_execution"):
        original = ORIGINALS.setdefault(f"response_{action}", getattr(response, action))

        def refuse_express(self, _original=original):
            if is_express_arn(self._get_param("executionArn")):
                raise InvalidArn(EXPRESS_ARN_ERROR)
            return _original(self)

        setattr(response, action, refuse_express)

    original_list = ORIGINALS.setdefault("response_list_executions", response.list_executions)

    def list_executions(self):
        machine = self.stepfunction_backend.describe_state_machine(self._get_param("stateMachineArn"))
        if getattr(machine, "type", "STANDARD") == "EXPRESS":
            raise AWSError("This operation is not supported by this type of state machine",
                           "StateMachineTypeNotSupported")
        return original_list(self)

    response.list_executions = list_executions


def patch_express_duration_limit() -> None:
    """An Express execution that runs past five minutes ends TIMED_OUT (ExecutionTimedOut).
    https://docs.aws.amazon.com/step-functions/latest/dg/choosing-workflow-type.html (Express: up to five
    minutes) and https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html. Time is the
    definition's time: with a compressed clock, the Waits and back-offs count for what they asked
    (``Virtual``), as does the state machine's own TimeoutSeconds. Stock moto lets an Express execution
    run for ever."""
    import time

    from moto.stepfunctions.parser.asl.component.program import program
    from moto.stepfunctions.parser.utils import TMP_THREADS

    cls = program.Program
    ORIGINALS.setdefault("program_eval", cls.eval)

    def eval(self, env):  # noqa: A001 - moto's method name
        limit = self.timeout_seconds.timeout_seconds if self.timeout_seconds else None
        if not env.is_frame():
            execution_arn = env.states.context_object.context_object_data.get("Execution", {}).get("Id")
            if is_express_arn(execution_arn):
                limit = min(limit or EXPRESS_MAX_SECONDS, EXPRESS_MAX_SECONDS)
        env.next_state_name = self.start_at.start_at_name

        def run():
            # a thread's ident is reused once it ends: forget what an earlier thread with this ident was
            # spared, or a new execution would start with another's virtual time (and time out at once)
            Virtual.pop(threading.get_ident(), keep=False)
            super(cls, self).eval(env)

        if limit is None and not env.is_frame():
            # nothing to time (a Standard execution without TimeoutSeconds): no thread to watch, the
            # program runs in the execution's own thread (a thread and two switches less per execution)
            run()
            Virtual.pop(threading.get_ident(), keep=False)
            return
        worker = threading.Thread(target=run, daemon=True)
        TMP_THREADS.append(worker)
        worker.start()
        if limit is None:
            try:
                worker.join()
            finally:
                Virtual.pop(worker.ident, keep=False)
            return
        started = time.monotonic()
        try:
            while worker.is_alive():
                remaining = limit - (time.monotonic() - started) - Virtual.pop(worker.ident)
                if remaining <= 0:
                    env.set_timed_out()
                    # the worker records ExecutionTimedOut when it sees the state (a Wait wakes at once):
                    # let it, so that the execution is signalled as ended after its last event, not before
                    # (a waiter read the log without it, ~1 run in 20 on a loaded machine). A Lambda task
                    # still in flight can hold the worker longer than this grace.
                    worker.join(timeout=TIMED_OUT_GRACE_SECONDS)
                    return
                worker.join(timeout=min(remaining, 0.02))
        finally:
            Virtual.pop(worker.ident, keep=False)

    cls.eval = eval
