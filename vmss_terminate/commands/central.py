"""`vmss-terminate events list|approve` and `vmss-terminate central run`: thin wrappers over
`vmss_terminate.central` (preview Azure APIs: docs/central.md)."""

from __future__ import annotations

from typing import Sequence, Tuple

import click

from vmss_terminate.commands.control import endpoint_options
from vmss_terminate.commands.fleet import scope_options
from vmss_terminate.commands.output import echo_json, output_option, tsv_lines, work_done
from vmss_terminate.control.connection import Connection
from vmss_terminate.fleet.scope import Scope


@click.group("events")
def events_group() -> None:
    """List and acknowledge scheduled events of scale sets across a scope, from outside the VMs (Resource Graph, Maintenance RP; preview)."""


@events_group.command("list")
@scope_options
@endpoint_options
@click.option("--scale-set", "scale_sets", multiple=True, metavar="ID",
              help="Only this scale set (its resource id; repeatable).")
@click.option("--all", "include_done", is_flag=True, help="Also Completed and Canceled events.")
@output_option("table: for people; json: a list of event objects; tsv: one row per event.")
def list_command(scope: Scope, connection: Connection, scale_sets: Tuple[str, ...], include_done: bool,
                 output: str) -> None:
    """Pending scheduled events of the scale sets in scope: set, VMs, type, status, NotBefore, time left.

    Preview: reads Resource Graph's maintenanceresources table (events of scale sets whose
    scheduledEventsPolicy enables eventGridAndResourceGraph). An incomplete answer is exit 1.
    """
    from vmss_terminate.central.ops import list_events, parse_scale_set_id

    for item in scale_sets:
        parse_scale_set_id(item)
    report = list_events(scope, connection=connection, scale_set_ids=scale_sets, include_done=include_done)
    work_done()
    if output == "json":
        echo_json(report.to_dict())
    elif output == "tsv":
        for line in tsv_lines([e.row() for e in report.events]):
            click.echo(line)
    else:
        for line in report.lines():
            click.echo(line)


@events_group.command("approve")
@endpoint_options
@click.option("--scale-set-id", required=True, metavar="ID",
              help="The scale set whose events these are (its resource id).")
@click.argument("event_ids", nargs=-1, required=True, metavar="EVENT_ID...")
@output_option("table: one line per event; json: a list of answers; tsv: one row per event.")
def approve_command(connection: Connection, scale_set_id: str, event_ids: Sequence[str], output: str) -> None:
    """Acknowledge scheduled events now through the Maintenance resource provider (preview
    api-versions 2023-10-01-preview; several at once: 2025-10-01-preview). Approving releases the
    event for every VM it lists. Prints what Azure answered per event; exit 1 if any was refused."""
    from vmss_terminate.central.ops import approve_events

    results = approve_events(scale_set_id, event_ids, connection=connection)
    work_done()
    rows = [r.to_dict() for r in results]
    if output == "json":
        echo_json(rows)
    elif output == "tsv":
        for line in tsv_lines(rows):
            click.echo(line)
    else:
        for r in results:
            click.echo(f"{r.event_id}  {'acknowledged' if r.ok else 'REFUSED'}  HTTP {r.status}  {r.message}")
    if not all(r.ok for r in results):
        click.get_current_context().exit(1)


