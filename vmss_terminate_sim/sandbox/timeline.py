"""A timeline of what happened in a sandbox run, stamped in sandbox time and real time.

The sandbox speeds time up (a PT5M timeout passes in seconds), so every entry carries both
clocks: sandbox seconds show the story as Azure would tell it, real seconds show what the user
waited. The scheduler, the demo and the agents' decisions all write here; subscribers (the
`sandbox` command) print entries as they arrive.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar, cast

from vmss_terminate.clock import SYSTEM_CLOCK, Clock, wait_until
from vmss_terminate.pipeline import decisions as D

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One thing that happened. `sandbox_s` / `real_s` are seconds since the timeline began."""

    sandbox_s: float
    real_s: float
    source: str  # "sandbox", "control", "agent", "demo"
    kind: str  # e.g. event_published, hook_started, approval_sent, held_back, deleted
    vm: str
    message: str
    data: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def view(self, shape: Type[T]) -> T:
        """An agent entry's `data` as the TypedDict its decision kind carries (`decisions.DATA`), so
        mypy checks the keys read (declare the type read: a `.get` of an unknown key is `object`).
        Any other shape is a TypeError: a reader never guesses what an entry holds."""
        if self.source != "agent" or D.DATA.get(self.kind) is not shape:
            raise TypeError(f"a {self.source} {self.kind!r} entry does not carry {shape.__name__}")
        return cast(T, self.data)


class Timeline:
    """Thread-safe, append-only list of entries with a bounded wait for tests and the demo."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._sandbox_start = clock.now()
        self._real_start = time.monotonic()
        self._entries: List[Entry] = []
        self._changed = threading.Condition()
        self._subscribers: List[Callable[[Entry], None]] = []

    @property
    def sandbox_start(self) -> float:
        """Epoch seconds (sandbox clock) at which the timeline began."""
        return self._sandbox_start

    def record(self, source: str, kind: str, vm: str = "", message: str = "", **data: Any) -> Entry:
        entry = Entry(
            sandbox_s=self.clock.now() - self._sandbox_start,
            real_s=time.monotonic() - self._real_start,
            source=source,
            kind=kind,
            vm=vm,
            message=message,
            data=data,
        )
        with self._changed:
            self._entries.append(entry)
            subscribers = list(self._subscribers)
            self._changed.notify_all()
        for fn in subscribers:
            fn(entry)
        return entry

    def subscribe(self, fn: Callable[[Entry], None]) -> None:
        with self._changed:
            self._subscribers.append(fn)

    def entries(self, kind: Optional[str] = None, vm: Optional[str] = None) -> List[Entry]:
        with self._changed:
            items = list(self._entries)
        return [e for e in items if (kind is None or e.kind == kind) and (vm is None or e.vm == vm)]

    def wait_for(self, predicate: Callable[[List[Entry]], bool], wait_seconds: float) -> bool:
        """Block until `predicate(entries)` holds or `wait_seconds` real seconds pass."""
        return wait_until(self._changed, lambda: predicate(list(self._entries)), wait_seconds)


def format_entry(entry: Entry) -> str:
    """`  +353.7s   (+5.90s)  myvmss_3     deleted           instance deleted ...`"""
    sandbox = f"+{entry.sandbox_s:.1f}s"
    real = f"(+{entry.real_s:.2f}s)"
    return f"{sandbox:>9} {real:>9}  {entry.vm or '-':<12} {entry.kind:<17} {entry.message}".rstrip()


HEADER = f"{'sandbox':>9} {'(real)':>9}  {'instance':<12} {'what':<17} details"


def hook_of(entry: Entry) -> Optional[str]:
    """Which step a HOOK_* agent entry is about: a `--hook` command, or the node drain (`DRAIN_STEP`)."""
    return entry.view(D.HookData).get("hook")


def attempt_of(entry: Entry) -> Optional[int]:
    """The how-manieth refusal a KUBE_EVICTION_REFUSED agent entry reports for its pod."""
    return entry.view(D.KubeData).get("attempt")
