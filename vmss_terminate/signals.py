"""Stop on SIGINT / SIGTERM: the one place a command installs signal handlers (stdlib only, no click).

`StopOnSignals` is a context manager: inside the block the named signals set its `stop` event (and
remember which one came, `signum`), optionally call `then(signum)` (print a notice, or raise
`StopSignal` to interrupt like Ctrl-C); on exit the previous handlers come back. `once=True` puts
them back at the first signal, so a second Ctrl-C interrupts at once. Outside the main thread (an
application embedding us) signals are left alone. Each use owns its state: nothing is kept at
module level, so the library never installs a handler and agents can run in threads.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any, Callable, Dict, List, Optional, Sequence, Type

from vmss_terminate.errors import StopSignal

STOP_SIGNALS = ("SIGINT", "SIGTERM")
"""Ctrl-C and SIGTERM; the agent adds SIGBREAK (Ctrl-Break on Windows)."""
AGENT_STOP_SIGNALS = STOP_SIGNALS + ("SIGHUP", "SIGBREAK")
"""What stops `agent run` cleanly (exit 0): Ctrl-C, SIGTERM, SIGHUP (its terminal closed, or a
reload: the agent has nothing to reload, and SIGHUP's default would kill it with no stop grace,
leaving hooks running unreported) and (Windows) Ctrl-Break."""


def _present(names: Sequence[str]) -> List[signal.Signals]:
    """The signals named that this platform has (SIGBREAK exists only on Windows)."""
    return [sig for sig in (getattr(signal, name, None) for name in names) if sig is not None]

def raise_stop_signal(signum: int) -> None:
    """A `then` that interrupts like Ctrl-C (KeyboardInterrupt as `StopSignal`): work in progress is
    reported the same way for both, and the exit code is 128 + `signum`."""
    raise StopSignal(signum)


class StopOnSignals:
    """Handlers for `signals` (names; those this platform lacks are skipped) while the block runs."""

    def __init__(self, signals: Sequence[str] = STOP_SIGNALS, stop: Optional[threading.Event] = None, *,
                 then: Optional[Callable[[int], None]] = None, once: bool = False) -> None:
        self.stop = stop if stop is not None else threading.Event()
        self.signum: Optional[int] = None
        self._signals = _present(signals)
        self._then, self._once = then, once
        self._previous: Dict[int, Any] = {}

    def _handler(self, signum: int, frame: Optional[FrameType]) -> None:
        self.signum = signum
        self.stop.set()
        if self._once:
            self.restore()
        if self._then is not None:
            self._then(signum)

    def install(self) -> "StopOnSignals":
        """Install the handlers (main thread only; elsewhere, or where a signal is unsupported, skip it)."""
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in self._signals:
            try:
                self._previous[int(sig)] = signal.signal(sig, self._handler)
            except (ValueError, OSError):  # unsupported here
                pass
        return self

    def restore(self) -> None:
        """Put the previous handlers back (once; later calls do nothing), where ours is still the
        one installed: a handler set meanwhile (`finish_quietly`) is left to whoever set it."""
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            if signal.getsignal(signum) == self._handler:
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def __enter__(self) -> "StopOnSignals":
        return self.install()

    def __exit__(self, kind: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.restore()


def finish_quietly(signals: Sequence[str] = STOP_SIGNALS) -> None:
    """The work is done: from now on a stop signal changes nothing (it is ignored), so the report is
    printed whole and the exit code is the work's, not 130/143 or a kill by the raw signal. Called
    where a command starts printing its result and by the CLI root once a command returned; the
    root puts the previous handlers back for an embedding caller (`kept_handlers`), the console
    script keeps them ignored until the process ends. Main thread only, like every handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _present(signals):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):
            pass


class kept_handlers:  # used as a context manager, like contextlib's
    """Save the handlers of `signals` and put them back on exit (unless `restore` is False: a
    process that ends with the block keeps ignoring late signals through its exit)."""

    def __init__(self, signals: Sequence[str] = STOP_SIGNALS, restore: bool = True) -> None:
        self._signals = _present(signals)
        self._restore = restore
        self._saved: Dict[int, Any] = {}

    def __enter__(self) -> "kept_handlers":
        if threading.current_thread() is threading.main_thread():
            self._saved = {int(sig): signal.getsignal(sig) for sig in self._signals}
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._restore:
            return
        for signum, handler in self._saved.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
