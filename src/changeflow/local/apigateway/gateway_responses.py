"""API Gateway's own answers, where a request never reaches an integration (like samcli's
``local/apigw/service_error_responses.py``): its quotas, and its gateway responses, the definition's
(``x-amazon-apigateway-gateway-responses``) or API Gateway's defaults.
https://docs.aws.amazon.com/apigateway/latest/developerguide/supported-gateway-response-types.html"""

from __future__ import annotations

import json

from .velocity import render

# API Gateway quotas (developer guide, "Amazon API Gateway quotas", REST APIs): payload size 10 MB,
# integration timeout 50 ms - 29 s.
MAX_PAYLOAD_BYTES = 10 * 1024 * 1024
INTEGRATION_TIMEOUT_S = 29.0

# Default gateway responses (developer guide, "Gateway response types for API Gateway"): status and the
# message of the default body template {"message":$context.error.messageString}.
DEFAULT_RESPONSES = {
    "MISSING_AUTHENTICATION_TOKEN": (403, "Missing Authentication Token"),
    # AWS_IAM: the message says which check failed (apigateway.sigv4)
    "INVALID_SIGNATURE": (403, "Forbidden"),
    "ACCESS_DENIED": (403, "Forbidden"),
    "EXPIRED_TOKEN": (403, "Forbidden"),
    "REQUEST_TOO_LARGE": (413, "Request Too Long"),
    "BAD_REQUEST_BODY": (400, "Invalid request body"),
    "UNSUPPORTED_MEDIA_TYPE": (415, "Unsupported Media Type"),
    "INTEGRATION_TIMEOUT": (504, "Endpoint request timed out"),
    "INTEGRATION_FAILURE": (502, "Internal server error"),
}


def gateway_response(kind: str, context: dict, spec: dict) -> tuple[int, dict, str]:
    """The gateway response of type ``kind``: ``spec`` (the definition's for that type, or ``{}``) rendered
    with the request's ``context``, else API Gateway's default: ``(status, headers, body)``."""
    status, message = DEFAULT_RESPONSES[kind]
    context["error"].setdefault("messageString", "")
    context["error"]["messageString"] = context["error"]["messageString"] or json.dumps(message)
    context["error"]["responseType"] = kind
    template = spec.get("responseTemplates", {}).get("application/json")
    shown = json.loads(context["error"]["messageString"])  # the request's own message (sigv4), else the default
    body = render(template, "{}", context) if template else json.dumps({"message": shown})
    return int(spec.get("statusCode", status)), {"Content-Type": "application/json"}, body
