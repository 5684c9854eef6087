"""The change requests a command is given: JSON files holding one request or an array of them, and what
the tooling reports for a request it will not submit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from changeflow_core import wire
from changeflow_core.errors import ValidationError

from ..client import Execution
from ..common.errors import UsageError


def load_changes(paths: list[str]) -> list[tuple[str, Any]]:
    """``(source, request)`` pairs from files holding one request object or an array of them."""
    changes = []
    for path in paths:
        try:
            data = wire.loads(Path(path).read_text(encoding="utf-8"))  # numbers exact, as written in the file
        except FileNotFoundError as exc:
            raise UsageError(f"{path}: no such file") from exc
        except IsADirectoryError as exc:
            raise UsageError(f"{path}: is a directory; give the JSON files in it ({path}/*.json)") from exc
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: not valid JSON ({exc})") from exc
        requests = data if isinstance(data, list) else [data]
        changes.extend((f"{path}[{i}]" if isinstance(data, list) else path, r) for i, r in enumerate(requests))
    return changes


def refused(source: str, request: Any, exc: ValidationError) -> Execution:
    """What the tooling reports for a request it will not submit (over the payload limit)."""
    return Execution(name=f"(not started: {source})", arn="", status="REFUSED", input=None,
                     error="ValidationError", cause=str(exc))
