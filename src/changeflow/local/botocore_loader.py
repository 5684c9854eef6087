"""What every botocore session and client makes again, made once for the process: the data loader, the event
names' aliases, and the User-Agent's sanitized parts; and the check of each handler's signature, read from its
code.

One botocore data loader for every session in this process. Each botocore session makes its own loader,
which parses botocore's JSON data (endpoints, partitions, the SDK's defaults, every service model a client
needs) again; moto starts a new default session with every mock, that is with every embedded stack, and
each client of a stack (``Changeflow.for_embedded``) has its own session: parsing the same files again
was a third of the CPU of a stack's life (tests/test_workflow.py: 2,436 files parsed in 48 tests).
botocore already shares what a loader parses between all the clients of one session (the loader's
instance cache); installed, it shares it between sessions too, one loader per data path
(``AWS_DATA_PATH``). Speed only: the same models, endpoints and configuration. The embedded stack
installs it when it starts (not with ``caches=False``, which measures what the caches save).

The event names' aliases: every event system (``botocore.hooks.EventAliaser``: one per session, a copy per
client) works out again, for each event name it registers or emits, which of botocore's renamed services the
name uses (``EVENT_ALIASES``), in a cache of its own that starts empty. A session registers about 130 built-in
handlers, so that was about 60% of making a session (5.6 ms of CPU, 2.0 ms with the names shared), and each
new client works out the names of its first requests again. Installed, every event system with the same
aliases, in the same order, shares one cache: the name an alias gives depends on nothing else.

The User-Agent: every request builds its header again, twice, from some 36 parts, each sanitized character by
character (``useragent.sanitize_user_agent_string_component``, 100 calls a request, ~5% of one's CPU against
moto). The sanitized part depends on the part and ``allow_hash`` alone: installed, each is worked out once.

The handlers' signatures: an event system checks that every handler registered on it takes ``**kwargs``
(``compat.accepts_kwargs``: ``inspect.getfullargspec``, about 10% of making a session or a client, 130 a
session). For a plain function or a method of one, whose signature nothing overrides (``__signature__``),
the answer is in its code object (``CO_VARKEYWORDS``, and the name after its other arguments'): read there;
any other callable is asked as before.
"""

from __future__ import annotations

import functools
import inspect
import threading
import types

from botocore import hooks, loaders, session, useragent

_LOADERS: dict[str | None, loaders.Loader] = {}
_ALIASED_NAMES: dict[tuple, dict[str, str]] = {}  # the aliases, in order -> event name -> its aliased name
_LOCK = threading.Lock()


def shared_loader(search_path_string: str | None = None) -> loaders.Loader:
    """The process's loader for this data path (what ``botocore.loaders.create_loader`` makes)."""
    with _LOCK:
        if search_path_string not in _LOADERS:
            _LOADERS[search_path_string] = loaders.create_loader(search_path_string)
        return _LOADERS[search_path_string]


def install() -> None:
    """Every botocore session made from now on in this process uses the shared loader, every event system
    made from now on the shared aliased names, and every User-Agent the sanitized parts worked out before."""
    session.create_loader = shared_loader
    if not hasattr(useragent.sanitize_user_agent_string_component, "cache_info"):
        useragent.sanitize_user_agent_string_component = functools.lru_cache(maxsize=4096)(
            useragent.sanitize_user_agent_string_component)
    if hooks.accepts_kwargs is not accepts_kwargs:
        hooks.accepts_kwargs = accepts_kwargs
    if getattr(hooks.EventAliaser.__init__, "shares_names", False):
        return
    made = hooks.EventAliaser.__init__

    def __init__(self, event_emitter, event_aliases=None):
        made(self, event_emitter, event_aliases)
        with _LOCK:
            self._alias_name_cache = _ALIASED_NAMES.setdefault(tuple(self._event_aliases.items()), {})

    __init__.shares_names = True
    hooks.EventAliaser.__init__ = __init__


_ACCEPTS_KWARGS = hooks.accepts_kwargs  # botocore's (compat.accepts_kwargs)


def accepts_kwargs(func):
    """What ``inspect.getfullargspec(func)[2]`` is (the name of its ``**`` argument, or None), from the code
    object of a plain function or a method of one; anything else as botocore asks it."""
    function = func.__func__ if type(func) is types.MethodType else func
    if type(function) is not types.FunctionType or "__signature__" in function.__dict__:
        return _ACCEPTS_KWARGS(func)
    code = function.__code__
    if not code.co_flags & inspect.CO_VARKEYWORDS:
        return None
    return code.co_varnames[code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS)]
