"""`QueueSource`: the central handler's Event Grid -> Azure Storage queue source (`--source queue`).

An Event Grid subscription on the system topic `Microsoft.ResourceNotifications.MaintenanceResources`
delivers each scheduled event change to a Storage queue, at least once. This source reads that queue
and hands the handler `CentralEvent`s like every other source (`central.source.EventSource`):

* **poll()** receives up to `batch` messages (each invisible for `visibility` seconds), parses them
  (`central.eventgrid`), and answers every event this replica holds. A message that cannot be parsed,
  or that was delivered more than `max_attempts` times without being settled, moves to
  `{queue}-poison` with the reason, and the source goes on.
* **One replica per event.** Before an event is handed on, this replica takes its blob lease
  (`central.leases`); while another replica holds it, the message is hidden for a lease's length and
  left alone. A keeper thread renews the leases and extends the messages' visibility while the
  handler works; a replica killed mid-event stops renewing, and another takes the event over once
  the lease has expired and the message is visible again (hooks run at least once).
* **Duplicates run nothing twice.** A delivery of a change (EventId, status, NotBefore) that this
  replica holds, or that the event's blob records as settled, is deleted unhandled -- whichever
  replica it reaches, and after a restart.
* **settle(event)** -- the handler acknowledged the event, or it will never be acted on (Completed,
  Canceled, past NotBefore) -- records the change in the event's blob, deletes its messages and
  releases the lease. Nothing is deleted before that.
* **Giving up in time.** `holds(event)` reads only this replica's clock: it turns False
  `give_up_before` seconds before the lease's expiry (counted from before its last successful
  acquire or renewal) unless a renewal moved that expiry on. No request is ever made under the
  lock `holds` takes, and every request is bounded (`leases.client_options`: a few seconds to
  connect and to answer, few quick retries; a renewal and the keeper's visibility extensions are
  tried once, the keeper trying again a second later), so a renewal that hangs or keeps failing
  neither blocks the job asking `holds` nor delays the give-up past the lease.

Metrics (`QueueMetrics`): queue depth and age of the oldest message (read every `metrics_interval`
seconds), messages received, duplicates dropped, poison moves by reason, leases busy elsewhere.
Label values are a fixed set; no EventId or VM name is ever a label.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

from vmss_terminate.central.eventgrid import Malformed, Notification, parse_message
from vmss_terminate.central.leases import (
    CONNECT_TIMEOUT,
    DEFAULT_CONTAINER,
    LEASE_MAX,
    NO_RETRY,
    READ_TIMEOUT,
    EventLeases,
    Lease,
    client_options,
)
from vmss_terminate.central.source import CentralEvent, SourceBatch
from vmss_terminate.clock import Clock, SystemClock
from vmss_terminate.errors import UsageError
from vmss_terminate.net import is_loopback_host

__all__ = ["QueueSettings", "QueueSource", "QueueMetrics", "POISON_SUFFIX", "poison_queue_name", "blob_account_url",
           "open_queue_source", "queue_name_of"]

log = logging.getLogger(__name__)

POISON_SUFFIX = "-poison"
MAX_QUEUE_MESSAGE = 64 * 1024
_REMEMBERED = 10_000  # settled changes remembered in memory (the blob remembers them all)
POISON_REASONS = ("malformed", "attempts")
_KEEPERS = 8  # renewals sent at once by the keeper


def poison_queue_name(queue: str) -> str:
    """`QUEUE-poison`, the convention Azure Functions' queue trigger uses for the same job."""
    return queue + POISON_SUFFIX


def blob_account_url(queue_url: str) -> str:
    """`https://acct.queue.core.windows.net/q` -> `https://acct.blob.core.windows.net` (the lease blobs
    live in the queue's storage account); ValueError for a URL that is not a Storage queue's."""
    parts = urlsplit(queue_url)
    host = parts.hostname or ""
    labels = host.split(".")
    if parts.scheme != "https" or len(labels) < 3 or labels[1] != "queue":
        raise ValueError(f"{queue_url!r} is not https://ACCOUNT.queue.core.windows.net/QUEUE")
    labels[1] = "blob"
    return urlunsplit(("https", ".".join(labels) + (f":{parts.port}" if parts.port else ""), "", "", ""))


@dataclass(frozen=True)
class QueueSettings:
    """How the source reads its queue. `visibility` and `lease_duration` are seconds (a lease is
    15..60 s, Lease Blob's range); a held message is made invisible again every third of them."""

    visibility: int = 60
    lease_duration: int = LEASE_MAX
    max_attempts: int = 5
    batch: int = 32
    lease_container: str = DEFAULT_CONTAINER
    metrics_interval: float = 15.0
    max_held: int = 32
    """Events held at once: no more is received until one is settled. Bounds the keeper's renewals
    (two requests per held event every third of a lease), which must finish well within a lease."""
    give_up_before: float = 7.0
    """Seconds before a lease's expiry (on this replica's clock, counted from before its last
    successful acquire or renewal) at which a replica whose renewals keep failing (no answer, 5xx)
    gives the event up: `holds` turns False then, whatever a renewal in flight is doing; the job
    sees it within a second, its running hook is terminated and, after the kill grace (5 s),
    killed -- before the lease can lapse at Azure and another replica take the event, so two never
    run its hook at once. While a renewal fails, the keeper tries again every second."""
    connect_timeout: float = CONNECT_TIMEOUT
    """Seconds to open a connection to the Storage account (queue and lease blobs)."""
    read_timeout: float = READ_TIMEOUT
    """Seconds an answer of the Storage account may keep a request waiting. A renewal (tried once)
    ends within connect_timeout + read_timeout; every other request within `leases.request_bound`."""

    def __post_init__(self) -> None:
        if not 15 <= self.lease_duration <= 60:
            raise ValueError(f"--lease-duration must be 15..60 seconds (Lease Blob), not {self.lease_duration}")
        if not 1 <= self.visibility <= 7 * 24 * 3600:
            raise ValueError(f"--visibility-timeout must be 1 s..7 days, not {self.visibility}")
        if self.max_attempts < 1:
            raise ValueError(f"--max-attempts must be at least 1, not {self.max_attempts}")
        if not 1 <= self.batch <= 32:
            raise ValueError(f"a receive takes 1..32 messages (Get Messages), not {self.batch}")
        for name, value in (("connect_timeout", self.connect_timeout), ("read_timeout", self.read_timeout)):
            if not 0 < value <= 60:
                raise ValueError(f"{name} must be more than 0 and at most 60 seconds, not {value}")
        if not 0 <= self.give_up_before < self.lease_duration - self.keep_alive_every:
            room = self.lease_duration - self.keep_alive_every
            raise ValueError(f"give_up_before must leave a renewal before it: 0..{room:g} s for a "
                             f"{self.lease_duration} s lease, not {self.give_up_before}")

    @property
    def keep_alive_every(self) -> float:
        return min(self.visibility, self.lease_duration) / 3.0


@dataclass
class QueueMetrics:
    """Counters and gauges of one source; `render()` is Prometheus text."""

    received: int = 0
    duplicates_dropped: int = 0
    poison_moves: Dict[str, int] = field(default_factory=lambda: {r: 0 for r in POISON_REASONS})
    settled: int = 0
    busy_elsewhere: int = 0
    lost: int = 0
    depth: Optional[int] = None
    oldest_age: Optional[float] = None
    held: int = 0

    def render(self) -> str:
        lines = [
            "# HELP vmss_terminate_queue_messages_received_total Messages received from the Storage queue.",
            "# TYPE vmss_terminate_queue_messages_received_total counter",
            f"vmss_terminate_queue_messages_received_total {self.received}",
            "# HELP vmss_terminate_queue_duplicates_dropped_total Deliveries of a change already held or settled, "
            "deleted unhandled.",
            "# TYPE vmss_terminate_queue_duplicates_dropped_total counter",
            f"vmss_terminate_queue_duplicates_dropped_total {self.duplicates_dropped}",
            "# HELP vmss_terminate_queue_poison_moves_total Messages moved to the poison queue, by reason.",
            "# TYPE vmss_terminate_queue_poison_moves_total counter",
        ]
        lines += [f'vmss_terminate_queue_poison_moves_total{{reason="{r}"}} {n}' for r, n in self.poison_moves.items()]
        lines += [
            "# HELP vmss_terminate_queue_settled_total Event changes settled (acknowledged or not actionable).",
            "# TYPE vmss_terminate_queue_settled_total counter",
            f"vmss_terminate_queue_settled_total {self.settled}",
            "# HELP vmss_terminate_queue_lease_busy_total Deliveries left to the replica holding the event's lease.",
            "# TYPE vmss_terminate_queue_lease_busy_total counter",
            f"vmss_terminate_queue_lease_busy_total {self.busy_elsewhere}",
            "# HELP vmss_terminate_queue_leases_lost_total Events dropped because their lease or message was lost.",
            "# TYPE vmss_terminate_queue_leases_lost_total counter",
            f"vmss_terminate_queue_leases_lost_total {self.lost}",
            "# HELP vmss_terminate_queue_events_held Events this replica holds the lease of.",
            "# TYPE vmss_terminate_queue_events_held gauge",
            f"vmss_terminate_queue_events_held {self.held}",
        ]
        if self.depth is not None:
            lines += ["# HELP vmss_terminate_queue_depth Approximate number of messages in the queue.",
                      "# TYPE vmss_terminate_queue_depth gauge", f"vmss_terminate_queue_depth {self.depth}"]
        if self.oldest_age is not None:
            lines += ["# HELP vmss_terminate_queue_oldest_message_age_seconds Age of the oldest message in the queue.",
                      "# TYPE vmss_terminate_queue_oldest_message_age_seconds gauge",
                      f"vmss_terminate_queue_oldest_message_age_seconds {self.oldest_age:.3f}"]
        return "\n".join(lines) + "\n"


@dataclass
class _Held:
    """An event this replica holds the lease of, and the messages that carried its changes."""

    event: CentralEvent
    change: str
    lease: Lease
    messages: List[Tuple[Any, str]] = field(default_factory=list)  # (QueueMessage, change)
    event_time: str = ""
    expires: float = 0.0  # the source clock's monotonic reading when the lease lapses unless renewed
    failing: bool = False  # the last renewal failed (transiently): the keeper tries again every second
    # one request sequence on this event's record and messages at a time (not the renewal: it needs none)
    io: threading.Lock = field(default_factory=threading.Lock)


class QueueSource:
    """The `EventSource` that reads an Event Grid -> Storage queue; see the module docstring."""

    name = "queue"

    def __init__(self, queue: Any, poison: Any, leases: EventLeases, settings: QueueSettings = QueueSettings(),
                 clock: Optional[Clock] = None, metrics: Optional[QueueMetrics] = None) -> None:
        self._queue = queue
        self._poison = poison
        self._leases = leases
        self.settings = settings
        self._clock: Clock = clock or SystemClock()
        self.metrics = metrics or QueueMetrics()
        self._held: Dict[str, _Held] = {}
        self._settled: "OrderedDict[Tuple[str, str], None]" = OrderedDict()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._keeper: Optional[threading.Thread] = None
        self._measured_at: Optional[float] = None
        self._ready = False
        self.on_lost: List[Callable[[CentralEvent], None]] = []  # called with each event whose lease was lost

    # --- construction ---------------------------------------------------------------------------

    @classmethod
    def from_connection_string(cls, connection_string: str, queue_name: str,
                               settings: QueueSettings = QueueSettings(), **kwargs: Any) -> "QueueSource":
        from azure.storage.queue import QueueClient

        queue = QueueClient.from_connection_string(connection_string, queue_name, **_options(settings))
        poison = QueueClient.from_connection_string(connection_string, poison_queue_name(queue_name),
                                                    **_options(settings))
        leases = EventLeases.from_connection_string(connection_string, settings.lease_container,
                                                    settings.lease_duration, settings.connect_timeout,
                                                    settings.read_timeout)
        return cls(queue, poison, leases, settings, **kwargs)

    @classmethod
    def from_url(cls, queue_url: str, credential: Any, settings: QueueSettings = QueueSettings(),
                 **kwargs: Any) -> "QueueSource":
        """`https://ACCOUNT.queue.core.windows.net/QUEUE` with an azure-identity credential (the
        handler's identity needs Storage Queue Data Message Processor -- or Contributor, for the
        poison queue -- and Storage Blob Data Contributor on the lease container)."""
        from azure.storage.queue import QueueClient

        queue = QueueClient.from_queue_url(queue_url, credential=credential, **_options(settings))
        poison = QueueClient(queue.url.rsplit("/", 1)[0] + "/", poison_queue_name(queue.queue_name),
                             credential=credential, **_options(settings))
        leases = EventLeases.from_url(blob_account_url(queue_url), credential, settings.lease_container,
                                      settings.lease_duration, settings.connect_timeout, settings.read_timeout)
        return cls(queue, poison, leases, settings, **kwargs)

    def _prepare(self) -> None:
        if self._ready:
            return
        from azure.core.exceptions import ResourceExistsError

        self._leases.ensure_container()
        try:
            self._poison.create_queue()
        except ResourceExistsError:
            pass
        self._ready = True
        self._keeper = threading.Thread(target=self._keep_alive_loop, name="queue-keeper", daemon=True)
        self._keeper.start()

    # --- EventSource ----------------------------------------------------------------------------

    def poll(self) -> SourceBatch:
        """Receive what is waiting and answer every event this replica holds (oldest first)."""
        from azure.core.exceptions import AzureError

        requests = 0
        try:
            self._prepare()
            self._measure()
            with self._lock:
                room = min(self.settings.batch, self.settings.max_held - len(self._held))
            received = []
            if room > 0:
                received = list(self._queue.receive_messages(max_messages=room, messages_per_page=room,
                                                             visibility_timeout=self.settings.visibility))
                requests += 1
            for message in received:
                self.metrics.received += 1
                self._take(message)
        except AzureError as exc:
            return SourceBatch(events=self._events(), complete=False,
                               problem=f"Storage queue {self._queue.queue_name}: {_brief(exc)}", requests=requests)
        return SourceBatch(events=self._events(), complete=True, requests=requests)

    def settle(self, event: CentralEvent) -> None:
        """The handler is done with this change of the event: record it, delete its messages, and
        release the lease once no later change is waiting."""
        from azure.core.exceptions import AzureError

        with self._lock:
            held = self._held.get(event.key)
            if held is None:
                return
        with held.io:  # the requests outside `_lock` (`holds` never waits for them)
            with self._lock:
                # A change that is not pending (Started, Completed, Canceled) supersedes every earlier
                # one: nothing of the Scheduled change is actionable any more, so all are settled.
                done = [(m, c) for m, c in held.messages
                        if not event.pending or c.split("|", 1)[0] == event.status]
            if not done:
                return
            try:
                record = held.lease.record()
                for _, change in done:
                    record.handled[change] = "settled"
                held.lease.write(record)
            except AzureError as exc:
                self._tell_lost(self._settle_failed(event.key, held, exc))
                return
            gone: List[Tuple[Any, str]] = []
            for message, change in done:
                try:
                    self._delete(message)
                except AzureError as exc:  # 5xx, no answer: kept (and kept invisible); the next poll settles again
                    log.warning("deleting message %s of event %s failed (%s): retried next poll", message.id,
                                event.event_id, _brief(exc))
                    continue
                gone.append((message, change))
            done = gone
            with self._lock:
                for _, change in done:
                    self._remember((event.event_id.lower(), change))
                    self.metrics.settled += 1
                held.messages = [(m, c) for m, c in held.messages if (m, c) not in done]
                release = not held.messages and self._held.get(event.key) is held
                if release:
                    del self._held[event.key]
                self.metrics.held = len(self._held)
            if release:
                held.lease.release()

    def _settle_failed(self, key: str, held: _Held, exc: BaseException) -> List[CentralEvent]:
        """Recording a settled change failed. Refused (a 4xx: the lease lapsed at Azure and was
        taken, or broken -- a replica starved past its lease after its POST): the event is lost here,
        its messages left to the lease's next holder, which finds the acknowledgement recorded before
        the POST and drops them. No answer, 5xx: kept; the handler settles it again next poll."""
        from azure.core.exceptions import HttpResponseError

        status = (exc.status_code or 0) if isinstance(exc, HttpResponseError) else 0
        if not 400 <= status < 500 or status in (408, 429):
            log.warning("recording event %s as settled failed (%s): tried again next poll", held.event.event_id,
                        _brief(exc))
            return []
        with self._lock:
            if self._held.get(key) is not held:
                return []
            lost = [self._lose(key, held, f"recording it as settled was refused: {_brief(exc)}")]
            self.metrics.held = len(self._held)
        return lost

    def close(self) -> None:
        """Stop renewing; release the leases held (their messages reappear after their visibility)."""
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(timeout=10)
        with self._lock:
            helds = list(self._held.values())
            self._held.clear()
            self.metrics.held = 0
        for held in helds:
            held.lease.release()

    # --- receiving ------------------------------------------------------------------------------

    def _events(self) -> List[CentralEvent]:
        with self._lock:
            return [h.event for h in self._held.values()]

    def _take(self, message: Any) -> None:
        attempts = int(getattr(message, "dequeue_count", 1) or 1)
        if attempts > self.settings.max_attempts:
            self._to_poison(message, "attempts",
                            f"delivered {attempts} times without being settled (--max-attempts "
                            f"{self.settings.max_attempts})")
            return
        try:
            notes = parse_message(message.content)
        except Malformed as exc:
            self._to_poison(message, "malformed", str(exc))
            return
        if len(notes) != 1:
            # Event Grid puts one event in a message; several are handled one message each by
            # re-queueing them, so every change keeps a message of its own until it is settled.
            from vmss_terminate.central.eventgrid import encode_body

            for note in notes:
                self._queue.send_message(encode_body(_raw_event(message.content, note)))
            self._delete(message)
            return
        self._take_one(message, notes[0])

    def _take_one(self, message: Any, note: Notification) -> None:
        key = note.event.key
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                if note.change == held.change or any(c == note.change for _, c in held.messages):
                    self._drop_duplicate(message)
                    return
                held.messages.append((message, note.change))
                if note.event_time >= held.event_time:  # a later change (Canceled, Started...) is what the handler sees
                    held.event, held.change, held.event_time = note.event, note.change, note.event_time
                return
            if note.dedup_key in self._settled:
                self._drop_duplicate(message)
                return
        asked_at = self._clock.monotonic()  # the lease runs from (at the latest) when it was asked for
        lease = self._leases.acquire(note.event_id)
        if lease is None:
            self.metrics.busy_elsewhere += 1
            self._hide(message, self.settings.lease_duration)
            return
        record = lease.record()
        moved_on = note.event.pending and any(not c.startswith(f"{note.status}|") for c in record.handled)
        acknowledged = note.event.pending and bool(record.ack)
        if record.handled.get(note.change) or moved_on or acknowledged:
            # moved_on: Event Grid does not keep order, and a Scheduled change arriving after the
            # event's Started/Completed/Canceled change was settled is stale: never acted on.
            # acknowledged: a replica decided the acknowledgement under its lease (and sent it, or
            # died first), then lost the lease before settling: never acknowledged twice.
            self._remember(note.dedup_key)
            lease.release()
            self._drop_duplicate(message)
            return
        with self._lock:
            self._held[key] = _Held(note.event, note.change, lease, [(message, note.change)], note.event_time,
                                    asked_at + lease.duration)
            self.metrics.held = len(self._held)

    def _drop_duplicate(self, message: Any) -> None:
        self.metrics.duplicates_dropped += 1
        self._delete(message)

    def acknowledging(self, event: CentralEvent) -> Optional[str]:
        """Record in the event's blob, under its lease, that this replica sends its acknowledgement
        now; the handler calls it right before the POST. None: go ahead. Otherwise why not: the
        lease is no longer held here, the blob answers that it is another's (412: lapsed at Azure
        and taken, or broken), or another lease's holder decided the acknowledgement already.

        The write is the fence: it succeeds only while this replica's lease is the blob's, and a
        replica that takes the lease later reads the record before it hands the event on
        (`_take_one`), so at most one acknowledgement is sent for an event, however long the
        sender is starved between this write and its POST, or between the POST and `settle`. A
        retry under the same lease (the POST failed) goes ahead."""
        from azure.core.exceptions import AzureError

        with self._lock:
            held = self._held.get(event.key)
        if held is None or not self.holds(event):
            return "this replica no longer holds the event's lease"
        with held.io:  # one read-modify-write of the record at a time (settle, unacknowledging)
            with self._lock:
                still = self._held.get(event.key) is held
            if not still or not self.holds(event):  # lost or settled while waiting for `io`
                return "this replica no longer holds the event's lease"
            try:
                record = held.lease.record()
                if record.ack and record.ack.get("lease") != held.lease.lease_id:
                    return (f"its acknowledgement was recorded under another replica's lease at "
                            f"{record.ack.get('at', '?')}")
                if not record.ack:
                    record.ack = {"lease": held.lease.lease_id, "change": held.change,
                                  "at": datetime.fromtimestamp(self._clock.now(), timezone.utc).isoformat()}
                    held.lease.write(record)
            except AzureError as exc:
                return f"recording the acknowledgement under the event's lease failed ({_brief(exc)})"
        return None

    def unacknowledging(self, event: CentralEvent) -> None:
        """Azure refused the acknowledgement (nothing was released): take the record back, under
        the lease, so a replica taking the event over may acknowledge it. Best effort: if the lease
        is gone, the record stays and the event goes on at its NotBefore."""
        from azure.core.exceptions import AzureError

        with self._lock:
            held = self._held.get(event.key)
        if held is None:
            return
        try:
            with held.io:
                record = held.lease.record()
                if record.ack.get("lease") == held.lease.lease_id:
                    record.ack = {}
                    held.lease.write(record)
        except AzureError as exc:
            log.warning("taking back the acknowledgement record of event %s failed (%s)", event.event_id,
                        _brief(exc))

    def _remember(self, key: Tuple[str, str]) -> None:
        self._settled[key] = None
        self._settled.move_to_end(key)
        while len(self._settled) > _REMEMBERED:
            self._settled.popitem(last=False)

    def _to_poison(self, message: Any, reason: str, why: str) -> None:
        content = str(message.content or "")
        truncated = len(content) > MAX_QUEUE_MESSAGE // 2
        body = {
            "reason": why, "queue": self._queue.queue_name, "messageId": message.id,
            "dequeueCount": getattr(message, "dequeue_count", None),
            "insertedOn": _iso(getattr(message, "inserted_on", None)), "movedOn": _iso(datetime.now(timezone.utc)),
            "contentTruncated": truncated, "content": content[: MAX_QUEUE_MESSAGE // 2],
        }
        self._poison.send_message(json.dumps(body, separators=(",", ":")))
        self._delete(message)
        self.metrics.poison_moves[reason] += 1
        log.warning("moved message %s of queue %s to %s: %s", message.id, self._queue.queue_name,
                    poison_queue_name(self._queue.queue_name), why)

    def _delete(self, message: Any) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self._queue.delete_message(message.id, message.pop_receipt)
        except ResourceNotFoundError:
            pass  # already gone (its visibility lapsed and another replica deleted it)

    def _hide(self, message: Any, seconds: int, **call: Any) -> Any:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self._queue.update_message(message.id, message.pop_receipt, visibility_timeout=seconds, **call)
        except ResourceNotFoundError:
            return None

    # --- keeping held events ------------------------------------------------------------------

    def holds(self, event: CentralEvent) -> bool:
        """True while this replica still holds `event`'s lease: held (not given up by the keeper),
        and more than `give_up_before` seconds of it left on the injectable clock (its expiry counted
        from before the last successful acquire/renew). The handler's pipeline asks while the event's
        job runs and before it acknowledges; False means the lease may soon lapse at Azure and
        another replica take the event over, so this one stops its job and never acknowledges it.
        Reads local state only, under a lock no request is ever made under: it never waits for a
        renewal in flight."""
        with self._lock:
            held = self._held.get(event.key)
            return held is not None and self._clock.monotonic() < held.expires - self.settings.give_up_before

    def keep_alive(self) -> None:
        """Renew every held lease and extend its messages' visibility; drop what was lost.

        A lease is lost when its renewal is refused for good (a 4xx: taken over, broken, its blob
        gone), or when fewer than `give_up_before` seconds of it are left on this replica's clock
        without a renewal that moved its expiry on: renewals failing (5xx, 408, 429, no answer),
        or the replica paused. It is given up while the lease still keeps other replicas out, so
        the job's hook is gone before another replica can take the event; `holds` already says
        False from that moment, whatever the keeper is doing. A transient failure with more time
        left keeps the hold, and the keeper tries again a second later.

        The requests are made outside `_lock`, each tried once (connect_timeout + read_timeout at
        most), the events' renewals side by side (up to `_KEEPERS` at once, so a round takes about
        one request however many events are held), then their visibility extensions; the events
        given up are told to `on_lost` as soon as they are known."""
        self._tell_lost(self._give_up_due())
        with self._lock:
            helds = list(self._held.items())
        if not helds:
            return
        with ThreadPoolExecutor(max_workers=min(_KEEPERS, len(helds)), thread_name_prefix="queue-keeper") as pool:
            renewed = list(pool.map(lambda item: self._renew(*item), helds))
            self._tell_lost([event for event, _ in renewed if event is not None])
            list(pool.map(lambda item: self._extend(*item), [item for item, (_, ok) in zip(helds, renewed) if ok]))

    def _give_up_due(self) -> List[CentralEvent]:
        """Drop the events whose give-up moment passed without a renewal (on this replica's clock)."""
        lost: List[CentralEvent] = []
        with self._lock:
            now = self._clock.monotonic()
            for key, held in list(self._held.items()):
                if now >= held.expires - self.settings.give_up_before:
                    why = ("its expiry passed without a renewal" if now >= held.expires else
                           f"fewer than {self.settings.give_up_before:g} s of it left without a renewal")
                    lost.append(self._lose(key, held, why))
            self.metrics.held = len(self._held)
        return lost

    def _renew(self, key: str, held: _Held) -> Tuple[Optional[CentralEvent], bool]:
        """Renew one event's lease: (the event if it was lost now, whether it was renewed)."""
        from azure.core.exceptions import AzureError, HttpResponseError

        # No `io`: the lease id never changes, so a renewal needs no turn among the event's other
        # Storage calls (settle, acknowledging, _extend: up to request_bound() each), which would
        # hold up the whole round. A release racing it is fine: a renewal of a released lease
        # fails, and is a loss only if the event is still held.
        with self._lock:
            if self._held.get(key) is not held:
                return None, False  # settled or given up meanwhile
            asked_at = self._clock.monotonic()
        failure: Optional[BaseException] = None
        try:
            held.lease.renew()
        except AzureError as exc:
            failure = exc
        with self._lock:
            if self._held.get(key) is not held:
                return None, False
            now = self._clock.monotonic()
            status = (failure.status_code or 0) if isinstance(failure, HttpResponseError) else 0
            if failure is not None and 400 <= status < 500 and status not in (408, 429):
                return self._lose(key, held, _brief(failure)), False
            if now >= held.expires - self.settings.give_up_before:
                # `holds` has said False since that moment (the job is being stopped): a renewal
                # that came back later changes nothing, the event stays given up.
                what = "failed" if failure is not None else "came back too late"
                detail = f" ({_brief(failure)})" if failure is not None else ""
                return self._lose(key, held, f"renewal {what}{detail} with fewer than "
                                             f"{self.settings.give_up_before:g} s of it left"), False
            if failure is not None:  # 5xx, 408, 429, no answer: transient
                held.failing = True
                log.warning("renewing the lease of event %s failed (%s): retried in a second",
                            held.event.event_id, _brief(failure))
                return None, False
            held.failing = False
            held.expires = asked_at + held.lease.duration
            return None, True

    def _extend(self, key: str, held: _Held) -> None:
        """Make a renewed event's messages invisible for another `visibility`; forget those gone."""
        from azure.core.exceptions import AzureError

        with held.io:
            with self._lock:
                if self._held.get(key) is not held:
                    return
                messages = list(held.messages)
            gone = []
            for message, change in messages:
                try:
                    updated = self._hide(message, self.settings.visibility, **NO_RETRY)
                except AzureError as exc:  # transient: the next round extends it (a third of its visibility)
                    log.warning("extending the visibility of a message of event %s failed (%s)",
                                held.event.event_id, _brief(exc))
                    continue
                if updated is None:
                    gone.append((message, change))
                    continue
                message.pop_receipt = updated.pop_receipt
            with self._lock:
                self.metrics.lost += len(gone)
                held.messages = [m for m in held.messages if m not in gone]
                release = not held.messages and self._held.get(key) is held
                if release:
                    del self._held[key]
                self.metrics.held = len(self._held)
            if release:
                held.lease.release()

    def _tell_lost(self, lost: List[CentralEvent]) -> None:
        for event in lost:  # outside the lock: the handler stops the event's job now
            for listener in list(self.on_lost):
                listener(event)

    def _lose(self, key: str, held: _Held, why: str) -> CentralEvent:
        log.warning("lost the lease of event %s (%s): another replica may take it over; this one stops it "
                    "and never acknowledges it", held.event.event_id, why)
        self.metrics.lost += 1
        del self._held[key]
        self.metrics.held = len(self._held)
        return held.event

    def _keep_alive_loop(self) -> None:
        while not self._clock.wait(self._stop, self._next_round()):
            try:
                self.keep_alive()
            except Exception:  # the keeper must outlive one failed round
                log.exception("renewing the queue's leases failed; retrying")

    def _next_round(self) -> float:
        """Seconds until the keeper's next round: a third of the lease, or a second while a renewal
        fails -- and no later than the next give-up moment, so `on_lost` is told on time."""
        with self._lock:
            failing = any(held.failing for held in self._held.values())
            give_ups = [held.expires - self.settings.give_up_before for held in self._held.values()]
            now = self._clock.monotonic()
        every = min(1.0, self.settings.keep_alive_every) if failing else self.settings.keep_alive_every
        return max(0.0, min([every] + [at - now for at in give_ups]))

    def _measure(self) -> None:
        now = self._clock.monotonic()
        if self._measured_at is not None and now - self._measured_at < self.settings.metrics_interval:
            return
        self._measured_at = now
        properties = self._queue.get_queue_properties()
        self.metrics.depth = int(properties.approximate_message_count or 0)
        oldest = list(self._queue.peek_messages(max_messages=1))
        inserted = getattr(oldest[0], "inserted_on", None) if oldest else None
        self.metrics.oldest_age = (max(0.0, self._clock.now() - inserted.timestamp()) if inserted is not None
                                   else 0.0)


_QUEUE_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")


def queue_name_of(queue_url: str) -> str:
    """The queue's name from `--queue-url` (`https://ACCOUNT.queue.core.windows.net/QUEUE`, or Azurite's
    path-style `http://127.0.0.1:PORT/ACCOUNT/QUEUE`); UsageError (exit 2) for anything else."""
    parts = urlsplit(queue_url or "")
    segments = [s for s in parts.path.split("/") if s]
    if parts.scheme not in ("https", "http") or not parts.hostname or not segments or parts.query:
        raise UsageError(f"invalid --queue-url {queue_url!r}: https://ACCOUNT.queue.core.windows.net/QUEUE")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise UsageError(f"invalid --queue-url {queue_url!r}: plain http only to loopback (Azurite); use https")
    name = segments[-1]
    if not _QUEUE_NAME.match(name):
        raise UsageError(f"invalid --queue-url {queue_url!r}: {name!r} is not a queue name "
                         "(3-63 lower-case letters, digits and single hyphens)")
    return name


def open_queue_source(queue_url: str, connection_string_env: Optional[str] = None,
                      settings: QueueSettings = QueueSettings(), *, environ: Optional[Mapping[str, str]] = None,
                      credential: Any = None, **kwargs: Any) -> "QueueSource":
    """The source `central run --source queue --queue-url URL [--queue-connection-string-env NAME]` reads.

    With `connection_string_env`, the Storage connection string is read from that environment
    variable (never from the command line, never printed: only the variable's name appears in
    messages); the queue's name comes from the URL. Without it, the handler's azure-identity
    credential (`control.pipeline.build_credential`, or `credential`) is used against the URL, which
    must then be https. Bad input: UsageError (exit 2) before any request."""
    name = queue_name_of(queue_url)
    if connection_string_env is not None:
        env = os.environ if environ is None else environ
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", connection_string_env):
            raise UsageError(f"invalid --queue-connection-string-env {connection_string_env!r}: an environment "
                             "variable's name")
        value = env.get(connection_string_env, "")
        if not value.strip():
            raise UsageError(f"--queue-connection-string-env {connection_string_env}: that environment variable "
                             "is not set (or empty)")
        if "AccountName=" not in value or "AccountKey=" not in value and "SharedAccessSignature=" not in value:
            raise UsageError(f"--queue-connection-string-env {connection_string_env}: its value is not a Storage "
                             "connection string (AccountName=...;AccountKey=... or SharedAccessSignature=...)")
        return QueueSource.from_connection_string(value, name, settings, **kwargs)
    if urlsplit(queue_url).scheme != "https":
        raise UsageError(f"invalid --queue-url {queue_url!r}: a credential's token goes over https only "
                         "(Azurite: give --queue-connection-string-env)")
    try:
        blob_account_url(queue_url)
    except ValueError as exc:
        raise UsageError(f"invalid --queue-url: {exc}") from None
    if credential is None:
        from vmss_terminate.control.pipeline import build_credential

        credential = build_credential()
    return QueueSource.from_url(queue_url, credential, settings, **kwargs)


def _options(settings: QueueSettings) -> Dict[str, Any]:
    from azure.storage.queue import LinearRetry

    return client_options(LinearRetry, settings.connect_timeout, settings.read_timeout)


def _raw_event(content: str, note: Notification) -> Dict[str, Any]:
    from vmss_terminate.central.eventgrid import decode_body

    value = decode_body(content)
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, dict) and item.get("id") == note.delivery_id:
            return item
    raise Malformed("event vanished from its message")  # pragma: no cover -- parse_message read it


def _iso(moment: Any) -> Optional[str]:
    return moment.isoformat() if isinstance(moment, datetime) else None


def _brief(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0] if text else ''}"[:300]
