"""A progress bar for long work (upgrades, `--wait`): count, %, elapsed and ETA on a terminal,
nothing at all in a pipe or with `-o json`/`tsv` (scripts read results, not bars).

    upgrading [##########----------]  20/40  50%  elapsed 0:12  ETA 0:12

One line on stderr, rewritten in place; `finish()` ends it, so an error printed afterwards starts
on its own line. The clock is injectable (tests drive elapsed/ETA without waiting).
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

WIDTH = 20


def _clock() -> float:
    return time.monotonic()


def _duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressBar:
    """progress(done, total) callback; ETA from the average rate since the first call."""

    def __init__(self, stream: TextIO, label: str = "upgrading", now: Callable[[], float] = _clock) -> None:
        self.stream, self.label, self.now = stream, label, now
        self.started: Optional[float] = None
        self.open = False

    def render(self, done: int, total: int) -> str:
        now = self.now()
        if self.started is None:
            self.started = now
        elapsed = now - self.started
        share = done / total if total else 1.0
        filled = int(round(WIDTH * share))
        eta = _duration(elapsed / done * (total - done)) if done and done < total else ("0:00" if done else "?")
        width = len(str(total))
        return (f"{self.label} [{'#' * filled}{'-' * (WIDTH - filled)}] {done:>{width}}/{total}  {share:4.0%}  "
                f"elapsed {_duration(elapsed)}  ETA {eta}")

    def __call__(self, done: int, total: int) -> None:
        line = self.render(done, total)
        self.open = done < total
        self.stream.write(f"\r{line}\x1b[K" + ("" if self.open else "\n"))
        self.stream.flush()

    def finish(self) -> None:
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = False


def terminal_progress(output: str, stream: Optional[TextIO] = None, label: str = "upgrading") -> Optional[ProgressBar]:
    """A bar only for a person watching a terminal: never with json/tsv output or a piped stderr."""
    stream = stream or sys.stderr
    if output != "table" or not stream.isatty():
        return None
    return ProgressBar(stream, label)
