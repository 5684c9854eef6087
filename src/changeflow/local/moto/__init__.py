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

AWS's limits and semantics where stock moto is more lenient (``_install_aws_limits``, each citing its AWS
page, each shown by a test in tests/test_parity.py): execution names, the 256 KiB StartExecution input,
Express (names not deduped, no DescribeExecution/GetExecutionHistory/StopExecution/ListExecutions, the
five-minute limit), the execution log delivered to CloudWatch Logs per the LoggingConfiguration,
``States.MathRandom``'s exclusive end, and DynamoDB's number range and precision, 4 KB expressions and
key sizes in reads.
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
        scaled = max(0.0, seconds * cls.scale)
        _Virtual.add(max(0.0, seconds - scaled))
        return scaled


class _Termination:
    """Who waits for which execution, and which executions have ended. An ended execution leaves only its
    ARN in ``ended`` (the string its Execution already holds: a set slot, not an Event with its Condition
    and lock for every execution a long ``serve`` ever ran); an Event exists only while someone waits."""

    events: dict[str, threading.Event] = {}
    ended: set[str] = set()
    lock = threading.Lock()

    @classmethod
    def event(cls, execution_arn: str) -> threading.Event | None:
        """The event to wait on, or ``None`` when the execution has ended already."""
        with cls.lock:
            if execution_arn in cls.ended:
                return None
            return cls.events.setdefault(execution_arn, threading.Event())

    @classmethod
    def end(cls, execution_arn: str) -> None:
        with cls.lock:
            cls.ended.add(execution_arn)
            event = cls.events.pop(execution_arn, None)
        if event is not None:
            event.set()


def wait_for_termination(execution_arn: str, timeout: float) -> bool:
    """Block until the execution (started in this process) has ended; ``False`` on timeout."""
    event = _Termination.event(execution_arn)
    return True if event is None else event.wait(timeout)


def forget_terminations() -> None:
    """Drop the events of a stack's executions (a new stack reuses names, so it would reuse ARNs)."""
    with _Termination.lock:
        _Termination.events.clear()
        _Termination.ended.clear()


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
            from . import perf as moto_perf  # linear-cost indexes: same answers, no super-linear scans
            moto_perf.install()
        _patch_history_paging()
        _patch_execution_names()
        _patch_eventbridge_to_stepfunctions()
        _patch_start_time()
        _patch_termination()
        _patch_request_lock()
        _install_aws_limits()
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
            _Termination.end(self.execution.exec_arn)

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


# --- AWS's limits and semantics (issue 10): where moto 5.2.5 is more lenient than AWS ----------------------
# Each patch below makes moto do what the named AWS page says, and tests/test_parity.py shows each one
# failing on stock moto. Limits that moto 5.2.5 already enforces as AWS does are not patched (the parity
# table in the README lists them, with the test that pins them).

MAX_PAYLOAD_BYTES = 256 * 1024  # Step Functions: input or output of a task, state or execution
EXPRESS_MAX_SECONDS = 300  # Express workflows: maximum duration of an execution
EXPRESS_ARN_ERROR = "Invalid Arn: 'Resource type not valid in this context: express'"


class _Virtual:
    """Seconds an execution's thread was spared by the time scale (requested minus slept), so that limits
    on an execution's duration (the Express five minutes, TimeoutSeconds) count the time the definition
    asked for, not the compressed time."""

    skipped: dict[int, float] = {}
    lock = threading.Lock()

    @classmethod
    def add(cls, seconds: float) -> None:
        with cls.lock:
            ident = threading.get_ident()
            cls.skipped[ident] = cls.skipped.get(ident, 0.0) + seconds

    @classmethod
    def pop(cls, ident: int | None, keep: bool = True) -> float:
        with cls.lock:
            return cls.skipped.get(ident, 0.0) if keep else cls.skipped.pop(ident, 0.0)


def _install_aws_limits() -> None:
    _patch_execution_name_rules()
    _patch_execution_input_limit()
    _patch_express_names_not_deduped()
    _patch_express_apis_unavailable()
    _patch_execution_log_delivery()
    _patch_express_duration_limit()
    _patch_math_random_end_exclusive()
    _patch_dynamodb_number_limits()
    _patch_dynamodb_expression_size()
    _patch_dynamodb_key_size_on_reads()


def _patch_execution_name_rules() -> None:
    """StartExecution ``name``: 1-80 characters, none of white space, brackets ``< > { } [ ]``, wildcards
    ``? *``, the specials ``" # % \\ ^ | ~ ` $ & , ; : /``, control characters (U+0000-001F, U+007F-009F),
    U+FFFE-FFFF or surrogates. https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html
    moto's own backend has this check (``_validate_name``) but its Step Functions interpreter never calls it."""
    from moto.stepfunctions.exceptions import InvalidName, ValidationException
    from moto.stepfunctions.parser import models

    backend = models.StepFunctionsParserBackend
    original = _ORIGINALS.setdefault("start_execution_names", backend.start_execution)

    def start_execution(self, state_machine_arn, name=None, *args, **kwargs):
        if name is not None:
            if len(name) == 0:
                raise ValidationException("1 validation error detected: Value '' at 'name' failed to satisfy "
                                          "constraint: Member must have length greater than or equal to 1")
            self._validate_name(name)  # the listed characters and the 80-character limit
            if any(c.isspace() or 0xFFFE <= ord(c) <= 0xFFFF or 0xD800 <= ord(c) <= 0xDFFF for c in name):
                raise InvalidName("Invalid Name: '" + name + "'")
        return original(self, state_machine_arn, name, *args, **kwargs)

    backend.start_execution = start_execution


def _patch_execution_input_limit() -> None:
    """StartExecution ``input``: at most 256 KiB as UTF-8 ("Length constraints apply to the payload size,
    and are expressed as bytes in UTF-8 encoding"); AWS refuses a larger one at the API, so no execution
    starts. Stock moto starts it and fails it at its first state.
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html
    https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html (256 KiB per task, state, execution)"""
    from moto.stepfunctions.exceptions import ValidationException
    from moto.stepfunctions.parser import models

    backend = models.StepFunctionsParserBackend
    original = _ORIGINALS.setdefault("start_execution_input", backend.start_execution)

    def start_execution(self, state_machine_arn, name=None, execution_input=None, *args, **kwargs):
        if execution_input is not None and len(execution_input.encode("utf-8")) > MAX_PAYLOAD_BYTES:
            raise ValidationException(
                "1 validation error detected: Value at 'input' failed to satisfy constraint: "
                f"Member must have length less than or equal to {MAX_PAYLOAD_BYTES}")
        return original(self, state_machine_arn, name, execution_input, *args, **kwargs)

    backend.start_execution = start_execution


def _is_express_arn(arn: Any) -> bool:
    return isinstance(arn, str) and ":express:" in arn


def _patch_express_names_not_deduped() -> None:
    """Express: StartExecution never dedupes names (no idempotency, no ExecutionAlreadyExists), and each
    execution gets its own ARN ``arn:<partition>:states:<region>:<account>:express:<machine>:<name>:<id>``.
    https://docs.aws.amazon.com/step-functions/latest/dg/choosing-workflow-type.html (Express: at-least-once;
    execution names are not unique). Witness: LocalStack's recorded AWS response
    tests/aws/services/stepfunctions/v2/test_sfn_api_express.snapshot.json (the ``express:`` ARN)."""
    import uuid

    from moto.stepfunctions import models as base_models
    from moto.stepfunctions.parser import models

    original_dedupe = _ORIGINALS.setdefault("name_idempotency", base_models.StateMachine._handle_name_input_idempotency)

    def _handle_name_input_idempotency(self, name, execution_input):
        if getattr(self, "type", "STANDARD") == "EXPRESS":
            return None
        return original_dedupe(self, name, execution_input)

    base_models.StateMachine._handle_name_input_idempotency = _handle_name_input_idempotency

    original_execution = _ORIGINALS.setdefault("parser_execution_class", models.Execution)

    class ExpressAwareExecution(original_execution):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            machine = kwargs.get("state_machine")
            if getattr(machine, "type", "STANDARD") == "EXPRESS" and ":execution:" in kwargs.get("exec_arn", ""):
                kwargs["exec_arn"] = kwargs["exec_arn"].replace(":execution:", ":express:", 1) + ":" + str(uuid.uuid4())
            super().__init__(*args, **kwargs)

    models.Execution = ExpressAwareExecution


def _patch_express_apis_unavailable() -> None:
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
        original = _ORIGINALS.setdefault(f"response_{action}", getattr(response, action))

        def refuse_express(self, _original=original):
            if _is_express_arn(self._get_param("executionArn")):
                raise InvalidArn(EXPRESS_ARN_ERROR)
            return _original(self)

        setattr(response, action, refuse_express)

    original_list = _ORIGINALS.setdefault("response_list_executions", response.list_executions)

    def list_executions(self):
        machine = self.stepfunction_backend.describe_state_machine(self._get_param("stateMachineArn"))
        if getattr(machine, "type", "STANDARD") == "EXPRESS":
            raise AWSError("This operation is not supported by this type of state machine",
                           "StateMachineTypeNotSupported")
        return original_list(self)

    response.list_executions = list_executions


def _patch_execution_log_delivery() -> None:
    """The state machine's LoggingConfiguration delivers each execution's events to its CloudWatch Logs
    group, one JSON record per event (id, type, details, previous_event_id, event_timestamp,
    execution_arn), filtered by the level (ALL, ERROR, FATAL) and without input and output when
    includeExecutionData is false. https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html
    Stock moto has the pieces (from LocalStack) but never starts a logging session, and its record would
    not be a valid log event."""
    import json

    from moto.stepfunctions.parser.asl.eval.event import logging as sfn_logging
    from moto.stepfunctions.parser.backend import execution

    session_class = sfn_logging.CloudWatchLoggingSession
    configuration_class = sfn_logging.CloudWatchLoggingConfiguration
    original_init = _ORIGINALS.setdefault("execution_init", execution.Execution.__init__)

    def __init__(self, *args, **kwargs):
        machine = kwargs.get("state_machine")
        config = getattr(machine, "loggingConfiguration", None) or {}
        if kwargs.get("cloud_watch_logging_session") is None and config.get("level", "OFF") != "OFF":
            config = {"includeExecutionData": False, **config}
            configuration = configuration_class.from_logging_configuration(
                state_machine_arn=machine.arn, logging_configuration=config)
            if configuration is not None:
                now = datetime.datetime.now(tz=datetime.timezone.utc)
                # CloudWatch Logs stream names cannot hold ':' (moto's default is the machine's ARN)
                configuration.log_stream_name = (
                    f"states/{machine.name}/{now:%Y-%m-%d-%H-%M}/{kwargs['exec_arn'].rsplit(':', 1)[-1][:36]}")
                kwargs["cloud_watch_logging_session"] = session_class(
                    execution_arn=kwargs["exec_arn"], configuration=configuration)
        original_init(self, *args, **kwargs)

    execution.Execution.__init__ = __init__

    def publish_history_log(self, history_log):
        when = history_log["event_timestamp"]
        if not isinstance(when, datetime.datetime):
            when = datetime.datetime.fromisoformat(str(when))
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        timestamp = int(when.timestamp() * 1000)
        record = {
            "id": history_log["id"],
            "type": str(getattr(history_log["type"], "value", history_log["type"])),
            "details": history_log.get("details", {}),
            "previous_event_id": history_log["previous_event_id"],
            "event_timestamp": str(timestamp),
            "execution_arn": history_log["execution_arn"],
        }
        message = json.dumps(record, separators=(",", ":"), default=str)
        # moto's logs backend is not thread-safe: executions log concurrently, and a FilterLogEvents request
        # iterates the streams a first record creates
        with API_LOCK:
            self._publish_history_log_or_setup(log_events=[{"timestamp": timestamp, "message": message}])

    def _put_events(self, log_events):
        from moto.logs.exceptions import ResourceNotFoundException

        try:
            self._logs_client.put_log_events(self.configuration.log_group_name, self.configuration.log_stream_name,
                                             log_events)
        except ResourceNotFoundException:
            return False
        return True

    def _setup(self):
        from moto.logs.exceptions import ResourceAlreadyExistsException, ResourceNotFoundException

        try:
            self._logs_client.create_log_stream(self.configuration.log_group_name, self.configuration.log_stream_name)
        except ResourceAlreadyExistsException:
            pass
        except ResourceNotFoundException:
            return False  # no such log group: AWS would have refused the LoggingConfiguration
        return True

    session_class.publish_history_log = publish_history_log
    session_class._put_events = _put_events
    session_class._setup = _setup


TIMED_OUT_GRACE_SECONDS = 5.0  # wall time a timed-out execution's worker gets to record ExecutionTimedOut


def _patch_express_duration_limit() -> None:
    """An Express execution that runs past five minutes ends TIMED_OUT (ExecutionTimedOut).
    https://docs.aws.amazon.com/step-functions/latest/dg/choosing-workflow-type.html (Express: up to five
    minutes) and https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html. Time is the
    definition's time: with a compressed clock, the Waits and back-offs count for what they asked
    (``_Virtual``), as does the state machine's own TimeoutSeconds. Stock moto lets an Express execution
    run for ever."""
    import time

    from moto.stepfunctions.parser.asl.component.program import program
    from moto.stepfunctions.parser.utils import TMP_THREADS

    cls = program.Program
    _ORIGINALS.setdefault("program_eval", cls.eval)

    def eval(self, env):  # noqa: A001 - moto's method name
        limit = self.timeout_seconds.timeout_seconds if self.timeout_seconds else None
        if not env.is_frame():
            execution_arn = env.states.context_object.context_object_data.get("Execution", {}).get("Id")
            if _is_express_arn(execution_arn):
                limit = min(limit or EXPRESS_MAX_SECONDS, EXPRESS_MAX_SECONDS)
        env.next_state_name = self.start_at.start_at_name

        def run():
            # a thread's ident is reused once it ends: forget what an earlier thread with this ident was
            # spared, or a new execution would start with another's virtual time (and time out at once)
            _Virtual.pop(threading.get_ident(), keep=False)
            super(cls, self).eval(env)

        worker = threading.Thread(target=run, daemon=True)
        TMP_THREADS.append(worker)
        worker.start()
        if limit is None:
            try:
                worker.join()
            finally:
                _Virtual.pop(worker.ident, keep=False)
            return
        started = time.monotonic()
        try:
            while worker.is_alive():
                remaining = limit - (time.monotonic() - started) - _Virtual.pop(worker.ident)
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
            _Virtual.pop(worker.ident, keep=False)

    cls.eval = eval


def _patch_math_random_end_exclusive() -> None:
    """``States.MathRandom(start, end)``: a random integer from start (inclusive) to end (exclusive).
    https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html#asl-intrsc-func-math-operation
    Stock moto's ``randint`` includes the end."""
    import random

    from moto.stepfunctions.parser.asl.component.intrinsic.function.statesfunction.math_operations import (
        math_random,
    )

    cls = math_random.MathRandom
    _ORIGINALS.setdefault("math_random", cls._eval_body)

    def _eval_body(self, env):
        self.argument_list.eval(env=env)
        args = env.stack.pop()
        seed = None
        if self.argument_list.size == 3:
            seed = self._validate_integer_value(args.pop(), "seed")
        end = self._validate_integer_value(args.pop(), "end")
        start = self._validate_integer_value(args.pop(), "start")
        env.stack.append(random.Random(seed).randrange(start, end))

    cls._eval_body = _eval_body


def _walk(value: Any, visit: Callable[[dict], None]) -> None:
    if isinstance(value, dict):
        visit(value)
        for child in value.values():
            _walk(child, visit)
    elif isinstance(value, list):
        for child in value:
            _walk(child, visit)


_DYNAMODB_CHECKS: list[Callable[[Any], None]] = []
_DYNAMODB_VISITS: list[Callable[[dict], None]] = []


def _wrap_dynamodb_actions(check: Callable[[Any], None] | None = None, visit: Callable[[dict], None] | None = None) -> None:
    """Run ``check(handler)``, and ``visit(node)`` on every object of the request, before each DynamoDB
    data action, inside moto's error handling (a raised ValidationException becomes the HTTP 400 the
    client sees, and nothing is written). One wrapper and one walk of the request for every check: they run
    under the request lock."""
    from moto.dynamodb import responses

    if check is not None:
        _DYNAMODB_CHECKS.append(check)
    if visit is not None:
        _DYNAMODB_VISITS.append(visit)
    if "dynamodb_actions" in _ORIGINALS:
        return
    handler = responses.DynamoHandler
    _ORIGINALS["dynamodb_actions"] = True

    def visit_all(node: dict) -> None:
        for each in _DYNAMODB_VISITS:
            each(node)

    for action in ("put_item", "update_item", "delete_item", "get_item", "query", "scan", "batch_write_item",
                   "batch_get_item", "transact_write_items", "transact_get_items"):
        original = _ORIGINALS.setdefault(f"dynamodb_{action}", getattr(handler, action))

        def checked(self, _original=original):
            _walk(self.body, visit_all)
            for each in _DYNAMODB_CHECKS:
                each(self)
            return _original(self)

        setattr(handler, action, checked)


def _patch_dynamodb_number_limits() -> None:
    """A Number has at most 38 significant digits, and a magnitude from 1E-130 to
    9.9999999999999999999999999999999999999E+125; leading and trailing zeros do not count.
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html#HowItWorks.DataTypes.Number
    Stock moto checks the range through a float (so 1E+126 passes) and never the precision, and not at
    all in UpdateItem's values."""
    import decimal

    from moto.dynamodb.exceptions import MockValidationException

    def check_number(text: str) -> None:
        try:
            number = decimal.Decimal(text.strip() if text == text.strip() else "x")
        except decimal.InvalidOperation:
            raise MockValidationException(f"The parameter cannot be converted to a numeric value: {text}") from None
        if not number.is_finite():
            raise MockValidationException(f"The parameter cannot be converted to a numeric value: {text}")
        if number.is_zero():
            return
        digits = "".join(map(str, number.as_tuple().digits)).strip("0")
        if len(digits) > 38:
            raise MockValidationException("Attempting to store more than 38 significant digits in a Number")
        if number.adjusted() > 125:
            raise MockValidationException(
                "Number overflow. Attempting to store a number with magnitude larger than supported range")
        if number.adjusted() < -130:
            raise MockValidationException(
                "Number underflow. Attempting to store a number with magnitude smaller than supported range")

    def visit(node: dict) -> None:
        if "N" in node and isinstance(node["N"], str):
            check_number(node["N"])
        if "NS" in node and isinstance(node["NS"], list):
            for text in node["NS"]:
                if isinstance(text, str):
                    check_number(text)

    _wrap_dynamodb_actions(visit=visit)


def _patch_dynamodb_expression_size() -> None:
    """Each expression string (condition, update, key condition, filter, projection) is at most 4 KB.
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-expression-parameters
    Stock moto accepts any length."""
    from moto.dynamodb.exceptions import MockValidationException

    kinds = ("ConditionExpression", "UpdateExpression", "KeyConditionExpression", "FilterExpression",
             "ProjectionExpression")

    def visit(node: dict) -> None:
        for kind in kinds:
            if kind in node and isinstance(node[kind], str) and len(node[kind]) > 1024:  # 4 bytes a character at most
                size = len(node[kind].encode("utf-8"))
                if size > 4096:
                    raise MockValidationException(
                        f"Invalid {kind}: Expression size has exceeded the maximum allowed size; expression size: {size}")

    _wrap_dynamodb_actions(visit=visit)


def _patch_dynamodb_key_size_on_reads() -> None:
    """The partition key is at most 2,048 bytes and the sort key 1,024 bytes, in every request that names
    an item by its key, not only in the writes that store one.
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys
    Stock moto checks them when an item is stored, so a GetItem/DeleteItem with an oversized key answers
    "not found" where AWS refuses the request."""
    from moto.dynamodb.exceptions import HashKeyTooLong, RangeKeyTooLong
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import HASH_KEY_MAX_LENGTH, RANGE_KEY_MAX_LENGTH

    def check_key(handler, table_name: Any, key: Any) -> None:
        if not isinstance(key, dict) or not isinstance(table_name, str):
            return
        try:
            table = handler.dynamodb_backend.get_table(table_name)
        except Exception:  # noqa: BLE001 - an unknown table is the action's own error to report
            return
        hash_value = key.get(table.hash_key_attr)
        if isinstance(hash_value, dict) and DynamoType(hash_value).size() > HASH_KEY_MAX_LENGTH:
            raise HashKeyTooLong
        range_value = key.get(table.range_key_attr) if table.range_key_attr else None
        if isinstance(range_value, dict) and DynamoType(range_value).size() > RANGE_KEY_MAX_LENGTH:
            raise RangeKeyTooLong

    def check(handler) -> None:
        body = handler.body
        check_key(handler, body.get("TableName"), body.get("Key"))
        for entry in body.get("TransactItems", []) or []:
            for request in entry.values() if isinstance(entry, dict) else []:
                if isinstance(request, dict):
                    check_key(handler, request.get("TableName"), request.get("Key"))
        for table_name, request in (body.get("RequestItems") or {}).items():
            for key in request.get("Keys", []) if isinstance(request, dict) else []:
                check_key(handler, table_name, key)

    _wrap_dynamodb_actions(check=check)
