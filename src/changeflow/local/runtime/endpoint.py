"""The AWS endpoint of the handlers that run in the emulator: a moto server on 127.0.0.1 serving this
process's in-process backends (so it reaches whichever embedded stack is running, behind the same request
lock), and the stand-ins for a handler's clients through which fault injection answers its requests there,
as it would in-process (botocore ``before-send`` hooks)."""

from __future__ import annotations

import http.client
import threading
from typing import Any, Callable


_ENDPOINT: dict[str, Any] = {}
_ENDPOINT_LOCK = threading.Lock()


def handler_endpoint() -> str:
    """The URL of a moto endpoint on 127.0.0.1 for the handlers' AWS clients, started once per process.
    It serves moto's in-process backends, so it reaches whichever embedded stack is running (the same
    backends the interpreter uses, behind the same request lock). A request first meets the hooks that
    fault injection registered on the function's client stand-in (``RemoteClient``)."""
    with _ENDPOINT_LOCK:
        if "url" not in _ENDPOINT:
            import logging

            from moto.moto_server.threaded_moto_server import MotoRequestHandler
            from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
            from werkzeug.serving import make_server

            logging.getLogger("werkzeug").setLevel(logging.WARNING)
            moto_app = DomainDispatcherApplication(create_backend_app)

            def app(environ, start_response):
                answer = _intercepted(environ)
                if answer is None:
                    return moto_app(environ, start_response)
                status, headers, body = answer
                start_response(f"{status} {http.client.responses.get(status, '')}",
                               [*headers.items(), ("Content-Length", str(len(body)))])
                return [body]

            server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
            threading.Thread(target=server.serve_forever, daemon=True, name="changeflow-lambda-endpoint").start()
            _ENDPOINT.update(server=server, url=f"http://127.0.0.1:{server.server_address[1]}")
        return _ENDPOINT["url"]


class _Events:
    """The part of a botocore event system that fault injection uses (register_first, unregister)."""

    def __init__(self) -> None:
        self.handlers: dict[str, list[Callable]] = {}
        self.lock = threading.Lock()

    def register_first(self, event: str, handler: Callable, **_) -> None:
        with self.lock:
            self.handlers.setdefault(event, []).insert(0, handler)

    def register(self, event: str, handler: Callable, **_) -> None:
        with self.lock:
            self.handlers.setdefault(event, []).append(handler)

    def unregister(self, event: str, handler: Callable, **_) -> None:
        with self.lock:
            if handler in self.handlers.get(event, []):
                self.handlers[event].remove(handler)

    def emit(self, event: str, **kwargs) -> Any:
        with self.lock:
            handlers = list(self.handlers.get(event, []))
        for handler in handlers:
            answer = handler(**kwargs)
            if answer is not None:
                return answer
        return None


class RemoteClient:
    """A handler's module-level client, seen from outside its process: ``before-send.<service>.<Op>``
    hooks registered on ``meta.events`` answer the handler's requests at the endpoint (the handler's
    botocore then treats the answer as AWS's, retries included), as they would in-process."""

    def __init__(self, service: str):
        from types import SimpleNamespace

        self.meta = SimpleNamespace(events=_Events(), service_model=SimpleNamespace(service_name=service))


# (app id, service) -> the client stand-in; a function's processes send its logical id as their SDK app id
REMOTE_CLIENTS: dict[tuple[str, str], RemoteClient] = {}
_TARGET_SERVICES = {"DynamoDB_20120810": "dynamodb"}


def remote_module(function):
    """The stand-in for the handler's module that fault injection reaches into (``module.dynamodb``, and the
    history step's ``module.tagging``: at the endpoint, every DynamoDB client of the function's processes)."""
    from types import SimpleNamespace

    client = REMOTE_CLIENTS.setdefault((function.logical_id, "dynamodb"), RemoteClient("dynamodb"))
    return SimpleNamespace(dynamodb=client, tagging=client)


def _intercepted(environ) -> tuple[int, dict, bytes] | None:
    import re as _re
    from types import SimpleNamespace

    agent = environ.get("HTTP_USER_AGENT", "")
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    app = _re.search(r"\bapp/([A-Za-z0-9_.-]+)", agent)
    if not app or "." not in target:
        return None
    prefix, operation = target.split(".", 1)
    service = _TARGET_SERVICES.get(prefix)
    client = REMOTE_CLIENTS.get((app.group(1), service)) if service else None
    if client is None:
        return None
    url = f"http://{environ.get('HTTP_HOST', '')}{environ.get('PATH_INFO', '/')}"
    answer = client.meta.events.emit(f"before-send.{service}.{operation}", request=SimpleNamespace(url=url))
    if answer is None:
        return None
    return answer.status_code, dict(answer.headers), answer.content
