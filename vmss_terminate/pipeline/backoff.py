"""Bounded exponential backoff with jitter, for every retry loop (IMDS polls, evictions, ...)."""

from __future__ import annotations

import random
from typing import Optional


class Backoff:
    """Bounded exponential backoff with jitter: base * 2**n, capped, times a random 0.5..1.0."""

    def __init__(self, base: float = 0.5, cap: float = 10.0, rng: Optional[random.Random] = None) -> None:
        self.base = base
        self.cap = cap
        self.attempt = 0
        self._rng = rng or random.Random()

    def next(self, at_least: float = 0.0) -> float:
        delay = min(self.cap, self.base * (2.0 ** min(self.attempt, 30)))
        self.attempt += 1
        return max(at_least, delay * self._rng.uniform(0.5, 1.0))

    def reset(self) -> None:
        self.attempt = 0
