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

from vmss_terminate.errors import UsageError

DONE, FAILED, STARTED, INTERRUPTED = "done", "failed", "started", "interrupted"


class Journal:
    """Open (creating it) a journal for a rollout with these settings; refuses a journal written for
    another timeout, so a resume can never mix two targets."""

    def __init__(self, path: Union[str, Path], timeout: str, batch_size: str, read_only: bool = False) -> None:
        self.path = Path(path)
        self.status: Dict[str, str] = {}  # lower-case id -> last status
        self._lock = threading.Lock()
        header = self._read()
        if header is not None and header.get("timeout") != timeout:
            raise UsageError(f"journal {self.path} belongs to a rollout with --timeout {header.get('timeout')}; "
                             f"use that timeout to resume it, or another --journal file")
        self._handle: Optional[TextIO] = None
        if read_only:  # --dry-run: show what a resume would skip, write nothing
            return
        try:
            self._handle = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write journal {self.path}: {exc.strerror or exc}") from None
        if header is None:
            self._write({"event": "rollout", "timeout": timeout, "batch_size": batch_size})

    @property
    def resumed(self) -> bool:
        return bool(self.status)

    def done(self) -> Set[str]:
        return {key for key, status in self.status.items() if status == DONE}

    def _read(self) -> Optional[Dict[str, Any]]:
        if not self.path.exists():
            return None
        header = None
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read journal {self.path}: {exc.strerror or exc}") from None
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn last line from an interrupted write
            if not isinstance(entry, dict):
                continue
            if entry.get("event") == "rollout" and header is None:
                header = entry
            elif entry.get("event") == "set" and isinstance(entry.get("id"), str):
                self.status[entry["id"].lower()] = str(entry.get("status"))
        if text.strip() and header is None:
            raise UsageError(f"{self.path} is not a vmss-terminate rollout journal")
        return header

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
