"""A WSGI app served on 127.0.0.1 from a background thread (``changeflow serve``'s endpoint, the console),
and a foreground that waits for Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import threading

from werkzeug.serving import make_server


class Serving:
    """A WSGI app served on a background thread (werkzeug, threaded), until ``stop``; port 0 picks one."""

    def __init__(self, host: str, port: int, app, name: str, **options):
        self._server = make_server(host, port, app, threaded=True, **options)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def on_sigterm() -> threading.Event:
    """An event that SIGTERM sets, from now on (before a server starts, so that a SIGTERM during its start
    stops it cleanly too)."""
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    return stopped


def wait_until_interrupted(stopped: threading.Event | None = None) -> None:
    """Return on Ctrl-C (KeyboardInterrupt) or SIGTERM (``stopped``, else a new ``on_sigterm()``)."""
    stopped = stopped if stopped is not None else on_sigterm()
    try:
        while not stopped.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
