"""Step Functions in moto 5.2.5 at a cost that does not grow with every execution ever run. Each patch
changes how fast moto answers, or how much memory it keeps, never what it answers
(tests/test_moto_perf.py).

- Executions by name and by ARN (``patch_execution_index``): stock StartExecution looks for an execution
  of the same name, and DescribeExecution/GetExecutionHistory for the execution's ARN, by walking the state
  machine's list of every execution it ever ran: O(executions) per call, O(n^2) over a run. The patch
  indexes that list by name and by ARN: O(1).
- Closed executions (``patch_compact_closed_executions``): a finished execution keeps its whole
  interpreter environment (threads, events, parsed inputs, the context object) only to answer
  GetExecutionHistory later: ~80 KB per change, never freed. The patch keeps, once the execution has
  closed, its history events as one compressed blob (what GetExecutionHistory returns, unchanged) and
  drops the environment. Like AWS, which keeps a closed Standard execution's history for 90 days
  (https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html), the embedded stack keeps
  every execution for as long as it runs; only the form is compact. moto also appends every thread its
  interpreter starts to a module-level list (``parser.utils.TMP_THREADS``) that nothing empties; the patch
  drops the finished ones each time an execution closes. At the same moment it packs the execution's own
  CloudWatch Logs stream (its execution log: ~22 records of ~760 bytes, ~21 KB as moto's ``LogEvent``
  objects, ~2 KB packed; read back unchanged), lets closed executions whose state machine snapshots are
  equal share one (moto deep-copies the state machine for every execution), and drops what only a running
  program reads (the evaluation details and logging session). The events are pickled from the interpreter's
  own list (stock ``get_event_history`` deep-copies it first: a second copy of every event, made to be
  pickled at once).
- Deep copies of JSON (``patch_json_deep_copies``): the interpreter copies a state's data at every step
  (each state's input, each path's result, each frame, the program state: ``copy.deepcopy`` about 30 times
  a change, an eighth of the interpreter's time), with the general ``copy.deepcopy``, which looks up a
  copier for every value. The data is JSON: dicts, lists and scalars. The patch gives the interpreter's
  modules a ``copy`` whose ``deepcopy`` copies dicts and lists itself and returns immutable scalars as they
  are (as ``copy.deepcopy`` does), with the same memo (a value met twice is copied once, a cycle stays a
  cycle), and hands anything else to ``copy.deepcopy`` with that memo: the same copy, made faster.
"""

from __future__ import annotations

import copy
import pickle
import threading
import zlib
from typing import Any

from ..core.perf import forgetting
from ..originals import ORIGINALS

_LOCK = threading.Lock()


# --- executions by name and by ARN --------------------------------------------------------------------


class Executions(list):
    """A state machine's executions, in the order they started (moto's list), with the first execution of
    each name and of each ARN indexed. Appends keep the index; any other change rebuilds it on next use."""

    def __init__(self, *args):
        super().__init__(*args)
        self._by_name: dict | None = None
        self._by_arn: dict | None = None
        self._index()

    def _index(self) -> tuple[dict, dict]:
        if self._by_name is None:
            self._by_name, self._by_arn = {}, {}
            for execution in self:
                self._by_name.setdefault(execution.name, execution)
                self._by_arn.setdefault(execution.execution_arn, execution)
        return self._by_name, self._by_arn

    def named(self, name: str):
        return self._index()[0].get(name)

    def with_arn(self, arn: str):
        return self._index()[1].get(arn)

    def append(self, execution) -> None:
        super().append(execution)
        if self._by_name is not None:
            self._by_name.setdefault(execution.name, execution)
            self._by_arn.setdefault(execution.execution_arn, execution)

    extend = forgetting(list, "extend", "_by_name", "_by_arn")
    insert = forgetting(list, "insert", "_by_name", "_by_arn")
    remove = forgetting(list, "remove", "_by_name", "_by_arn")
    pop = forgetting(list, "pop", "_by_name", "_by_arn")
    clear = forgetting(list, "clear", "_by_name", "_by_arn")
    sort = forgetting(list, "sort", "_by_name", "_by_arn")
    reverse = forgetting(list, "reverse", "_by_name", "_by_arn")
    __setitem__ = forgetting(list, "__setitem__", "_by_name", "_by_arn")
    __delitem__ = forgetting(list, "__delitem__", "_by_name", "_by_arn")
    __iadd__ = forgetting(list, "__iadd__", "_by_name", "_by_arn")
    __imul__ = forgetting(list, "__imul__", "_by_name", "_by_arn")

    def __deepcopy__(self, memo):
        return Executions(copy.deepcopy(list(self), memo))

    def __reduce__(self):
        return (Executions, (list(self),))


def patch_execution_index() -> None:
    from moto.stepfunctions import models
    from moto.stepfunctions.exceptions import ExecutionAlreadyExists, ExecutionDoesNotExist

    machine = models.StateMachine
    backend = models.StepFunctionBackend
    original_init = ORIGINALS.setdefault("machine_init", machine.__init__)
    original_idempotency = ORIGINALS.setdefault("idempotency", machine._handle_name_input_idempotency)
    original_describe = ORIGINALS.setdefault("describe_execution", backend.describe_execution)

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.executions = Executions(self.executions)

    def _handle_name_input_idempotency(self, name, execution_input):
        if not isinstance(self.executions, Executions):
            return original_idempotency(self, name, execution_input)
        execution = self.executions.named(name)  # moto: the first execution of this name in the list
        if execution is None:
            return None
        if execution_input == execution.execution_input and execution.status == "RUNNING":
            return execution
        raise ExecutionAlreadyExists("Execution Already Exists: '" + execution.execution_arn + "'")

    def describe_execution(self, execution_arn):
        self._validate_execution_arn(execution_arn)
        state_machine = self._get_state_machine_for_execution(execution_arn)
        if not isinstance(state_machine.executions, Executions):
            return original_describe(self, execution_arn)
        execution = state_machine.executions.with_arn(execution_arn)
        if not execution:
            raise ExecutionDoesNotExist("Execution Does Not Exist: '" + execution_arn + "'")
        return execution

    machine.__init__ = __init__
    machine._handle_name_input_idempotency = _handle_name_input_idempotency
    backend.describe_execution = describe_execution


# --- a closed execution keeps its history, compressed, and nothing else -----------------------------


class ClosedHistory:
    """What a closed execution's interpreter environment is still asked for: its history events (the list
    GetExecutionHistory returns), kept pickled and compressed; its final program state; its callback and
    map-run pools (SendTaskFailure and DescribeMapRun walk every execution's); and StopExecution, which
    does nothing to a closed program (``Environment.set_stop`` only stops a running one)."""

    def __init__(self, env: Any):
        manager = env.event_manager
        events, mutex = getattr(manager, "_history_event_list", None), getattr(manager, "_mutex", None)
        if type(events) is list and mutex is not None:  # pickled as get_event_history would return it, uncopied
            with mutex:
                self._blob = zlib.compress(pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL), 1)
        else:
            events = manager.get_event_history()
            self._blob = zlib.compress(pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL), 1)
        self._program_state = env.program_state()
        self.callback_pool_manager = env.callback_pool_manager
        self.map_run_record_pool_manager = env.map_run_record_pool_manager
        self.event_manager = self

    def get_event_history(self) -> list:
        return pickle.loads(zlib.decompress(self._blob))  # noqa: S301 - our own bytes, made just above

    def program_state(self) -> Any:
        return self._program_state

    def set_stop(self, *args: Any, **kwargs: Any) -> None:
        """The program has ended: nothing to stop."""


class PackedLogEvents:
    """A closed execution's log stream events (moto's ``LogStream.events``, a list of ``LogEvent``), kept
    pickled and compressed: the execution's ARN and the state names repeat in every record, so 22 records
    of ~730 bytes each (16 KB of text, ~21 KB as objects) pack into ~2 KB. Reading unpacks them (equal
    objects each time); ``+=`` (a later PutLogEvents into the stream: all that moto's logs backend does to
    the list besides reading it) gives back a plain list, unpacked."""

    __slots__ = ("_blob", "_count")

    def __init__(self, events: list):
        self._blob = zlib.compress(pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL), 1)
        self._count = len(events)

    def _events(self) -> list:
        return pickle.loads(zlib.decompress(self._blob))  # noqa: S301 - our own bytes, made just above

    def __iter__(self):
        return iter(self._events())

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __getitem__(self, index):
        return self._events()[index]

    def __add__(self, other: list) -> list:
        return self._events() + list(other)

    __iadd__ = __add__

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    __hash__ = None


def _pack_execution_log(execution) -> None:
    """Pack the closed execution's own log stream (one stream per execution: execution_log names it after
    the execution), once the execution has written its last record."""
    session = getattr(execution, "_cloud_watch_logging_session", None)
    if session is None:
        return
    from moto.logs.models import logs_backends

    config = session.configuration
    try:
        logs = logs_backends[config.log_account_id][config.log_region]
    except (AttributeError, KeyError):
        return
    group = logs.groups.get(config.log_group_name)
    stream = group.streams.get(config.log_stream_name) if group is not None else None
    if stream is not None and type(stream.events) is list and stream.events:
        stream.events = PackedLogEvents(stream.events)


def _share_snapshot(execution, snapshots: dict) -> None:
    """moto gives each execution its own deep copy of the state machine (a snapshot of the definition and
    settings it started with). Closed executions whose snapshots are equal share one: what
    DescribeExecution reads from it (definition, name, ARN, revision, logging) is unchanged."""
    snapshot = getattr(execution, "state_machine", None)
    if snapshot is None:
        return
    key = getattr(execution, "state_machine_arn", None)
    fields = {k: v for k, v in vars(snapshot).items() if k not in ("executions", "backend")}
    kept = snapshots.get(key)
    if kept is not None and type(kept[0]) is type(snapshot) and kept[1] == fields:
        execution.state_machine = kept[0]
    else:
        snapshots[key] = (snapshot, fields)


def patch_compact_closed_executions() -> None:
    from moto.stepfunctions.parser.backend import execution as execution_module

    from moto.stepfunctions.parser import utils

    communication = execution_module.BaseExecutionWorkerCommunication
    original = ORIGINALS.setdefault("terminated_perf", communication.terminated)
    threads = utils.TMP_THREADS  # every interpreter thread moto ever started, never emptied
    snapshots: dict = {}  # state machine ARN -> (the snapshot closed executions share, its fields)

    def terminated(self):
        try:
            original(self)
        finally:
            execution = self.execution
            worker = execution.exec_worker
            env = getattr(worker, "env", None)
            if env is not None and not isinstance(env, ClosedHistory):
                worker.env = ClosedHistory(env)
            # what the worker needed to start the program (the evaluation details, ~1 KB) and the logging
            # session (which only a running program writes through) are not read once it has ended
            with _LOCK:
                _pack_execution_log(execution)
                for holder in (worker, execution):
                    for name in ("_evaluation_details", "_cloud_watch_logging_session"):
                        if getattr(holder, name, None) is not None:
                            setattr(holder, name, None)
                _share_snapshot(execution, snapshots)
                # keep the threads still running: O(threads alive), not O(threads ever started)
                threads[:] = [t for t in threads if t.is_alive()]

    communication.terminated = terminated


# --- deep copies of JSON --------------------------------------------------------------------------------------

_IMMUTABLE = frozenset({str, int, float, bool, type(None), bytes})


def json_deepcopy(value: Any, memo: dict | None = None) -> Any:
    """``copy.deepcopy(value, memo)``, with dicts and lists (exactly those types) copied here."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if memo is None:
        memo = {}
    else:
        found = memo.get(id(value))
        if found is not None:
            return found
    if kind is dict:
        copied: Any = {}
        memo[id(value)] = copied
        for key, item in value.items():
            copied[key if type(key) in _IMMUTABLE else json_deepcopy(key, memo)] = (
                item if type(item) in _IMMUTABLE else json_deepcopy(item, memo))
        return copied
    if kind is list:
        copied = []
        memo[id(value)] = copied
        append = copied.append
        for item in value:
            append(item if type(item) in _IMMUTABLE else json_deepcopy(item, memo))
        return copied
    return copy.deepcopy(value, memo)


class _CopyModule:
    """The ``copy`` module, with ``deepcopy`` made fast for JSON."""

    deepcopy = staticmethod(json_deepcopy)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


JSON_COPYING_MODULES = (
    "moto.stepfunctions.parser.asl.component.common.string.string_expression",
    "moto.stepfunctions.parser.asl.component.common.path.result_path",
    "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service",
    "moto.stepfunctions.parser.asl.component.state.exec.execute_state",
    "moto.stepfunctions.parser.asl.eval.states",
    "moto.stepfunctions.parser.asl.eval.event.event_manager",
    "moto.stepfunctions.parser.asl.eval.environment",
)


def patch_json_deep_copies() -> None:
    import importlib

    shim = _CopyModule()
    for name in JSON_COPYING_MODULES:
        module = importlib.import_module(name)
        if getattr(module, "copy", None) is copy:
            ORIGINALS.setdefault(f"copy of {name}", module.copy)
            module.copy = shim
