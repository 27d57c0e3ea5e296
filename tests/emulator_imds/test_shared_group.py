

def test_approval_by_differently_cased_owner_is_not_foreign() -> None:
    """Azure VM names are case-insensitive: `myvmss_3` approving an event for `MyVMSS_3` is its own."""
    from vmss_terminate.clock import ManualClock
    from vmss_terminate_sim.emulator.imds.app import PlacementGroup

    group = PlacementGroup(clock=ManualClock())
    own = group.add_event("Terminate", ["MyVMSS_3"])
    other = group.add_event("Terminate", ["MyVMSS_30"])
    group.approve(own, "myvmss_3")
    group.approve(other, "myvmss_3")
    assert [(a.event_id, a.foreign) for a in group.approvals] == [(own, False), (other, True)]
