"""What the agent has done per EventId, persisted so a restart (even after kill -9) neither reruns a
finished drain hook nor forgets to send an approval.

The file is rewritten atomically (temp file in the same directory, fsync, os.replace) with mode
0600; temp files a killed agent left behind are removed at start. Entries of events that left the
document are pruned. `path=":memory:"` keeps state in memory only (for in-process sandboxes that
run several agents). A file that cannot be read as state (corrupt, absurdly nested, fields of the
wrong type) is logged and ignored, field by field where possible: it must never stop the agent.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

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
    """Whether a file can be created in `directory` (created if missing): tried, not guessed, because
    os.access says yes to root on a read-only file system."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", suffix=".tmp", dir=str(directory))
    except OSError:
        return False
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return True


def _state_file_problem(target: Path) -> Optional[str]:
    """Why `target` cannot be the state file (None: it can)."""
    if target.is_dir():
        return f"{target} is a directory: --state-file takes a file path, e.g. {target / 'state.json'}"
    if target.exists() and not target.is_file():
        return f"{target} is not a regular file"
    if target.exists() and not os.access(str(target), os.R_OK):
        return f"{target} is not readable"
    if not _writable_dir(target.parent):
        return f"state file directory {target.parent} is not writable"
    return None


def resolve_state_file(path: Optional[str]) -> str:
    """An explicit path (must be usable: UsageError, exit 2, at start-up otherwise), else
    $VMSS_TERMINATE_STATE_FILE (empty = unset), else the system default, falling back to the per-user
    location with a warning when the default is not writable."""
    if path is not None and not str(path).strip():
        raise UsageError("empty --state-file: pass a file path (or :memory: to keep state in memory only)")
    explicit = path or os.environ.get(STATE_ENV) or None
    if explicit == MEMORY:
        return MEMORY
    if explicit:
        target = Path(explicit).expanduser()
        # an explicit path creates at most its own directory (mkdir, not mkdir -p): a typo such as
        # /nonexistent/d/s.json is refused instead of becoming a directory tree created as root
        grandparent = target.parent.parent
        problem = (f"{grandparent} does not exist (only the state file's own directory is created)"
                   if not target.parent.exists() and not grandparent.is_dir() else _state_file_problem(target))
        if problem is not None:
            raise UsageError(f"{problem}: pass a usable --state-file")
        return str(target)
    system = default_state_file()
    if _state_file_problem(system) is None:
        return str(system)
    fallback = user_state_file()
    if _state_file_problem(fallback) is None:
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
        self._remove_stale_temp_files()
        self._load()

    # -- reading --------------------------------------------------------------------------------

    def get(self, event_id: str) -> Dict[str, Any]:
        """A copy of the record for `event_id` ({} if none)."""
        with self._lock:
            return dict(self._events.get(event_id, {}))

    def event_ids(self) -> List[str]:
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

    def forget(self, event_id: str, *keys: str) -> None:
        """Drop `keys` from the record of `event_id` if it still has one (a record already pruned is
        not brought back, as `update` would)."""
        with self._lock:
            record = self._events.get(event_id)
            if record is not None and any(k in record for k in keys):
                for key in keys:
                    record.pop(key, None)
                self._save()

    def rename(self, old: str, new: str, **fields: Any) -> bool:
        """Move the record of `old` to `new` (merged under what `new` already has), then merge
        `fields` (None deletes a key), in one save; False if there is no record of `old`."""
        with self._lock:
            record = self._events.pop(old, None)
            if record is None:
                return False
            merged = {**record, **self._events.get(new, {})}
            for key, value in fields.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            self._events[new] = merged
            self._save()
            return True

    def prune(self, keep: Iterable[str]) -> List[str]:
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

    def _temp_prefix(self) -> str:
        return f".{os.path.basename(self.path)}-"

    def _remove_stale_temp_files(self) -> None:
        """Temp files of this state file that a killed agent (kill -9 mid-write) left behind. Only
        ours by name; the `.state-*.tmp` names earlier versions used only when a minute old (so never
        another agent's write in progress)."""
        if self.path == MEMORY:
            return
        directory = os.path.dirname(os.path.abspath(self.path))
        ours = glob.glob(os.path.join(glob.escape(directory), glob.escape(self._temp_prefix()) + "*.tmp"))
        legacy = [p for p in glob.glob(os.path.join(glob.escape(directory), ".state-*.tmp"))
                  if _age(p) > 60.0]
        for leftover in ours + legacy:
            try:
                os.unlink(leftover)
                log.info("removed %s, left by an agent killed while writing its state", leftover)
            except OSError:
                pass

    def _load(self) -> None:
        if self.path == MEMORY or not os.path.exists(self.path):
            return
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
            events = data.get("events") if isinstance(data, dict) else None
            if not isinstance(events, dict):
                raise ValueError("not a state file (no events object)")
            dropped: List[str] = []
            self._events = {str(k): _clean_record(v, dropped) for k, v in events.items() if isinstance(v, dict)}
            if dropped:
                log.error("state file %s: ignored field(s) of the wrong type: %s", self.path,
                          ", ".join(sorted(set(dropped))))
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: absurdly nested JSON
            # A corrupt file must not stop the agent; the worst case is rerunning an idempotent hook.
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
            log.error("cannot read state file %s (%s); starting with empty state", self.path, reason)
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
        fd, tmp = tempfile.mkstemp(prefix=self._temp_prefix(), suffix=".tmp", dir=directory)  # created 0600
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


def event_of(key: str, record: Mapping[str, Any]) -> str:
    """The EventId of a journal key: the key itself, or the `kube_event_id` a per-VM node drain's
    key (EventId/VM, `kubernetes/drain.py`) records."""
    event_id = record.get("kube_event_id")
    return event_id if isinstance(event_id, str) and event_id else key


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _is_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# The fields the agent reads back, and what each must be; a field of another type is dropped (as if
# never written) rather than crash a hook worker or the loop.
_FIELD_CHECKS: Dict[str, Callable[[Any], bool]] = {
    "hooks_started": _is_time, "hooks_finished": _is_time, "approval_started": _is_time, "approved": _is_time,
    "started": lambda v: v is True,  # seen Started: the VM is going away (policy.departing)
    "hooks_result": lambda v: v in ("ok", "failed"),
    "current_step": lambda v: isinstance(v, str), "event_type": lambda v: isinstance(v, str),
    "hook_token": lambda v: isinstance(v, str),
    "hook_pid": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    "steps_done": _is_names, "hooks": _is_names, "covered": _is_names,
    "hook_pids": lambda v: isinstance(v, dict) and all(isinstance(x, list) for x in v.values()),
    # --kubernetes (pipeline/kubernetes/drain.py)
    "kube_node": lambda v: isinstance(v, str), "kube_cordoned": lambda v: v is True,
    "kube_tainted": lambda v: v is True, "kube_event_started": lambda v: v is True,
    "kube_drain_started": _is_time, "kube_event_id": lambda v: isinstance(v, str),
    "kube_evicted": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
}


def _clean_record(record: Dict[str, Any], dropped: List[str]) -> Dict[str, Any]:
    clean = {}
    for key, value in record.items():
        check = _FIELD_CHECKS.get(key)
        if check is not None and not check(value):
            dropped.append(key)
            continue
        clean[str(key)] = value
    return clean


def _age(path: str) -> float:
    try:
        return time.time() - os.path.getmtime(path)
    except OSError:
        return 0.0


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
