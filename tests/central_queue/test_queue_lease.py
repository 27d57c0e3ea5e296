"""Blob leases per EventId on the real Azurite: one holder at a time, the record written under the
lease, by anyone (the expiry and takeover are in test_queue_consumer.py: kill -9)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from vmss_terminate.central.leases import EventLeases, Record


@pytest.fixture
def leases(azurite_endpoints: Any) -> EventLeases:
    made = EventLeases.from_connection_string(azurite_endpoints.connection_string, f"l{uuid.uuid4().hex}",
                                              duration=15)
    made.ensure_container()
    made.ensure_container()  # twice is fine
    return made


def test_one_holder_per_event_and_release_frees_it(leases: EventLeases) -> None:
    eid = str(uuid.uuid4())
    first = leases.acquire(eid)
    assert first is not None
    assert leases.acquire(eid) is None           # another replica
    assert leases.acquire(eid.upper()) is None   # EventIds are GUIDs: case does not make another event
    assert leases.acquire(str(uuid.uuid4())) is not None  # another event is free
    first.release()
    second = leases.acquire(eid)
    assert second is not None and second.lease_id != first.lease_id
    second.release()
    first.release()  # a lease already released (or taken over) is no error


def test_the_record_is_written_under_the_lease_and_read_by_anyone(leases: EventLeases) -> None:
    eid = str(uuid.uuid4())
    assert leases.record(eid).handled == {}
    lease = leases.acquire(eid)
    assert lease is not None
    record = lease.record()
    record.handled[Record.key("Scheduled", "Mon, 19 Sep 2016 18:29:47 GMT")] = "acknowledged"
    lease.write(record)
    lease.renew()
    assert leases.record(eid).done("Scheduled", "Mon, 19 Sep 2016 18:29:47 GMT") == "acknowledged"
    assert leases.record(eid).done("Canceled", "") is None
    lease.release()
    again = leases.acquire(eid)
    assert again is not None and again.record().handled == record.handled
    assert (eid.lower(), record) in [(name, rec) for name, rec in leases.records()]


def test_a_duration_outside_what_lease_blob_accepts_is_refused(azurite_endpoints: Any) -> None:
    for bad in (14, 61, -1):
        with pytest.raises(ValueError, match="15 to 60"):
            EventLeases.from_connection_string(azurite_endpoints.connection_string, "x", duration=bad)
