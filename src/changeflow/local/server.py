"""``changeflow serve``'s server: the embedded stack behind an AWS-compatible endpoint on 127.0.0.1.

One process holds the stack; moto's own server application answers every AWS API on the endpoint
(boto3 or the AWS CLI with ``--endpoint-url``), and the same in-process backends serve the handlers, so
what an execution writes is what a client reads. In front of moto's application: the stack's REST APIs
(``routes``, under ``/<stage>/``) and the audit console (``/console``).
"""

from __future__ import annotations

import logging
from typing import Callable

from moto.moto_server.threaded_moto_server import MotoRequestHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from ..common.serving import Serving
from ..console import for_embedded
from .apigateway.rest_api import RestApi
from .embedded import EmbeddedStack

# A route answers a WSGI request or returns None to let moto answer it.
Route = Callable[[dict, Callable], "list[bytes] | None"]


class EmbeddedServer:
    """The embedded stack and its endpoint, started and stopped together (tests use it directly)."""

    def __init__(self, port: int = 4566, parameters: dict[str, str] | None = None, time_scale: float = 1.0,
                 host: str = "127.0.0.1", lambda_runtime: str | None = None, insecure: bool = False):
        self.stack = EmbeddedStack(parameters=parameters, time_scale=time_scale, lambda_runtime=lambda_runtime)
        self.host, self.port = host, port
        self.insecure = insecure  # the REST API without SigV4 (changeflow serve --insecure)
        self.routes: list[Route] = []  # the template's REST APIs, in front of moto
        self._serving: Serving | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "EmbeddedServer":
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request on the terminal
        self.stack.start()
        self.routes = [RestApi(self.stack, api, insecure=self.insecure)
                       for api in self.stack.template.of_type("AWS::Serverless::Api")]
        console = for_embedded(self.stack)  # the audit console at /console
        moto_app = DomainDispatcherApplication(create_backend_app)

        def app(environ, start_response):
            for route in [console.route, *self.routes]:
                answer = route(environ, start_response)
                if answer is not None:
                    return answer
            return moto_app(environ, start_response)

        try:
            self._serving = Serving(self.host, self.port, app, "changeflow-serve", request_handler=MotoRequestHandler)
        except BaseException:  # werkzeug exits (SystemExit) when the port is taken
            self.stack.stop()
            raise
        self.port = self._serving.port
        return self

    def stop(self) -> None:
        if self._serving is not None:
            self._serving.stop()
            self._serving = None
        self.stack.stop()

    def __enter__(self) -> "EmbeddedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
