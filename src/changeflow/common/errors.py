"""The exit statuses every command shares, and the errors a person is shown in one line (the command line
maps each to its status; each command's --help says what they mean for it)."""

from __future__ import annotations

OK = 0        # done; every execution SUCCEEDED (stale and duplicate outcomes are successes)
REJECTED = 1  # the stack answered no: a change failed with one of the workflow's named errors or was
              # refused before it started; no such entity or execution; verify found problems
USAGE = 2     # the command line or a file is wrong (argparse uses 2 as well)
FAILED = 3    # the tool could not do its job: no endpoint or stack, AWS refused, an execution ended
              # with an error the workflow does not name, timed out or was aborted


class UsageError(Exception):
    """A problem with what the user gave the tool (a file, a parameter, a name): exit status 2."""


class NotFound(Exception):
    """What the user asked about does not exist on the stack (an entity, an execution): exit status 1."""


class ToolFailure(Exception):
    """The tool could not do its job (the stack, the endpoint, AWS): exit status 3."""


class ProjectNotFound(UsageError, FileNotFoundError):
    """No project here: no template.yaml in the directory or above it, nor where CHANGEFLOW_ROOT points (a
    usage problem, exit status 2; still a FileNotFoundError for code that catches that)."""
