"""`vmss-terminate emulator imds`: a local IMDS in the foreground, for testing agents and drain hooks.

A thin wrapper over `vmss_terminate.emulator.imds_launch.start_imds`: one HTTP server per
`--vm-name`, all sharing one placement group. Events come from `--event`, `--scenario` or, while
it runs, the admin endpoint (`POST /emulator/events`, see `vmss_terminate.emulator.imds`).
"""

from __future__ import annotations

import signal
import threading
from typing import Callable, List, Optional, Tuple

import click

from vmss_terminate.emulator.imds import Approval, EmulatedEvent, ImdsEmulator, PlacementGroup
from vmss_terminate.emulator.imds_launch import load_scenario, parse_event_spec, start_imds


def _describe(kind: str, event: EmulatedEvent) -> str:
    return f"{kind:<8} {event.event_type} {event.event_id} resources={','.join(event.resources)} status={event.status}"


def _approval_line(approval: Approval) -> str:
    note = "" if approval.accepted else " (unknown EventId, refused)"
    note += " (NOT in the event's Resources)" if approval.foreign else ""
    return f"{approval.event_id} by {approval.vm_name}{note}"


def _printer(group_ref: List[PlacementGroup]) -> Callable[[str, EmulatedEvent], None]:
    """Print every change; an approval line names the approving VM (the group's latest approval of it)."""

    def show(kind: str, event: EmulatedEvent) -> None:
        line = _describe(kind, event)
        if kind == "approved" and group_ref:
            mine = [a for a in group_ref[0].approvals if a.event_id == event.event_id]
            line += f" by {mine[-1].vm_name}" if mine else ""
        click.echo(line)

    return show


@click.command("imds")
@click.option("--vm-name", "vm_names", multiple=True, required=True,
              help="VM name (e.g. myvmss_3); repeat for several VMs of one placement group, one server each.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=0, type=click.IntRange(0, 65535), show_default=True,
              help="Port of the first VM's server (next VMs use the following ports); 0 picks free ports.")
@click.option("--vmss-name", default=None, help="Scale set name (default: the VM name before its last '_').")
@click.option("--event", "event_specs", multiple=True, metavar="TYPE:VM[,VM][@SECONDS]",
              help="Seed an event, e.g. Terminate:myvmss_3 or Freeze:myvmss_0,myvmss_1@60 (NotBefore in 60 s).")
@click.option("--scenario", type=click.Path(dir_okay=False), default=None,
              help='JSON file: [{"EventType": "Terminate", "Resources": ["myvmss_3"], "NotBeforeIn": 300}, ...].')
@click.option("--first-call-delay", default=0.0, type=click.FloatRange(0), show_default=True,
              help="Seconds the first Scheduled Events request waits (real IMDS: up to 120).")
@click.option("--rate-limit", default=5.0, type=click.FloatRange(0), show_default=True,
              help="Requests per second per VM before 429; 0 disables.")
@click.option("--started-ttl", default=60.0, type=click.FloatRange(0), show_default=True,
              help="Seconds a Started event stays listed before it is removed.")
@click.option("--no-auto-start", is_flag=True,
              help="Approval and NotBefore do not start events (start them with the admin endpoint).")
def imds_command(vm_names: Tuple[str, ...], host: str, port: int, vmss_name: Optional[str],
                 event_specs: Tuple[str, ...], scenario: Optional[str], first_call_delay: float,
                 rate_limit: float, started_ttl: float, no_auto_start: bool) -> None:
    """Run a local IMDS (scheduled events + instance metadata) until Ctrl-C.

    Point an agent at it with VMSS_TERMINATE_IMDS_URL=<url>. Add events while it runs:
    curl -X POST -d '{"EventType":"Terminate","Resources":["myvmss_3"]}' <url>/emulator/events
    """
    seeded = [parse_event_spec(spec) for spec in event_specs]
    if scenario:
        seeded += load_scenario(scenario)
    group_ref: List[PlacementGroup] = []
    group, servers = start_imds(vm_names, host, port, vmss_name, first_call_delay, rate_limit or None,
                                started_ttl, not no_auto_start, seeded, listener=_printer(group_ref))
    group_ref.append(group)
    for server in servers:
        app: ImdsEmulator = server.app  # type: ignore[assignment]
        click.echo(f"IMDS for {app.vm_name} (scale set {app.vmss_name or '-'}): {server.url}")
        click.echo(f"  export VMSS_TERMINATE_IMDS_URL={server.url}")
    click.echo(f"admin: curl {servers[0].url}/emulator/events   (POST a JSON event to add one)")
    click.echo("Press Ctrl-C to stop.")
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.2):
            group.tick()  # so "started"/"removed" are printed as they happen
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        for server in servers:
            server.stop()
        approvals = group.approvals
        click.echo(f"stopped; {len(approvals)} approval(s): " + ", ".join(_approval_line(a) for a in approvals))
