"""One botocore data loader for every session in this process. Each botocore session makes its own loader,
which parses botocore's JSON data (endpoints, partitions, the SDK's defaults, every service model a client
needs) again; moto starts a new default session with every mock, that is with every embedded stack, and
each client of a stack (``Changeflow.for_embedded``) has its own session: parsing the same files again
was a third of the CPU of a stack's life (tests/test_workflow.py: 2,436 files parsed in 48 tests).
botocore already shares what a loader parses between all the clients of one session (the loader's
instance cache); installed, it shares it between sessions too, one loader per data path
(``AWS_DATA_PATH``). Speed only: the same models, endpoints and configuration. The embedded stack
installs it when it starts (not with ``caches=False``, which measures what the caches save)."""

from __future__ import annotations

import threading

from botocore import loaders, session

_LOADERS: dict[str | None, loaders.Loader] = {}
_LOCK = threading.Lock()


def shared_loader(search_path_string: str | None = None) -> loaders.Loader:
    """The process's loader for this data path (what ``botocore.loaders.create_loader`` makes)."""
    with _LOCK:
        if search_path_string not in _LOADERS:
            _LOADERS[search_path_string] = loaders.create_loader(search_path_string)
        return _LOADERS[search_path_string]


def install() -> None:
    """Every botocore session made from now on in this process uses the shared loader."""
    session.create_loader = shared_loader
