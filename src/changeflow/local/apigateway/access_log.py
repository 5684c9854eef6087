"""The stage's access log, as API Gateway writes it: one event per request in the stage's
``AccessLogSetting.Format``, each ``$context`` variable replaced by its value and ``-`` where it has none, in the
``DestinationArn`` log group. API Gateway writes it, not the integration: ``changeflow verify --principals``
matches each version recorded under an ``api`` principal with its request here (issue 33).
https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-logging.html
https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-variables-for-access-logging.html"""

from __future__ import annotations

import json
import re
import time
from typing import Any

VARIABLE = re.compile(r"\$context\.([A-Za-z0-9_.]+)")
STREAM = "embedded"


class AccessLog:
    """Writes the access log of one stage, or nothing when the stage has no ``AccessLogSetting``."""

    def __init__(self, client, setting: dict[str, Any] | None):
        self.client, self.format = client, (setting or {}).get("Format")
        arn = (setting or {}).get("DestinationArn") or ""
        self.group = arn.split(":log-group:", 1)[1].removesuffix(":*") if ":log-group:" in arn else None
        self._stream_made = False

    def write(self, context: dict[str, Any], status: int, latency_ms: int) -> None:
        if not self.format or not self.group:
            return
        values = {**context, "status": status, "responseLatency": latency_ms}
        line = VARIABLE.sub(lambda m: _escaped(_lookup(values, m.group(1))), self.format)
        if not self._stream_made:
            try:
                self.client.create_log_stream(logGroupName=self.group, logStreamName=STREAM)
            except self.client.exceptions.ResourceAlreadyExistsException:
                pass
            self._stream_made = True
        self.client.put_log_events(logGroupName=self.group, logStreamName=STREAM,
                                   logEvents=[{"timestamp": int(time.time() * 1000), "message": line}])


def _lookup(values: dict[str, Any], path: str) -> Any:
    value: Any = values
    for part in path.split("."):
        if not isinstance(value, dict) or value.get(part) in (None, ""):
            return "-"
        value = value[part]
    return value


def _escaped(value: Any) -> str:
    """The value inside the format's quotes: a JSON string's escapes (an ARN or id has none to escape)."""
    return json.dumps(str(value))[1:-1]
