"""Property: whatever the document, the agent approves exactly its own approvable events and no
POST ever carries an EventId whose Resources do not name the posting VM.

Several emulated VMs share one placement group (as in Azure every VM sees every event); the names
are chosen to collide by prefix (vmss_1 / vmss_10 / vmss_100) and by case.
"""

from __future__ import annotations

import json
from typing import Dict, Iterator, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmss_terminate.agent.events import EVENT_TYPES
from vmss_terminate.emulator.imds import ImdsEmulator, PlacementGroup
from vmss_terminate.emulator.server import EmulatorServer

from .conftest import make_agent

OWN_NAMES = ["vmss_1", "vmss_10", "myvmss_1a2b3c4d", "myvmss_3"]
OTHER_NAMES = ["vmss_100", "vmss_", "vmss_1 ", "xvmss_1", "myvmss_1a2b3c4", "myvmss_30", "myvmss_3a"]


def _variant(name: str, how: int) -> str:
    return [name, name.upper(), name.capitalize()][how]


resource = st.tuples(st.sampled_from(OWN_NAMES + OTHER_NAMES), st.integers(0, 2)).map(lambda t: _variant(*t))
event = st.fixed_dictionaries({
    "type": st.sampled_from(EVENT_TYPES),
    "status": st.sampled_from(["Scheduled", "Scheduled", "Started"]),
    "resources": st.lists(resource, min_size=1, max_size=3, unique=True),
})


@pytest.fixture(scope="module")
def placement() -> Iterator[Tuple[PlacementGroup, Dict[str, EmulatorServer]]]:
    group = PlacementGroup(auto_start=False)
    servers = {name: EmulatorServer(ImdsEmulator(group, vm_name=name, rate_limit=None)).start() for name in OWN_NAMES}
    yield group, servers
    for server in servers.values():
        server.stop()


def _posted_ids(server: EmulatorServer) -> List[str]:
    return [item["EventId"] for r in server.log.find("POST") for item in json.loads(r.body)["StartRequests"]]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event, max_size=5), me=st.sampled_from(OWN_NAMES),
       approve_types=st.sets(st.sampled_from(EVENT_TYPES)), approve_shared=st.booleans())
def test_only_own_events_are_ever_approved(placement, events, me, approve_types, approve_shared) -> None:  # type: ignore[no-untyped-def]
    group, servers = placement
    for old in group.events():
        group.remove_event(old.event_id)
    for server in servers.values():
        server.log.clear()
    before = len(group.approvals)
    resources_of = {}
    for spec in events:
        eid = group.add_event(spec["type"], spec["resources"], status=spec["status"])
        resources_of[eid] = spec["resources"]

    agent = make_agent(servers[me].url, approve_types=approve_types or "none", approve_shared=approve_shared)
    agent.run_once(retry_for=0)

    mine = me.casefold()
    approvals = group.approvals[before:]
    # 1. nothing foreign, at the emulator and on the wire
    for approval in approvals:
        assert approval.vm_name == me and approval.accepted
        assert mine in [r.casefold() for r in resources_of[approval.event_id]], approval
    assert servers[me].log.wait_for(lambda log: sum(r.method == "POST" for r in log) == len(approvals), 5)
    for eid in _posted_ids(servers[me]):
        assert mine in [r.casefold() for r in resources_of[eid]]
    for name, server in servers.items():
        if name != me:
            assert server.log.count("POST") == 0
    # 2. and everything that should be approved was
    expected = {
        eid for eid, spec in zip(resources_of, events)
        if spec["status"] == "Scheduled" and spec["type"] in approve_types
        and mine in [r.casefold() for r in spec["resources"]]
        and (approve_shared or all(r.casefold() == mine for r in spec["resources"]))
    }
    assert {a.event_id for a in approvals} == expected
