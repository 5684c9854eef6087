"""What an import has done, and what it could not do: the checkpoint a resumed run skips by, and the rejects file.

The checkpoint is JSON Lines: a header (the format, the source and every setting that shapes a request), then
one entry per record whose execution ended: ``{"changeId", "entityId", "outcome", "version"[, "reason"]}``. An
entry names its entity because a change id is only unique within one: a source's own ids
(``--change-id-field``) may be each entity's sequence numbers, and the workflow remembers ids per entity.

A run killed while writing leaves its last line torn (a prefix of an entry, ``{"…`` without its end): that
line is skipped (its record is done again, which its change id makes safe) and the next entry starts on a
line of its own. Any other line that is not an entry means the file is not this import's checkpoint, or was
damaged: the run is refused (``UsageError``, exit status 2) naming the file and the line, before anything
starts."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from changeflow_core import wire

from ..common.errors import UsageError

CHECKPOINT_FORMAT = "changeflow-import-checkpoint/1"
ENDED = ("applied", "duplicate", "stale", "rejected")  # what a checkpointed record's execution ended as
_TORN = b'{"'  # how every entry starts: a line cut short by a kill is a prefix of one


class Checkpoint:
    """What is done, by entity and change id; appended and flushed as each execution ends."""

    def __init__(self, path: Path | None, header: dict[str, Any]):
        self.path, self.header = path, {"format": CHECKPOINT_FORMAT, **header}
        self.done: dict[tuple[str, str], dict[str, Any]] = {}  # (entity, change id) -> what an earlier run ended
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
        except OSError as exc:
            raise UsageError(f"{path}: cannot use it as the checkpoint ({exc.strerror or exc})") from exc

    def finished(self, entity_id: str, cid: str) -> dict[str, Any] | None:
        """The entry of an earlier run that ended this entity's change, if any."""
        return self.done.get((entity_id, cid))

    def _refuse(self, number: int, why: str) -> UsageError:
        return UsageError(f"{self.path} line {number}: {why}: it is not the checkpoint of a changeflow import, or it "
                          "was damaged; give another --checkpoint (a run without one applies nothing twice)")

    def _load(self, path: Path) -> None:
        lines = path.read_bytes().split(b"\n")
        header = self._parse(1, lines[0])
        if not isinstance(header, dict) or header.get("format") != CHECKPOINT_FORMAT:
            raise self._refuse(1, f"not a header ({{\"format\": \"{CHECKPOINT_FORMAT}\", ...}})")
        if header != self.header:
            differs = sorted(k for k in set(header) | set(self.header) if header.get(k) != self.header.get(k))
            named = " and ".join([", ".join(differs[:-1]), differs[-1]] if len(differs) > 1 else differs)
            raise UsageError(f"{path} is the checkpoint of another import (its {named} "
                             f"{'differ' if len(differs) > 1 else 'differs'}): "
                             "resume with the same source and options, or give another --checkpoint")
        for number, raw in enumerate(lines[1:], start=2):
            if not raw.strip():
                continue
            entry = self._parse(number, raw)
            if entry is not None:
                self._check(number, entry)
                self.done[(entry["entityId"], entry["changeId"])] = entry

    def _parse(self, number: int, raw: bytes) -> Any:
        """A line's JSON; None for a line torn by a kill (a prefix of an entry)."""
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            if number > 1 and raw.startswith(_TORN):
                return None
            raise self._refuse(number, "not JSON") from None

    def _check(self, number: int, entry: Any) -> None:
        if not isinstance(entry, dict):
            raise self._refuse(number, f"an entry is a JSON object, not {type(entry).__name__}")
        for name in ("changeId", "entityId"):
            if not isinstance(entry.get(name), str) or not entry[name]:
                raise self._refuse(number, f"an entry's {name} is a non-empty string")
        if entry.get("outcome") not in ENDED:
            raise self._refuse(number, f"an entry's outcome is one of {', '.join(ENDED)}")

    def _write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry) + "\n")
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
        line = {"position": position, "record": json_or_text(record), "reason": reason}
        with self._lock:
            if self._file.closed:
                return
            self._file.write(wire.dumps(line, compact=True, default=repr) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def json_or_text(record: Any) -> Any:
    """A rejected record as a JSON Lines file can hold it: itself, or its text where it holds a number JSON has
    no form for (NaN, Infinity: Python's parser reads them, a strict one such as jq's refuses the line), as a
    line that is not JSON is kept."""
    text = wire.dumps(record, compact=True, default=repr)

    def no_form(constant: str):
        raise ValueError(constant)

    try:
        json.loads(text, parse_constant=no_form)
    except ValueError:
        return text
    return record
