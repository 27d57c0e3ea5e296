"""The rollout journal: one JSON line per event, appended and flushed as work happens, so a run
stopped by Ctrl-C, a crash or a failure can be resumed with the same file.

    {"event": "rollout", "timeout": "PT10M", "batch_size": "20%", "at": ...}        first line
    {"event": "set", "id": "/subscriptions/...", "status": "started" | "done" | "failed" |
     "interrupted", "upgraded": 4, "error": "...", "at": ...}

    {"event": "run", "pid": 4242, "host": "ops-1", "command": "vmss-terminate fleet rollout ...", "at": ...}
                                                                             each run that writes to it

Why append-only lines: a line is written whole or not at all (a torn last line is ignored on
read), and nothing earlier is ever rewritten.

One writer at a time: a run that writes holds an exclusive lock on the file (flock; on Windows a
byte-range lock far past its end) for as long as it is open, so a second rollout on the same
journal refuses at once (UsageError, exit 2) naming the run that holds it (its last `run` line), instead of
both PATCHing and upgrading the same sets. The lock dies with its process: nothing to clean up after a
crash. `--dry-run` only reads and takes no lock.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional, Set, TextIO, Union

from vmss_terminate.control.arm_errors import describe_json
from vmss_terminate.errors import AzureError, UsageError

DONE, FAILED, STARTED, INTERRUPTED = "done", "failed", "started", "interrupted"
MAX_DEPTH = 8
"""How deep a journal entry may nest: the tool writes flat objects (depth 1)."""


class Journal:
    """Open (creating it) a journal for a rollout with these settings; refuses a journal written for
    another timeout, so a resume can never mix two targets."""

    def __init__(self, path: Union[str, Path], timeout: str, batch_size: str, read_only: bool = False,
                 policy: Optional[Dict[str, Any]] = None) -> None:
        self.path = Path(path)
        self.status: Dict[str, str] = {}  # lower-case id -> last status
        self._lock = threading.Lock()
        self._handle: Optional[TextIO] = None
        self.last_run: Optional[Dict[str, Any]] = None  # the newest `run` line: who wrote last
        self._torn: Optional[int] = None  # the file ends in a line cut short (no newline) from this offset
        if not read_only:  # --dry-run: show what a resume would skip, write nothing, lock nothing
            self._open_locked()
        try:
            header = self._read()
            if header is not None and header.get("timeout") != timeout:
                raise UsageError(f"journal {self.path} belongs to a rollout with --timeout "
                                 f"{header.get('timeout') or '(none recorded)'}; use that timeout to resume it, or "
                                 "another --journal file")
            if header is not None and header.get("policy") != policy:
                raise UsageError(f"journal {self.path} belongs to a rollout with other scheduled-events policy "
                                 f"options ({header.get('policy') or 'none'}); resume it with the same --event-grid / "
                                 f"--events-api-version / --auto-approve options, or use another --journal file")
        except BaseException:
            self.close()
            raise
        if self._handle is None:
            return
        if self._torn is not None:  # drop the torn line a crash left (under the lock): what follows is whole
            self._handle.flush()
            os.truncate(self._handle.fileno(), self._torn)
        if header is None:
            self._write({"event": "rollout", "timeout": timeout, "batch_size": batch_size,
                         **({"policy": policy} if policy is not None else {})})
        self._write({"event": "run", "pid": os.getpid(), "host": socket.gethostname(), "command": _command()})

    def _open_locked(self) -> None:
        """Open for appending and take the one-writer lock, or refuse naming the run holding it."""
        try:
            handle = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write journal {self.path}: {exc.strerror or exc}") from None
        if not _try_lock(handle):
            handle.close()
            self._read()
            raise UsageError(f"journal {self.path} is in use by another rollout ({_describe_run(self.last_run)}); "
                             "wait for it to finish or stop it, then resume with the same --journal -- or work on "
                             "other scale sets with another --journal file")
        self._handle = handle

    @property
    def resumed(self) -> bool:
        return bool(self.status)

    def done(self) -> Set[str]:
        return {key for key, status in self.status.items() if status == DONE}

    def _read(self) -> Optional[Dict[str, Any]]:
        """The header, after reading every entry's status. A torn last line (an interrupted write: no
        newline after it) is ignored; any other line that is not valid UTF-8, not JSON, not an object
        or nested absurdly is bad input (exit 2) naming the file and the line."""
        if not self.path.exists():
            return None
        header = None
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read journal {self.path}: {exc.strerror or exc}") from None
        self._torn = data.rfind(b"\n") + 1 if data and not data.endswith(b"\n") else None
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, start=1):
            torn = number == len(lines)  # no newline after it: a write cut short
            entry = self._entry(raw, number, torn)
            if entry is None:
                continue
            if entry.get("event") == "rollout" and header is None:
                header = entry
            elif entry.get("event") == "run":
                self.last_run = entry
            elif entry.get("event") == "set" and isinstance(entry.get("id"), str):
                self.status[entry["id"].lower()] = str(entry.get("status"))
        if data.strip() and header is None:
            raise UsageError(f"{self.path} is not a vmss-terminate rollout journal")
        return header

    def _entry(self, raw: bytes, number: int, torn: bool) -> Optional[Dict[str, Any]]:
        if not raw.strip():
            return None
        try:
            entry = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            problem = "is not valid UTF-8"
        except RecursionError:
            problem = "is nested too deeply"
        except ValueError:
            problem = "is not JSON"
        else:
            if not isinstance(entry, dict):
                problem = f"is {describe_json(entry)} where a JSON object was expected"
            elif _depth(entry) > MAX_DEPTH:
                problem = f"is nested more than {MAX_DEPTH} levels deep"
            else:
                return entry
        if torn and problem in ("is not valid UTF-8", "is not JSON"):
            return None  # the torn last line of an interrupted write
        raise UsageError(f"journal {self.path} line {number} {problem}: not a journal this tool wrote "
                         "(pass another --journal file, or repair that line)")

    def record(self, resource_id: str, status: str, **extra: Any) -> None:
        entry = {"event": "set", "id": resource_id, "status": status}
        entry.update({k: v for k, v in extra.items() if v is not None})
        with self._lock:
            self.status[resource_id.lower()] = status
            self._write(entry)

    def _write(self, entry: Dict[str, Any]) -> None:
        entry["at"] = round(time.time(), 3)
        if self._handle is None:
            return
        try:
            self._handle.write(json.dumps(entry) + "\n")
            self._handle.flush()
        except OSError as exc:  # a full disk, a removed mount: said in words, never "[Errno 28]"
            raise JournalWriteFailed(f"cannot write journal {self.path}: {exc.strerror or exc}; the work this "
                                     "line would record may be done -- free the space and resume with the same "
                                     "--journal (a resume re-audits, so nothing is redone blindly)") from None

    def close(self) -> None:
        """Close the file, which releases the lock."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            try:
                handle.close()
            except OSError:
                pass  # its last write failed and was reported then (JournalWriteFailed)


class JournalWriteFailed(AzureError):
    """The journal could not be written (exit 1): its set is reported failed with this message."""


def _command() -> str:
    """How this process was started, as a shell line (bounded: it names the run, it does not log it)."""
    line = shlex.join([Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]])
    return line if len(line) <= 300 else line[:297] + "..."


def _describe_run(run: Optional[Dict[str, Any]]) -> str:
    """The run holding a journal, from its `run` line."""
    if run is None:
        return "a run that has not written its first line yet"
    at = run.get("at")
    since = (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)) if isinstance(at, (int, float))
             and not isinstance(at, bool) and 0 <= at < 1e11 else "an unknown time")
    return (f"pid {run.get('pid')} on {run.get('host') or 'an unknown host'} since {since}: "
            f"{str(run.get('command') or '')[:300]}").rstrip(": ")


def _try_lock(handle: TextIO) -> bool:
    """An exclusive, non-blocking lock on the open file: False when another holder has it."""
    if sys.platform == "win32":
        import msvcrt

        fd = handle.fileno()
        here = os.lseek(fd, 0, os.SEEK_CUR)
        try:
            os.lseek(fd, 2**31 - 2, os.SEEK_SET)  # a byte nobody reads: the journal stays readable
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        finally:
            os.lseek(fd, here, os.SEEK_SET)
        return True
    import fcntl

    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks (some network mounts): work unlocked, as before
        return True
    return True


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                todo.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
