"""The execution log: a state machine's LoggingConfiguration delivers each execution's events to its
CloudWatch Logs group (stock moto never starts a logging session), and cuts an event's input or output
as AWS does past 248 KB escaped (stock moto logs it whole).
https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html"""

from __future__ import annotations

import datetime
import json

from ..core.locking import API_LOCK
from ..originals import ORIGINALS

# "CloudWatch Logs payloads": "If escaped input or escaped output sent to CloudWatch Logs exceeds 248KB, it
# will be truncated as a result of CloudWatch Logs quotas"; inputDetails/outputDetails say so
# (HistoryEventExecutionDataDetails.truncated: "In CloudWatch logs, the value will be true if the data is
# truncated due to size limits"). https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html and
# https://docs.aws.amazon.com/step-functions/latest/apireference/API_HistoryEventExecutionDataDetails.html
# KB as AWS's other payload figures mean it: "256 KB" is ExecutionStartedEventDetails.input's 262,144 bytes.
LOG_PAYLOAD_LIMIT = 248 * 1024


def _escaped_size(text: str) -> int:
    """Bytes of ``text`` escaped as a JSON string inside the log record (without its quotes)."""
    return len(json.dumps(text)) - 2  # json.dumps escapes to ASCII: characters are bytes


def truncated_for_log(details: dict) -> dict:
    """An event's details as the execution log carries them: an input or output whose escaped form is over
    LOG_PAYLOAD_LIMIT cut to the longest prefix that fits (never inside an escape), with
    ``{"truncated": true}`` in its inputDetails/outputDetails. Everything else, and the execution history
    that GetExecutionHistory returns, is untouched (a new dict when anything is cut)."""
    cut = None
    for field in ("input", "output"):
        text = details.get(field)
        if not isinstance(text, str) or _escaped_size(text) <= LOG_PAYLOAD_LIMIT:
            continue
        low, high = 0, min(len(text), LOG_PAYLOAD_LIMIT)  # the longest prefix whose escaped form fits
        while low < high:
            middle = (low + high + 1) // 2
            if _escaped_size(text[:middle]) <= LOG_PAYLOAD_LIMIT:
                low = middle
            else:
                high = middle - 1
        cut = dict(details) if cut is None else cut
        cut[field] = text[:low]
        cut[f"{field}Details"] = {**(details.get(f"{field}Details") or {}), "truncated": True}
    return details if cut is None else cut


def patch_execution_log_delivery() -> None:
    """The state machine's LoggingConfiguration delivers each execution's events to its CloudWatch Logs
    group, one JSON record per event (id, type, details, previous_event_id, event_timestamp,
    execution_arn), filtered by the level (ALL, ERROR, FATAL) and without input and output when
    includeExecutionData is false. https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html
    Stock moto has the pieces (from LocalStack) but never starts a logging session, and its record would
    not be a valid log event."""
    from moto.stepfunctions.parser.asl.eval.event import logging as sfn_logging
    from moto.stepfunctions.parser.backend import execution

    session_class = sfn_logging.CloudWatchLoggingSession
    configuration_class = sfn_logging.CloudWatchLoggingConfiguration
    original_init = ORIGINALS.setdefault("execution_init", execution.Execution.__init__)

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


def patch_execution_log_truncation() -> None:
    """An event's input or output over 248 KB escaped reaches the execution log cut, marked
    ``truncated`` (truncated_for_log); stock moto logs it whole. The execution history keeps it whole, as
    GetExecutionHistory does. https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html
    (after patch_execution_log_delivery, whose publisher it wraps)"""
    from moto.stepfunctions.parser.asl.eval.event import logging as sfn_logging

    session_class = sfn_logging.CloudWatchLoggingSession
    deliver = ORIGINALS.setdefault("delivered_history_log", session_class.publish_history_log)

    def publish_history_log(self, history_log):
        details = history_log.get("details")
        if isinstance(details, dict):
            history_log = {**history_log, "details": truncated_for_log(details)}
        deliver(self, history_log)

    session_class.publish_history_log = publish_history_log
