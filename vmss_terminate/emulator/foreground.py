"""Serve in the foreground until Ctrl-C or SIGTERM: the loop the `emulator` and `sandbox` commands share."""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable, Optional


def wait_until_stopped(every: Optional[Callable[[], None]] = None, interval: float = 0.2,
                       timeout: Optional[float] = None) -> None:
    """Block until Ctrl-C (SIGINT), SIGTERM or `timeout` real seconds (None: no limit), calling
    `every()` each `interval` seconds meanwhile.

    CLI only (main thread): SIGTERM is handled for the duration and the previous handler restored.
    The bounded wait keeps Ctrl-C responsive on every platform.
    """
    stop = threading.Event()
    deadline = None if timeout is None else time.monotonic() + timeout
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while True:
            wait = interval if deadline is None else min(interval, deadline - time.monotonic())
            if wait <= 0 or stop.wait(wait):
                break
            if every is not None:
                every()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
