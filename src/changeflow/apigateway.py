"""The template's REST API on the embedded stack, answered as API Gateway answers it:

- AWS service integrations (``type: aws``, e.g. ``states:action/StartExecution``): the method's request
  model is checked with jsonschema (draft 4, as API Gateway does), the integration's own mapping templates
  are rendered by a Velocity engine (airspeed), the action is called on moto, and the integration response
  is selected by status code and rendered by its template (``$context.responseOverride`` honoured).
- Lambda proxy routes (SAM ``Api`` events of functions): a REST (v1) proxy event to the real handler.

Authorization (IAM/SigV4) is not enforced here, as ``sam local start-api`` does not enforce it either.
``$util`` and ``$input`` are the small API Gateway objects templates use, written after its documentation.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from datetime import datetime
from typing import Any, Callable
from urllib.parse import parse_qs, unquote

import airspeed
import jsonschema
from botocore.exceptions import ClientError, ParamValidationError


def escape_javascript(text: Any) -> str:
    """API Gateway's ``$util.escapeJavaScript`` (Java's StringEscapeUtils.escapeJavaScript): quotes,
    backslash and slash escaped, control and non-ASCII characters as ``\\uXXXX``; ``'`` becomes ``\\'``."""
    out = []
    for ch in str(text):
        code = ord(ch)
        if ch in "\"\\'/":
            out.append("\\" + ch)
        elif ch in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif code < 32 or code > 0x7E:
            encoded = ch.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{int.from_bytes(encoded[i:i + 2], 'big'):04X}" for i in range(0, len(encoded), 2))
        else:
            out.append(ch)
    return "".join(out)


class Util:
    def escapeJavaScript(self, text):  # noqa: N802 - the name templates use
        return escape_javascript(text)

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


class Route:
    def __init__(self, method: str, path: str, handler: Callable):
        self.method, self.path, self.handler = method.upper(), path, handler
        pattern = re.sub(r"\\\{[^/]+?\\\}", "([^/]+)", re.escape(path))
        self.names = re.findall(r"\{([^/]+?)\}", path)
        self.regex = re.compile(f"^{pattern}$")

    def match(self, method: str, path: str) -> dict[str, str] | None:
        found = self.regex.match(path)
        if method.upper() != self.method or not found:
            return None
        return {name: unquote(value) for name, value in zip(self.names, found.groups())}


class RestApi:
    """One ``AWS::Serverless::Api`` of the stack, served under ``/<stage>/...``."""

    def __init__(self, stack, logical_id: str):
        self.stack, self.logical_id = stack, logical_id
        props = stack.template.resolve(stack.template.resources[logical_id]["Properties"])
        self.stage = props["StageName"]
        body = props.get("DefinitionBody", {})
        self.definitions = body.get("definitions", {})
        self.validators = body.get("x-amazon-apigateway-request-validators", {})
        self.gateway_responses = body.get("x-amazon-apigateway-gateway-responses", {})
        self.routes: list[Route] = []
        for path, methods in body.get("paths", {}).items():
            for method, operation in methods.items():
                integration = operation.get("x-amazon-apigateway-integration", {})
                if integration.get("type") == "aws":
                    self.routes.append(Route(method, path, self._service_integration(operation, integration)))
        for function_id, spec in stack.template.of_type("AWS::Serverless::Function").items():
            for event in spec.get("Properties", {}).get("Events", {}).values():
                props = event.get("Properties", {})
                if event["Type"] == "Api" and props.get("RestApiId") == {"Ref": logical_id}:
                    self.routes.append(Route(props["Method"], props["Path"], self._lambda_proxy(function_id, props["Path"])))

    # --- WSGI ---------------------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        path = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "")
        path = path.split("?", 1)[0]
        prefix = f"/{self.stage}/"
        if not path.startswith(prefix):
            return None
        resource_path = path[len(prefix) - 1:]
        for route in self.routes:
            params = route.match(environ["REQUEST_METHOD"], resource_path)
            if params is not None:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length).decode("utf-8") if length else ""
                request = {"path": resource_path, "params": params, "body": body, "headers": _headers(environ),
                           "query": environ.get("QUERY_STRING", ""), "route": route,
                           "source_ip": environ.get("REMOTE_ADDR", "127.0.0.1")}
                status, headers, payload = route.handler(request)
                start_response(f"{status} {_REASONS.get(status, 'Status')}", list(headers.items()))
                return [payload.encode("utf-8")]
        return None

    # --- AWS service integration --------------------------------------------------------------------
    def _gateway_error(self, kind: str, status: int, message: str, context: dict) -> tuple[int, dict, str]:
        spec = self.gateway_responses.get(kind, {})
        template = spec.get("responseTemplates", {}).get("application/json")
        body = render(template, "{}", context) if template else json.dumps({"message": message})
        return int(spec.get("statusCode", status)), {"Content-Type": "application/json"}, body

    def _service_integration(self, operation: dict, integration: dict):
        service, action = re.match(r"arn:[^:]+:apigateway:[^:]+:([^:]+):action/(\w+)", integration["uri"]).groups()
        schema = None
        for parameter in operation.get("parameters", []):
            if parameter.get("in") == "body":
                ref = parameter["schema"].get("$ref", "")
                schema = {**self.definitions.get(ref.rsplit("/", 1)[-1], parameter["schema"]),
                          "definitions": self.definitions}
        validate_body = self.validators.get(operation.get("x-amazon-apigateway-request-validator"), {}).get(
            "validateRequestBody", False)

        def handle(request):
            context = {"requestId": str(uuid.uuid4()), "error": {"validationErrorString": "", "messageString": ""},
                       "identity": {"sourceIp": request["source_ip"], "caller": None, "user": None},
                       "responseOverride": {"status": None}, "stage": self.stage,
                       "resourcePath": request["route"].path, "httpMethod": request["route"].method}
            content_type = request["headers"].get("content-type", "application/json").split(";")[0].strip()
            template = integration.get("requestTemplates", {}).get(content_type)
            if template is None:
                return 415, {"Content-Type": "application/json"}, json.dumps({"message": "Unsupported Media Type"})
            if validate_body and schema is not None:
                try:
                    jsonschema.Draft4Validator(schema).validate(json.loads(request["body"] or "null"))
                except (ValueError, jsonschema.ValidationError) as exc:
                    context["error"]["validationErrorString"] = f"[{getattr(exc, 'message', 'Invalid JSON')}]"
                    context["error"]["messageString"] = json.dumps("Invalid request body")
                    return self._gateway_error("BAD_REQUEST_BODY", 400, "Invalid request body", context)
            try:
                parameters = json.loads(render(template, request["body"] or "{}", context))
            except ValueError:  # the mapping template made no JSON of this body: API Gateway's 500
                return 500, {"Content-Type": "application/json"}, json.dumps({"message": "Internal server error"})
            status, response = self._call(service, action, parameters)
            return self._integration_response(integration, status, response, context)

        return handle

    def _call(self, service: str, action: str, parameters: dict) -> tuple[int, str]:
        client = self.stack.client({"states": "stepfunctions"}.get(service, service))
        method = getattr(client, re.sub(r"(?<!^)(?=[A-Z])", "_", action).lower())
        try:
            result = method(**parameters)
        except ClientError as exc:
            error = exc.response["Error"]
            return exc.response["ResponseMetadata"]["HTTPStatusCode"], json.dumps(
                {"__type": error["Code"], "message": error.get("Message", "")})
        except ParamValidationError as exc:  # what the service would refuse with a 400
            return 400, json.dumps({"__type": "ValidationException", "message": str(exc)})
        result.pop("ResponseMetadata", None)
        return 200, json.dumps(result, default=lambda v: v.timestamp() if isinstance(v, datetime) else str(v))

    def _integration_response(self, integration: dict, status: int, body: str, context: dict):
        responses = integration.get("responses", {})
        chosen = responses.get("default", {"statusCode": "200"})
        for pattern, response in responses.items():
            if pattern != "default" and re.fullmatch(pattern, str(status)):
                chosen = response
                break
        template = chosen.get("responseTemplates", {}).get("application/json")
        payload = render(template, body, context) if template else body
        final = context["responseOverride"].get("status") or chosen.get("statusCode", 200)
        return int(final), {"Content-Type": "application/json"}, payload

    # --- Lambda proxy -------------------------------------------------------------------------------
    def _lambda_proxy(self, function_id: str, resource: str):
        def handle(request):
            query = parse_qs(request["query"], keep_blank_values=True)
            event = {
                "resource": resource,
                "path": request["path"],
                "httpMethod": request["route"].method,
                "headers": request["headers"],
                "multiValueHeaders": {k: [v] for k, v in request["headers"].items()},
                "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
                "multiValueQueryStringParameters": query or None,
                "pathParameters": request["params"] or None,
                "stageVariables": None,
                "requestContext": {
                    "resourcePath": resource, "httpMethod": request["route"].method, "stage": self.stage,
                    "path": f"/{self.stage}{request['path']}", "requestId": str(uuid.uuid4()),
                    "identity": {"sourceIp": request["source_ip"]}, "accountId": "123456789012",
                },
                "body": request["body"] or None,
                "isBase64Encoded": False,
            }
            function = self.stack.function(function_id)
            payload, failed = self.stack.lambdas.invoke(function, event)
            if failed or not isinstance(payload, dict) or "statusCode" not in payload:
                return 502, {"Content-Type": "application/json"}, json.dumps({"message": "Internal server error"})
            body = payload.get("body") or ""
            if payload.get("isBase64Encoded"):
                body = base64.b64decode(body).decode("utf-8")
            return int(payload["statusCode"]), dict(payload.get("headers") or {}), body

        return handle


def _headers(environ) -> dict[str, str]:
    headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
    if environ.get("CONTENT_TYPE"):
        headers["content-type"] = environ["CONTENT_TYPE"]
    return headers


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 409: "Conflict", 415: "Unsupported Media Type",
            500: "Internal Server Error", 502: "Bad Gateway"}
