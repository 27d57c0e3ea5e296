"""`StopOnSignals`, the one stop-on-signal helper of the commands: a signal sets the stop event and
says which it was, the previous handlers come back on exit (or at the first signal with `once`),
`then` can interrupt, and outside the main thread nothing is installed."""

from __future__ import annotations

import os
import signal
import threading
from typing import List

import pytest

from vmss_terminate.errors import StopSignal
from vmss_terminate.signals import StopOnSignals, raise_stop_signal

pytestmark = pytest.mark.skipif(os.name == "nt", reason="no SIGTERM on Windows")


def test_a_signal_sets_stop_and_the_previous_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopOnSignals() as signals:
        assert signal.getsignal(signal.SIGTERM) is not before
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.stop.wait(5)
    assert signals.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_once_restores_at_the_first_signal_and_then_is_told_which() -> None:
    told: List[int] = []
    before = signal.getsignal(signal.SIGINT)
    stop = threading.Event()
    with StopOnSignals(stop=stop, then=told.append, once=True) as signals:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5)
        assert signal.getsignal(signal.SIGINT) is before  # a second Ctrl-C interrupts at once
    assert told == [signal.SIGINT] and signals.signum == signal.SIGINT


def test_raise_stop_signal_interrupts_like_ctrl_c() -> None:
    with pytest.raises(StopSignal) as raised:
        with StopOnSignals(("SIGTERM",), then=raise_stop_signal):
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(5)  # the handler raises in the main thread before this returns
    assert raised.value.signum == signal.SIGTERM


def test_outside_the_main_thread_signals_are_left_alone() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def worker() -> None:
        with StopOnSignals():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(5)
    assert seen == [before]


def test_a_signal_this_platform_lacks_is_skipped() -> None:
    with StopOnSignals(("SIGTERM", "SIGNOTHING")) as signals:
        assert not signals.stop.is_set()
