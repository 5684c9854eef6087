"""The client of a changeflow stack: one code path for every command, against the embedded stack,
``changeflow serve`` (an endpoint URL) or a stack deployed on AWS: start named executions, wait for them,
page their history the AWS way, and read an entity's versions (this module, ``Changeflow``). Beside it:
``names`` (execution names, the rule every entry point shares) and ``targets`` (the stack a command
names)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import boto3
from botocore.config import Config

from changeflow_core import items, model, principal, store, wire
from changeflow_core.names import event_execution_name

from . import logged, names, rest

# An Express execution's history is its execution log (DescribeExecution and GetExecutionHistory refuse
# its ARN), read by ``logged``: the event that ends an execution, and the status it gives it; UNKNOWN once
# an execution has ended but the log lost its end. https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html
TERMINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", logged.UNKNOWN}
TERMINAL_EVENTS = logged.TERMINAL_EVENTS
# The workflow's named error for an outcome it cannot know (a write whose answer was lost, and nothing left
# to tell whether it landed: changeflow_core.lostwrites). Such an execution is shown UNKNOWN, never FAILED.
OUTCOME_UNKNOWN = "OutcomeUnknown"


def shown_status(status: str, error: str | None) -> str:
    """The status a person is shown: Step Functions' own, but UNKNOWN for an execution that ended
    ``OutcomeUnknown`` (Step Functions says FAILED: the workflow says it does not know)."""
    return logged.UNKNOWN if status == "FAILED" and error == OUTCOME_UNKNOWN else status


def named_errors(definition: dict) -> set[str]:
    """The errors the workflow names: its Fail states' ``Error`` values. An execution that failed with one
    of them was rejected by the workflow; any other failure is a fault."""
    return {s["Error"] for s in definition["States"].values() if s["Type"] == "Fail" and "Error" in s}


def is_express(arn: str) -> bool:
    """``arn:<partition>:states:<region>:<account>:express:<machine>:<name>:<id>``"""
    return arn.split(":")[5:6] == ["express"]


@dataclass
class Execution:
    name: str
    arn: str
    status: str
    input: Any
    output: Any = None
    error: str | None = None
    cause: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arn": self.arn, "status": self.status, "input": self.input,
                "output": self.output, "error": self.error, "cause": self.cause}


class Changeflow:
    """A client of one deployed (or embedded) changeflow stack."""

    def __init__(self, sfn, dynamodb, state_machine_arn: str, table: str, history_table: str,
                 wait_hook: Callable[[str, float], bool | dict] | None = None, history_expires: bool = False,
                 outputs: dict[str, Any] | None = None, session=None, api_url: str | None = None,
                 make: Callable[[str], Any] | None = None):
        self.sfn, self.dynamodb = sfn, dynamodb
        self.state_machine_arn = state_machine_arn
        self.table, self.history_table = table, history_table
        self._wait_hook = wait_hook
        self.history_expires = history_expires  # a retention window may have removed the oldest versions
        self.outputs = outputs or {}
        # HashEntityIds: execution names carry a digest, never the entity id (as the API names them)
        self.hashes_entity_ids = str(self.outputs.get("HashEntityIds", "false")).lower() == "true"
        self.session = session
        self.api_url = api_url or self.outputs.get("ChangeApiUrl")
        self.make = make or (lambda service: boto3.client(service))  # a client of another service, same place

    # --- construction -----------------------------------------------------------------------------
    @classmethod
    def from_outputs(cls, outputs: dict[str, Any], session=None, endpoint_url: str | None = None,
                     region: str | None = None, wait_hook=None, api_url: str | None = None) -> "Changeflow":
        session = session or boto3.session.Session(region_name=region)
        config = Config(retries={"mode": "standard", "max_attempts": 5})
        make = lambda service: session.client(service, endpoint_url=endpoint_url, config=config)  # noqa: E731
        retention = any(int(outputs.get(name) or 0) for name in ("HistoryRetentionVersions", "HistoryRetentionDays"))
        return cls(make("stepfunctions"), make("dynamodb"), outputs["ChangeStateMachineArn"],
                   outputs["ChangeTableName"], outputs.get("HistoryTableName") or outputs["ChangeTableName"],
                   wait_hook, history_expires=retention, outputs=outputs, session=session, api_url=api_url,
                   make=make)

    @classmethod
    def for_embedded(cls, stack) -> "Changeflow":
        """A client of an embedded stack in this process: it waits on the stack's own signal that an
        execution has ended (``stack.wait_for_termination``) instead of polling, and reads what DescribeExecution
        would answer of it from the stack (``stack.ended_execution``) instead of asking."""
        def wait_hook(arn: str, timeout: float) -> bool | dict:
            return stack.wait_for_termination(arn, timeout) and (stack.ended_execution(arn) or True)

        return cls.from_outputs(stack.outputs, region=stack.region, wait_hook=wait_hook)

    @classmethod
    def for_aws_stack(cls, stack_name: str = "changeflow", region: str | None = None,
                      endpoint_url: str | None = None) -> "Changeflow":
        """The stack's clients and names from its CloudFormation Outputs: a deployed stack on AWS, or
        ``changeflow serve`` (which publishes its Outputs the same way) when ``endpoint_url`` is given."""
        session = boto3.session.Session(region_name=region)
        if endpoint_url and session.get_credentials() is None:  # a local endpoint accepts any credentials
            session = boto3.session.Session(region_name=region, aws_access_key_id="testing",
                                            aws_secret_access_key="testing")
        stack = session.client("cloudformation", endpoint_url=endpoint_url).describe_stacks(
            StackName=stack_name)["Stacks"][0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        api_url = None
        if endpoint_url and outputs.get("ChangeApiUrl"):  # serve answers the API under /<stage>/
            api_url = f"{endpoint_url.rstrip('/')}/{outputs['ChangeApiUrl'].rstrip('/').rsplit('/', 1)[1]}"
        return cls.from_outputs(outputs, session=session, endpoint_url=endpoint_url, api_url=api_url)

    # --- executions -------------------------------------------------------------------------------
    def start(self, request: Any, name: str | None = None, redeliver: bool = False) -> tuple[str, str]:
        """Start a named execution (moto would otherwise call it ``None``): ``(name, arn)``.

        The same change submitted again gets the same name; Step Functions refuses a second execution
        of a closed one (``ExecutionAlreadyExists``). With ``redeliver`` it is delivered again as a new
        execution (as an at-least-once source would), and the workflow reports it ``duplicate``, or
        ``stale`` once v0 no longer remembers its id: a redelivery keeps the time the first execution
        started as its ``receivedAt`` (its default effectiveAt), so it never reverts newer data.

        The input is the direct-start envelope (``changeflow_core.principal``): Step Functions does not
        tell the workflow who called StartExecution, and the version records exactly that."""
        name = name or names.execution_name(_parsed(request), hashed=self.hashes_entity_ids)
        received_at = None
        for delivery in range(1, 100):
            attempt = name if delivery == 1 else names.redelivery_name(name, delivery)
            try:
                response = self.sfn.start_execution(  # numbers cross Step Functions inside the text: exact
                    stateMachineArn=self.state_machine_arn, name=attempt,
                    input=principal.direct_input(request, received_at))
                return attempt, response["executionArn"]
            except self.sfn.exceptions.ExecutionAlreadyExists:
                if not redeliver:
                    raise
                if received_at is None:  # the first delivery's receipt: what it was given, or its start
                    received_at = self._first_receipt(attempt)
        raise RuntimeError(f"change {name} was delivered 99 times")

    def _first_receipt(self, name: str) -> int | None:
        arn = self.state_machine_arn.replace(":stateMachine:", ":execution:", 1) + ":" + name
        try:
            description = self.sfn.describe_execution(executionArn=arn)
        except self.sfn.exceptions.ExecutionDoesNotExist:
            return None
        sent = json.loads(description.get("input") or "{}")
        received = sent.get(principal.RECEIVED_AT) if isinstance(sent, dict) else None
        started = description["startDate"]
        return principal.received_ms(received) if received is not None else int(started.timestamp() * 1000)

    def wait(self, arn: str, timeout: float = 300.0) -> Execution:
        """Wait for the execution to end (an event on the embedded stack, polling elsewhere)."""
        deadline = time.monotonic() + timeout
        if self._wait_hook is not None:
            ended = self._wait_hook(arn, timeout)
            if isinstance(ended, dict):  # the embedded stack's own DescribeExecution answer of the ended execution
                return _execution(ended)
        delay = 0.05
        while True:
            description = self.describe(arn)
            if description["status"] in TERMINAL:
                return _execution(description)
            if time.monotonic() > deadline:
                raise TimeoutError(f"execution {arn} still {description['status']} after {timeout} s")
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def submit(self, request: Any, name: str | None = None, timeout: float = 300.0,
               redeliver: bool = True) -> Execution:
        _, arn = self.start(request, name, redeliver=redeliver)
        return self.wait(arn, timeout)

    def api(self, method: str, path: str, body: bytes | None = None) -> rest.Answer:
        """One call to the stack's REST API (``path`` under its stage), SigV4-signed with this client's
        credentials, as API Gateway's AWS_IAM authorization and ``changeflow serve`` require."""
        if not self.api_url:
            raise RuntimeError("this stack has no REST API (no ChangeApiUrl output)")
        return rest.call(self.session or boto3.session.Session(), self.sfn.meta.region_name, self.api_url, method,
                         path, body)

    def submit_via_api(self, request: Any, timeout: float = 300.0) -> Execution:
        """POST /changes on the stack's REST API (SigV4-signed)."""
        body = (request if isinstance(request, str) else wire.dumps(request)).encode("utf-8")  # exact numbers
        answer = self.api("POST", "/changes", body)
        if answer.status >= 300:
            return Execution(name="(not started)", arn="", status="REJECTED", input=request,
                             error=f"HTTP {answer.status}", cause=answer.body.decode("utf-8", "replace"))
        return self.wait(wire.loads(answer.body)["executionArn"], timeout)

    def submit_via_events(self, request: Any, timeout: float = 300.0) -> Execution:
        """PutEvents to the stack's bus; the rule's function starts an execution named after the event's id
        (``names.event_execution_name``), found by that name. A change whose event was delivered before is
        that first delivery's execution (a redelivery starts none on a Standard workflow)."""
        answer = self.make("events").put_events(Entries=[{
            "Source": self.outputs["ChangeEventSource"], "DetailType": "ChangeRequested",
            "EventBusName": self.outputs["ChangeBusName"], "Detail": wire.execution_input(request)}])
        if answer.get("FailedEntryCount"):
            failed = answer["Entries"][0]
            raise RuntimeError(f"PutEvents refused the event: {failed.get('ErrorCode')}: {failed.get('ErrorMessage')}")
        name = event_execution_name(answer["Entries"][0]["EventId"])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for summary in self.executions(limit=50):
                if summary.get("name") == name:
                    return self.wait(summary["executionArn"], max(1.0, deadline - time.monotonic()))
            time.sleep(0.05)
        raise TimeoutError("no execution was started for the event (see the dead-letter queue)")

    def describe(self, arn: str, entity_id: str | None = None) -> dict[str, Any]:
        """DescribeExecution, or for an Express execution the same fields read from its execution log.

        An execution aged out of Step Functions (90 days) is read from the execution log when the log holds
        it (level ALL; with execution data, its input and output too). By default the log holds only
        failures and no data (docs/privacy.md): then, given the entity, the execution is described from
        what the table keeps of it (``from_versions``): its name, the versions it wrote, their audit fields."""
        if not is_express(arn):
            try:
                return self.sfn.describe_execution(executionArn=arn)
            except self.sfn.exceptions.ExecutionDoesNotExist:
                if not self._archived(arn):  # aged out of Step Functions (90 days): the execution log keeps it
                    aged = self.from_versions(arn, entity_id) if entity_id is not None else None
                    if aged is None:
                        raise
                    return aged
        name = arn.split(":")[-2] if is_express(arn) else arn.split(":")[-1]
        # the log is best-effort and cuts big payloads: the description says what it lacks (logGaps)
        description = logged.description(arn, name, self.state_machine_arn, self._log_records(arn),
                                          closed=not is_express(arn))
        if entity_id is not None and description.get("output") is None and description["status"] == "SUCCEEDED":
            aged = self.from_versions(arn, entity_id)  # the log kept no data: what the table kept of it
            if aged is not None:
                description["versions"] = aged["versions"]
        return description

    def from_versions(self, arn: str, entity_id: str) -> dict[str, Any] | None:
        """An execution described from the versions of ``entity_id`` it wrote (each version item names its
        execution), for one that Step Functions no longer keeps and the execution log does not hold whole:
        status ``AGED_OUT``, its name, and per version the audit metadata (change, operation, actor, reason,
        effective and recorded time); no content. None if no version of the entity names it."""
        written = [items.view(item) for item in store.all_history(self.dynamodb, self.history_table, entity_id)
                   if item.get(model.EXECUTION) == arn]
        if not written:
            return None
        name = arn.split(":")[-2] if is_express(arn) else arn.split(":")[-1]
        keep = ("version", "changeId", "operation", "actor", "reason", "effectiveAt", "recordedAt", "deleted")
        return {"executionArn": arn, "name": name, "stateMachineArn": self.state_machine_arn, "status": "AGED_OUT",
                "entityId": entity_id, "versions": [{k: v[k] for k in keep} for v in written]}

    def _log_group(self) -> str:
        if not hasattr(self, "_execution_log_group"):
            config = self.sfn.describe_state_machine(stateMachineArn=self.state_machine_arn).get(
                "loggingConfiguration", {})
            destinations = config.get("destinations") or []
            if config.get("level") != "ALL" or not destinations:
                raise RuntimeError("an Express execution's history is its execution log, which this state machine "
                                   "does not keep whole: deploy with StateMachineLogLevel=ALL")
            arn = destinations[0]["cloudWatchLogsLogGroup"]["logGroupArn"]
            self._execution_log_group = arn.split(":log-group:", 1)[1].split(":")[0]
        return self._execution_log_group

    def _archived(self, arn: str) -> bool:
        """Whether the execution log holds this execution (the state machine logs at ALL)."""
        try:
            return bool(self._log_records(arn))
        except RuntimeError:  # the state machine does not log at ALL: there is no archive to read
            return False

    def _log_records(self, arn: str) -> list[dict[str, Any]]:
        """The execution's log records, oldest first (CloudWatch Logs may deliver them late, or twice)."""
        logs, group = self.make("logs"), self._log_group()
        records: dict[int, dict[str, Any]] = {}
        kwargs: dict[str, Any] = {"logGroupName": group, "filterPattern": f'{{ $.execution_arn = "{arn}" }}'}
        while True:
            page = logs.filter_log_events(**kwargs)
            for event in page.get("events", []):
                record = json.loads(event["message"])
                if record.get("execution_arn") == arn:
                    records[int(record["id"])] = record
            if not page.get("nextToken"):
                return [records[i] for i in sorted(records)]
            kwargs["nextToken"] = page["nextToken"]

    def history(self, arn: str, page_size: int = 100) -> Iterator[dict[str, Any]]:
        """Every history event, oldest first, following nextToken as AWS pages it (for an Express execution,
        its execution log's records in GetExecutionHistory's shape)."""
        if is_express(arn):
            yield from (_history_event(record) for record in self._log_records(arn))
            return
        token = None
        while True:
            kwargs = {"executionArn": arn, "maxResults": page_size}
            if token:
                kwargs["nextToken"] = token
            try:
                page = self.sfn.get_execution_history(**kwargs)
            except self.sfn.exceptions.ExecutionDoesNotExist:
                # Step Functions keeps a closed Standard execution 90 days; its execution log (level ALL, with
                # execution data, kept ExecutionLogRetentionDays) is the archive after that
                if token or not self._archived(arn):
                    raise
                yield from (_history_event(record) for record in self._log_records(arn))
                return
            yield from page["events"]
            token = page.get("nextToken")
            if not token:
                return

    def executions(self, limit: int = 50, errors: bool = False) -> list[dict[str, Any]]:
        """Newest first. ListExecutions refuses an Express state machine: its executions come from the log.
        With ``errors``, a failed execution's summary carries its ``error`` too (DescribeExecution's: one call
        per failed execution), so that an ``OutcomeUnknown`` can be told from a failure."""
        if self.state_machine_type() == "EXPRESS":
            return self._express_executions(limit, errors)
        found = self._standard_executions(limit)
        for summary in found if errors else ():
            if summary["status"] == "FAILED":
                summary["error"] = self.describe(summary["executionArn"]).get("error")
        return found

    def _standard_executions(self, limit: int) -> list[dict[str, Any]]:
        found, token = [], None
        while len(found) < limit:
            kwargs = {"stateMachineArn": self.state_machine_arn, "maxResults": min(100, limit - len(found))}
            if token:
                kwargs["nextToken"] = token
            page = self.sfn.list_executions(**kwargs)
            found.extend(page["executions"])
            token = page.get("nextToken")
            if not token:
                break
        return found[:limit]

    def state_machine_type(self) -> str:
        if not hasattr(self, "_state_machine_type"):
            self._state_machine_type = self.sfn.describe_state_machine(
                stateMachineArn=self.state_machine_arn).get("type", "STANDARD")
        return self._state_machine_type

    def _express_executions(self, limit: int, errors: bool = False) -> list[dict[str, Any]]:
        prefix = self.state_machine_arn.replace(":stateMachine:", ":express:", 1) + ":"
        # its start or its end: the log is best-effort, and an execution whose start it lost is still listed
        kinds = ["ExecutionStarted", *TERMINAL_EVENTS]
        logs, kwargs = self.make("logs"), {"logGroupName": self._log_group(), "filterPattern": "{ " + " || ".join(
            f'($.type = "{kind}")' for kind in kinds) + " }"}
        found: dict[str, dict[str, Any]] = {}
        while True:
            page = logs.filter_log_events(**kwargs)
            for event in page.get("events", []):
                record = json.loads(event["message"])
                arn = record.get("execution_arn", "")
                if record.get("type") in kinds and arn.startswith(prefix) and (
                        arn not in found or record["type"] == "ExecutionStarted"):
                    found[arn] = {"executionArn": arn, "name": arn.split(":")[-2],
                                  "stateMachineArn": self.state_machine_arn,
                                  "startDate": _log_time(record)}  # its end's time if the start is lost
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
        newest = sorted(found.values(), key=lambda e: e["startDate"], reverse=True)[:limit]
        for summary in newest:
            description = self.describe(summary["executionArn"])
            summary["status"] = description["status"]
            if errors and description.get("error"):
                summary["error"] = description["error"]
        return newest

    # --- data ---------------------------------------------------------------------------------------
    def entity(self, entity_id: str) -> dict[str, Any]:
        """``{"latest": VIEW|None, "versions": [VIEW...]}``: the raw v0 (a tombstone shows deleted) and
        every history version, oldest first."""
        latest = store.get_item(self.dynamodb, self.table, entity_id, model.LATEST_SK)
        history = store.all_history(self.dynamodb, self.history_table, entity_id)
        return {"latest": items.view(latest), "versions": [items.view(i) for i in history]}


def _parsed(request: Any) -> Any:
    """A request given as its JSON text, parsed (exactly) to name its execution; anything else as it is."""
    if isinstance(request, str):
        try:
            return wire.loads(request)
        except ValueError:
            return None
    return request


def _execution(description: dict[str, Any]) -> Execution:
    def parse(text):
        if text is None:
            return None
        try:
            return wire.loads(text)  # exact numbers
        except ValueError:
            return text

    return Execution(
        name=description["name"],
        arn=description["executionArn"],
        status=shown_status(description["status"], description.get("error")),
        input=parse(description.get("input")),
        output=parse(description.get("output")),
        error=description.get("error"),
        cause=description.get("cause"),
    )


def _log_time(record: dict[str, Any]):
    import datetime

    return datetime.datetime.fromtimestamp(int(record["event_timestamp"]) / 1000, tz=datetime.timezone.utc)


def _history_event(record: dict[str, Any]) -> dict[str, Any]:
    """An execution log record as GetExecutionHistory would have given the event."""
    kind = record["type"]
    if kind.endswith("StateEntered"):
        key = "stateEnteredEventDetails"
    elif kind.endswith("StateExited"):
        key = "stateExitedEventDetails"
    else:
        key = kind[0].lower() + kind[1:] + "EventDetails"
    event = {"id": int(record["id"]), "previousEventId": int(record.get("previous_event_id") or 0), "type": kind,
             "timestamp": _log_time(record)}
    if record.get("details"):
        event[key] = record["details"]
    return event
