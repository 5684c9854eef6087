"""``changeflow import``: each record of a data set becomes a ``put`` of one entity through the real
workflow (whichever entry point the client submits through), once.

- **Idempotent.** A record's change id is derived from what it says: its entity id, its effective time and
  its content (their canonical bytes, as the hash chain encodes them). Run twice, or resumed after a kill,
  the same record is the same change: the ids ``v0`` remembers answer it ``duplicate`` (read before it starts,
  ``outcomes``, and by the workflow itself), and an older timestamp never lets it overwrite newer data.
- **Resumable.** A checkpoint (JSON Lines: a header with the import's settings, then one line per record
  whose execution ended) lets a resumed run skip what is done without starting executions for it. A
  record whose execution failed for a reason that is not the record's is not checkpointed: a resumed run
  tries it again. A run with another source's or other settings' checkpoint is refused.
- **Bad records** (not JSON, no id, a field the workflow refuses) go to the rejects file with the reason,
  checked here with the workflow's own validation before anything starts; the run goes on.
- **Quotas.** Executions start at ``rate`` per second at most (a token bucket, ``rate.py``), lowered while
  throttled as botocore's adaptive mode does; a throttled call (HTTP 429/503, ``ThrottlingException``) is
  backed off and tried again, never dropped.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as first_done
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from botocore.exceptions import ClientError
from changeflow_core import chain, model, wire
from changeflow_core.errors import ValidationError
from changeflow_core.validation import validate_request

from ..client.logged import UNKNOWN
from ..common.errors import UsageError
from . import outcomes
from .rate import AdaptiveRate, TokenBucket
from .sources import Bad, Record

CHECKPOINT_FORMAT = "changeflow-import-checkpoint/1"
# Step Functions' default token buckets (https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html,
# "Quotas related to API action throttling" and "... state throttling"): StartExecution refills 300 a second in
# us-east-1, us-west-2 and eu-west-1 (150 elsewhere), StateTransition 1,500 (500 elsewhere). An applied change is
# 4 state transitions (docs/workflow.md), so 300 starts a second fit both buckets there; elsewhere 125 do
# (--rate 125). The start rate then adapts to throttling (AdaptiveRate).
DEFAULT_RATE = 300.0
OUTCOMES = ("applied", "duplicate", "stale", "rejected", "failed", "unknown")
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
    entity_id = str(entity) if isinstance(entity, (int,)) or (isinstance(entity, str)) else None
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

class Checkpoint:
    """What is done, by change id; appended and flushed as each execution ends."""

    def __init__(self, path: Path | None, header: dict[str, Any]):
        self.path, self.header = path, {"format": CHECKPOINT_FORMAT, **header}
        self.done: dict[str, dict[str, Any]] = {}  # what earlier runs finished (this run's are only written)
        self._lock = threading.Lock()
        self._file = None
        if path is None:
            return
        try:
            if path.exists() and path.stat().st_size:
                self._load(path)
            torn = path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n")
            self._file = path.open("a", encoding="utf-8")
            if torn:  # a run killed while writing its last line: the next entry starts on a line of its own
                self._file.write("\n")
            if not path.stat().st_size:
                self._write(self.header)
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise UsageError(f"{path}: cannot use it as the checkpoint ({why})") from exc

    def _load(self, path: Path) -> None:
        lines = path.read_text(encoding="utf-8").splitlines()
        try:
            header = json.loads(lines[0])
        except ValueError:
            raise UsageError(f"{path}: not a checkpoint of changeflow import") from None
        if header != self.header:
            differs = sorted(k for k in set(header) | set(self.header) if header.get(k) != self.header.get(k))
            raise UsageError(f"{path} is the checkpoint of another import (its {', '.join(differs)} differ): "
                             "resume with the same source and options, or give another --checkpoint")
        for line in lines[1:]:
            try:
                entry = json.loads(line)
            except ValueError:  # the last line of a run killed while writing it
                continue
            self.done[entry["changeId"]] = entry

    def _write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._file.flush()

    def record(self, cid: str, entity_id: str, outcome: str, version: Any = None, reason: str | None = None) -> None:
        entry = {"changeId": cid, "entityId": entity_id, "outcome": outcome, "version": version}
        if reason is not None:
            entry["reason"] = reason
        with self._lock:
            if self._file is not None and not self._file.closed:
                self._write(entry)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class Rejects:
    """The records the import could not apply, with why: JSON Lines ``{position, record, reason}``, written
    anew by each run (a resumed run writes again the rejections its checkpoint remembers), so that it always
    lists every record of the source the import has not applied."""

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()
        try:
            self._file = path.open("w", encoding="utf-8") if path is not None else None
        except OSError as exc:
            raise UsageError(f"{path}: cannot write the rejects file ({exc.strerror or exc})") from exc

    def add(self, position: str, record: Any, reason: str) -> None:
        if self._file is None:
            return
        line = {"position": position, "record": record, "reason": reason}
        with self._lock:
            if self._file.closed:
                return
            self._file.write(wire.dumps(line, compact=True, default=repr) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


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


def entry_point(client, via: str, timeout: float) -> tuple[Callable[[dict], Any], Callable[[str, dict], Any]]:
    """``(start, wait)`` for the entry point ``via``.

    Through Step Functions a change ``v0`` already lists is ``duplicate`` without starting anything, and a
    started change's outcome is read from the table (``outcomes``: no DescribeExecution per record, whose
    quota would bound the import far below the start rate), its execution described only when the data has
    not answered in time. A change whose execution name is taken (an earlier run's, closed) is delivered
    again as a new execution, which the workflow answers ``duplicate``; one still running with the same
    input is the same execution (StartExecution is idempotent for it)."""
    if via == "stepfunctions":
        def start(request):
            return outcomes.already_done(client, request) or client.start(request, redeliver=True)[1]

        return start, (lambda arn, request: outcomes.settle(client, request, arn, timeout))
    submit = {"api": client.submit_via_api, "events": client.submit_via_events}[via]
    return (lambda request: submit(request, timeout=timeout)), (lambda arn, request: client.wait(arn, timeout))


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
    ``Execution``), at most ``concurrency`` at once and ``rate`` starts a second, adapted to throttling."""

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

    def _apply(self, position: str, record: dict, request: dict) -> None:
        """Start the record's change, wait for its end and file its outcome."""
        try:
            started = self._patiently(lambda: self.start(request), rated=True)
            execution = started if not isinstance(started, str) else self._patiently(
                lambda: self.wait(started, request), rated=False)
        except Stopped:
            return  # not counted, not checkpointed: a resumed run starts it
        except (ClientError, TimeoutError) as exc:
            self.rejects.add(position, record, f"failed, not checkpointed (a resumed run tries again): {exc}")
            self._count("failed")
            return
        cid, entity = request["changeId"], request["entityId"]
        if execution.status == "SUCCEEDED":
            output = execution.output if isinstance(execution.output, dict) else {}
            outcome = output.get("outcome") if output.get("outcome") in OUTCOMES else "applied"
            self.checkpoint.record(cid, entity, outcome, output.get("version"))
            self._count(outcome)
        elif execution.status == UNKNOWN:  # OutcomeUnknown: a resumed run sends the same change id again
            self.rejects.add(position, record, f"unknown outcome, not checkpointed (a resumed run sends the same "
                                               f"change id again): {execution.cause}")
            self._count("unknown")
        elif execution.error in self.named_errors or str(execution.error).startswith("HTTP 4"):
            reason = f"{execution.error}: {execution.cause}"
            self.checkpoint.record(cid, entity, "rejected", reason=reason)
            self.rejects.add(position, record, reason)
            self._count("rejected")
        else:
            self.rejects.add(position, record, f"failed, not checkpointed (a resumed run tries again): "
                                               f"{execution.status} {execution.error}: {execution.cause}")
            self._count("failed")

    named_errors: set[str] = {"ValidationError"}  # the workflow's named errors (``client.named_errors``)

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
        done = self.checkpoint.done.get(request["changeId"])
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
                    if request is None:
                        continue
                    while len(pending) >= self.concurrency * 2:  # bounded: memory does not grow with the source
                        finished, pending = first_done(pending, return_when=FIRST_COMPLETED)
                        for future in finished:
                            future.result()
                    pending.add(pool.submit(self._apply, item.position, item.values, request))
            except KeyboardInterrupt:
                self.stop.set()
                self.summary.stopped = True
            while pending:  # what is in flight ends (a second Ctrl-C leaves it to the resumed run)
                try:
                    finished, pending = first_done(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        future.result()
                except KeyboardInterrupt:
                    self.stop.set()
                    self.summary.stopped = True
        finally:
            pool.shutdown(wait=not self.stop.is_set(), cancel_futures=True)
            self.summary.seconds = time.monotonic() - began
            self.checkpoint.close()
            self.rejects.close()
        return self.summary
