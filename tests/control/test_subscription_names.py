"""`--subscription DISPLAY-NAME` resolved through the emulator's GET /subscriptions (the ARM shape
az reads), with the real SDK pipeline."""

from __future__ import annotations

import json

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run


def test_status_finds_a_subscription_by_its_display_name(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=1)
    state.add_subscription(SUB, display_name="Production EU")
    state.add_subscription("00000000-0000-0000-0000-0000000000bb", display_name="Staging")
    result = run("status", "-g", RG, "-n", "web", "--subscription", "production eu", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["subscription_id"] == SUB
    assert arm.arm_server.log.count("GET", "/subscriptions") >= 1


def test_an_unknown_display_name_lists_what_is_visible(arm: ArmServers, state: ArmState) -> None:
    state.add_subscription(SUB, display_name="Production EU")
    result = run("status", "-g", RG, "-n", "web", "--subscription", "Nope")
    assert result.exit_code == 2
    assert "no subscription named 'Nope'" in result.stderr and f"Production EU ({SUB})" in result.stderr


def test_unknown_subscription_name_is_bad_input_in_control_and_fleet_alike(arm: ArmServers, state: ArmState) -> None:
    """One resolver: the same exit 2 and the same one-line error from a single-set and a fleet command."""
    state.add_subscription(SUB, display_name="Production EU")
    single = run("status", "-g", RG, "-n", "web", "--subscription", "Nope")
    fleet = run("fleet", "audit", "--subscription", "Nope")
    assert (single.exit_code, fleet.exit_code) == (2, 2), (single.output, fleet.output)
    assert single.stderr.strip() == fleet.stderr.strip()
    assert single.stderr.strip().startswith("error: invalid --subscription 'Nope': no subscription named 'Nope'")


def test_a_name_matching_nothing_among_many_shows_ten_and_counts_the_rest() -> None:
    """Issue 28 item 10: every visible subscription was printed on one line (thousands in an estate)."""
    import pytest

    from vmss_terminate.control.subscriptions import match_subscription
    from vmss_terminate.errors import UsageError

    visible = [{"displayName": f"team-{i}", "subscriptionId": f"{i:08d}-0000-0000-0000-000000000000"}
               for i in range(2500)]
    with pytest.raises(UsageError) as caught:
        match_subscription(visible, "Nope")
    message = str(caught.value)
    assert "team-9 " in message and "team-10 " not in message and "and 2490 more" in message
    assert len(message) < 1200
