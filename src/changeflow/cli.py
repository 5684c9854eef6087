"""The changeflow command line.

- ``changeflow run FILE...``: start the embedded stack in this process, submit the changes in the files,
  print a report (or ``--json``).
- ``changeflow serve``: the embedded stack behind an AWS-compatible endpoint on 127.0.0.1.
- ``changeflow submit|versions|history|executions|verify|repair|tail|import|export``: against ``changeflow serve``
  (``--endpoint-url``, the default) or a stack deployed on AWS (``--stack-name``), one code path.

This module builds the parser from the command groups (changeflow.commands, one module per group), in the
order ``--help`` lists the commands, and turns what a command raises into one line and an exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from urllib.error import URLError

from botocore.exceptions import (BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError,
                                 NoRegionError)

from .commands import audit, capacity, chainops, deadletters, feed, local, reads, run, submit, transfer
from .commands.options import EXIT_DEFAULT
from .common.errors import FAILED, REJECTED, USAGE, NotFound, ToolFailure, UsageError
from .local.template import TemplateError

# Every command, in the order --help lists them: each group adds its own, with its help and exit statuses.
COMMANDS = [run.add_run, run.add_demo, local.add_serve, local.add_local, submit.add_submit, reads.add_versions,
            reads.add_history, reads.add_executions, reads.add_api, deadletters.add_dead_letters, audit.add_verify,
            audit.add_digest, audit.add_proof, audit.add_verify_proof, audit.add_repair, chainops.add_redact,
            chainops.add_adopt, feed.add_tail, transfer.add_import, transfer.add_export, transfer.add_verify_export,
            local.add_console, capacity.add_capacity]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="changeflow", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status, every command: 0 done, 1 rejected (the stack answered no), 2 bad command line or "
               "file, 3 could not do it.\nEach command's --help says what they mean for it.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, description: str | None = None,
                exits: str = EXIT_DEFAULT) -> argparse.ArgumentParser:
        """A subcommand: its one-line help, its description (wrapped) and its exit statuses (the epilog)."""
        return commands.add_parser(name, help=help_text, description=textwrap.fill(description or help_text, 100),
                                   epilog=exits, formatter_class=argparse.RawDescriptionHelpFormatter)

    for add in COMMANDS:
        add(command)
    return parser


def explain(exc: BaseException, args) -> tuple[str, int] | None:
    """The one line a user sees for an error, and the exit status; None for a defect in the tool (which
    keeps its traceback, so that it gets reported)."""
    endpoint = getattr(args, "stack_name", None) or getattr(args, "endpoint_url", None)
    if isinstance(exc, (UsageError, TemplateError)):
        return str(exc), USAGE
    if isinstance(exc, NotFound):
        return str(exc), REJECTED
    if isinstance(exc, ToolFailure):
        return str(exc), FAILED
    if isinstance(exc, NoRegionError):
        return "no AWS region: pass --region REGION or set AWS_REGION", USAGE
    if isinstance(exc, NoCredentialsError):
        return ("no AWS credentials: configure them (aws configure, AWS_PROFILE) for --stack-name, "
                "or use --endpoint-url with `changeflow serve`"), FAILED
    if isinstance(exc, EndpointConnectionError):
        if getattr(args, "stack_name", None):  # AWS: the network, a proxy or the region's name is at fault
            return (f"cannot reach {exc.kwargs.get('endpoint_url')} (AWS, region "
                    f"{args.region or 'from the AWS config'}): check the network, a proxy, and the region"), FAILED
        return f"cannot reach {exc.kwargs.get('endpoint_url')}: is `changeflow serve` running there?", FAILED
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), error.get("Message", "")
        if exc.operation_name == "DescribeStacks" and "does not exist" in message:
            return f"no stack {endpoint if args.stack_name else 'changeflow'}: {message}", FAILED
        return f"{exc.operation_name} failed: {code}: {message}", FAILED
    if isinstance(exc, BotoCoreError):
        return str(exc), FAILED
    if isinstance(exc, URLError):
        return f"cannot reach the REST API: {exc.reason}", FAILED
    if isinstance(exc, (TimeoutError, RuntimeError)):
        return str(exc), FAILED
    return None


# What a shell reports for a program that SIGPIPE stopped (128 + 13): what `changeflow executions | head -1`
# ends with when `head` has read its line and closed the pipe.
CLOSED_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # a bad command line: argparse's usage line and exit status 2
    try:
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush (a traceback there)
        return status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return stdout_closed()
    except Exception as exc:
        explained = explain(exc, args)
        if explained is None:
            raise
        message, status = explained
        print(f"changeflow: {message}", file=sys.stderr)
        return status


def stdout_closed() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a program that SIGPIPE stops does. Python
    ignores SIGPIPE, so a write raises BrokenPipeError instead; what is still buffered goes to /dev/null, so that
    the interpreter's own flush at exit does not raise it again (the Python docs' recipe, "Note on SIGPIPE" in
    the signal module's documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the process's stdout (sys.stdout may be the embedded stack's router of handler output)
    os.close(devnull)
    return CLOSED_PIPE
