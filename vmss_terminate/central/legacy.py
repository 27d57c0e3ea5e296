"""The journal the central handler wrote before it ran on the pipeline (up to 6884e8f), made
readable by today's when it is loaded (`migrate`), so an upgrade forgets nothing.

That handler keyed an event's record by `{scale set id}/{event id}`, both lower case
(`CentralEvent.key`), with `acknowledged` (when the Maintenance RP took the acknowledgement),
`withheld`, `seen`, `scale_set` and `steps_done` (`name@VM`; the JSON webhook as `webhook`), and
each listed VM's node drain under `{that key}@{VM}`. Today's handler keys an event by its EventId,
a VM's drain by `EventId/VM` (with `kube_event_id`), and reads `approved`. Unmigrated, every old
record would be invisible: a withheld event handled again and acknowledged, an acknowledged one
still Scheduled in a lagging Resource Graph acknowledged twice, a canceled event's cordon kept.

The old keys lower-cased the EventId, so a migrated record is first kept under the lower-case id;
`adopt(event_id)` moves it (and its drains) to the EventId as the source spells it when the event
is read again, before anything looks at it.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Dict, Optional, Set

from vmss_terminate.pipeline.journal import StateStore

log = logging.getLogger(__name__)

_OLD_KEY = re.compile(r"^/subscriptions/[^/]+/resourcegroups/[^/]+/providers/microsoft\.compute/"
                      r"virtualmachinescalesets/[^/]+/(?P<event>[^/@]+)(?:@(?P<vm>.+))?$")


class Legacy:
    """The EventIds (lower case) whose records came from the old journal and may need `adopt`."""

    def __init__(self, journal: StateStore) -> None:
        self.journal = journal
        self.pending: Set[str] = set()
        self._lock = threading.Lock()

    def migrate(self, webhook_step: Optional[str] = None) -> int:
        """Re-key the old records (see the module docstring): `acknowledged` becomes `approved`,
        `withheld` stays, a drain goes to `EventId/VM`; `webhook_step`: today's name of the JSON
        webhook step (`webhook:URL`), so a webhook that finished is not sent again. Returns how
        many records moved."""
        moved = 0
        for key in self.journal.event_ids():
            found = _OLD_KEY.match(key)
            if found is None:
                continue
            eid, vm = found.group("event"), found.group("vm")
            record = self.journal.get(key)
            if vm is not None:
                self.journal.rename(key, f"{eid}/{vm}", kube_event_id=eid)
            else:
                fields: Dict[str, Any] = {}
                if record.get("acknowledged") is not None:
                    fields["acknowledged"] = None
                    fields["approved"] = record["acknowledged"]
                done = record.get("steps_done")
                if webhook_step and isinstance(done, list) and "webhook" in done:
                    fields["steps_done"] = [webhook_step if name == "webhook" else name for name in done]
                self.journal.rename(key, eid, **fields)
            self.pending.add(eid)
            moved += 1
        if moved:
            log.warning("journal %s: %d record(s) written by the central handler before it ran on the "
                        "pipeline re-keyed by EventId (acknowledged -> approved)", self.journal.path, moved)
        return moved

    def adopt(self, event_id: str) -> None:
        """The source spells `event_id` in another case than the old key did: move its record and
        its drains' to `event_id` (once; cheap when there is nothing to move)."""
        lower = event_id.lower()
        with self._lock:
            if lower not in self.pending:
                return
            self.pending.discard(lower)
        if lower == event_id:
            return
        self.journal.rename(lower, event_id)
        prefix = lower + "/"
        for key in self.journal.event_ids():
            if key.startswith(prefix):
                self.journal.rename(key, event_id + key[len(lower):], kube_event_id=event_id)
