"""Lambda's asynchronous invocation (``InvocationType: Event``, an EventBridge rule's target): answered 202 at
once, run on a thread of its own, retried (``MaximumRetryAttempts``, 2 by default, a minute and then two
apart on the stack's time scale) and then sent to the function's on-failure destination as Lambda's
invocation record, with the function's own role.
https://docs.aws.amazon.com/lambda/latest/dg/invocation-async.html
https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any


class AsyncInvocations:
    """The asynchronous side of ``lambdas.LambdaService`` (which provides ``invoke``)."""

    async_delay_scale = 1.0  # the stack's time scale
    service_error: type = Exception  # lambdas.LambdaServiceError

    def _async_threads(self) -> set:
        if not hasattr(self, "_async"):
            self._async: set[threading.Thread] = set()
        return self._async

    def invoke_async(self, function: Any, event: Any) -> None:
        """Lambda's event invocation: the event queued (here: a thread of its own), retried, then recorded."""
        thread = threading.Thread(target=self._run_async, args=(function, event), daemon=True,
                                  name=f"async-{function.logical_id}")
        self._async_threads().add(thread)
        thread.start()

    def _run_async(self, function: Any, event: Any) -> None:
        attempts = 1 + int(function.event_invoke.get("MaximumRetryAttempts", 2))
        try:
            for attempt in range(1, attempts + 1):
                try:
                    payload, failed = self.invoke(function, event)
                except self.service_error as exc:  # the Lambda service failed the attempt
                    payload, failed = {"errorType": exc.code, "errorMessage": exc.message}, True
                if not failed:
                    return
                if attempt < attempts:
                    time.sleep(60 * attempt * self.async_delay_scale)
            self._record_failure(function, event, payload, attempts)
        finally:
            self._async_threads().discard(threading.current_thread())

    def _record_failure(self, function: Any, event: Any, payload: Any, attempts: int) -> None:
        """The invocation record sent to the on-failure destination (an SQS queue), with the function's role."""
        import boto3

        destination = function.event_invoke.get("OnFailure")
        if not destination:
            return
        record = {"version": "1.0", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                  "requestContext": {"requestId": str(uuid.uuid4()), "functionArn": f"{function.arn}:$LATEST",
                                     "condition": "RetriesExhausted", "approximateInvokeCount": attempts},
                  "requestPayload": event,
                  "responseContext": {"statusCode": 200, "executedVersion": function.version,
                                      "functionError": "Unhandled"},
                  "responsePayload": payload}
        env = function.environment
        sqs = boto3.client("sqs", region_name=destination.split(":")[3],
                           aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                           aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                           aws_session_token=env.get("AWS_SESSION_TOKEN"))
        _, _, _, region, account, name = destination.split(":")[:6]
        sqs.send_message(QueueUrl=f"https://sqs.{region}.amazonaws.com/{account}/{name}", MessageBody=json.dumps(record))

    def drain(self, timeout: float) -> None:
        """Wait for the asynchronous invocations still running (a stack that stops)."""
        deadline = time.monotonic() + timeout
        for thread in list(self._async_threads()):
            thread.join(max(0.0, deadline - time.monotonic()))

