"""The audit console: executions (the graph of the deployed ASL with the path taken, the event table,
each state's input and output, the failure) and entities (versions, field-by-field diffs, the execution
that wrote each version, ``verify`` and ``repair``) as server-rendered pages on 127.0.0.1.

- ``changeflow serve`` mounts it at ``/console`` (``server.EmbeddedServer``).
- ``changeflow console --stack-name NAME`` serves it for a stack deployed on AWS with the user's own
  credentials, or ``--endpoint-url URL`` for a running ``changeflow serve``: it only reads, except the
  repair an explicit POST asks for.
"""

from __future__ import annotations

import signal
import sys
import threading

from ..client import Changeflow
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

        from ..local.server import Serving

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


def wait_until_interrupted() -> None:
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        while not stopped.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass


def add_command(command, default_endpoint: str) -> None:
    """``changeflow console``: the subcommand, added by cli.build_parser through its ``command`` helper
    (which gives it a description and its exit statuses)."""
    sub = command("console", "the audit console on 127.0.0.1 for changeflow serve or a deployed stack",
                  "Serve the audit console on 127.0.0.1 until Ctrl-C: executions with the state machine drawn "
                  "and the path each took, entities with their versions and diffs, verify and repair. It reads "
                  "a running `changeflow serve` (which also answers /console itself) or, with --stack-name, a "
                  "stack deployed on AWS with your own credentials; its one write is an explicit repair.")
    where = sub.add_mutually_exclusive_group()
    where.add_argument("--endpoint-url", default=default_endpoint, metavar="URL",
                       help="a running `changeflow serve` (default %(default)s)")
    where.add_argument("--stack-name", metavar="NAME",
                       help="a stack deployed on AWS (sam deploy), read with your AWS credentials; needs a region")
    sub.add_argument("--region", default=None,
                     help="AWS region of --stack-name (default: AWS_REGION or the AWS config; us-east-1 for --endpoint-url)")
    sub.add_argument("--port", type=int, default=DEFAULT_PORT,
                     help="TCP port of the console on 127.0.0.1 (default %(default)s)")
    sub.set_defaults(func=cmd_console)


def cmd_console(args) -> int:
    from ..cli import target  # the same checks (a region for --stack-name) and client as every command

    client = target(args)
    if args.stack_name:
        label = f"stack {args.stack_name} ({client.sfn.meta.region_name})"
    else:
        label = f"changeflow serve at {args.endpoint_url}"
    with ConsoleServer(for_client(client, label), port=args.port) as server:
        print(f"changeflow console: {server.url}  ({label}; read-only but for an explicit repair; Ctrl-C stops)")
        sys.stdout.flush()
        wait_until_interrupted()
    print("changeflow console: stopped")
    return 0
