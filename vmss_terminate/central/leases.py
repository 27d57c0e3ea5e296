"""One replica per scheduled event: a blob lease per EventId, and the event's record in that blob.

Why a blob lease: it is Azure Storage's documented distributed lock -- "Lease Blob ... establishes
and manages a lock on a blob for write and delete operations", 15 to 60 seconds or infinite, renewed
by its holder, free again when it expires (Learn, "Lease Blob" REST API and "Managing concurrency in
Blob storage": pessimistic concurrency with leases). It lives in the storage account the queue is in,
so the source needs no other service, and a replica killed mid-event loses its lease at the latest
`duration` seconds later, when another can take the event over. The queue's own visibility timeout
cannot do this job: it hides one *message*, and a duplicate delivery of the same event is another
message (Learn: the same notification may be broadcast more than once), so two replicas could each
hold one copy. A lease per EventId serialises them.

The blob (`{container}/{EventId}`) also keeps what was done for the event: the changes handled
(status and NotBefore) and their outcome, written only under the lease. A duplicate delivery that
reaches another replica, or arrives after a restart, finds its change there and runs nothing.
It also keeps the acknowledgement (`Record.ack`), written under the lease *before* the POST: the
write succeeds only while the writer's lease is the blob's (Azure answers 412 otherwise), so it is
the fence that lets at most one replica send the acknowledgement, whatever its clock or its speed.

Every request is bounded (`client_options`): the SDK's defaults -- ExponentialRetry with 3 retries
backing off ~15/18/24 s, a 20 s connect and a 60 s read timeout -- let one renewal answered 503, or
sent to a connection that hangs, take a minute or more before it raises, longer than a whole lease
(15..60 s). A holder that cannot renew must find out well before its lease lapses at Azure.

The Azure Storage SDK (azure-storage-blob) is imported lazily, in the functions that use it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["DEFAULT_CONTAINER", "LEASE_MIN", "LEASE_MAX", "CONNECT_TIMEOUT", "READ_TIMEOUT", "RETRIES",
           "RETRY_BACKOFF", "EventLeases", "Lease", "Record", "client_options", "request_bound"]

DEFAULT_CONTAINER = "vmss-terminate-leases"
LEASE_MIN, LEASE_MAX = 15, 60  # seconds: what Lease Blob accepts besides infinite (-1), which we never take
CONNECT_TIMEOUT = 2.0  # seconds to open a connection to the Storage account
READ_TIMEOUT = 3.0  # seconds an answer may keep the client waiting (any read of it)
RETRIES, RETRY_BACKOFF = 2, 1  # LinearRetry: 2 retries, 1 s (+-1 s) apart; the renewal and the keeper's calls: none
NO_RETRY: Dict[str, Any] = {"retry_total": 0}  # per call: the keeper retries on its own clock


def client_options(linear_retry: Callable[..., Any], connect_timeout: float = CONNECT_TIMEOUT,
                   read_timeout: float = READ_TIMEOUT) -> Dict[str, Any]:
    """Keyword arguments for a Storage client (blob or queue: `linear_retry` is the package's
    `LinearRetry`, a new policy per client) whose every request ends within `request_bound`."""
    return {"retry_policy": linear_retry(backoff=RETRY_BACKOFF, random_jitter_range=RETRY_BACKOFF,
                                         retry_total=RETRIES),
            "connection_timeout": connect_timeout, "read_timeout": read_timeout}


def request_bound(connect_timeout: float = CONNECT_TIMEOUT, read_timeout: float = READ_TIMEOUT,
                  retries: int = RETRIES) -> float:
    """Seconds one call can take at most: each attempt connects and waits for its answer, and a
    retry waits up to twice the backoff first (a server that trickles its answer byte by byte is
    bounded per read only)."""
    return (retries + 1) * (connect_timeout + read_timeout) + retries * 2 * RETRY_BACKOFF


@dataclass
class Record:
    """What the blob says was done for one event: handled changes `(status, NotBefore)` -> outcome."""

    event_id: str
    handled: Dict[str, str] = field(default_factory=dict)  # "status|NotBefore" -> outcome
    ack: Dict[str, str] = field(default_factory=dict)
    """The acknowledgement decided for the event (empty: none): `lease` (the id of the lease it was
    written under), `change` and `at` (ISO 8601). Written before the POST is sent: a replica that
    finds one written under another lease never acknowledges the event (the holder of that lease
    sent it, or died before it could: then Azure goes on at NotBefore)."""

    @staticmethod
    def key(status: str, not_before: str) -> str:
        return f"{status}|{not_before}"

    def done(self, status: str, not_before: str) -> Optional[str]:
        return self.handled.get(self.key(status, not_before))

    def to_bytes(self) -> bytes:
        value: Dict[str, Any] = {"eventId": self.event_id, "handled": self.handled}
        if self.ack:
            value["acknowledgement"] = self.ack
        return json.dumps(value, sort_keys=True).encode("utf-8")

    @classmethod
    def from_bytes(cls, event_id: str, data: bytes) -> "Record":
        try:
            value = json.loads(data.decode("utf-8")) if data else {}
        except (ValueError, UnicodeDecodeError):
            value = {}
        handled = value.get("handled") if isinstance(value, dict) else None
        if not isinstance(handled, dict):
            handled = {}
        ack = value.get("acknowledgement") if isinstance(value, dict) else None
        if not isinstance(ack, dict):
            ack = {}
        return cls(event_id, {str(k): str(v) for k, v in handled.items()}, {str(k): str(v) for k, v in ack.items()})


class Lease:
    """A held lease on one event's blob: renew it while the event's actions run, write the record, release."""

    def __init__(self, blob: Any, lease: Any, event_id: str, duration: int) -> None:
        self._blob = blob
        self._lease = lease
        self.event_id = event_id
        self.duration = duration
        self.renewed_at = time.monotonic()
        self.released = False

    @property
    def lease_id(self) -> str:
        return str(self._lease.id)

    def record(self) -> Record:
        data = self._blob.download_blob(lease=self._lease).readall()
        return Record.from_bytes(self.event_id, data)

    def write(self, record: Record) -> None:
        self._blob.upload_blob(record.to_bytes(), overwrite=True, lease=self._lease)

    def renew(self) -> None:
        """Renew the lease in one attempt (`request_bound(retries=0)`: connect and read timeouts):
        raises the SDK's HttpResponseError if it was refused (lost: expired and taken) or failed,
        its ServiceRequestError/ServiceResponseError if no answer came in time."""
        self._lease.renew(**NO_RETRY)
        self.renewed_at = time.monotonic()

    def release(self) -> None:
        """Free the lease for the next holder; if Storage cannot be reached, it lapses at its expiry."""
        from azure.core.exceptions import AzureError

        if self.released:
            return
        self.released = True
        try:
            self._lease.release(**NO_RETRY)  # one attempt: a lease not released lapses anyway
        except AzureError:
            pass  # expired or taken over already, or no answer: it lapses on its own within `duration`


class EventLeases:
    """The lease blobs of one storage account's container, one per EventId."""

    def __init__(self, container: Any, duration: int = LEASE_MAX) -> None:
        if not LEASE_MIN <= duration <= LEASE_MAX:
            raise ValueError(f"a blob lease lasts {LEASE_MIN} to {LEASE_MAX} seconds, not {duration}")
        self._container = container
        self.duration = duration

    @classmethod
    def from_connection_string(cls, connection_string: str, container: str = DEFAULT_CONTAINER,
                               duration: int = LEASE_MAX, connect_timeout: float = CONNECT_TIMEOUT,
                               read_timeout: float = READ_TIMEOUT) -> "EventLeases":
        from azure.storage.blob import ContainerClient, LinearRetry

        options = client_options(LinearRetry, connect_timeout, read_timeout)
        return cls(ContainerClient.from_connection_string(connection_string, container, **options), duration)

    @classmethod
    def from_url(cls, account_url: str, credential: Any, container: str = DEFAULT_CONTAINER,
                 duration: int = LEASE_MAX, connect_timeout: float = CONNECT_TIMEOUT,
                 read_timeout: float = READ_TIMEOUT) -> "EventLeases":
        from azure.storage.blob import ContainerClient, LinearRetry

        options = client_options(LinearRetry, connect_timeout, read_timeout)
        return cls(ContainerClient(account_url, container, credential=credential, **options), duration)

    def ensure_container(self) -> None:
        from azure.core.exceptions import ResourceExistsError

        try:
            self._container.create_container()
        except ResourceExistsError:
            pass

    def _blob(self, event_id: str) -> Any:
        return self._container.get_blob_client(event_id.lower())

    def acquire(self, event_id: str) -> Optional[Lease]:
        """The event's lease, or None while another replica holds it. Creates the blob when missing."""
        from azure.core.exceptions import HttpResponseError, ResourceExistsError
        from azure.storage.blob import BlobLeaseClient

        blob = self._blob(event_id)
        try:
            blob.upload_blob(b"", overwrite=False)
        except ResourceExistsError:
            pass  # it exists (and may be leased): the lease below decides
        except HttpResponseError as exc:
            if _code(exc) != "LeaseIdMissing":
                raise
        lease = BlobLeaseClient(blob)
        try:
            lease.acquire(lease_duration=self.duration)
        except HttpResponseError as exc:
            if _code(exc) in ("LeaseAlreadyPresent", "LeaseIdMismatchWithLeaseOperation") or exc.status_code == 409:
                return None
            raise
        return Lease(blob, lease, event_id, self.duration)

    def record(self, event_id: str) -> Record:
        """The event's record, read without the lease (a blob under lease is still readable)."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return Record.from_bytes(event_id, self._blob(event_id).download_blob().readall())
        except ResourceNotFoundError:
            return Record(event_id)

    def records(self) -> List[Tuple[str, Record]]:
        """Every event's record (tests and `central` status read them)."""
        out = []
        for item in self._container.list_blobs():
            out.append((item.name, self.record(item.name)))
        return out


def _code(exc: Any) -> str:
    return str(getattr(exc, "error_code", "") or "")
