"""moto's own methods and classes, kept the first time a patch replaces them (one name per patch): each
patch calls what it replaced, and tests compare a patched answer with moto's own."""

from __future__ import annotations

from typing import Any

ORIGINALS: dict[str, Any] = {}
