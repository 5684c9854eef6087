"""Lambda tasks: the interpreter's Lambda client is a real boto3 client whose ``Invoke`` is answered by
the embedded stack's handler (``before-call.lambda.Invoke``), made once per region and service instead of
once per task (client creation dominated stock executions); and a failed ``Invoke`` request becomes the
error ``Lambda.<Code>`` (``Lambda.ServiceException``), as Step Functions reports it, where stock moto names
every such failure ``Exception``.
https://docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html"""

from __future__ import annotations

import threading
from typing import Any

from ..originals import ORIGINALS, rebind


def patch_lambda_clients(cache: bool) -> None:
    import moto.stepfunctions.parser.asl.parse.preprocessor  # noqa: F401 - imports every task module
    import moto.stepfunctions.parser.asl.utils.boto_client as boto_client

    original = ORIGINALS.setdefault("boto_client_for", boto_client.boto_client_for)
    clients: dict[tuple, Any] = {}
    lock = threading.Lock()

    def dispatch(**kwargs):
        return ORIGINALS["invoke"][0](**kwargs)

    def boto_client_for(region: str, service: str, state_credentials: Any = None):
        key = (region, service, boto_client.botocore_stubber.enabled)
        with lock:
            client = clients.get(key) if cache else None
            if client is None:
                client = original(region=region, service=service, state_credentials=state_credentials)
                if service == "lambda":
                    client.meta.events.register_first("before-call.lambda.Invoke", dispatch)
                if cache:
                    clients[key] = client
        return client

    rebind("boto_client_for", original, boto_client_for)


def patch_lambda_task_invoke_in_process() -> None:
    """A Lambda task's ``Invoke`` handed to the stack's handler without building a botocore request first
    (speed only, with the caches): what the interpreter's client would send (function, qualifier, payload)
    goes to the same ``before-call`` answer, and an error answer is raised as the ``ClientError`` botocore
    raises for it. The client has no retries and no parameter validation (moto's ``boto_client_for``), so
    nothing else happens on that path. A task with any other Invoke parameter takes the client's path."""
    from urllib.parse import quote

    from botocore.exceptions import ClientError
    from moto.core.models import botocore_stubber
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    original = ORIGINALS.setdefault("invoke_lambda_function", lambda_eval_utils._invoke_lambda_function)

    def _invoke_lambda_function(parameters: dict, region: str, state_credentials: Any):
        if not botocore_stubber.enabled or set(parameters) - {"FunctionName", "Payload", "Qualifier"}:
            return original(parameters=parameters, region=region, state_credentials=state_credentials)
        _, parsed = ORIGINALS["invoke"][0](model=None, params={
            "url_path": f"/2015-03-31/functions/{quote(str(parameters['FunctionName']), safe='')}/invocations",
            "query_string": {"Qualifier": parameters["Qualifier"]} if "Qualifier" in parameters else {},
            "body": parameters.get("Payload") or b""})
        if "Error" in parsed:
            raise ClientError(parsed, "Invoke")
        parsed["Payload"] = lambda_eval_utils._from_payload(parsed["Payload"])
        return parsed

    lambda_eval_utils._invoke_lambda_function = _invoke_lambda_function


def patch_lambda_error_names() -> None:
    from botocore.exceptions import ClientError
    from moto.stepfunctions.parser.api import HistoryEventType, LambdaFunctionFailedEventDetails
    from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_lambda
    from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

    task = state_task_lambda.StateTaskLambda
    original = ORIGINALS.setdefault("lambda_from_error", task._from_error)

    def _from_error(self, env, ex):
        if not isinstance(ex, ClientError):
            return original(self, env, ex)
        error = ex.response.get("Error", {})
        name = f"Lambda.{error.get('Code', 'ServiceException')}"
        return FailureEvent(
            env=env,
            error_name=CustomErrorName(name),
            event_type=HistoryEventType.LambdaFunctionFailed,
            event_details=EventDetails(
                lambdaFunctionFailedEventDetails=LambdaFunctionFailedEventDetails(
                    error=name, cause=error.get("Message", "")
                )
            ),
        )

    task._from_error = _from_error


def patch_lambda_task_sdk_metadata() -> None:
    """A ``lambda:invoke`` task's result carries, besides ``ExecutedVersion``, ``Payload`` and
    ``StatusCode``, the SDK's ``SdkHttpMetadata`` (the HTTP headers of the Invoke response, twice: as lists
    and as values, and the status code) and ``SdkResponseMetadata`` (the request id), about 1 KB that
    stock moto leaves out. Step Functions records it in the TaskSucceeded event (history, execution log)
    before ResultSelector picks the payload, so it counts in history and log sizes and in the 256 KiB
    task-result limit. https://docs.aws.amazon.com/step-functions/latest/dg/connect-lambda.html (the
    "Optimized Lambda" response shape); the field set and order are those AWS returned on 2025-11-06 in
    LocalStack's AWS-validated snapshot tests/aws/services/stepfunctions/v2/services/
    test_lambda_task_service.snapshot.json (test_invoke)."""
    import email.utils
    import json
    import secrets
    import time
    import uuid

    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    original = ORIGINALS.setdefault("lambda_integration", lambda_eval_utils.execute_lambda_function_integration)

    def execute_lambda_function_integration(env, parameters, region, state_credentials):
        original(env=env, parameters=parameters, region=region, state_credentials=state_credentials)
        result = env.stack.pop()
        request_id = str(uuid.uuid4())
        body = json.dumps(result.get("Payload"), separators=(",", ":"))
        trace = f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)};Parent={secrets.token_hex(8)};Sampled=1;Lineage=1:{secrets.token_hex(4)}:0"
        headers = {  # in the order AWS returned them
            "X-Amz-Executed-Version": result.get("ExecutedVersion", "$LATEST"),
            "x-amzn-Remapped-Content-Length": "0",
            "Connection": "keep-alive",
            "x-amzn-RequestId": request_id,
            "Content-Length": str(len(body.encode("utf-8"))),
            "Date": email.utils.formatdate(usegmt=True),
            "X-Amzn-Trace-Id": trace,
            "Content-Type": "application/json",
        }
        env.stack.append({
            "ExecutedVersion": result.get("ExecutedVersion", "$LATEST"),
            "Payload": result.get("Payload"),
            "SdkHttpMetadata": {"AllHttpHeaders": {k: [v] for k, v in headers.items()},
                                "HttpHeaders": dict(sorted(headers.items(), key=lambda kv: kv[0].lower())),
                                "HttpStatusCode": 200},
            "SdkResponseMetadata": {"RequestId": request_id},
            "StatusCode": result.get("StatusCode", 200),
        })

    lambda_eval_utils.execute_lambda_function_integration = execute_lambda_function_integration
