"""HTTP requests bounded in total, first byte to last, and ended at once on a stop: `Watch` and
the `WatchedAdapter` it cuts the connection of. The IMDS client (agent/imds.py) and the Kubernetes
client (pipeline/kubernetes/api.py) both send through it: a per-read timeout alone lets an answer
sent a byte every few seconds hold a request (and the thread waiting for it) for ever.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Optional, TypeVar

import requests.adapters
import urllib3
import urllib3.connection

__all__ = ["Watch", "WatchedAdapter"]

W = TypeVar("W", bound="Watch")


class Watch:
    """Aborts the request in flight on this thread when its total deadline passes or `stop` is set.

    A per-read timeout cannot stop a body sent a byte at a time, and a signal handler cannot
    interrupt a blocking read (Python retries it). So a watcher thread shuts the connection's socket
    down, which ends any read at once; the request then fails and `fired` says why (stopped, deadline).
    Real time on purpose: sockets wait in real time, also under a sandbox's fast clock.
    """

    _POLL = 0.05  # seconds between looks at `stop` (bounded polling: a threading.Event has no select)

    def __init__(self, total: float, stop: Optional[threading.Event], name: str = "http-watch") -> None:
        self.total = total
        self.name = name
        self.stop = stop
        self.connection: Any = None  # set by WatchedConnection when the request goes out
        self.fired: Optional[str] = None
        self._done = threading.Event()
        self._deadline = time.monotonic() + total

    def __enter__(self: "W") -> "W":
        threading.Thread(target=self._run, name=self.name, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(min(self._POLL, max(0.0, self._deadline - time.monotonic()))):
            if self.stop is not None and self.stop.is_set():
                self._fire("stopped")
                return
            if time.monotonic() >= self._deadline:
                self._fire("deadline")
                return

    def _fire(self, why: str) -> None:
        self.fired = why
        sock = getattr(self.connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _tell(watches: threading.local, connection: Any) -> None:
    watch = getattr(watches, "watch", None)
    if watch is not None:
        watch.connection = connection


class WatchedConnection(urllib3.connection.HTTPConnection):
    """Tells the Watch of the request its thread is sending which connection carries it."""

    watches: threading.local  # set per adapter (WatchedAdapter.init_poolmanager)

    def request(self, *args: Any, **kwargs: Any) -> Any:
        _tell(self.watches, self)
        return super().request(*args, **kwargs)


class WatchedHTTPSConnection(urllib3.connection.HTTPSConnection):
    watches: threading.local

    def request(self, *args: Any, **kwargs: Any) -> Any:
        _tell(self.watches, self)
        return super().request(*args, **kwargs)


class WatchedAdapter(requests.adapters.HTTPAdapter):
    """A transport of real sockets whose pools use the watched connection classes.
    The request each thread is sending is this adapter's own state (no module-level state)."""

    def __init__(self) -> None:
        self._watches = threading.local()  # .watch: the Watch of this thread's request in flight
        super().__init__()  # calls init_poolmanager

    @contextmanager
    def watching(self, watch: Watch) -> Iterator[None]:
        self._watches.watch = watch
        try:
            yield
        finally:
            self._watches.watch = None

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        attrs = {"watches": self._watches}
        http_conn = type("WatchedConnection", (WatchedConnection,), attrs)
        https_conn = type("WatchedHTTPSConnection", (WatchedHTTPSConnection,), attrs)
        http_pool = type("WatchedHTTPPool", (urllib3.HTTPConnectionPool,), {"ConnectionCls": http_conn})
        https_pool = type("WatchedHTTPSPool", (urllib3.HTTPSConnectionPool,), {"ConnectionCls": https_conn})
        self.poolmanager.pool_classes_by_scheme = {"http": http_pool, "https": https_pool}
