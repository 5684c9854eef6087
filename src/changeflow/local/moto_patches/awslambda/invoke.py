"""Invoke through moto's Lambda API (a client of the process, ``aws lambda invoke --endpoint-url`` against
``changeflow serve``, a rule's target) of a function the embedded stack runs in-process: answered by the stack,
as the state machine's Lambda tasks are, after the request was authorized (``lambda:InvokeFunction``,
moto_patches.iam). Stock moto 5.2.5 knows only the functions created through its own API and would answer
``ResourceNotFoundException`` (and for ``Event`` answers 202 even for a function that does not exist, where AWS
answers ResourceNotFoundException: refused here too). Synchronous (``RequestResponse``) and asynchronous
(``Event``: 202 at once) invocations, https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html"""

from __future__ import annotations

from urllib.parse import unquote

from ..originals import ORIGINALS


def patch_invoke_in_process_functions() -> None:
    from moto.awslambda.responses import LambdaResponse

    original = ORIGINALS.setdefault("lambda_response_invoke", LambdaResponse.invoke)

    def invoke(self):
        name = unquote(self.path.rsplit("/", 2)[-2])
        qualifier = self._get_param("qualifier") or self.querystring.get("Qualifier", [None])[0]
        answered = ORIGINALS["invoke_request"][0](name, qualifier, self.body,
                                                 self.headers.get("X-Amz-Invocation-Type") or "RequestResponse")
        if answered is not None:
            return answered
        self.backend.get_function(name, qualifier)  # ResourceNotFoundException for every invocation type, as AWS
        return original(self)

    LambdaResponse.invoke = invoke
