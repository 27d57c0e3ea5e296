"""The rollout journal: one JSON line per event, appended and flushed as work happens, so a run
stopped by Ctrl-C, a crash or a failure can be resumed with the same file.

    {"event": "rollout", "timeout": "PT10M", "batch_size": "20%", "at": ...}        first line
    {"event": "set", "id": "/subscriptions/...", "status": "started" | "done" | "failed" |
     "interrupted", "upgraded": 4, "error": "...", "at": ...}

Why append-only lines: a line is written whole or not at all (a torn last line is ignored on
read), and nothing earlier is ever rewritten.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional, Set, TextIO, Union

from vmss_terminate.control.arm_errors import describe_json
from vmss_terminate.errors import UsageError

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
        header = self._read()
        if header is not None and header.get("timeout") != timeout:
            raise UsageError(f"journal {self.path} belongs to a rollout with --timeout {header.get('timeout')}; "
                             f"use that timeout to resume it, or another --journal file")
        if header is not None and header.get("policy") != policy:
            raise UsageError(f"journal {self.path} belongs to a rollout with other scheduled-events policy options "
                             f"({header.get('policy') or 'none'}); resume it with the same --event-grid / "
                             f"--events-api-version / --auto-approve options, or use another --journal file")
        self._handle: Optional[TextIO] = None
        if read_only:  # --dry-run: show what a resume would skip, write nothing
            return
        try:
            self._handle = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write journal {self.path}: {exc.strerror or exc}") from None
        if header is None:
            self._write({"event": "rollout", "timeout": timeout, "batch_size": batch_size,
                         **({"policy": policy} if policy is not None else {})})

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
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, start=1):
            torn = number == len(lines)  # no newline after it: a write cut short
            entry = self._entry(raw, number, torn)
            if entry is None:
                continue
            if entry.get("event") == "rollout" and header is None:
                header = entry
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
        self._handle.write(json.dumps(entry) + "\n")
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


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
