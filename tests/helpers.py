"""Small helpers shared by test packages (import as `from helpers import ...`: tests/ is on sys.path
because tests/conftest.py sits there)."""

from __future__ import annotations

import signal
import subprocess


def interrupt(proc: "subprocess.Popen[str]", timeout: float = 10.0) -> int:
    """Stop a foreground command the way a user does (Ctrl-C, i.e. SIGINT) and return its exit code.

    A process still running after `timeout` seconds is killed (and reaped), so a hung command fails
    the test instead of outliving it; its exit code is then the kill's (negative), never 0.
    """
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
    return proc.returncode
