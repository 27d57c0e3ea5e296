"""`Foreground`: the stop signals of the emulator and sandbox commands are installed before they serve."""

from __future__ import annotations

import os
import signal

import pytest

from vmss_terminate.commands.foreground import Foreground

pytestmark = pytest.mark.skipif(os.name == "nt", reason="no SIGTERM on Windows")


def test_sigterm_before_the_wait_is_remembered_and_the_wait_returns_at_once() -> None:
    """The CI failure this fixes: SIGTERM while the banner printed killed the process (exit -15)."""
    cleaned = []
    with Foreground() as foreground:
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # delivered here, before anyone waits
            stopped_by_signal = foreground.wait(timeout=30)
        finally:
            cleaned.append(True)
    assert stopped_by_signal and cleaned == [True]


def test_timeout_ends_the_wait_and_every_is_called_meanwhile() -> None:
    calls = []
    with Foreground() as foreground:
        stopped_by_signal = foreground.wait(every=lambda: calls.append(1), interval=0.01, timeout=0.2)
    assert not stopped_by_signal and len(calls) >= 2


def test_ctrl_c_inside_the_block_runs_the_clean_up_and_ends_cleanly() -> None:
    cleaned = []
    with Foreground():
        try:
            raise KeyboardInterrupt
        finally:
            cleaned.append(True)
    assert cleaned == [True]


def test_other_errors_still_propagate_and_the_previous_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(ValueError):
        with Foreground():
            assert signal.getsignal(signal.SIGTERM) is not before
            raise ValueError("a real bug")
    assert signal.getsignal(signal.SIGTERM) is before
