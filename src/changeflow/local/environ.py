"""``os.environ`` as each thread of the embedded stack's process sees it: the process's environment, and in a
thread importing a handler (``LambdaService.load``, a cold start) the function's environment over it, in that
thread only.

On Lambda a function's environment variables are its own process's. Here every function shares one process, and
a handler's module reads its variables at import (``TABLE_NAME``...). That import used to bind ``os.environ`` to a
copy for the whole process, so every other thread saw the function's variables meanwhile, and a change another
thread made then (a stack's mock setting its credentials, a test's ``monkeypatch``) went into the copy and was
lost when the import gave the environment back (a new client then asked 169.254.169.254 for credentials, a
fresh clone's ``make test``, 2026-11-26). With the overlay kept per thread, nothing else needs to know an import
is under way: other threads read and write the process's environment as ever.

In the importing thread, reads see the function's variables first; writes and deletes stay in its overlay (as they
stayed in the copy): the process's environment is never changed by a handler's import.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, MutableMapping
from typing import Any

_DELETED = object()  # a variable the importing thread deleted: absent for it, still there for the others
_LOCAL = threading.local()


class ThreadEnviron(MutableMapping):
    """The process's ``os.environ`` (``base``, an ``os._Environ``: writes still reach ``putenv``), with a
    thread's overlay over it while that thread imports a handler (``over``)."""

    def __init__(self, base: MutableMapping):
        self._base = base

    @staticmethod
    def _overlay() -> dict[str, Any] | None:
        return getattr(_LOCAL, "overlay", None)

    def __getitem__(self, key: str) -> str:
        overlay = self._overlay()
        if overlay is not None and key in overlay:
            value = overlay[key]
            if value is _DELETED:
                raise KeyError(key)
            return value
        return self._base[key]

    def __setitem__(self, key: str, value: str) -> None:
        overlay = self._overlay()
        if overlay is None:
            self._base[key] = value
            return
        if not isinstance(key, str) or not isinstance(value, str):  # what os.environ refuses, refused here too
            raise TypeError(f"str expected, not {type(key if not isinstance(key, str) else value).__name__}")
        overlay[key] = value

    def __delitem__(self, key: str) -> None:
        overlay = self._overlay()
        if overlay is None:
            del self._base[key]
            return
        if key not in self:
            raise KeyError(key)
        overlay[key] = _DELETED

    def __iter__(self) -> Iterator[str]:
        overlay = self._overlay()
        if overlay is None:
            yield from self._base
            return
        yield from (key for key, value in list(overlay.items()) if value is not _DELETED)
        yield from (key for key in list(self._base) if key not in overlay)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def copy(self) -> dict[str, str]:
        return dict(self)

    def __or__(self, other: Any) -> dict[str, str]:
        return {**self, **other}

    def __ror__(self, other: Any) -> dict[str, str]:
        return {**other, **self}

    def __ior__(self, other: Any) -> ThreadEnviron:
        self.update(other)
        return self

    def __repr__(self) -> str:
        return f"environ({dict(self)!r})"

    def __getattr__(self, name: str) -> Any:  # os._Environ's own (encodekey, putenv, ...), as before
        return getattr(self._base, name)


def install() -> ThreadEnviron:
    """``os.environ`` (and so ``os.getenv``) made the per-thread view, once per process."""
    if not isinstance(os.environ, ThreadEnviron):
        os.environ = ThreadEnviron(os.environ)
    return os.environ


@contextlib.contextmanager
def over(environment: dict[str, str]) -> Iterator[None]:
    """In this thread only, until the block ends: ``environment`` over the process's environment."""
    install()
    outer = getattr(_LOCAL, "overlay", None)
    _LOCAL.overlay = {**(outer or {}), **environment}
    try:
        yield
    finally:
        _LOCAL.overlay = outer
