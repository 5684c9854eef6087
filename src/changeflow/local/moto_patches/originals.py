"""moto's own methods and classes, kept the first time a patch replaces them (one name per patch): each
patch calls what it replaced, and tests compare a patched answer with moto's own."""

from __future__ import annotations

import sys
from typing import Any

ORIGINALS: dict[str, Any] = {}


def rebind(name: str, original: Any, replacement: Any, package: str = "moto.stepfunctions.parser") -> None:
    """``replacement`` wherever a loaded module of ``package`` holds ``original`` under ``name`` (moto's modules
    import functions by name, ``from ... import name``, so patching the defining module alone misses them)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith(package) and getattr(module, name, None) is original:
            setattr(module, name, replacement)
