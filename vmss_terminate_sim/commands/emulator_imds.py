"""`vmss-terminate emulator imds`: a local IMDS in the foreground, for testing agents and drain hooks.

A thin wrapper over `vmss_terminate_sim.emulator.imds.launch.start_imds`: one HTTP server per
`--vm-name`, all sharing one placement group. Events come from `--event`, `--scenario` or, while
it runs, the admin endpoint (`POST /emulator/events`, see `vmss_terminate_sim.emulator.imds.app`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

import click

from vmss_terminate.commands.foreground import Foreground
from vmss_terminate.commands.options import decimal_range, int_range
from vmss_terminate.commands.output import echo_json, output_option
from vmss_terminate.errors import UsageError
from vmss_terminate_sim.commands.options import fault_option
from vmss_terminate_sim.emulator.faults import Fault
from vmss_terminate_sim.emulator.imds.app import Approval, EmulatedEvent, ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.imds.launch import load_scenario, parse_event_spec, start_imds
from vmss_terminate_sim.emulator.server import EmulatorServer, PortUnavailable

DEFAULT_VM_NAME = "myvmss_0"
SCHEDULED_EVENTS_QUERY = "/metadata/scheduledevents?api-version=2019-01-01"


def _describe(kind: str, event: EmulatedEvent) -> str:
    return f"{kind:<8} {event.event_type} {event.event_id} resources={','.join(event.resources)} status={event.status}"


def _approval_line(approval: Approval) -> str:
    note = "" if approval.accepted else " (unknown EventId, refused)"
    note += " (NOT in the event's Resources)" if approval.foreign else ""
    return f"{approval.event_id} by {approval.vm_name}{note}"


class _Console:
    """Prints the group's changes as they happen, after the banner (changes before it are held).

    An "approved" line names the approving VM: the n-th "approved" change of an event is its n-th
    accepted approval (the group records both under one lock, in the same order), so concurrent
    approvals by two VMs are each attributed right. Refused approvals (unknown EventId) cause no
    change, so `poll_refused` finds them in the approval list.
    """

    def __init__(self, err: bool = False) -> None:
        self.err = err  # with -o json stdout holds the one JSON document: the live lines go to stderr
        self.group: Optional[PlacementGroup] = None
        self._held: List[Tuple[str, EmulatedEvent]] = []
        self._approved_seen: Dict[str, int] = {}
        self._approvals_read = 0
        self._lock = threading.Lock()

    def on_change(self, kind: str, event: EmulatedEvent) -> None:
        with self._lock:
            if self.group is None:
                self._held.append((kind, event))
            else:
                click.echo(self._line(kind, event), err=self.err)

    def ready(self, group: PlacementGroup) -> None:
        """The banner is out: print what was held, then every change as it comes."""
        with self._lock:
            self.group = group
            for kind, event in self._held:
                click.echo(self._line(kind, event), err=self.err)
            self._held = []

    def poll_refused(self) -> None:
        if self.group is None:
            return
        with self._lock:
            approvals = self.group.approvals
            for approval in approvals[self._approvals_read:]:
                if not approval.accepted:
                    click.echo(f"refused  approval of unknown EventId {approval.event_id} by {approval.vm_name} (400)",
                               err=self.err)
            self._approvals_read = len(approvals)

    def _line(self, kind: str, event: EmulatedEvent) -> str:
        line = _describe(kind, event)
        if kind != "approved" or self.group is None:
            return line
        nth = self._approved_seen.get(event.event_id, 0)
        self._approved_seen[event.event_id] = nth + 1
        accepted = [a for a in self.group.approvals if a.accepted and a.event_id == event.event_id]
        if nth < len(accepted):
            approval = accepted[nth]
            line += f" by {approval.vm_name}"
            if approval.foreign:
                line += "  <-- NOT in the event's Resources: this VM approved another VM's event"
        return line


def _document(servers: List[EmulatorServer]) -> Dict[str, object]:
    """`-o json`: each VM's endpoint and the export that points an agent at it."""
    rows = []
    for server in servers:
        app: ImdsEmulator = server.app  # type: ignore[assignment]
        rows.append({"vmName": app.vm_name, "vmssName": app.vmss_name, "url": server.url,
                     "scheduledEvents": server.url + SCHEDULED_EVENTS_QUERY, "admin": server.url + "/emulator",
                     "env": {"VMSS_TERMINATE_IMDS_URL": server.url}})
    return {"servers": rows}


def _banner(servers: List[EmulatorServer]) -> None:
    for server in servers:
        app: ImdsEmulator = server.app  # type: ignore[assignment]
        click.echo(f"IMDS for {app.vm_name} (scale set {app.vmss_name or '-'}): {server.url}")
        click.echo(f"  export VMSS_TERMINATE_IMDS_URL={server.url}")
    first: ImdsEmulator = servers[0].app  # type: ignore[assignment]
    url = servers[0].url
    add = json.dumps({"EventType": "Terminate", "Resources": [first.vm_name]}, separators=(",", ":"))
    click.echo("Try it (the admin routes under /emulator work on every server; all share one event list):")
    click.echo(f"  curl -H Metadata:true '{url}{SCHEDULED_EVENTS_QUERY}'")
    click.echo(f"  curl -X POST -d '{add}' {url}/emulator/events")
    click.echo(f"  curl {url}/emulator/approvals        (every route: curl {url}/emulator)")
    click.echo("Press Ctrl-C to stop.")


@click.command("imds")
@click.option("--vm-name", "vm_names", multiple=True, default=(DEFAULT_VM_NAME,), show_default=True,
              help="VM name (e.g. myvmss_3); repeat for several VMs of one placement group, one server each.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=0, type=int_range("port", 0, 65535), show_default=True,
              help="Port of the first VM's server (next VMs use the following ports); 0 picks free ports.")
@click.option("--vmss-name", default=None, help="Scale set name (default: the VM name before its last '_').")
@click.option("--event", "event_specs", multiple=True, metavar="TYPE:VM[,VM][@SECONDS]",
              help="Seed an event, e.g. Terminate:myvmss_3 or Freeze:myvmss_0,myvmss_1@60 (NotBefore in 60 s).")
@click.option("--scenario", type=click.Path(dir_okay=False), default=None,
              help='JSON file: [{"EventType": "Terminate", "Resources": ["myvmss_3"], "NotBeforeIn": 300}, ...].')
@click.option("--first-call-delay", default=0.0, type=decimal_range("first-call-delay", 0), show_default=True, metavar="S",
              help="Seconds the first Scheduled Events request waits (real IMDS: up to 120).")
@click.option("--rate-limit", default=5.0, type=decimal_range("rate-limit", 0, what="a number of requests per second"),
              show_default=True, metavar="N",
              help="Requests per second per VM before 429; 0 disables.")
@click.option("--started-ttl", default=60.0, type=decimal_range("started-ttl", 0), show_default=True, metavar="S",
              help="Seconds a Started event stays listed before it is removed.")
@click.option("--no-auto-start", is_flag=True,
              help="Approval and NotBefore do not start events (start them with the admin endpoint).")
@output_option(help="table: a banner for people, then each change as it happens; json: the endpoints and "
                   "exports as one JSON document (the changes go to stderr).")
@fault_option()
def imds_command(vm_names: Tuple[str, ...], host: str, port: int, vmss_name: Optional[str],
                 event_specs: Tuple[str, ...], scenario: Optional[str], first_call_delay: float,
                 rate_limit: float, started_ttl: float, no_auto_start: bool, output: str,
                 faults: Tuple[Fault, ...]) -> None:
    """Run a local IMDS (scheduled events + instance metadata) until Ctrl-C.

    Point an agent at it with VMSS_TERMINATE_IMDS_URL=<url>. Add events while it runs:
    curl -X POST -d '{"EventType":"Terminate","Resources":["myvmss_3"]}' <url>/emulator/events
    """
    seeded = [parse_event_spec(spec) for spec in event_specs]
    if scenario:
        seeded += load_scenario(scenario)
    as_json = output == "json"
    console = _Console(err=as_json)
    with Foreground() as foreground:  # before start: a SIGTERM during start-up still stops the servers
        try:
            running = start_imds(vm_names, host, port, vmss_name, first_call_delay, rate_limit or None,
                                 started_ttl, not no_auto_start, seeded, listener=console.on_change)
        except PortUnavailable as exc:
            raise UsageError(str(exc)) from None
        group, servers = running.group, running.servers
        for server in servers:  # each VM's endpoint gets its own copy (a fault counts its uses)
            for fault in faults:
                server.faults.add(replace(fault))

        def every() -> None:
            group.tick()  # so "started"/"removed" are printed as they happen
            console.poll_refused()

        try:
            if as_json:
                echo_json(_document(servers))
            else:
                _banner(servers)
            console.ready(group)
            foreground.wait(every)
        finally:
            running.stop()
            approvals = group.approvals
            click.echo(f"stopped; {len(approvals)} approval(s)" + (":" if approvals else ""), err=as_json)
            for approval in approvals:
                click.echo(f"  {_approval_line(approval)}", err=as_json)
