"""``changeflow import``: each record of a data set becomes a ``put`` of one entity through the real
workflow (whichever entry point the client submits through), once.

- **Idempotent.** A record's change id is derived from what it says: its entity id, its effective time and
  its content (their canonical bytes, as the hash chain encodes them). Run twice, or resumed after a kill,
  the same record is the same change: the workflow answers it ``duplicate`` from the ids ``v0`` remembers,
  and a stale or equal timestamp never lets it overwrite newer data.
- **Resumable.** A checkpoint (JSON Lines: a header with the import's settings, then one line per record
  whose execution ended) lets a resumed run skip what is done without starting executions for it. A
  record whose execution failed for a reason that is not the record's is not checkpointed: a resumed run
  tries it again. A run with another source's or other settings' checkpoint is refused.
- **Bad records** (not JSON, no id, a field the workflow refuses) go to the rejects file with the reason,
  checked here with the workflow's own validation before anything starts; the run goes on.
- **Quotas.** Executions start at ``rate`` per second at most (a token bucket, ``rate.py``); a throttled
  start (HTTP 429/503, ``ThrottlingException``) is backed off and tried again, never dropped.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from botocore.exceptions import ClientError
from changeflow_core import chain, model, wire
from changeflow_core.errors import ValidationError
from changeflow_core.validation import validate_request

from ..common.errors import UsageError
from .rate import TokenBucket
from .sources import Bad, Record

CHECKPOINT_FORMAT = "changeflow-import-checkpoint/1"
OUTCOMES = ("applied", "duplicate", "stale", "rejected", "failed")
THROTTLED = {"ThrottlingException", "TooManyRequestsException", "ExecutionLimitExceeded", "ServiceUnavailable",
             "HTTP 429", "HTTP 503"}


@dataclass
class Plan:
    """How a record becomes a change request."""
    id_field: str
    effective_at_field: str | None = None
    effective_at: int | None = None
    actor: str | None = None
    reason: str | None = None
    drop: tuple[str, ...] = ()

    def settings(self) -> dict[str, Any]:
        return {"idField": self.id_field, "effectiveAtField": self.effective_at_field,
                "effectiveAt": self.effective_at, "drop": sorted(self.drop)}


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
    try:
        cid = change_id(entity_id, effective_at, attributes)
    except TypeError as exc:  # a value JSON cannot carry (a set, bytes)
        raise ValidationError("attributes", f"holds a value a JSON change request cannot carry: {exc}") from None
    request = {"entityId": entity_id, "operation": model.PUT, "attributes": attributes, "effectiveAt": effective_at,
               "changeId": cid}
    request.update({k: v for k, v in (("actor", plan.actor), ("reason", plan.reason)) if v is not None})
    try:
        text = wire.dumps(request, compact=True)
    except TypeError as exc:
        raise ValidationError("attributes", f"holds a value a JSON change request cannot carry: {exc}") from None
    validate_request(wire.loads(text), {"name": "import", "startTime": "1970-01-01T00:00:00Z"})
    return request


class Checkpoint:
    """What is done, by change id; appended and flushed as each execution ends."""

    def __init__(self, path: Path | None, header: dict[str, Any]):
        self.path, self.header = path, {"format": CHECKPOINT_FORMAT, **header}
        self.done: dict[str, str] = {}
        self._lock = threading.Lock()
        self._file = None
        if path is None:
            return
        if path.exists() and path.stat().st_size:
            self._load(path)
        self._file = path.open("a", encoding="utf-8")
        if not path.stat().st_size:
            self._write(self.header)

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
            self.done[entry["changeId"]] = entry["outcome"]

    def _write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._file.flush()

    def record(self, cid: str, entity_id: str, outcome: str, version: Any = None) -> None:
        with self._lock:
            self.done[cid] = outcome
            if self._file is not None:
                self._write({"changeId": cid, "entityId": entity_id, "outcome": outcome, "version": version})

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class Rejects:
    """The records the import could not apply, with why: JSON Lines ``{position, record, reason}``."""

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8") if path is not None else None

    def add(self, position: str, record: Any, reason: str) -> None:
        if self._file is None:
            return
        line = {"position": position, "record": record, "reason": reason}
        with self._lock:
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


def _throttle_code(exc: BaseException | None, execution: Any) -> str | None:
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code")
        return code if code in THROTTLED else None
    if execution is not None and getattr(execution, "status", None) == "REJECTED" and execution.error in THROTTLED:
        return execution.error
    return None


class Importer:
    def __init__(self, submit: Callable[[dict], Any], plan: Plan, checkpoint: Checkpoint, rejects: Rejects,
                 rate: float = 300.0, concurrency: int = 16, on_progress: Callable[[Summary], None] | None = None,
                 backoff_cap: float = 20.0):
        self.submit, self.plan, self.checkpoint, self.rejects = submit, plan, checkpoint, rejects
        self.bucket = TokenBucket(rate, burst=max(1.0, rate))
        self.concurrency = concurrency
        self.summary = Summary()
        self.on_progress = on_progress or (lambda summary: None)
        self.stop = threading.Event()
        self.backoff_cap = backoff_cap
        self._lock = threading.Lock()

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.summary.counts[outcome] += 1
        self.on_progress(self.summary)

    def _apply(self, position: str, record: dict, request: dict) -> None:
        """Start the record's change (backing off while throttled) and file its outcome."""
        delay = 0.05
        while True:
            self.bucket.take()
            execution, error = None, None
            try:
                execution = self.submit(request)
            except ClientError as exc:
                error = exc
            code = _throttle_code(error, execution)
            if code is None:
                break
            with self._lock:
                self.summary.throttled += 1
            if self.stop.wait(delay):  # Ctrl-C while backing off: not done, a resumed run tries it again
                self._count("failed")
                return
            delay = min(delay * 2, self.backoff_cap)
        if error is not None:
            self._count("failed")
            self.rejects.add(position, record, f"failed, not checkpointed (a resumed run tries again): {error}")
            return
        cid, entity = request["changeId"], request["entityId"]
        if execution.status == "SUCCEEDED":
            outcome = (execution.output or {}).get("outcome", "applied")
            self.checkpoint.record(cid, entity, outcome, (execution.output or {}).get("version"))
            self._count(outcome if outcome in OUTCOMES else "applied")
        elif execution.error == "ValidationError" or (execution.status == "REJECTED" and
                                                        str(execution.error).startswith("HTTP 4")):
            self.checkpoint.record(cid, entity, "rejected")
            self.rejects.add(position, record, f"{execution.error}: {execution.cause}")
            self._count("rejected")
        else:
            self.rejects.add(position, record, f"failed, not checkpointed (a resumed run tries again): "
                                               f"{execution.status} {execution.error}: {execution.cause}")
            self._count("failed")

    def run(self, records: Iterable[Record | Bad]) -> Summary:
        started = time.monotonic()
        pending: set[Future] = set()
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="import") as pool:
                try:
                    for item in records:
                        if self.stop.is_set():
                            break
                        if isinstance(item, Bad):
                            self.rejects.add(item.position, item.text, item.reason)
                            self._count("rejected")
                            continue
                        try:
                            request = to_request(item.values, self.plan)
                        except ValidationError as exc:
                            self.rejects.add(item.position, item.values, f"ValidationError: {exc}")
                            self._count("rejected")
                            continue
                        if request["changeId"] in self.checkpoint.done:
                            with self._lock:
                                self.summary.skipped += 1
                            self.on_progress(self.summary)
                            continue
                        while len(pending) >= self.concurrency * 2:  # bounded: memory does not grow with the source
                            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                            for future in finished:
                                future.result()
                        pending.add(pool.submit(self._apply, item.position, item.values, request))
                except KeyboardInterrupt:
                    self.stop.set()
                    self.summary.stopped = True
                for future in pending:
                    future.result()
        finally:
            self.summary.seconds = time.monotonic() - started
            self.checkpoint.close()
            self.rejects.close()
        return self.summary
