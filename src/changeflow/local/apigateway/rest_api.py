"""The template's REST API on the embedded stack, answered as API Gateway answers it:

- A method's request validator: its body model checked with jsonschema (draft 4, as API Gateway does).
- Lambda proxy routes (SAM ``Api`` events of functions, and ``type: aws_proxy`` integrations in the
  definition): a REST (v1) proxy event to the real handler, as a REST API delivers it: ``path`` as the
  client sent it (percent-encoding kept), ``pathParameters`` decoded.
- API Gateway's own answers where the request never reaches an integration (``gateway_responses``): no
  such resource or method under the stage -> 403 ``Missing Authentication Token``; a body over the 10 MB
  payload quota -> 413; a body that is not UTF-8 JSON for a validated model -> 400; an integration running
  past the 29-second timeout -> 504.
  Nothing under ``/<stage>/`` ever reaches moto's other services.

- The stage's access log (``access_log``), one line per request in the template's format.
- ``AWS_IAM`` authorization (the template's ``Auth.DefaultAuthorizer``), as API Gateway enforces it and
  ``sam local start-api`` does not: SigV4 verified against moto's IAM and STS (``sigv4``), API Gateway's
  403 answers otherwise, and the signer in ``requestContext.identity`` (``userArn``, ``accountId``,
  ``caller``). ``changeflow serve --insecure`` turns it off (``insecure=True``): every request is then
  anonymous, as on an API without authorization.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import uuid
from typing import Callable
from urllib.parse import parse_qs, unquote

import jsonschema

from ..template import ACCOUNT
from . import sigv4
from .access_log import AccessLog
from .gateway_responses import INTEGRATION_TIMEOUT_S, MAX_PAYLOAD_BYTES, gateway_response


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

    def __init__(self, stack, logical_id: str, insecure: bool = False):
        self.stack, self.logical_id = stack, logical_id
        props = stack.template.resolve(stack.template.resources[logical_id]["Properties"])
        self.stage = props["StageName"]
        self.api_id = stack.template.physical_name(logical_id)  # in the method ARNs IAM policies name
        self.access_log = AccessLog(stack.client("logs"), props.get("AccessLogSetting"))
        self.iam = (props.get("Auth") or {}).get("DefaultAuthorizer") == "AWS_IAM" and not insecure
        body = props.get("DefinitionBody", {})
        self.definitions = body.get("definitions", {})
        self.validators = body.get("x-amazon-apigateway-request-validators", {})
        self.gateway_responses = body.get("x-amazon-apigateway-gateway-responses", {})
        self.routes: list[Route] = []
        for function_id, spec in stack.template.of_type("AWS::Serverless::Function").items():
            for event in spec.get("Properties", {}).get("Events", {}).values():
                props = event.get("Properties", {})
                if event["Type"] == "Api" and props.get("RestApiId") == {"Ref": logical_id}:
                    self.routes.append(Route(props["Method"], props["Path"], self._lambda_proxy(function_id, props["Path"])))
        for path, methods in body.get("paths", {}).items():
            for method, operation in methods.items():
                integration = operation.get("x-amazon-apigateway-integration", {})
                if integration.get("type") == "aws_proxy":
                    name = re.search(r":function:([^/:]+)", integration["uri"]).group(1)
                    function_id = next(f.logical_id for f in stack.lambdas.functions.values() if f.name == name)
                    self.routes.append(Route(method, path, self._lambda_proxy(
                        function_id, path, self._body_validator(operation))))
        self.integration_timeout = INTEGRATION_TIMEOUT_S
        self.max_payload = MAX_PAYLOAD_BYTES

    # --- WSGI ---------------------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        path = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "")
        path = path.split("?", 1)[0]
        prefix = f"/{self.stage}"
        if path != prefix and not path.startswith(prefix + "/"):
            return None  # not this API: moto's endpoint answers it
        resource_path = path[len(prefix):] or "/"
        context = self._context(environ, resource_path)
        context["rawPath"] = path
        started = time.monotonic()
        answer = self._answer(environ, resource_path, context)
        status, headers, payload = answer
        self.access_log.write(context, status, int((time.monotonic() - started) * 1000))
        start_response(f"{status} {_REASONS.get(status, 'Status')}", list(headers.items()))
        return [payload.encode("utf-8")]

    def _context(self, environ, resource_path: str) -> dict:
        return {"requestId": str(uuid.uuid4()), "error": {"validationErrorString": "", "messageString": ""},
                "identity": {"sourceIp": environ.get("REMOTE_ADDR", "127.0.0.1"), "caller": None, "user": None},
                "responseOverride": {"status": None}, "stage": self.stage, "resourcePath": resource_path,
                "httpMethod": environ["REQUEST_METHOD"]}

    def _answer(self, environ, resource_path: str, context: dict) -> tuple[int, dict, str]:
        for route in self.routes:
            params = route.match(environ["REQUEST_METHOD"], resource_path)
            if params is not None:
                break
        else:  # API Gateway answers an unknown resource or method of an IAM-authorized API like this
            return self._gateway_error("MISSING_AUTHENTICATION_TOKEN", context)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length > self.max_payload:
            while environ["wsgi.input"].read(min(length, 1 << 20)):  # read it all, so the client hears the 413
                length -= 1 << 20
                if length <= 0:
                    break
            return self._gateway_error("REQUEST_TOO_LARGE", context)
        raw = environ["wsgi.input"].read(length) if length else b""
        context.update(resourcePath=route.path, httpMethod=route.method)
        refused = self._authenticate(environ, raw, context)
        if refused is not None:
            return refused
        request = {"path": resource_path, "params": params, "raw": raw, "headers": _headers(environ),
                   "query": environ.get("QUERY_STRING", ""), "route": route, "context": context,
                   "source_ip": environ.get("REMOTE_ADDR", "127.0.0.1")}
        done: list = []
        worker = threading.Thread(target=lambda: done.append(self._run(route, request)), daemon=True,
                                  name="apigateway-integration")
        worker.start()
        worker.join(self.integration_timeout)
        if not done:  # the integration goes on (as a Lambda does), the client gets API Gateway's 504
            return self._gateway_error("INTEGRATION_TIMEOUT", context)
        return done[0]

    def _run(self, route: Route, request: dict) -> tuple[int, dict, str]:
        try:
            request["body"] = request["raw"].decode("utf-8")
        except UnicodeDecodeError:
            request["body"] = None  # no JSON model accepts it; a Lambda proxy gets it base64-encoded
        try:
            return route.handler(request)
        except Exception:  # noqa: BLE001 - whatever breaks in an integration is API Gateway's 5xx, not a crash
            return self._gateway_error("INTEGRATION_FAILURE", request["context"])

    def _body_validator(self, operation: dict) -> Callable[[dict], tuple[int, dict, str] | None]:
        """The method's request validator for its body model: None when the body passes, else the
        BAD_REQUEST_BODY answer (a body that is not UTF-8 JSON never passes a model)."""
        schema = None
        for parameter in operation.get("parameters", []):
            if parameter.get("in") == "body":
                ref = parameter["schema"].get("$ref", "")
                schema = {**self.definitions.get(ref.rsplit("/", 1)[-1], parameter["schema"]),
                          "definitions": self.definitions}
        enabled = self.validators.get(operation.get("x-amazon-apigateway-request-validator"), {}).get(
            "validateRequestBody", False)

        consumes = set(operation.get("consumes", ["application/json"]))

        def validate(request: dict) -> tuple[int, dict, str] | None:
            content_type = request["headers"].get("content-type", "application/json").split(";")[0].strip()
            if not enabled or schema is None or content_type.lower() not in consumes:
                return None  # a model belongs to its content types; another one passes unchecked
            context = request["context"]
            try:
                if request["body"] is None:
                    raise ValueError("Invalid UTF-8")
                jsonschema.Draft4Validator(schema).validate(json.loads(request["body"] or "null"))
            except (ValueError, RecursionError, jsonschema.ValidationError) as exc:
                context["error"]["validationErrorString"] = f"[{getattr(exc, 'message', 'Invalid JSON')}]"
                context["error"]["messageString"] = json.dumps("Invalid request body")
                return self._gateway_error("BAD_REQUEST_BODY", context)
            return None

        return validate

    def _authenticate(self, environ, raw: bytes, context: dict) -> tuple[int, dict, str] | None:
        """AWS_IAM: the SigV4 signer into ``context["identity"]``, or API Gateway's 403 answer."""
        context["requestTimeEpoch"] = int(time.time() * 1000)
        if not self.iam:
            return None
        try:
            identity = sigv4.authenticate(environ["REQUEST_METHOD"], context["rawPath"], environ.get("QUERY_STRING", ""),
                                          _headers(environ), raw, self.stack.region, ACCOUNT)
        except sigv4.Refused as refused:
            context["error"]["messageString"] = json.dumps(refused.message)
            status, headers, body = self._gateway_error(refused.kind, context)
            return status, {**headers, "x-amzn-ErrorType": refused.error_type}, body
        context["identity"].update(identity)
        return self._authorize(context)

    def _authorize(self, context: dict) -> tuple[int, dict, str] | None:
        """AWS_IAM's second half: the signer's policies must allow ``execute-api:Invoke`` on the method's ARN
        (``arn:aws:execute-api:<region>:<account>:<api id>/<stage>/<METHOD>/<path>``), evaluated as IAM does
        (moto_patches.iam), https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-control-access-using-iam-policies-to-invoke-api.html;
        refused: API Gateway's 403 (``AccessDeniedException``)."""
        from ..moto_patches.iam import enforcement

        identity = context["identity"]
        method = f"{self.api_id}/{self.stage}/{context['httpMethod']}{context['rawPath'][len(self.stage) + 1:]}"
        resource = f"arn:aws:execute-api:{self.stack.region}:{ACCOUNT}:{method}"
        who = enforcement.identify(ACCOUNT, identity.get("accessKey"), identity.get("sessionToken"))
        try:
            enforcement.authorize(who, [enforcement.Check("execute-api:Invoke", resource)], identity.get("accessKey"))
        except enforcement.Denied as denied:
            context["error"]["messageString"] = json.dumps(str(denied))
            status, headers, body = self._gateway_error("ACCESS_DENIED", context)
            return status, {**headers, "x-amzn-ErrorType": "AccessDeniedException"}, body
        return None

    # --- gateway responses ---------------------------------------------------------------------------
    def _gateway_error(self, kind: str, context: dict) -> tuple[int, dict, str]:
        """A gateway response: the definition's, else API Gateway's default for ``kind``."""
        return gateway_response(kind, context, self.gateway_responses.get(kind, {}))

    # --- Lambda proxy -------------------------------------------------------------------------------
    def _lambda_proxy(self, function_id: str, resource: str, validate: Callable | None = None):
        def handle(request):
            refused = validate(request) if validate else None
            if refused is not None:
                return refused
            query = parse_qs(request["query"], keep_blank_values=True)
            binary = request["body"] is None  # not UTF-8: delivered base64-encoded, as binary data is
            body = base64.b64encode(request["raw"]).decode("ascii") if binary else request["body"]
            event = {
                "resource": resource,
                "path": request["path"],  # as the client sent it: a REST API does not decode it
                "httpMethod": request["route"].method,
                "headers": request["headers"],
                "multiValueHeaders": {k: [v] for k, v in request["headers"].items()},
                "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
                "multiValueQueryStringParameters": query or None,
                "pathParameters": request["params"] or None,  # decoded
                "stageVariables": None,
                "requestContext": {
                    "resourcePath": resource, "httpMethod": request["route"].method, "stage": self.stage,
                    "path": f"/{self.stage}{request['path']}", "requestId": request["context"]["requestId"],
                    "identity": {**{k: v for k, v in request["context"]["identity"].items() if v is not None},
                                 "sourceIp": request["source_ip"]},
                    "accountId": ACCOUNT, "requestTimeEpoch": request["context"]["requestTimeEpoch"],
                },
                "body": body or None,
                "isBase64Encoded": binary,
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


_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
            413: "Payload Too Large", 415: "Unsupported Media Type", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}
