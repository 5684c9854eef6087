"""``changeflow import``: each record of a data set becomes a ``put`` of one entity through the real
workflow (whichever entry point the client submits through), once.

- **Idempotent.** A record's change id is derived from what it says: its entity id, its effective time and
  its content (their canonical bytes, as the hash chain encodes them). Run twice, or resumed after a kill,
  the same record is the same change: before it starts, ``outcomes`` answers it ``duplicate`` from the ids
  ``v0`` remembers or, past those 16, from the entity's history; the workflow itself answers a repeat it
  still remembers, and an older timestamp never lets it overwrite newer data.
- **In order.** An entity's records are applied one after another, in the source's order, whatever the
  concurrency (which runs different entities side by side): under one effective time, the source's last
  record of an entity is its last version. A record whose outcome is not known (failed, unknown) stops its entity's later records in
  this run, so that a resumed run applies them in order after it.
- **Resumable.** A checkpoint (``checkpoint.py``) lets a resumed run skip what is done without starting
  executions for it. A record whose execution failed for a reason that is not the record's is not
  checkpointed: a resumed run tries it again. A run with another source's or other settings' checkpoint is
  refused.
- **Bad records** (a line that cannot be one, ``sources``; no id, a field the workflow refuses) go to the
  rejects file with the reason, checked here with the workflow's own validation before anything starts; the
  run goes on.
- **Quotas.** Executions start at ``rate`` per second at most (a token bucket, ``rate.py``), lowered while
  throttled as botocore's adaptive mode does; a throttled call (HTTP 429/503, ``ThrottlingException``) is
  backed off and tried again, never dropped.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from botocore.exceptions import ClientError
from changeflow_core import chain, model, wire
from changeflow_core.errors import ValidationError
from changeflow_core.validation import validate_request

from . import outcomes
from .checkpoint import CHECKPOINT_FORMAT, Checkpoint, Rejects  # noqa: F401 - the importer's parts, named here too
from .rate import AdaptiveRate, TokenBucket
from .sources import Bad, Record

# Step Functions' default token buckets (https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html,
# "Quotas related to API action throttling" and "... state throttling"): StartExecution refills 300 a second in
# us-east-1, us-west-2 and eu-west-1 (150 elsewhere), StateTransition 1,500 (500 elsewhere). An applied change is
# 3 state transitions (docs/workflow.md), so 300 starts a second fit both buckets there; elsewhere 150 do
# (--rate 150). The start rate then adapts to throttling (AdaptiveRate).
DEFAULT_RATE = 300.0
OUTCOMES = ("applied", "duplicate", "stale", "rejected", "failed", "unknown")
UNKNOWN = "OutcomeUnknown"  # the workflow's named error for an outcome it cannot know (docs/workflow.md)
LOOKAHEAD = 1024  # records read ahead of those in flight, queued behind their entity's: memory stays bounded
THROTTLED = {"ThrottlingException", "TooManyRequestsException", "ExecutionLimitExceeded", "ServiceUnavailable",
             "ProvisionedThroughputExceededException", "RequestLimitExceeded", "HTTP 429", "HTTP 503"}


@dataclass
class Plan:
    """How a record becomes a change request."""
    id_field: str
    effective_at_field: str | None = None
    effective_at: int | None = None
    actor: str | None = None
    reason: str | None = None
    drop: tuple[str, ...] = ()
    change_id_field: str | None = None  # the record's own change id, instead of the derived one
    actor_field: str | None = None  # each record's actor, instead of one for all

    def settings(self) -> dict[str, Any]:
        """What decides the requests: a checkpoint taken with other settings is not resumed."""
        return {"idField": self.id_field, "effectiveAtField": self.effective_at_field,
                "effectiveAt": self.effective_at, "drop": sorted(self.drop), "changeIdField": self.change_id_field,
                "actor": self.actor, "actorField": self.actor_field, "reason": self.reason}


def change_id(entity_id: str, effective_at: int, attributes: dict[str, Any]) -> str:
    """The record's change id: the same record (entity, time, content), the same change, whatever the run."""
    content = chain.encode_version(chain.to_wire(attributes))
    digest = hashlib.sha256(entity_id.encode("utf-8") + b"\x00" + str(effective_at).encode() + b"\x00" + content)
    return "import-" + digest.hexdigest()[:32]


def to_request(record: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """The put this record stands for, validated by the workflow's own rules (``ValidationError``)."""
    if plan.id_field not in record:
        raise ValidationError(plan.id_field, "is missing: every record needs the id field (--id-field)")
    entity = record[plan.id_field]
    entity_id = str(entity) if isinstance(entity, (int, str)) and not isinstance(entity, bool) else None
    if entity_id is None:
        raise ValidationError(plan.id_field, f"must be a string or an integer, not {type(entity).__name__}")
    if plan.effective_at_field is not None:
        raw = record.get(plan.effective_at_field)
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValidationError(plan.effective_at_field, "must be an integer: epoch milliseconds")
        effective_at = raw
    else:
        effective_at = plan.effective_at
    attributes = {k: v for k, v in record.items() if k != plan.id_field and k not in plan.drop}
    actor = plan.actor
    if plan.actor_field is not None:
        actor = record.get(plan.actor_field)
        if actor is not None and not isinstance(actor, str):
            raise ValidationError(plan.actor_field, "must be a string: who the change is on behalf of (--actor-field)")
    request = {"entityId": entity_id, "operation": model.PUT, "attributes": attributes, "effectiveAt": effective_at}
    request.update({k: v for k, v in (("actor", actor), ("reason", plan.reason)) if v is not None})
    if plan.change_id_field is not None:
        request["changeId"] = record.get(plan.change_id_field)
        if not isinstance(request["changeId"], str) or not request["changeId"]:
            raise ValidationError(plan.change_id_field, "must be a non-empty string: the change id (--change-id-field)")
    try:
        text = wire.dumps(request, compact=True)
    except (TypeError, ValueError) as exc:
        raise ValidationError("attributes", f"holds a value a JSON change request cannot carry: {exc}") from None
    # the workflow's own rules, before anything starts (the same ValidationError the fetch step would raise)
    validate_request(wire.loads(text), {"name": "import", "startTime": "1970-01-01T00:00:00Z"})
    if plan.change_id_field is None:
        request["changeId"] = change_id(entity_id, effective_at, attributes)
    return request

@dataclass
class Summary:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    skipped: int = 0  # done by an earlier run (the checkpoint): nothing started
    throttled: int = 0  # starts backed off and tried again
    seconds: float = 0.0
    stopped: bool = False

    @property
    def records(self) -> int:
        return sum(self.counts.values()) + self.skipped

    def to_json(self) -> dict[str, Any]:
        return {**self.counts, "skipped": self.skipped, "throttled": self.throttled, "records": self.records,
                "seconds": round(self.seconds, 3), "stopped": self.stopped}


def default_checkpoint(source: str) -> Path:
    """``<source's file name>.checkpoint`` in the working directory (``dynamodb-TABLE.checkpoint``)."""
    return Path(Path(source.replace("://", "-")).name + ".checkpoint")


def entry_point(client, via: str, timeout: float, describe_after: float = 20.0,
                ) -> tuple[Callable[[dict], Any], Callable[[str, dict], Any]]:
    """``(start, wait)`` for the entry point ``via``.

    Whatever the entry point, a change the entity already has is ``duplicate`` without starting (or
    submitting) anything: ``v0``'s remembered ids, or past them its history (``outcomes.already_done``).
    Through Step Functions a started change's outcome is read from the table (``outcomes``: no
    DescribeExecution per record, whose quota would bound the import far below the start rate), its execution
    described only when the data has not answered in time. A change whose execution name is taken (an
    earlier run's, closed) is delivered again as a new execution, which the workflow answers ``duplicate``;
    one still running with the same input is the same execution (StartExecution is idempotent for it);
    ``describe_after``: how long the data is read before the execution is described."""
    applied = outcomes.Applied(client)

    def noted(execution: Any, request: dict) -> Any:  # what this run applies joins what its history holds
        output = getattr(execution, "output", None)
        if getattr(execution, "status", None) == "SUCCEEDED" and isinstance(output, dict) \
                and output.get("outcome") == model.APPLIED:
            applied.note(request["entityId"], request["changeId"], int(output["version"]))
        return execution

    if via == "stepfunctions":
        def start(request):
            return outcomes.already_done(client, request, applied) or client.start(request, redeliver=True)[1]

        return start, (lambda arn, request: noted(outcomes.settle(client, request, arn, timeout, describe_after), request))
    submit = {"api": client.submit_via_api, "events": client.submit_via_events}[via]

    def submitted(request):
        return outcomes.already_done(client, request, applied) or noted(submit(request, timeout=timeout), request)

    return submitted, (lambda arn, request: noted(client.wait(arn, timeout), request))


def _throttle_code(exc: BaseException | None, execution: Any) -> str | None:
    """The throttling error a call met (an exception, or an answer such as the REST API's 429), else None."""
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code")
        return code if code in THROTTLED else None
    if execution is not None and getattr(execution, "status", None) == "REJECTED" and execution.error in THROTTLED:
        return execution.error
    return None


class Stopped(Exception):
    """Ctrl-C while a record waited to start: it is not done, and a resumed run starts it."""


class Importer:
    """Runs the records through ``start`` (a request -> an execution's ARN, or an ``Execution`` when the entry
    point answers with its end, as the REST API does) and ``wait`` (an ARN and its request -> the
    ``Execution``), at most ``concurrency`` at once and ``rate`` starts a second, adapted to throttling.

    An entity's records run one after another in the source's order (a "chain": one thread applies them as
    they queue behind the first), so that under one effective time its last record is its last version;
    different entities run side by side. At most ``2 x concurrency`` chains wait for a thread and ``LOOKAHEAD`` records queue behind theirs:
    memory does not grow with the source."""

    def __init__(self, start: Callable[[dict], Any], wait: Callable[[str, dict], Any], plan: Plan,
                 checkpoint: Checkpoint, rejects: Rejects, rate: float = 300.0, concurrency: int = 16,
                 on_progress: Callable[[Summary], None] | None = None, backoff_cap: float = 20.0,
                 sleep: Callable[[float], None] | None = None):
        self.start, self.wait, self.plan, self.checkpoint, self.rejects = start, wait, plan, checkpoint, rejects
        self.stop = threading.Event()
        self.bucket = TokenBucket(rate, burst=max(1.0, rate), sleep=sleep or self._sleep)
        self.adaptive = AdaptiveRate(self.bucket, rate)
        self.concurrency = concurrency
        self.summary = Summary()
        self.on_progress = on_progress or (lambda summary: None)
        self.backoff_cap = backoff_cap
        self._lock = threading.Lock()
        self._queued: dict[str, deque] = {}  # entity -> its records waiting behind the one its chain applies
        self._queue_slots = threading.BoundedSemaphore(LOOKAHEAD)
        self._halted: dict[str, str] = {}  # entity -> the position of its record whose outcome is not known

    def _sleep(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise Stopped

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.summary.counts[outcome] += 1
        self.on_progress(self.summary)

    def _patiently(self, call: Callable[[], Any], rated: bool) -> Any:
        """``call()`` until it is not throttled: a throttled call slows the start rate (``AdaptiveRate``) and
        is tried again after an exponential back-off with full jitter (botocore's: base 2^attempt, capped),
        never given up while the import runs (a record is never dropped on a 429)."""
        attempt = 0
        while True:
            if rated:
                self.bucket.take()
            answer, error = None, None
            try:
                answer = call()
            except ClientError as exc:
                error = exc
            if _throttle_code(error, answer) is None:
                if error is not None:
                    raise error
                if rated:
                    self.adaptive.succeeded()
                return answer
            with self._lock:
                self.summary.throttled += 1
            self.adaptive.throttled()
            self._sleep(random.uniform(0, min(self.backoff_cap, 0.05 * 2 ** attempt)))
            attempt += 1

    def _apply(self, position: str, record: dict, request: dict) -> bool:
        """Start the record's change, wait for its end and file its outcome. False when the outcome is not
        known (failed, unknown, stopped): the entity's later records must not overtake it."""
        try:
            started = self._patiently(lambda: self.start(request), rated=True)
            execution = started if not isinstance(started, str) else self._patiently(
                lambda: self.wait(started, request), rated=False)
        except Stopped:
            return False  # not counted, not checkpointed: a resumed run starts it
        except TimeoutError as exc:
            self.rejects.add(position, record, f"unknown, not checkpointed: no outcome within --timeout ({exc}); the "
                                               "change may yet be applied: a resumed run sends the same change again")
            self._count("unknown")
            return False
        except ClientError as exc:
            self.rejects.add(position, record, f"failed, not checkpointed (a resumed run tries again): {exc}")
            self._count("failed")
            return False
        cid, entity = request["changeId"], request["entityId"]
        if execution.status == "SUCCEEDED":
            output = execution.output if isinstance(execution.output, dict) else {}
            outcome = output.get("outcome") if output.get("outcome") in OUTCOMES else "applied"
            self.checkpoint.record(cid, entity, outcome, output.get("version"))
            self._count(outcome)
            return True
        # OutcomeUnknown is one of the workflow's named errors, but not a rejection: it may have been applied
        if execution.error != UNKNOWN and (execution.error in self.named_errors
                                           or str(execution.error).startswith("HTTP 4")):
            reason = f"{execution.error}: {execution.cause}"
            self.checkpoint.record(cid, entity, "rejected", reason=reason)
            self.rejects.add(position, record, reason)
            self._count("rejected")
            return True  # never applied: the entity's next record may follow
        outcome = "unknown" if execution.error == UNKNOWN else "failed"
        self.rejects.add(position, record, f"{outcome}, not checkpointed (a resumed run tries it again): "
                                           f"{execution.status} {execution.error}: {execution.cause}")
        self._count(outcome)
        # a change that was never sent because whether it was applied cannot be known (outcomes.already_done) is
        # not sent by a resumed run either: the entity's later records cannot be overtaken by it
        return outcome == "unknown" and not execution.arn

    named_errors: set[str] = {"ValidationError"}  # the workflow's named errors (``client.named_errors``)

    def _hold(self, position: str, record: dict, entity: str) -> None:
        """A record not started because an earlier one of its entity has no known outcome (not checkpointed)."""
        self.rejects.add(position, record, f"failed, not started: the outcome of this entity's record at "
                                           f"{self._halted[entity]} is not known, and a record never overtakes an "
                                           "earlier one of its entity; a resumed run applies them in order")
        self._count("failed")

    def _settle(self, item: Record | Bad) -> dict | None:
        """A record's request, or None when it is settled without starting anything (rejected here, or
        done by an earlier run)."""
        if isinstance(item, Bad):
            self.rejects.add(item.position, item.text, item.reason)
            self._count("rejected")
            return None
        try:
            request = to_request(item.values, self.plan)
        except ValidationError as exc:
            self.rejects.add(item.position, item.values, f"ValidationError: {exc}")
            self._count("rejected")
            return None
        done = self.checkpoint.finished(request["entityId"], request["changeId"])
        if done is None:
            return request
        if done["outcome"] == "rejected":  # the workflow refused it: the rejects file lists it again
            self.rejects.add(item.position, item.values, done.get("reason", "rejected by the workflow"))
            self._count("rejected")
        else:
            with self._lock:
                self.summary.skipped += 1
            self.on_progress(self.summary)
        return None

    def _chain(self, entity: str, job: tuple[str, dict, dict]) -> None:
        """Apply ``job``, then the entity's records queued behind it, in order; after Ctrl-C, the first only."""
        queued = self._queued[entity]
        try:
            known = self._apply(*job)
            while True:
                with self._lock:
                    if not queued:
                        del self._queued[entity]
                        if not known and not self.stop.is_set():
                            self._halted.setdefault(entity, job[0])
                        return
                    following = queued.popleft()
                try:
                    if self.stop.is_set():
                        continue  # not started, not checkpointed: a resumed run starts it
                    if not known:
                        self._halted.setdefault(entity, job[0])
                        self._hold(following[0], following[1], entity)
                        continue
                    job, known = following, self._apply(*following)
                finally:
                    self._queue_slots.release()
        except BaseException:
            with self._lock:
                for _ in range(len(queued)):
                    queued.popleft()
                    self._queue_slots.release()
                self._queued.pop(entity, None)
            raise

    def _dispatch(self, pool: ThreadPoolExecutor, pending: set[Future], item: Record, request: dict) -> None:
        """Queue the record behind its entity's chain, or start a chain for it."""
        entity, job = request["entityId"], (item.position, item.values, request)
        if entity in self._halted:
            self._hold(item.position, item.values, entity)
            return
        if entity in self._queued:  # only this thread adds chains: one that ends meanwhile just is not there
            self._queue_slots.acquire()
            with self._lock:
                if entity in self._queued:
                    self._queued[entity].append(job)
                    return
            self._queue_slots.release()
        while len(pending) >= self.concurrency * 2:  # bounded: memory does not grow with the source
            self._reap(pending, block=True)
        with self._lock:
            self._queued[entity] = deque()
        pending.add(pool.submit(self._chain, entity, job))

    @staticmethod
    def _reap(pending: set[Future], block: bool = False) -> None:
        """Forget the chains that ended (raising what one raised); with ``block``, wait for one first."""
        if block and pending:
            next(as_completed(pending))
        for future in [f for f in pending if f.done()]:
            pending.discard(future)
            future.result()

    def run(self, records: Iterable[Record | Bad]) -> Summary:
        """Import ``records``; Ctrl-C (KeyboardInterrupt) stops starting new ones, lets those in flight end
        and be checkpointed, and returns with ``stopped`` set."""
        began = time.monotonic()
        pending: set[Future] = set()
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="import")
        try:
            try:
                for item in records:
                    request = self._settle(item)
                    if request is not None:
                        self._dispatch(pool, pending, item, request)
                    self._reap(pending)
            except KeyboardInterrupt:
                self.stop.set()
                self.summary.stopped = True
            while pending:  # what is in flight ends (a second Ctrl-C leaves it to the resumed run)
                try:
                    self._reap(pending, block=True)
                except KeyboardInterrupt:
                    self.stop.set()
                    self.summary.stopped = True
        finally:
            pool.shutdown(wait=not self.stop.is_set(), cancel_futures=True)
            self.summary.seconds = time.monotonic() - began
            self.checkpoint.close()
            self.rejects.close()
        return self.summary
