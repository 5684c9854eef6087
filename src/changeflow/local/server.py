"""``changeflow serve``: the embedded stack behind an AWS-compatible endpoint on 127.0.0.1.

One process holds the stack; moto's own server application answers every AWS API on the endpoint
(boto3 or the AWS CLI with ``--endpoint-url``), and the same in-process backends serve the handlers, so
what an execution writes is what a client reads. Extra routes (the stack's HTTP API) can be put in front
of moto's application through ``routes``.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable

from moto.moto_server.threaded_moto_server import MotoRequestHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from .embedded import EmbeddedStack

# A route answers a WSGI request or returns None to let moto answer it.
Route = Callable[[dict, Callable], "list[bytes] | None"]


class Serving:
    """A WSGI app served on a background thread (werkzeug, threaded), until ``stop``; port 0 picks one."""

    def __init__(self, host: str, port: int, app, name: str, **options):
        self._server = make_server(host, port, app, threaded=True, **options)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class EmbeddedServer:
    """The embedded stack and its endpoint, started and stopped together (tests use it directly)."""

    def __init__(self, port: int = 4566, parameters: dict[str, str] | None = None, time_scale: float = 1.0,
                 host: str = "127.0.0.1", lambda_runtime: str | None = None):
        self.stack = EmbeddedStack(parameters=parameters, time_scale=time_scale, lambda_runtime=lambda_runtime)
        self.host, self.port = host, port
        self.routes: list[Route] = []  # the template's REST APIs, in front of moto
        self._serving: Serving | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "EmbeddedServer":
        import logging

        from .apigateway.rest_api import RestApi

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request on the terminal
        self.stack.start()
        self.routes = [RestApi(self.stack, api) for api in self.stack.template.of_type("AWS::Serverless::Api")]
        from ..console import for_embedded

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


def serve(port: int, parameters: dict[str, str], time_scale: float, lambda_runtime: str | None = None) -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM)."""
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with EmbeddedServer(port, parameters, time_scale, lambda_runtime=lambda_runtime) as server:
        outputs = server.stack.outputs
        print(f"changeflow serve: {server.url}  (stack {server.stack.template.stack_name}, time scale {time_scale}, "
              f"Lambda runtime {server.stack.lambda_runtime})")
        for name, value in outputs.items():
            if ".execute-api." not in str(value):  # an API's AWS URL: its local URL is printed below
                print(f"  {name}: {value}")
        for api in server.routes:
            print(f"  REST API {api.logical_id}: {server.url}/{api.stage}  (POST /changes, GET /entities/...)")
        print(f"  console: {server.url}/console")
        print(f"  try: changeflow submit events/workflow/put.json --endpoint-url {server.url}")
        print(f"       aws --endpoint-url {server.url} stepfunctions list-executions "
              f"--state-machine-arn {outputs['ChangeStateMachineArn']}")
        sys.stdout.flush()
        try:
            while not stopped.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    print("changeflow serve: stopped")
