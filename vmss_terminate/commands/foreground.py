"""Serve in the foreground until Ctrl-C or SIGTERM: the loop the `emulator` and `sandbox` commands share."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Callable, Optional, Type

from vmss_terminate.signals import StopOnSignals


class Foreground:
    """Stop signals for a foreground server command, installed *before* it starts serving.

    Use as `with Foreground() as fg: start(); print banner; fg.wait()`. A SIGTERM that arrives while
    the servers start or the banner prints is remembered (the wait then returns at once) instead of
    killing the process before its clean-up and report; a Ctrl-C anywhere inside the block ends it
    cleanly (exit 0) after the block's own `finally` clean-up has run. CLI only (main thread); the
    previous SIGTERM handler is restored on exit.
    """

    def __init__(self) -> None:
        self._signals = StopOnSignals(("SIGTERM",))  # Ctrl-C stays a KeyboardInterrupt, caught on exit
        self._stop = self._signals.stop

    def __enter__(self) -> "Foreground":
        self._signals.install()
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> bool:
        self._signals.restore()
        return kind is not None and issubclass(kind, KeyboardInterrupt)

    def wait(self, every: Optional[Callable[[], None]] = None, interval: float = 0.2,
             timeout: Optional[float] = None) -> bool:
        """Block until Ctrl-C, SIGTERM or `timeout` real seconds (None: no limit), calling `every()`
        each `interval` seconds meanwhile; True when SIGTERM ended it. The bounded wait keeps Ctrl-C
        responsive on every platform."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = interval if deadline is None else min(interval, deadline - time.monotonic())
            if self._stop.wait(max(wait, 0)):
                return True
            if wait <= 0:
                return False
            if every is not None:
                every()
