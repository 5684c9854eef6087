"""EventBridge Scheduler runs its schedules. Stock moto 5.2.5 stores a schedule (CreateSchedule,
UpdateSchedule, DeleteSchedule) and never invokes its target. Here every ``ENABLED`` schedule whose target is
a Lambda function (a templated target) invokes it at the times its expression gives, on the stack's time
scale (``Clock.scale``: ``rate(1 hour)`` at 0.0005 fires every 1.8 s), with its ``Input`` and the context
attributes filled in (``<aws.scheduler.scheduled-time>`` is the schedule's own time, on the stack's scale).

- ``rate(value unit)``: every interval from the schedule's creation (or ``StartDate``), the first one interval
  after it; ``cron(minutes hours day-of-month month day-of-week year)``: each minute the fields match, in
  ``ScheduleExpressionTimezone`` (``L``, ``W`` and ``#`` are not modelled: such a schedule is not run, and says
  so in the log); ``at(yyyy-mm-ddThh:mm:ss)``: once.
- A schedule deleted, updated to ``DISABLED`` or past its ``EndDate`` stops; an update takes effect from the
  next time.
- Scheduler assumes the target's ``RoleArn`` and invokes as that role: a role Scheduler may not assume, or
  that may not invoke the function, and the run is logged and skipped (IAM evaluated, ``moto_patches.iam``).
- Lambda runs a scheduled invocation as it runs any other (the in-process Lambda service); a failed one is
  logged and the schedule goes on (AWS retries per ``RetryPolicy`` and Lambda's own asynchronous retries:
  not modelled).

https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html
https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-schedule-context-attributes.html"""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time
import uuid
from typing import Any

from ..originals import ORIGINALS
from ..stepfunctions.clock import Clock

logger = logging.getLogger("embedded.scheduler")  # not under "changeflow": Powertools' service logger
_RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")
_AT = re.compile(r"at\((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\)")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
_MONTHS = {name: i + 1 for i, name in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())}
_DAYS = {name: i + 1 for i, name in enumerate("SUN MON TUE WED THU FRI SAT".split())}  # cron's 1 = Sunday


class Runs:
    """Every schedule's runner in this process, so that a stack stops them before moto's mock stops."""

    runners: dict[str, "Runner"] = {}
    lock = threading.Lock()
    fired: list[tuple[str, str]] = []  # (schedule ARN, scheduled time), most recent last, bounded

    @classmethod
    def start(cls, schedule) -> None:
        with cls.lock:
            old = cls.runners.pop(schedule.arn, None)
            cls.runners[schedule.arn] = Runner(schedule)
        if old is not None:
            old.stop(wait=False)
        cls.runners[schedule.arn].start()

    @classmethod
    def stop(cls, arn: str) -> None:
        with cls.lock:
            runner = cls.runners.pop(arn, None)
        if runner is not None:
            runner.stop(wait=False)

    @classmethod
    def stop_all(cls, timeout: float = 30.0) -> None:
        """Stop every runner and wait for an invocation in progress to end."""
        with cls.lock:
            runners, cls.runners = list(cls.runners.values()), {}
        for runner in runners:
            runner.stop(wait=False)
        for runner in runners:
            runner.join(timeout)


def _parse_time(text: Any) -> datetime.datetime | None:
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return datetime.datetime.fromtimestamp(text, datetime.timezone.utc)
    if isinstance(text, datetime.datetime):
        return text if text.tzinfo else text.replace(tzinfo=datetime.timezone.utc)
    return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def _field(text: str, low: int, high: int, names: dict[str, int] | None = None) -> set[int] | None:
    """The values one cron field matches; None for ``?``. ValueError for what is not modelled."""
    if text == "?":
        return None
    values: set[int] = set()
    for part in text.split(","):
        step, stepped = 1, "/" in part
        if stepped:
            part, step_text = part.split("/", 1)
            step = int(step_text)
        if part == "*":
            first, last = low, high
        elif "-" in part:
            a, b = part.split("-", 1)
            first, last = (names or {}).get(a.upper(), None) or int(a), (names or {}).get(b.upper(), None) or int(b)
        else:
            first = (names or {}).get(part.upper(), None) or int(part)
            last = high if stepped else first
        values.update(range(first, last + 1, step))
    return values


def next_cron(expression: str, after: datetime.datetime, zone: str) -> datetime.datetime | None:
    """The first minute after ``after`` that a six-field cron expression matches (in ``zone``), within 5
    years; None if none does."""
    from zoneinfo import ZoneInfo

    fields = expression[len("cron("):-1].split()
    if len(fields) != 6 or any(c in expression for c in "LW#"):
        raise ValueError(f"{expression}: only numbers, ranges, lists, steps, * and ? are modelled")
    minutes, hours = _field(fields[0], 0, 59), _field(fields[1], 0, 23)
    days, months = _field(fields[2], 1, 31), _field(fields[3], 1, 12, _MONTHS)
    weekdays, years = _field(fields[4], 1, 7, _DAYS), _field(fields[5], 1970, 2199)
    local = after.astimezone(ZoneInfo(zone)).replace(second=0, microsecond=0)
    day = local.replace(hour=0, minute=0)
    for _ in range(5 * 366):
        weekday = (day.isoweekday() % 7) + 1  # Sunday 1 ... Saturday 7
        if ((months is None or day.month in months) and (years is None or day.year in years)
                and (days is None or day.day in days) and (weekdays is None or weekday in weekdays)):
            for hour in sorted(hours or range(24)):
                for minute in sorted(minutes or range(60)):
                    candidate = day.replace(hour=hour, minute=minute)
                    if candidate > local:
                        return candidate.astimezone(datetime.timezone.utc)
        day = (day + datetime.timedelta(days=1)).replace(hour=0, minute=0)
    return None


def next_time(schedule, after: datetime.datetime, origin: datetime.datetime) -> datetime.datetime | None:
    """When the schedule fires next after ``after`` (its own time); None: never again."""
    expression = schedule.schedule_expression
    rate = _RATE.fullmatch(expression)
    if rate:
        interval = datetime.timedelta(seconds=int(rate.group(1)) * _UNIT_SECONDS[rate.group(2).rstrip("s")])
        elapsed = max(datetime.timedelta(0), after - origin)
        return origin + interval * (elapsed // interval + 1)
    at = _AT.fullmatch(expression)
    if at:
        from zoneinfo import ZoneInfo

        moment = datetime.datetime.fromisoformat(at.group(1)).replace(
            tzinfo=ZoneInfo(schedule.schedule_expression_timezone or "UTC"))
        return moment if moment > after else None
    if expression.startswith("cron(") and expression.endswith(")"):
        return next_cron(expression, after, schedule.schedule_expression_timezone or "UTC")
    raise ValueError(f"{expression}: not a schedule expression")


class Runner(threading.Thread):
    """One schedule's times, on the stack's scale: its own clock starts at the schedule's creation (or its
    ``StartDate``) and runs ``1 / Clock.scale`` times faster than the wall clock."""

    def __init__(self, schedule) -> None:
        super().__init__(name=f"schedule {schedule.name}", daemon=True)
        self.schedule = schedule
        self.stopped = threading.Event()
        now = datetime.datetime.now(datetime.timezone.utc)
        self.origin = max(now, _parse_time(schedule.start_date) or now)
        self.started = time.monotonic()

    def stop(self, wait: bool = True) -> None:
        self.stopped.set()
        if wait and self.is_alive():
            self.join()

    def now(self) -> datetime.datetime:
        return self.origin + datetime.timedelta(seconds=(time.monotonic() - self.started) / max(Clock.scale, 1e-9))

    def run(self) -> None:
        last = self.origin
        while not self.stopped.is_set():
            schedule = self.schedule
            try:
                due = next_time(schedule, last, self.origin)
            except ValueError as exc:
                logger.warning("schedule %s is not run on the embedded stack: %s", schedule.arn, exc)
                return
            end = _parse_time(schedule.end_date)
            if due is None or (end is not None and due > end):
                return
            wait = (due - self.now()).total_seconds() * Clock.scale
            if self.stopped.wait(max(0.0, wait)):
                return
            last = due
            if schedule.state == "ENABLED":
                self.fire(schedule, due)

    def fire(self, schedule, due: datetime.datetime) -> None:
        target = schedule.target
        scheduled = due.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        payload = target.get("Input", "{}")
        for name, value in (("schedule-arn", schedule.arn), ("scheduled-time", scheduled),
                            ("execution-id", uuid.uuid4().hex[:16]), ("attempt-number", "1")):
            payload = payload.replace(f"<aws.scheduler.{name}>", value)
        Runs.fired.append((schedule.arn, scheduled))
        del Runs.fired[:-1000]
        if ":lambda:" not in target["Arn"] or ":function:" not in target["Arn"]:
            logger.warning("schedule %s: only Lambda function targets are run on the embedded stack", schedule.arn)
            return
        try:  # the scheduler invokes as the schedule's role (IAM evaluated: moto_patches.iam)
            _authorize_as_its_role(schedule, target)
        except Exception as refused:  # noqa: BLE001 - a role it may not assume, or that may not invoke
            logger.warning("schedule %s: %s is not invoked: %s", schedule.arn, target["Arn"], refused)
            return
        try:
            response = _lambda_client(target["Arn"].split(":")[3]).invoke(FunctionName=target["Arn"],
                                                                           Payload=payload.encode("utf-8"))
            if response.get("FunctionError"):
                logger.warning("schedule %s: %s failed: %s", schedule.arn, target["Arn"],
                               response["Payload"].read()[:500])
        except Exception as exc:  # noqa: BLE001 - a failed invocation is logged; the schedule goes on
            logger.warning("schedule %s: invoking %s failed: %s", schedule.arn, target["Arn"], exc)


_CLIENTS: dict[str, Any] = {}


def _authorize_as_its_role(schedule, target: dict[str, Any]) -> None:
    """``Denied`` unless Scheduler may assume the target's ``RoleArn`` (``scheduler.amazonaws.com`` under the
    role's trust policy, the schedule's ARN as ``aws:SourceArn``) and that role may invoke the function
    (``lambda:InvokeFunction``, with the function's policy), as Scheduler needs
    (https://docs.aws.amazon.com/scheduler/latest/UserGuide/setting-up.html#setting-up-execution-role)."""
    from moto.sts.models import sts_backends

    from ..iam import enforcement

    account = schedule.arn.split(":")[4]
    role = target.get("RoleArn") or ""
    with enforcement.acting_as("scheduler.amazonaws.com", schedule.arn, account):
        enforcement.assume_role_as_service("scheduler.amazonaws.com", account, role)
    session = sts_backends[account]["aws"].assume_role(
        region_name=schedule.arn.split(":")[3], role_session_name=uuid.uuid4().hex, role_arn=role, policy="",
        duration=3600, external_id="")
    function = ":".join(target["Arn"].split(":")[:7])
    try:
        enforcement.authorize(enforcement.identify(account, session.access_key_id, session.session_token),
                              [enforcement.Check("lambda:InvokeFunction", target["Arn"],
                                                 enforcement.function_policy(function))], session.access_key_id)
    finally:  # a session per run; none left behind for identify() to scan
        sts_backends[account]["aws"].assumed_roles.remove(session)


def _lambda_client(region: str):
    """A Lambda client whose Invoke the stack's Lambda service answers (as a Step Functions task's does)."""
    if region not in _CLIENTS:
        import boto3
        from botocore.config import Config

        client = boto3.client("lambda", region_name=region, config=Config(retries={"max_attempts": 1},
                                                                          read_timeout=900))
        client.meta.events.register_first("before-call.lambda.Invoke",
                                          lambda **kwargs: ORIGINALS["invoke"][0](**kwargs))
        _CLIENTS[region] = client
    return _CLIENTS[region]


def patch_schedules_run() -> None:
    from moto.scheduler.models import EventBridgeSchedulerBackend

    create = ORIGINALS.setdefault("scheduler_create_schedule", EventBridgeSchedulerBackend.create_schedule)
    update = ORIGINALS.setdefault("scheduler_update_schedule", EventBridgeSchedulerBackend.update_schedule)
    delete = ORIGINALS.setdefault("scheduler_delete_schedule", EventBridgeSchedulerBackend.delete_schedule)

    def create_schedule(self, *args, **kwargs):
        schedule = create(self, *args, **kwargs)
        Runs.start(schedule)
        return schedule

    def update_schedule(self, *args, **kwargs):
        schedule = update(self, *args, **kwargs)
        Runs.start(schedule)
        return schedule

    def delete_schedule(self, group_name, name):
        schedule = self.get_schedule(group_name, name)
        delete(self, group_name, name)
        Runs.stop(schedule.arn)

    EventBridgeSchedulerBackend.create_schedule = create_schedule
    EventBridgeSchedulerBackend.update_schedule = update_schedule
    EventBridgeSchedulerBackend.delete_schedule = delete_schedule
