"""Chat notices of the central handler (`central run --webhook URL --webhook-format slack|teams`):
the agent's `pipeline.notify.ChatNotifier`, fed with decisions of what the handler did for an event
-- seen (its actions start), each failed action, then acknowledged or withheld. The VM field names
every VM the event lists. A subscriber, never a step: a slow or failing chat endpoint never delays
an acknowledgement."""

from __future__ import annotations

from typing import Any, Dict

from vmss_terminate.central.source import CentralEvent
from vmss_terminate.clock import Clock
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate.pipeline.notify import ChatNotifier


class CentralNotices:
    """`seen(event)` before the actions, `ended(outcome)` after them; `close()` sends what is queued."""

    def __init__(self, url: str, fmt: str, clock: Clock) -> None:
        self.chat = ChatNotifier(url, fmt)
        self.clock = clock
        self.closed = False

    def _tell(self, kind: str, event: CentralEvent, message: str, **data: Any) -> None:
        fields: Dict[str, Any] = dict(event_type=event.event_type, not_before=event.fields()["NotBefore"] or "-",
                                      event_source=f"central handler, {event.scale_set}", **data)
        self.chat(Decision(kind, event.event_id, ", ".join(event.resources), message, self.clock.now(), fields))

    def seen(self, event: CentralEvent) -> None:
        self._tell(D.DRAIN_STARTED, event, f"event seen: running its actions for {len(event.resources)} VM(s)")

    def ended(self, outcome: Any) -> None:
        """`outcome`: the handler's Outcome (typed loosely: handler.py imports this module)."""
        event = outcome.event
        for step in outcome.failed:
            self._tell(D.HOOK_FAILED, event, f"action {step} failed", hook=step, outcome=outcome.steps[step])
        done = ", ".join(f"{name} {result}" for name, result in outcome.steps.items()) or "none"
        if outcome.acknowledged is not None and outcome.acknowledged.ok:
            self._tell(D.APPROVAL_SENT, event, f"acknowledged; actions: {done}")
        elif outcome.acknowledged is not None:
            self._tell(D.APPROVAL_WITHHELD, event, f"acknowledge refused (HTTP {outcome.acknowledged.status} "
                                                   f"{outcome.acknowledged.message}); actions: {done}")
        else:
            self._tell(D.APPROVAL_WITHHELD, event, f"not acknowledged: {outcome.withheld}; actions: {done}")

    def close(self) -> None:
        if not self.closed:  # the handler's join and its owner's close both end it
            self.closed = True
            self.chat.close()

