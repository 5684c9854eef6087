"""What the embedded stack changes in moto 5.2's Step Functions interpreter, and why. Each patch keeps
what the interpreter does (the same states, transitions, retries, history events) and changes only how
the world around it behaves:

- Lambda dispatch: the interpreter's Lambda client is a real boto3 client whose ``Invoke`` is answered
  in-process by the function's handler (``before-call.lambda.Invoke``); clients are made once per
  region and service instead of once per task (boto3 client creation dominated stock executions).
- Lambda error names: a failed ``Invoke`` request becomes ``Lambda.<Code>`` (``Lambda.ServiceException``)
  as on AWS; stock moto names every such failure ``Exception``.
- Time: retry back-offs and Wait states sleep ``seconds * time_scale``; the definition is untouched.
- Parse caches: a definition is parsed once, not once per execution (with every component's lazily made
  heap key made up front, so concurrent executions sharing the tree cannot race on it), and each JSONPath
  expression once, not once per evaluation.
- History paging: ``GetExecutionHistory`` honours ``maxResults``/``nextToken``/``reverseOrder`` as AWS
  does (stock moto returns everything at once); a nameless ``StartExecution`` gets a UUID name as on AWS
  (stock moto names it ``None``).
- ``$$.Execution.StartTime`` is the ISO-8601 string AWS gives, not a Python datetime.
- Termination: each execution sets an event when it ends, so waiting needs no polling.
- EventBridge to Step Functions: a rule's ``states`` target starts an execution with the target's
  ``Input``/``InputPath``/``InputTransformer`` (stock moto drops such targets); an event that cannot start
  one goes to the target's ``DeadLetterConfig`` queue with the error, as EventBridge does.
- Atomic requests: every AWS API request moto serves (in-process or over HTTP) holds one lock, so
  concurrent executions see DynamoDB apply each request atomically; moto is not thread-safe.
"""

from __future__ import annotations

import datetime
import sys
import threading
import types
from typing import Any, Callable

_ORIGINALS: dict[str, Any] = {}
_INSTALL_LOCK = threading.Lock()
API_LOCK = threading.RLock()


class Atomicity:
    """``enabled`` is the embedded stack's guarantee; tests switch it off only to show what it prevents."""

    enabled: bool = True


class Clock:
    """The embedded stack's time scale: 1 sleeps for real, 0.001 turns a 30 s back-off into 30 ms."""

    scale: float = 1.0
    slept: list[tuple[str, float]] = []  # (kind, requested seconds), most recent last, bounded

    @classmethod
    def record(cls, kind: str, seconds: float) -> float:
        cls.slept.append((kind, float(seconds)))
        del cls.slept[:-1000]
        return max(0.0, seconds * cls.scale)


class _Termination:
    events: dict[str, threading.Event] = {}
    lock = threading.Lock()

    @classmethod
    def event(cls, execution_arn: str) -> threading.Event:
        with cls.lock:
            return cls.events.setdefault(execution_arn, threading.Event())


def wait_for_termination(execution_arn: str, timeout: float) -> bool:
    """Block until the execution (started in this process) has ended; ``False`` on timeout."""
    return _Termination.event(execution_arn).wait(timeout)


def forget_terminations() -> None:
    """Drop the events of a stack's executions (a new stack reuses names, so it would reuse ARNs)."""
    with _Termination.lock:
        _Termination.events.clear()


def install(invoke: Callable[..., Any], caches: bool = True) -> None:
    """Install every patch once per process. ``invoke`` answers ``before-call.lambda.Invoke``.
    ``caches=False`` leaves out the caches (clients, parsed definitions, JSONPath), for measuring what
    they save; nothing else depends on them."""
    with _INSTALL_LOCK:
        if "installed" in _ORIGINALS:
            if _ORIGINALS["caches"] != caches:
                raise RuntimeError("moto is already patched with caches=%s in this process" % _ORIGINALS["caches"])
            _ORIGINALS["invoke"][0] = invoke
            return
        _ORIGINALS["caches"] = caches
        _ORIGINALS["invoke"] = [invoke]
        _patch_lambda_clients(cache=caches)
        _patch_lambda_error_names()
        _patch_time()
        if caches:
            _patch_parse_cache()
            _patch_jsonpath_cache()
            from . import moto_perf  # linear-cost indexes: same answers, no super-linear scans
            moto_perf.install()
        _patch_history_paging()
        _patch_execution_names()
        _patch_eventbridge_to_stepfunctions()
        _patch_start_time()
        _patch_termination()
        _patch_request_lock()
        _ORIGINALS["installed"] = True


def _patch_lambda_clients(cache: bool) -> None:
    import moto.stepfunctions.parser.asl.parse.preprocessor  # noqa: F401 - imports every task module
    import moto.stepfunctions.parser.asl.utils.boto_client as boto_client

    original = _ORIGINALS.setdefault("boto_client_for", boto_client.boto_client_for)
    clients: dict[tuple, Any] = {}
    lock = threading.Lock()

    def dispatch(**kwargs):
        return _ORIGINALS["invoke"][0](**kwargs)

    def boto_client_for(region: str, service: str, state_credentials: Any = None):
        key = (region, service, boto_client.botocore_stubber.enabled)
        with lock:
            client = clients.get(key) if cache else None
            if client is None:
                client = original(region=region, service=service, state_credentials=state_credentials)
                if service == "lambda":
                    client.meta.events.register_first("before-call.lambda.Invoke", dispatch)
                if cache:
                    clients[key] = client
        return client

    for module in list(sys.modules.values()):
        if (
            isinstance(module, types.ModuleType)
            and module.__name__.startswith("moto.stepfunctions.parser")
            and getattr(module, "boto_client_for", None) is original
        ):
            module.boto_client_for = boto_client_for


def _patch_lambda_error_names() -> None:
    from botocore.exceptions import ClientError
    from moto.stepfunctions.parser.api import HistoryEventType, LambdaFunctionFailedEventDetails
    from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_lambda
    from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

    task = state_task_lambda.StateTaskLambda
    original = _ORIGINALS.setdefault("lambda_from_error", task._from_error)

    def _from_error(self, env, ex):
        if not isinstance(ex, ClientError):
            return original(self, env, ex)
        error = ex.response.get("Error", {})
        name = f"Lambda.{error.get('Code', 'ServiceException')}"
        return FailureEvent(
            env=env,
            error_name=CustomErrorName(name),
            event_type=HistoryEventType.LambdaFunctionFailed,
            event_details=EventDetails(
                lambdaFunctionFailedEventDetails=LambdaFunctionFailedEventDetails(
                    error=name, cause=error.get("Message", "")
                )
            ),
        )

    task._from_error = _from_error


def _patch_time() -> None:
    import time as real_time

    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function

    class ScaledTime(types.ModuleType):
        def __getattr__(self, name):
            return getattr(real_time, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            real_time.sleep(Clock.record("retry", seconds))

    retrier_decl.time = ScaledTime("time")

    def _wait_interval(self, env, wait_seconds):
        # stock moto re-enters the wait until whole seconds have passed, which would undo the scale;
        # StopExecution still interrupts the wait through the same event.
        if wait_seconds > 0:
            env.program_state_event.wait(Clock.record("wait", wait_seconds))

    wait_function.WaitFunction._wait_interval = _wait_interval


def _patch_parse_cache() -> None:
    from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.backend import execution_worker

    programs: dict[str, Any] = {}
    lock = threading.Lock()

    def make_heap_keys(node: Any, seen: set) -> None:
        # retry counters and the like live in env.heap under each component's heap_key, made on first use
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, EvalComponent):
            node.heap_key  # noqa: B018 - the property makes the key
        if isinstance(node, (list, tuple, set)):
            children = node
        elif isinstance(node, dict):
            children = node.values()
        elif hasattr(node, "__dict__") and type(node).__module__.startswith("moto.stepfunctions"):
            children = vars(node).values()
        else:
            return
        for child in list(children):
            make_heap_keys(child, seen)

    def _get_evaluation_entrypoint(self):
        definition = self._evaluation_details.state_machine_details.definition
        with lock:
            program = programs.get(definition)
            if program is None:
                program = AmazonStateLanguageParser.parse(definition)[0]
                make_heap_keys(program, set())
                programs[definition] = program
        return program

    execution_worker.ExecutionWorker._get_evaluation_entrypoint = _get_evaluation_entrypoint


def _patch_jsonpath_cache() -> None:
    import functools

    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    for module in (result_path, json_path):
        if not hasattr(module.parse, "cache_info"):
            module.parse = functools.lru_cache(maxsize=4096)(module.parse)


def _patch_history_paging() -> None:
    from moto.core.responses import ActionResult
    from moto.stepfunctions import responses

    def get_execution_history(self):
        history = self.stepfunction_backend.get_execution_history(self._get_param("executionArn"))
        events = list(history["events"])
        if self._get_param("reverseOrder"):
            events.reverse()
        start = int(self._get_param("nextToken") or 0)
        size = int(self._get_param("maxResults") or 0) or 100
        page = {"events": events[start:start + size]}
        if start + size < len(events):
            page["nextToken"] = str(start + size)
        return ActionResult(page)

    responses.StepFunctionResponse.get_execution_history = get_execution_history


def _patch_execution_names() -> None:
    import uuid

    from moto.stepfunctions.parser import models

    backend = models.StepFunctionsParserBackend
    original = _ORIGINALS.setdefault("start_execution", backend.start_execution)

    def start_execution(self, state_machine_arn, name=None, *args, **kwargs):
        return original(self, state_machine_arn, name or str(uuid.uuid4()), *args, **kwargs)

    backend.start_execution = start_execution


def _patch_eventbridge_to_stepfunctions() -> None:
    import json
    import uuid

    import boto3
    from botocore.exceptions import ClientError
    from moto.events.models import EventTemplateParser, Rule
    from moto.utilities.arns import parse_arn

    original = _ORIGINALS.setdefault("send_to_targets", Rule.send_to_targets)

    def target_input(target: dict, event: dict) -> Any:
        if "Input" in target:
            return json.loads(target["Input"])
        if "InputTransformer" in target:
            transformer = target["InputTransformer"]
            return EventTemplateParser.parse(input_template=transformer.get("InputTemplate"),
                                             input_paths_map=transformer.get("InputPathsMap", {}), event=event)
        selected: Any = event
        for key in [k for k in target.get("InputPath", "$").lstrip("$").split(".") if k]:
            selected = selected[key]
        return selected

    def send_to_targets(self, original_event, transform_input=True):
        # stock moto raises NotImplementedError on a states target: give it the others only
        machines = [t for t in self.targets if parse_arn(t["Arn"]).service == "states"]
        others = [t for t in self.targets if t not in machines]
        if others:
            self.targets = others
            try:
                original(self, original_event, transform_input)
            finally:
                self.targets = others + machines
        if not machines or not self.event_pattern.matches_event(original_event):
            return
        for target in machines:
            arn = parse_arn(target["Arn"])
            try:
                boto3.client("stepfunctions", region_name=arn.region).start_execution(
                    stateMachineArn=target["Arn"], name=str(uuid.uuid4()),
                    input=json.dumps(target_input(target, original_event)))
            except (ClientError, KeyError, ValueError) as exc:
                dead_letters = target.get("DeadLetterConfig", {}).get("Arn")
                if not dead_letters:
                    continue
                code = exc.response["Error"]["Code"] if isinstance(exc, ClientError) else type(exc).__name__
                queue = parse_arn(dead_letters)
                sqs = boto3.client("sqs", region_name=queue.region)
                sqs.send_message(
                    QueueUrl=sqs.get_queue_url(QueueName=queue.resource_id)["QueueUrl"],
                    MessageBody=json.dumps(original_event, default=str),
                    MessageAttributes={
                        "RULE_ARN": {"DataType": "String", "StringValue": self.arn},
                        "TARGET_ARN": {"DataType": "String", "StringValue": target["Arn"]},
                        "ERROR_CODE": {"DataType": "String", "StringValue": code},
                        "ERROR_MESSAGE": {"DataType": "String", "StringValue": str(exc)[:1000]},
                    },
                )

    Rule.send_to_targets = send_to_targets


def _patch_start_time() -> None:
    from moto.stepfunctions.parser.backend import execution_worker

    worker = execution_worker.ExecutionWorker
    original = _ORIGINALS.setdefault("evaluation_environment", worker._get_evaluation_environment)

    def _get_evaluation_environment(self):
        env = original(self)
        execution = env.states.context_object.context_object_data["Execution"]
        start = execution.get("StartTime")
        if isinstance(start, datetime.datetime):
            execution["StartTime"] = (
                start.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            )
        return env

    worker._get_evaluation_environment = _get_evaluation_environment


def _patch_termination() -> None:
    from moto.stepfunctions.parser.backend import execution

    communication = execution.BaseExecutionWorkerCommunication
    original = _ORIGINALS.setdefault("terminated", communication.terminated)

    def terminated(self):
        try:
            original(self)
        finally:
            _Termination.event(self.execution.exec_arn).set()

    communication.terminated = terminated


def _patch_request_lock() -> None:
    from moto.core.responses import BaseResponse

    original = _ORIGINALS.setdefault("call_action", BaseResponse.call_action)

    def call_action(self):
        # StartSyncExecution runs a whole (Express) execution inside the request: holding the lock
        # there would block the execution's own DynamoDB requests made from other threads.
        if not Atomicity.enabled or "StartSyncExecution" in str(self.headers.get("X-Amz-Target", "")):
            return original(self)
        with API_LOCK:
            return original(self)

    BaseResponse.call_action = call_action
