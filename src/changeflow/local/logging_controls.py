"""Lambda's advanced logging controls on the embedded stack: which of a function's lines reach its log group
(``LoggingConfig``: ``LogFormat``, ``ApplicationLogLevel``, ``SystemLogLevel``), and the lines Lambda itself
writes for each invocation, so that what the embedded stack counts is what CloudWatch Logs would ingest.

AWS's rules, from "Log-level filtering"
(https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html, read 2026-11-25):

- filtering needs the JSON log format; with the text format every line is sent;
- an application line is sent when its level is the configured level or less detailed (TRACE < DEBUG < INFO
  < WARN < ERROR < FATAL); a line's level is its JSON ``"level"`` key, and a line whose ``"level"`` is
  missing or invalid (a plain text line, an EMF document) is INFO;
- system lines are Lambda's own: per invocation ``platform.start``, ``platform.runtimeDone`` and
  ``platform.report`` (the text format's START, END and REPORT lines), all INFO, sent only at a system log
  level of INFO or DEBUG.

Lambda tells the runtime its configuration in ``AWS_LAMBDA_LOG_FORMAT`` and ``AWS_LAMBDA_LOG_LEVEL`` (which
Powertools' Logger takes over ``POWERTOOLS_LOG_LEVEL``); ``environment`` gives a function those.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
# Python's and Powertools' names for the same levels
ALIASES = {"WARNING": "WARN", "CRITICAL": "FATAL", "NOTSET": "TRACE"}


def level_of(line: str) -> str:
    """A line's level as Lambda reads it: the JSON ``"level"`` key, else INFO."""
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            return "INFO"
        value = record.get("level") if isinstance(record, dict) else None
        if isinstance(value, str):
            name = ALIASES.get(value.upper(), value.upper())
            if name in LEVELS:
                return name
    return "INFO"


@dataclass(frozen=True)
class LoggingControls:
    """A function's ``LoggingConfig`` (Lambda's defaults when the template gives none: text, no filtering)."""

    log_format: str = "Text"
    application_level: str = "INFO"
    system_level: str = "INFO"

    @classmethod
    def of(cls, properties: dict[str, Any]) -> "LoggingControls":
        config = properties.get("LoggingConfig") or {}
        return cls(log_format=str(config.get("LogFormat", "Text")),
                   application_level=str(config.get("ApplicationLogLevel", "INFO")).upper(),
                   system_level=str(config.get("SystemLogLevel", "INFO")).upper())

    @property
    def filters(self) -> bool:
        return self.log_format.upper() == "JSON"

    def environment(self) -> dict[str, str]:
        """What Lambda sets in the function's environment for this configuration."""
        if not self.filters:
            return {"AWS_LAMBDA_LOG_FORMAT": "Text"}
        return {"AWS_LAMBDA_LOG_FORMAT": "JSON", "AWS_LAMBDA_LOG_LEVEL": self.application_level}

    def python_level(self, powertools_level: str | None = None) -> str:
        """The level a Powertools Logger takes in the function: Lambda's (``AWS_LAMBDA_LOG_LEVEL``) when it
        filters, else ``POWERTOOLS_LOG_LEVEL`` (INFO when unset), in Python's names."""
        level = self.application_level if self.filters else (powertools_level or "INFO").upper()
        return {"WARN": "WARNING", "FATAL": "CRITICAL", "TRACE": "NOTSET"}.get(level, level)

    def sends(self, line: str, level: str | None = None) -> bool:
        """Whether an application line (``level`` when the runtime knows it, else read from the line) is sent."""
        if not self.filters:
            return True
        return LEVELS.index(level or level_of(line)) >= LEVELS.index(self.application_level)

    def sends_system(self, level: str = "INFO") -> bool:
        return not self.filters or LEVELS.index(level) >= LEVELS.index(self.system_level)

    def platform_lines(self, request_id: str, duration_ms: float, memory_mb: int,
                       trace_id: str = "1-6751c1e3-2f3e1e6c1c2d1d8a3b4c5d6e") -> list[str]:
        """What Lambda writes to the log group for one invocation: START, END and REPORT in the text format;
        ``platform.start``, ``platform.runtimeDone`` and ``platform.report`` in JSON (their fields as in
        "Lambda Telemetry API schema reference",
        https://docs.aws.amazon.com/lambda/latest/dg/telemetry-schema-reference.html), none of them below
        the system log level."""
        billed = max(1, -(-int(duration_ms * 1000) // 1000))
        if not self.filters:
            return [f"START RequestId: {request_id} Version: $LATEST",
                    f"END RequestId: {request_id}",
                    f"REPORT RequestId: {request_id}\tDuration: {duration_ms:.2f} ms\tBilled Duration: {billed} ms\t"
                    f"Memory Size: {memory_mb} MB\tMax Memory Used: 90 MB\t\nXRAY TraceId: {trace_id}\t"
                    "SegmentId: 5d2a6b8c9e0f1a2b\tSampled: true\t"]
        if not self.sends_system("INFO"):
            return []
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        tracing = {"spanId": "5d2a6b8c9e0f1a2b", "type": "X-Amzn-Trace-Id",
                   "value": f"Root={trace_id};Parent=53995c3f42cd8ad8;Sampled=1"}
        records = [
            {"time": now, "type": "platform.start",
             "record": {"requestId": request_id, "version": "$LATEST", "tracing": tracing}},
            {"time": now, "type": "platform.runtimeDone",
             "record": {"requestId": request_id, "status": "success", "tracing": tracing,
                        "spans": [{"name": "responseLatency", "start": now, "durationMs": round(duration_ms, 3)},
                                  {"name": "responseDuration", "start": now, "durationMs": 0.1}],
                        "metrics": {"durationMs": round(duration_ms, 3), "producedBytes": 120}}},
            {"time": now, "type": "platform.report",
             "record": {"requestId": request_id, "metrics": {"durationMs": round(duration_ms, 3),
                                                             "billedDurationMs": billed, "memorySizeMB": memory_mb,
                                                             "maxMemoryUsedMB": 90},
                        "tracing": tracing, "status": "success"}},
        ]
        return [json.dumps(r, separators=(",", ":")) for r in records]
