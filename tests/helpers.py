"""Small helpers shared by test packages (import as `from helpers import ...`: tests/ is on sys.path
because tests/conftest.py sits there)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from click.testing import CliRunner, Result


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


def cli_command(*path: str) -> Any:
    """The real click command at `vmss-terminate PATH...`, loaded the way the CLI loads it (the root
    group imports a command's module on first use, so `main.commands` alone lists only loaded ones).
    A missing command fails the test: it never turns into a skip."""
    import click

    from vmss_terminate.cli import main

    command: Any = main
    for word in path:
        assert isinstance(command, click.Group), f"`{word}`: {command.name} is not a group"
        found = command.get_command(click.Context(command), word)
        assert found is not None, f"no command `vmss-terminate {' '.join(path)}`"
        command = found
    return command


def invoke_cli(command: Any, args: Sequence[str], **kwargs: Any) -> "CliResult":
    """`CliRunner().invoke` with click 8.2's result semantics on every click we support.

    Python 3.9 gets click 8.1, whose runner mixes stderr into stdout unless `mix_stderr=False`
    (an argument click 8.2 removed); there `.output` is then stdout only. The wrapper keeps
    `.stdout` / `.stderr` separate and `.output` holding both, as click 8.2 does.
    """
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
        separate = True
    except TypeError:
        runner, separate = CliRunner(), False
    return CliResult(runner.invoke(command, list(args), **kwargs), separate)


class CliResult:
    def __init__(self, result: Result, separate: bool) -> None:
        self._result = result
        self._separate = separate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)

    @property
    def output(self) -> str:
        if self._separate:
            return self._result.stdout + self._result.stderr
        return self._result.output


def poll_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Bounded polling for conditions outside our reach to be notified of (files, other processes,
    a server's handler threads); True as soon as `predicate()` holds."""
    deadline = time.monotonic() + timeout
    gate = threading.Event()
    while time.monotonic() < deadline:
        if predicate():
            return True
        gate.wait(interval)
    return predicate()


def serve_arm_state(servers: Any, state: Any, monkeypatch: Any) -> Any:
    """Serve `state` on the shared ARM servers (fresh log, no faults) with the credential env and
    VMSS_TERMINATE_ARM_ENDPOINT pointing at them."""
    servers.reset(state)
    for key, value in servers.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("VMSS_TERMINATE_ARM_ENDPOINT", servers.arm_url)
    return servers


def _read_until(proc: "subprocess.Popen[str]", marker: str, timeout: float = 20) -> List[str]:
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    seen: List[str] = []
    while True:
        line = lines.get(timeout=timeout)
        seen.append(line)
        if line.startswith(marker):
            return seen


@contextlib.contextmanager
def serving_arm(*args: str, env: Optional[Dict[str, str]] = None) -> Iterator[List[str]]:
    """Run `vmss-terminate emulator arm ARGS` as a process; yield its output up to the env JSON line
    (the last line: `env as JSON: {...}`); stop it with Ctrl+C (SIGINT) and expect a clean exit."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if "PROXY" not in k.upper()}
    proc = subprocess.Popen([sys.executable, "-m", "vmss_terminate", "emulator", "arm", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        yield _read_until(proc, "env as JSON:")
    finally:
        code = interrupt(proc)
    assert code == 0


class RecordingServer:
    """A second loopback server that records every request reaching it (method, path, whether it
    carried an Authorization header) and answers each one `200 {}`: the "elsewhere" an answer's link
    may point at. `origin` is its http://127.0.0.1:PORT."""

    def __init__(self) -> None:
        import http.server

        self.requests: List[Dict[str, Any]] = []
        recorded = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                recorded.append({"method": self.command, "path": self.path,
                                 "authorization": "Authorization" in self.headers})
                body = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "RecordingServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def recording_clock() -> Any:
    """A ManualClock whose sleeps and waits pass instantly and are recorded in `.waits`, so that
    backoff and polling intervals are observable without waiting."""
    from vmss_terminate.clock import ManualClock

    class RecordingClock(ManualClock):
        def __init__(self) -> None:
            super().__init__()
            self.waits: List[float] = []

        def sleep(self, seconds: float) -> None:
            self.waits.append(seconds)
            super().sleep(seconds)

        def wait(self, event: threading.Event, seconds: float) -> bool:
            self.waits.append(seconds)
            return super().wait(event, seconds)

    return RecordingClock()
