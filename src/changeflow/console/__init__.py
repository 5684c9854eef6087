"""The audit console: executions (the graph of the deployed ASL with the path taken, the event table,
each state's input and output, the failure) and entities (versions, field-by-field diffs, the execution
that wrote each version, ``verify`` and ``repair``) as server-rendered pages on 127.0.0.1.

- ``changeflow serve`` mounts it at ``/console`` (``changeflow.local.server.EmbeddedServer``).
- ``changeflow console --stack-name NAME`` (changeflow.commands.local) serves it for a stack deployed on AWS
  with the user's own credentials, or ``--endpoint-url URL`` for a running ``changeflow serve``: it only
  reads, except the repair an explicit POST asks for.
"""

from __future__ import annotations

from ..client import Changeflow
from ..common.serving import Serving
from .app import Console
from .data import Reader

DEFAULT_PORT = 8766


def for_client(client: Changeflow, label: str = "") -> Console:
    return Console(Reader(client), label=label)


def for_embedded(stack) -> Console:
    """The console of an embedded stack in this process (what ``changeflow serve`` mounts)."""
    return for_client(Changeflow.for_embedded(stack), label=f"embedded stack {stack.template.stack_name}")


class ConsoleServer:
    """The console alone on 127.0.0.1 (``changeflow console``); port 0 picks a free port."""

    def __init__(self, console: Console, port: int = DEFAULT_PORT, host: str = "127.0.0.1"):
        self.console, self.host, self.port = console, host, port
        self._serving = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/console"

    def start(self) -> "ConsoleServer":
        import logging

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._serving = Serving(self.host, self.port, self.console, "changeflow-console")
        self.port = self._serving.port
        return self

    def stop(self) -> None:
        if self._serving is not None:
            self._serving.stop()
            self._serving = None

    def __enter__(self) -> "ConsoleServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
