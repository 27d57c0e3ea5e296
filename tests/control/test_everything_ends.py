"""Everything ends: a page link already followed is a paging loop (exit 1), a listing has at most
MAX_PAGES pages, and every wait for an Azure operation -- the PATCH's, each manualupgrade's -- is
bounded by --wait-timeout, honours Retry-After and otherwise backs off (never ten polls a second).
Waits run on an injectable clock: these tests wait for nothing."""

from __future__ import annotations

import shlex

import pytest
from helpers import recording_clock

from vmss_terminate.control import Connection, UpgradeIncomplete, UpgradeOptions, enable, upgrade
from vmss_terminate.control.paging import MAX_PAGES, PageGuard, PagingLoop
from vmss_terminate.control.upgrade import BatchSize
from vmss_terminate.errors import AzureError
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run


def _polls(arm: ArmServers) -> int:
    return arm.arm_server.log.count("GET", "/operations/")


def test_a_vm_list_that_links_to_itself_is_a_paging_loop(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=3)
    arm.arm_server.faults.add(method="GET", path_contains="/web/virtualMachines", link_loop=True, times=None)
    result = run("status", "-g", RG, "-n", "web")
    assert result.exit_code == 1, result.output
    line = result.stderr.strip()
    assert line.startswith("error: listing instances of rg/web: paging loop at http://127.0.0.1:") and "\n" not in line
    assert arm.arm_server.log.count("GET", "/web/virtualMachines") == 2  # the link once, then refused


def test_a_subscription_list_that_links_to_itself_is_a_paging_loop(arm: ArmServers, state: ArmState) -> None:
    state.add_subscription(SUB, display_name="Production")
    arm.arm_server.faults.add(method="GET", path_contains="/subscriptions", link_loop=True, times=None)
    result = run("status", "-g", RG, "-n", "web", "--subscription", "Production")
    assert result.exit_code == 1, result.output
    assert "listing subscriptions: paging loop at" in result.stderr


def test_a_listing_has_a_page_cap() -> None:
    guard = PageGuard("listing instances of rg/web", max_pages=3)
    assert guard.next_link("https://a/x?$skiptoken=1") and guard.next_link("https://a/x?$skiptoken=2")
    with pytest.raises(PagingLoop, match="more than 3 pages"):
        guard.next_link("https://a/x?$skiptoken=3")
    assert MAX_PAGES == 1000  # documented in docs/control-plane.md


def test_a_link_is_the_same_whatever_the_order_of_its_query() -> None:
    guard = PageGuard("listing")
    guard.next_link("https://A/x?b=2&a=1")
    with pytest.raises(PagingLoop, match="paging loop at"):
        guard.next_link("https://a/x?a=1&b=2")


def test_a_stuck_patch_operation_ends_at_the_wait_timeout_with_what_runs_and_what_to_run(
        conn: Connection, arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(method="GET", path_contains="/operations/", stuck=True, times=None)
    clock = recording_clock()
    started = clock.now()
    with pytest.raises(AzureError) as caught:
        enable(RG, "web", 10, connection=conn, options=UpgradeOptions(wait_timeout=120), clock=clock)
    message = str(caught.value)
    assert "the update of rg/web is still running in Azure after 120 s" in message
    assert "/operations/" in message  # which operation
    assert f"`vmss-terminate status -g rg -n web --subscription {SUB} --arm-endpoint {arm.arm_url}`" in message
    assert f"`vmss-terminate upgrade -g rg -n web --subscription {SUB} --arm-endpoint {arm.arm_url}`" in message
    assert clock.now() - started == pytest.approx(120)
    # backoff without Retry-After: 0.05 s doubling to 1 s (20 x the first), never ten polls a second
    assert clock.waits[:6] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0])
    # the first read at once, then one after each wait
    assert max(clock.waits) == 1.0 and _polls(arm) == len(clock.waits) + 1 <= 126
    assert arm.arm_server.log.count("POST") == 0


def test_polling_honours_retry_after(conn: Connection, arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm.retry_after = 7
    arm.arm_server.faults.add(method="GET", path_contains="/operations/", stuck=True, times=None)
    clock = recording_clock()
    try:
        with pytest.raises(AzureError, match="still running in Azure after 60 s"):
            enable(RG, "web", 10, connection=conn, options=UpgradeOptions(wait_timeout=60), clock=clock)
    finally:
        arm.arm.retry_after = None
    assert clock.waits[:-1] == [7.0] * 8 and clock.waits[-1] == pytest.approx(4.0)  # 8 x 7 s, then the deadline


def test_a_stuck_manualupgrade_is_reported_in_flight(conn: Connection, arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=4, stale_instances=4)
    arm.arm_server.faults.add(method="GET", path_contains="/operations/", stuck=True, times=None)
    clock = recording_clock()
    with pytest.raises(UpgradeIncomplete) as caught:
        upgrade(RG, "web", connection=conn, options=UpgradeOptions(batch_size=BatchSize(2, False), wait_timeout=30),
                clock=clock)
    result = caught.value.result
    assert result.in_flight == ["0", "1"] and result.remaining == ["0", "1", "2", "3"]
    assert "still running in Azure after 30 s" in str(caught.value)
    assert f"re-run `vmss-terminate upgrade -g rg -n web --subscription {SUB} --arm-endpoint" in str(caught.value)
    assert "still being upgraded by Azure when the wait ended" in result.describe()
    assert arm.arm_server.log.count("POST", "/manualupgrade") == 1  # stopped at the first batch


def test_the_printed_resume_command_runs_as_printed(arm: ArmServers, state: ArmState,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Subscription and endpoint given as options (nothing in the environment): the resume line
    carries them, and run as printed it finishes the upgrade."""
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID")
    monkeypatch.delenv("VMSS_TERMINATE_ARM_ENDPOINT")
    ss = state.add_scale_set(SUB, RG, "web", capacity=2, stale_instances=2)
    arm.arm_server.faults.add(method="GET", path_contains="/operations/", stuck=True, times=None)
    result = run("upgrade", "-g", RG, "-n", "web", "--subscription", SUB, "--arm-endpoint", arm.arm_url,
                 "--wait-timeout", "0")
    assert result.exit_code == 1, result.output
    printed = result.stderr.split("re-run `", 1)[1].split("`", 1)[0]
    assert printed == f"vmss-terminate upgrade -g rg -n web --subscription {SUB} --arm-endpoint {arm.arm_url}"
    arm.arm_server.faults.clear()
    again = run(*shlex.split(printed)[1:])
    assert again.exit_code == 0, again.output
    assert all(i.latest_model_applied for i in ss.instances.values())


def test_wait_timeout_is_on_every_change_command() -> None:
    for command in ("enable", "disable", "retime", "upgrade"):
        help_text = " ".join(run(command, "--help").stdout.split())
        assert "--wait-timeout" in help_text and "Azure operation" in help_text, command


@pytest.mark.parametrize("in_progress", [0, 1, 3])
def test_an_operation_is_read_at_once_then_after_each_retry_after(conn: Connection, arm: ArmServers, state: ArmState,
                                                                  in_progress: int) -> None:
    """Each operation's status is read once without waiting (azure-core's poller does the same), then
    once per Retry-After: an operation answering InProgress n times costs n waits of exactly the
    Retry-After asked for, and one done at its first read costs none (the PATCH's Retry-After is not
    slept before the first read: that was two Retry-Afters per operation)."""
    state.add_scale_set(SUB, RG, "web", capacity=4, upgrade_policy="Manual")
    state.lro_polls = in_progress
    arm.arm.retry_after = 3
    clock = recording_clock()
    try:
        enable(RG, "web", 10, connection=conn, options=UpgradeOptions(batch_size=BatchSize(100, True)), clock=clock)
    finally:
        arm.arm.retry_after = None
    operations = arm.arm_server.log.count("PATCH") + arm.arm_server.log.count("POST", "/manualupgrade")
    assert operations == 2
    assert clock.waits == [3.0] * (in_progress * operations)
    assert _polls(arm) == (in_progress + 1) * operations
