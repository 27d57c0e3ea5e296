"""`python -m vmss_terminate ...` run to completion, forked from a warm interpreter (tests/cli_zygote.py).

For tests that need the CLI as a process -- its exit code, what reaches stdout and stderr, the
click-free `agent run` path of the console script -- but not a fresh interpreter: bad input, one-shot
commands. Each run is still a process of its own with the environment and directory it is given;
only the interpreter's start-up and the CLI's imports are shared (~0.2 s of CPU saved per run, on
2 cores). Tests about start-up itself (what `agent run` imports, signals during start-up) start a
real `python -m vmss_terminate` instead. Where fork does not exist, runs are plain subprocesses.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

ZYGOTE = Path(__file__).with_name("cli_zygote.py")


class CliForkServer:
    """One zygote per process (pytest-xdist worker), started on first use; runs one at a time."""

    def __init__(self) -> None:
        self._proc: "Optional[subprocess.Popen[bytes]]" = None
        self._pending = b""
        self._lock = threading.Lock()

    def run(self, args: List[str], env: Mapping[str, str], cwd: str, timeout: float,
            code: Optional[str] = None) -> "subprocess.CompletedProcess[str]":
        argv = [sys.executable, *(["-c", code] if code is not None else ["-m", "vmss_terminate"]), *args]
        if not hasattr(os, "fork"):
            done = subprocess.run(argv, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout)
            return done
        with self._lock, tempfile.TemporaryDirectory(prefix="clifork-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            out.touch()
            err.touch()
            proc = self._zygote()
            assert proc.stdin is not None
            proc.stdin.write((json.dumps({"args": list(args), "env": dict(env), "cwd": cwd, "stdout": str(out),
                                          "stderr": str(err), "code": code}) + "\n").encode())
            proc.stdin.flush()
            deadline = time.monotonic() + timeout
            pid = int(self._answer(deadline + 30)["pid"])
            try:
                code = int(self._answer(deadline)["returncode"])
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                self._answer(time.monotonic() + 30)
                raise subprocess.TimeoutExpired(argv, timeout) from None
            return subprocess.CompletedProcess(argv, code, out.read_text(encoding="utf-8", errors="replace"),
                                               err.read_text(encoding="utf-8", errors="replace"))

    def _zygote(self) -> "subprocess.Popen[bytes]":
        if self._proc is None or self._proc.poll() is not None:
            self._pending = b""
            self._proc = subprocess.Popen([sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, cwd=str(ZYGOTE.parent.parent))
            atexit.register(self.close)
        return self._proc

    def _answer(self, deadline: float) -> Dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise subprocess.TimeoutExpired("cli_zygote", 0)
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"tests/cli_zygote.py ended (exit {proc.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


FORK_SERVER = CliForkServer()


def run_forked(args: List[str], env: Mapping[str, str], cwd: str, timeout: float = 30,
               code: Optional[str] = None) -> "subprocess.CompletedProcess[str]":
    """`python -m vmss_terminate ARGS` (with `code`: `python -c CODE ARGS`) to completion, as
    subprocess.run(capture_output=True, text=True)."""
    return FORK_SERVER.run(args, env, cwd, timeout, code)
