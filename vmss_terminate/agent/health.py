"""IMDS health as the agent reports it: one outage = one story, told at its start, every
`report_every` seconds while it lasts, and at its end with its length.

The loop and the IMDS client's retries both report failures here (`failed`), and every good
answer ends the outage (`answered`). Times come from the injected clock, so a test can run a
40-second outage in no real time. The loop's own backoff between failed polls lives here too:
it grows during an outage and starts again from the bottom after it.
"""

from __future__ import annotations

from typing import Callable, Optional

from vmss_terminate.agent.imds import ImdsError
from vmss_terminate.clock import Clock
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.backoff import Backoff

Report = Callable[..., None]  # report(kind, event_id, message, **data)

REPORT_EVERY = 60.0  # clock seconds between "still unavailable" reports


class Outage:
    """Tracks whether IMDS is failing, since when, and how often; reports through `report`."""

    def __init__(self, clock: Clock, report: Report, report_every: float = REPORT_EVERY) -> None:
        self.clock = clock
        self._report = report
        self.report_every = report_every
        self.since: Optional[float] = None
        self.failures = 0
        self._last_report = 0.0
        self.backoff = Backoff(base=1.0, cap=30.0)

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, exc: ImdsError, retry_in: Optional[float] = None) -> None:
        """One failed IMDS request (retried in `retry_in` seconds, if known)."""
        now = self.clock.now()
        after = f"; retrying in {retry_in:.1f}s" if retry_in is not None else ""
        if self.since is None:
            self.since, self.failures, self._last_report = now, 1, now
            self._report(D.IMDS_ERROR, None, f"IMDS unavailable: {exc}{after}", status=exc.status,
                         outcome=exc.outcome, delay=retry_in, outage_seconds=0.0, failures=1)
            return
        self.failures += 1
        if now - self._last_report >= self.report_every:
            self._last_report = now
            lasted = now - self.since
            self._report(D.IMDS_ERROR, None, f"IMDS still unavailable after {lasted:.0f}s "
                                             f"({self.failures} failed requests): {exc}{after}",
                         status=exc.status, outcome=exc.outcome, delay=retry_in, outage_seconds=lasted, failures=self.failures)

    def answered(self) -> None:
        """IMDS answered: an outage in progress ends (and is reported with its length)."""
        if self.since is None:
            return
        lasted = self.clock.now() - self.since
        self._report(D.IMDS_RECOVERED, None, f"IMDS answers again after a {lasted:.1f}s outage "
                                             f"({self.failures} failed requests)",
                     outage_seconds=lasted, failures=self.failures)
        self.since, self.failures = None, 0
        self.backoff.reset()

    def next_wait(self) -> float:
        """Seconds the loop waits after a poll that failed (bounded exponential backoff)."""
        return self.backoff.next()
