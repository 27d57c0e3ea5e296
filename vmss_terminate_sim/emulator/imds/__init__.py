"""Local Instance Metadata Service: Scheduled Events and instance metadata, one server per VM over
a shared placement group. What users import to test their drain hooks:

    from vmss_terminate_sim.emulator.imds import start_imds

    with start_imds(["myvmss_0", "myvmss_1"]) as imds:      # one server per VM, one event list
        imds.group.add_event("Terminate", ["myvmss_0"])      # what Azure does on scale-in
        agent_url = imds.url_of("myvmss_0")                  # point the agent (or a hook) here
        ...
        assert imds.group.approvals                           # who approved what, and when

`PlacementGroup` is the shared event list (add, approve, expire events; `approvals`, listeners);
`ImdsEmulator` is the HTTP app of one VM, served by `vmss_terminate_sim.emulator.server.EmulatorServer`.
"""

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator
from vmss_terminate_sim.emulator.imds.events import Approval, EmulatedEvent, PlacementGroup
from vmss_terminate_sim.emulator.imds.launch import ImdsServers, start_imds

__all__ = ["Approval", "EmulatedEvent", "ImdsEmulator", "ImdsServers", "PlacementGroup", "start_imds"]
