"""What the commands share on the command line: argparse types with one-line errors, the exit-status
section of each command's --help, and the options several commands take (where the stack is, template
parameters, where handlers run)."""

from __future__ import annotations

import argparse
import math
import os
import textwrap
from urllib.parse import urlsplit

from changeflow_core.validation import MAX_REQUEST_BYTES

from ..common.errors import ToolFailure
from ..local.runtime import LAMBDA_RUNTIMES

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"
ENDPOINT_VARIABLE = "CHANGEFLOW_ENDPOINT_URL"  # serve on another port: the default of every --endpoint-url


def default_endpoint() -> str:
    """``--endpoint-url``'s default: ``CHANGEFLOW_ENDPOINT_URL`` if set (checked as the option is), else
    serve's own default port on 127.0.0.1."""
    return os.environ.get(ENDPOINT_VARIABLE) or DEFAULT_ENDPOINT


def _number(kind, low, high=None, what="a number"):
    """An argparse type: ``kind`` within ``[low, high]``, else argparse's one-line error and status 2
    (``inf`` and ``nan`` are not numbers a command can use)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}: give a finite one")
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {what} {bound}")
        return value
    return parse


PORT = _number(int, 0, 65535, "a port number")
COUNT = _number(int, 1, what="a whole number")
# a time scale multiplies the definition's Waits and back-offs (at most 33 s): 1000 makes them 9 hours
FACTOR = _number(float, 0.0, 1000.0, what="a number")
SECONDS = _number(float, 0.0, what="a number of seconds")


def check_port_free(port: int) -> None:
    """A port to serve on (serve, demo --serve, console): free on 127.0.0.1, else a one-line ToolFailure (exit 3)
    before anything starts; werkzeug would print its own lines and exit 1. 0 picks a free one."""
    import socket

    if not port:
        return
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ToolFailure(f"port {port} on 127.0.0.1 is taken ({exc.strerror}): "
                              "pass --port PORT, or --port 0 for a free one") from exc


def ENDPOINT(text: str) -> str:  # noqa: N802 - an argparse type, named like the others
    """An argparse type: an http(s) URL with a host (and a valid port, if any), else a one-line error."""
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL with a host, "
                                         "such as http://127.0.0.1:4566")
    del port
    return text


def exit_help(*lines: str) -> str:
    """The ``exit status`` section of a command's --help: its own meanings of 1 and 3, and 0 and 2."""
    return "exit status:\n" + "\n".join(textwrap.fill(line, 100, initial_indent="  ", subsequent_indent="     ")
                                         for line in lines)


EXIT_2 = "2  bad command line or file (unreadable, not JSON, bad --param, --stack-name without a region)"
EXIT_3_REMOTE = "3  could not reach the endpoint or the stack, or AWS refused the request"
EXIT_0_EXECUTIONS = "0  every execution SUCCEEDED (stale and duplicate outcomes included)"  # run, submit
# the one request limit (changeflow_core.validation), as run's and submit's --help say it
TOO_LARGE = f"over {MAX_REQUEST_BYTES // 1024} KiB"
EXIT_DEFAULT = exit_help("0  done", "1  rejected: the stack answered no", EXIT_2, "3  could not do it")


def add_remote_options(sub: argparse.ArgumentParser, json: bool = True,
                       stack_help: str = "a stack deployed on AWS (sam deploy); needs a region and AWS credentials"
                       ) -> None:
    """Where the stack is, for the commands that talk to one: ``--endpoint-url`` (a running ``changeflow
    serve``) or ``--stack-name`` (a stack deployed on AWS), its ``--region``, and ``--json``."""
    where = sub.add_mutually_exclusive_group()
    where.add_argument("--endpoint-url", default=default_endpoint(), metavar="URL", type=ENDPOINT,
                       help=f"a running `changeflow serve` (default ${ENDPOINT_VARIABLE} if set, else "
                            f"{DEFAULT_ENDPOINT})")
    where.add_argument("--stack-name", metavar="NAME", help=stack_help)
    sub.add_argument("--region", default=None,
                     help="AWS region of --stack-name (default: AWS_REGION or the AWS config; "
                          "us-east-1 for --endpoint-url)")
    if json:
        sub.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_param_option(parser: argparse.ArgumentParser) -> None:
    """``--param KEY=VALUE`` for the commands that start an embedded stack (run, serve)."""
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="override a template parameter, e.g. HistoryRetentionVersions=2 (repeatable)")


def add_lambda_runtime_option(parser: argparse.ArgumentParser) -> None:
    """``--lambda-runtime`` for the commands that start an embedded stack (run, serve)."""
    parser.add_argument("--lambda-runtime", choices=LAMBDA_RUNTIMES, default=None,
                        help="where handlers run: in-process (default, fastest) or emulator (one warm Lambda "
                             "runtime process per function: python3.13, real timeouts, no Docker)")
