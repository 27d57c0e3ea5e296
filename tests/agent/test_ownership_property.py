"""Property: whatever the document, the agent approves exactly its own approvable events and no
POST ever carries an EventId whose Resources do not name the posting VM.

Hypothesis generates the VM names themselves (Uniform `{scale set}_{instance id}`, Flexible
`{scale set}_{8 hex}`), the near misses a substring or prefix match would confuse with ours
(`vmss_1` / `vmss_10`, a truncated Flexible suffix, a leading or trailing character, a neighbour
scale set), case variants of our own name (Azure names are case-insensitive: ours), random other
VMs, event types and statuses, the `--approve` list and `--approve-shared`.

Each example's agent talks to its own IMDS emulator app in process (tests/inprocess.py): the
property is about what the agent decides and sends, not the wire (test_imds_client.py has that).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Set

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from inprocess import InProcessTransport

from vmss_terminate.pipeline.events import EVENT_TYPES
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import RequestLog

from .conftest import make_agent

scale_set_name = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,9}", fullmatch=True)
uniform_vm = st.builds("{}_{}".format, scale_set_name, st.integers(0, 999))
flexible_vm = st.builds("{}_{}".format, scale_set_name, st.from_regex(r"[0-9a-f]{8}", fullmatch=True))
vm_name = uniform_vm | flexible_vm


def _case_variant(draw: Callable[..., Any], name: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    return "".join(c.swapcase() if flip else c for c, flip in zip(name, flips))


def _near_misses(draw: Callable[..., Any], me: str) -> List[str]:
    """Names a prefix, substring or trimming comparison would wrongly take for `me`."""
    scale_set, suffix = me.rsplit("_", 1)
    return [
        me + str(draw(st.integers(0, 9))),  # vmss_1 -> vmss_10
        me[:-1],  # vmss_10 -> vmss_1, a truncated Flexible suffix
        draw(st.sampled_from("x0_-")) + me,  # a longer scale set name ending in ours
        me + " ", " " + me,  # whitespace is not trimmed
        f"{scale_set}x_{suffix}",  # the neighbour scale set
        f"{scale_set}_{suffix}_0",
        # Unicode spellings that case folding maps onto ours (Azure names are ASCII: never ours)
        me.replace("s", "\u017f").replace("S", "\u017f"),  # long s: casefold() gives "s"
        me.replace("k", "\u212a").replace("K", "\u212a"),  # Kelvin sign: lower() gives "k"
        me.replace("ss", "\u00df"),  # sharp s: casefold() gives "ss"
        me.replace("i", "\u0130"),  # dotted capital I
    ]


@st.composite
def scenario(draw: Callable[..., Any]) -> Dict[str, Any]:
    me = draw(vm_name)
    near = _near_misses(draw, me)

    def resource() -> str:
        kind = draw(st.sampled_from(["own", "near", "other"]))
        if kind == "own":
            return _case_variant(draw, me)
        return draw(st.sampled_from(near)) if kind == "near" else draw(vm_name)

    events = []
    for _ in range(draw(st.integers(0, 6))):
        resources = list(dict.fromkeys(resource() for _ in range(draw(st.integers(1, 3)))))
        events.append({"type": draw(st.sampled_from(EVENT_TYPES)),
                       "status": draw(st.sampled_from(["Scheduled", "Scheduled", "Started"])),
                       "resources": resources})
    return {"me": me, "events": events}


def _azure_fold(name: str) -> str:
    """The oracle's own spelling of Azure's rule: ASCII letters case-insensitive, anything else exact."""
    return "".join(c.lower() if c.isascii() else c for c in name)


def _approved_types(listed: Set[str], none: bool) -> Set[str]:
    """The documented `--approve` rule: Terminate plus the types listed; `none` approves nothing."""
    return set() if none else {"Terminate"} | listed


def _posted_ids(log: RequestLog) -> List[str]:
    return [item["EventId"] for r in log.find("POST") for item in json.loads(r.body)["StartRequests"]]


@pytest.mark.slow  # 300 generated estates (drawing them is most of the time)
@settings(max_examples=300, deadline=None)
@given(case=scenario(), listed=st.sets(st.sampled_from(EVENT_TYPES)), none=st.booleans(),
       approve_shared=st.booleans())
@example(case={"me": "vmss_1", "events": [{"type": "Terminate", "status": "Scheduled", "resources": ["vmss_10"]},
                                          {"type": "Terminate", "status": "Scheduled", "resources": ["VMSS_1"]}]},
         listed=set(), none=False, approve_shared=False)
@example(case={"me": "webvmss_1", "events": [{"type": "Terminate", "status": "Scheduled", "resources": ["webvm\u017fs_1"]},
                                             {"type": "Terminate", "status": "Scheduled", "resources": ["webvm\u00df_1"]},
                                             {"type": "Terminate", "status": "Scheduled", "resources": ["WEBVMSS_1"]}]},
         listed=set(), none=False, approve_shared=False)
def test_only_own_events_are_ever_approved(case: Dict[str, Any], listed: Set[str], none: bool,
                                           approve_shared: bool) -> None:
    me = case["me"]
    group = PlacementGroup(auto_start=False)
    transport = InProcessTransport(ImdsEmulator(group, vm_name=me, rate_limit=None))
    resources_of = {group.add_event(spec["type"], spec["resources"], status=spec["status"]): spec
                    for spec in case["events"]}

    agent = make_agent("http://127.0.0.1:9", transport=transport, approve_types="none" if none else sorted(listed),
                       approve_shared=approve_shared)
    agent.run_once(retry_for=0)

    mine = _azure_fold(me)
    approvals = list(group.approvals)
    # 1. nothing foreign, at the emulator and in what was sent
    for approval in approvals:
        assert approval.accepted
        assert mine in [_azure_fold(r) for r in resources_of[approval.event_id]["resources"]], approval
    assert transport.log.count("POST") == len(approvals)
    for eid in _posted_ids(transport.log):
        assert mine in [_azure_fold(r) for r in resources_of[eid]["resources"]]
    # 2. and everything that should be approved was
    approvable = _approved_types(listed, none)
    expected = {
        eid for eid, spec in resources_of.items()
        if spec["status"] == "Scheduled" and spec["type"] in approvable
        and mine in [_azure_fold(r) for r in spec["resources"]]
        and (approve_shared or all(_azure_fold(r) == mine for r in spec["resources"]))
    }
    assert {a.event_id for a in approvals} == expected
