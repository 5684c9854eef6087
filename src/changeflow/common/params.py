"""Template parameter overrides as a person types them: ``--param KEY=VALUE`` (repeatable)."""

from __future__ import annotations

from .errors import UsageError


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--param {pair!r}: expected KEY=VALUE")
        params[key] = value
    return params
