"""What the agent has done per EventId, persisted so a restart (even after kill -9) neither reruns a
finished drain hook nor forgets to send an approval.

The file is rewritten atomically (temp file in the same directory, fsync, os.replace) with mode
0600. Entries of events that left the document are pruned. `path=":memory:"` keeps state in memory
only (for in-process sandboxes that run several agents).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

from vmss_terminate.errors import UsageError

log = logging.getLogger(__name__)

MEMORY = ":memory:"
STATE_ENV = "VMSS_TERMINATE_STATE_FILE"


def default_state_file() -> Path:
    """/var/lib/vmss-terminate/state.json (Linux), %ProgramData%\\vmss-terminate\\state.json (Windows)."""
    if os.name == "nt":
        return Path(os.environ.get("ProgramData", r"C:\ProgramData")) / "vmss-terminate" / "state.json"
    return Path("/var/lib/vmss-terminate/state.json")


def user_state_file() -> Path:
    """The unprivileged fallback: $XDG_STATE_HOME or ~/.local/state (POSIX), %LOCALAPPDATA% (Windows)."""
    if os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "vmss-terminate" / "state.json"
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vmss-terminate" / "state.json"


def _writable_dir(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(str(directory), os.W_OK)


def resolve_state_file(path: Optional[str]) -> str:
    """An explicit path (must be writable), else $VMSS_TERMINATE_STATE_FILE, else the system default,
    falling back to the per-user location with a warning when the default is not writable."""
    explicit = path or os.environ.get(STATE_ENV)
    if explicit == MEMORY:
        return MEMORY
    if explicit:
        target = Path(explicit).expanduser()
        if not _writable_dir(target.parent):
            raise UsageError(f"state file directory {target.parent} is not writable: pass a writable --state-file")
        return str(target)
    system = default_state_file()
    if _writable_dir(system.parent):
        return str(system)
    fallback = user_state_file()
    if _writable_dir(fallback.parent):
        log.warning("%s is not writable (running unprivileged?); keeping state in %s -- "
                    "pass --state-file PATH to choose", system.parent, fallback)
        return str(fallback)
    raise UsageError(f"neither {system.parent} nor {fallback.parent} is writable: pass --state-file PATH")


class StateStore:
    """A dict of EventId -> record, saved on every change. Thread-safe."""

    VERSION = 1

    def __init__(self, path: str = MEMORY) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._events: Dict[str, Dict[str, Any]] = {}
        self._save_failed = False
        self._load()

    # -- reading --------------------------------------------------------------------------------

    def get(self, event_id: str) -> Dict[str, Any]:
        """A copy of the record for `event_id` ({} if none)."""
        with self._lock:
            return dict(self._events.get(event_id, {}))

    def event_ids(self) -> list:
        with self._lock:
            return list(self._events)

    # -- changing -------------------------------------------------------------------------------

    def update(self, event_id: str, **fields: Any) -> Dict[str, Any]:
        """Merge `fields` into the record (None deletes a key) and save; returns the new record."""
        with self._lock:
            record = self._events.setdefault(event_id, {})
            for key, value in fields.items():
                if value is None:
                    record.pop(key, None)
                else:
                    record[key] = value
            self._save()
            return dict(record)

    def prune(self, keep: Iterable[str]) -> list:
        """Drop records of events not in `keep` (they left the document); returns the dropped ids."""
        keep = set(keep)
        with self._lock:
            gone = [eid for eid in self._events if eid not in keep]
            for eid in gone:
                del self._events[eid]
            if gone:
                self._save()
            return gone

    # -- file -----------------------------------------------------------------------------------

    def _load(self) -> None:
        if self.path == MEMORY or not os.path.exists(self.path):
            return
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
            events = data.get("events") if isinstance(data, dict) else None
            if not isinstance(events, dict):
                raise ValueError("not a state file (no events object)")
            self._events = {str(k): dict(v) for k, v in events.items() if isinstance(v, dict)}
        except (OSError, ValueError) as exc:
            # A corrupt file must not stop the agent; the worst case is rerunning an idempotent hook.
            log.error("cannot read state file %s (%s); starting with empty state", self.path, exc)
            self._events = {}

    def _save(self) -> None:
        """Persist; a failure (disk full, read-only file system) is logged, never raised: losing
        restart memory is bad, but blocking the drain or the approval would be worse."""
        if self.path == MEMORY:
            return
        try:
            self._write()
        except OSError as exc:
            if not self._save_failed:
                log.error("cannot write state file %s (%s); keeping state in memory until it works again",
                          self.path, exc)
            self._save_failed = True
            return
        if self._save_failed:
            log.warning("state file %s written again", self.path)
        self._save_failed = False

    def _write(self) -> None:
        payload = json.dumps({"version": self.VERSION, "events": self._events}, indent=1, sort_keys=True)
        directory = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".tmp", dir=directory)  # created 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            _chmod_private(tmp)
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _fsync_dir(directory)


def _chmod_private(path: str) -> None:
    try:
        os.chmod(path, 0o600)
    except OSError:  # e.g. filesystems without POSIX modes; Windows ACLs come from %ProgramData%
        pass


def _fsync_dir(directory: str) -> None:
    if sys.platform.startswith("win"):
        return  # directories cannot be opened for fsync on Windows; os.replace is atomic there
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
