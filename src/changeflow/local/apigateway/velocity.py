"""API Gateway's mapping templates: Velocity (the airspeed engine) with the small ``$util`` and ``$input``
objects templates use, written after API Gateway's documentation.
https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-mapping-template-reference.html"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import airspeed


class Util:
    def parseJson(self, text):  # noqa: N802
        return json.loads(text)

    def base64Encode(self, text):  # noqa: N802
        return base64.b64encode(str(text).encode()).decode()

    def base64Decode(self, text):  # noqa: N802
        return base64.b64decode(str(text)).decode()


class Input:
    """``$input``: the body (request or integration response) as templates see it."""

    def __init__(self, raw: str):
        self.body = raw
        self._json = json.loads(raw) if raw.strip() else {}

    def _select(self, path: str) -> Any:
        value = self._json
        for part in re.findall(r"[^.\[\]]+", path.lstrip("$")):
            value = value[int(part)] if isinstance(value, list) else value.get(part)
            if value is None:
                return None
        return value

    def json(self, path: str) -> str:
        return json.dumps(self._select(path))

    def path(self, path: str) -> Any:
        return self._select(path)


def render(template: str, raw_body: str, context: dict[str, Any]) -> str:
    return airspeed.Template(template).merge({"input": Input(raw_body), "util": Util(), "context": context})
