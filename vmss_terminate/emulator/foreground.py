"""Serve in the foreground until Ctrl-C or SIGTERM: the loop both `vmss-terminate emulator` commands share."""

from __future__ import annotations

import signal
import threading
from typing import Callable, Optional


def wait_until_stopped(every: Optional[Callable[[], None]] = None, interval: float = 0.2) -> None:
    """Block until Ctrl-C (SIGINT) or SIGTERM, calling `every()` each `interval` seconds meanwhile.

    CLI only (main thread): SIGTERM is handled for the duration and the previous handler restored.
    The bounded wait keeps Ctrl-C responsive on every platform.
    """
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(interval):
            if every is not None:
                every()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
