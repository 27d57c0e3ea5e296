"""Start a hook process without a shell and stop its whole process tree, on POSIX and Windows.

POSIX: the user's command line is split with `shlex` and run as an argv list in a new session,
so `os.killpg` reaches every child it spawned. Windows: the string goes to CreateProcess unchanged
(no shell), in a new process group; stopping sends CTRL_BREAK, then `taskkill /T /F` kills the tree.
Event data never passes through a shell: it arrives in environment variables and on stdin.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import threading
from typing import Dict, List, Optional, Union

from vmss_terminate.errors import UsageError

log = logging.getLogger(__name__)

IS_WINDOWS = os.name == "nt"


def split_command(command: str) -> Union[List[str], str]:
    """argv for POSIX (shlex rules), the unchanged string for Windows; UsageError if empty or unbalanced."""
    if not command or not command.strip():
        raise UsageError("empty --hook command")
    if IS_WINDOWS:
        return command
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        program = command.split()[0]  # arguments may hold secrets: never echo them
        raise UsageError(f"cannot parse --hook {program}...: {exc}") from None
    if not argv:
        raise UsageError("empty --hook command")
    return argv


def check_program(argv: Union[List[str], str]) -> None:
    """UsageError now if a POSIX hook's program cannot be found or run, rather than a failed drain
    at scale-in time. (Windows strings go to CreateProcess unparsed, so they are not checked.)"""
    if not isinstance(argv, list):
        return
    program = argv[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        if not os.path.isfile(program) or not os.access(program, os.X_OK):
            raise UsageError(f"--hook program {program!r} does not exist or is not executable")
    elif shutil.which(program) is None:
        raise UsageError(f"--hook program {program!r} is not on PATH")


def start(command: str, env: Dict[str, str], stdin: bytes) -> subprocess.Popen[bytes]:
    """Start `command` (no shell) with `env`, feeding `stdin` from a helper thread (never blocks us)."""
    kwargs: Dict[str, object] = {}
    if IS_WINDOWS:
        kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200)
    else:
        kwargs["start_new_session"] = True
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        split_command(command), stdin=subprocess.PIPE, env=env, shell=False, close_fds=True, **kwargs)
    try:
        threading.Thread(target=_feed, args=(proc, stdin), name=f"hook-stdin:{proc.pid}", daemon=True).start()
    except RuntimeError:  # no thread to spare: the event JSON fits a pipe's buffer, so this cannot block
        _feed(proc, stdin)
    return proc


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    try:
        assert proc.stdin is not None
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the hook does not read stdin: fine


def stop_tree(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Ask the hook's process tree to stop, wait `grace` real seconds, then kill what is left."""
    if IS_WINDOWS:
        _stop_tree_windows(proc, grace)
    else:
        _stop_tree_posix(proc, grace)


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False


def _stop_tree_posix(proc: subprocess.Popen[bytes], grace: float) -> None:
    pgid = proc.pid  # start_new_session: the hook leads its own group
    _signal_group(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(pgid, signal.SIGKILL)  # children that ignored SIGTERM, or outlived the leader
    _reap(proc)


def _stop_tree_windows(proc: subprocess.Popen[bytes], grace: float) -> None:
    try:
        proc.send_signal(getattr(signal, "CTRL_BREAK_EVENT"))  # noqa: B009 (Windows only; mypy on POSIX)
        proc.wait(timeout=grace)
    except (subprocess.TimeoutExpired, OSError, ValueError, AttributeError):
        pass
    try:
        subprocess.run(["taskkill", "/PID", str(proc.pid), "/T", "/F"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        proc.kill()
    except OSError:
        pass
    _reap(proc)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.error("hook process %s did not exit after SIGKILL", proc.pid)


def process_start_token(pid: int) -> Optional[str]:
    """Something that identifies *this* process and not a later one with the same pid.

    Linux: the start time from /proc/PID/stat. Elsewhere None (an orphan cannot be verified,
    so it is never signalled).
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return fields[19]  # field 22 (starttime), counted after the "(comm)" field
    except (OSError, IndexError):
        return None


def stop_orphan(pid: int, token: Optional[str], grace: float = 5.0) -> bool:
    """Stop the process group of a hook left running by an agent that died (kill -9).

    Only when the pid still has the start token recorded when it was started (so a reused pid is
    never signalled). Returns True if something was signalled.
    """
    if IS_WINDOWS or not token or process_start_token(pid) != token:
        return False
    if not _signal_group(pid, signal.SIGTERM):
        return False
    done = threading.Event()
    for _ in range(int(grace * 20)):
        if process_start_token(pid) != token:
            break
        done.wait(0.05)  # bounded poll for an unrelated process to exit
    _signal_group(pid, signal.SIGKILL)
    return True
