"""`vmss-terminate agent run|events|approve`: thin wrappers over `vmss_terminate.agent`.

`agent run`'s options are declared once, as fields of `AgentConfig` and `RunOptions`
(`vmss_terminate.agent.command` reads them and also starts the agent without click, see
`vmss_terminate/entry.py`); this module builds the click command from them. Nothing here imports
`azure.*`.
"""

from __future__ import annotations

from typing import Any, Optional

import click

from vmss_terminate.agent.command import RUN_OPTIONS, build, by_dest, run
from vmss_terminate.commands.fields import click_option, click_options
from vmss_terminate.commands.output import echo_json, output_option, tsv_lines

_IMDS_URL = click_option(by_dest("imds_url"))
_API_VERSION = click_option(by_dest("api_version"))
_RETRY_FOR = click_option(by_dest("retry_for"))
_VM_NAME = click_option(by_dest("vm_name"))


@click.group("agent")
def agent_group() -> None:
    """The in-VM agent: drain hooks, then approve this VM's Terminate event."""


@agent_group.command("run")
@click_options(RUN_OPTIONS)
def run_command(**values: Any) -> None:
    """Poll Scheduled Events; run hooks; approve only this VM's own events."""
    ctx = click.get_current_context()
    config, options = build(values)
    run(config, options, [name for name in values if _given(ctx, name)])


def _given(ctx: click.Context, parameter: str) -> bool:
    """Whether the user set `parameter` (command line or environment), not its default."""
    source = ctx.get_parameter_source(parameter)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


@agent_group.command("events")
@_IMDS_URL
@_API_VERSION
@_VM_NAME
@_RETRY_FOR
@output_option("table: for people; json: the document; tsv: one row per event (Ours last).")
def events_command(imds_url: Optional[str], api_version: str, vm_name: Optional[str], retry_for: float,
                   output: str) -> None:
    """Show the current Scheduled Events document, this VM's own events marked."""
    from vmss_terminate.agent.ops import list_events

    view = list_events(imds_url, api_version, vm_name, retry_for=retry_for)
    if output == "json":
        echo_json(view.to_json())
        return
    if output == "tsv":
        for line in tsv_lines(view.to_json()["Events"]):
            click.echo(line)
        return
    click.echo(f"VM {view.vm_name}  DocumentIncarnation {view.document.incarnation}  "
               f"{len(view.document.events)} event(s), {len(view.own)} ours")
    for event in view.document.events:
        mark = "*" if event.names(view.vm_name) else " "
        click.echo(f"{mark} {event.event_id}  {event.event_type:<9} {event.status:<9} "
                   f"NotBefore={event.not_before_raw or '-'}  Resources={','.join(event.resources)}")
    if view.document.events:
        click.echo("(* = names this VM)")


@agent_group.command("approve")
@click.argument("event_id")
@click.option("--force", is_flag=True, help="Approve even if the event is not (only) this VM's.")
@_IMDS_URL
@_API_VERSION
@_VM_NAME
@_RETRY_FOR
@output_option()
def approve_command(event_id: str, force: bool, imds_url: Optional[str], api_version: str,
                    vm_name: Optional[str], retry_for: float, output: str) -> None:
    """Approve EVENT_ID now. Refuses (exit 2) an event that is not this VM's alone, unless --force."""
    from vmss_terminate.agent.ops import approve_event

    event = approve_event(event_id, imds_url, api_version, force=force, vm_name=vm_name, retry_for=retry_for)
    if output == "table":
        click.echo(f"approved {event.event_type} {event.event_id} ({', '.join(event.resources)})")
    elif output == "json":
        echo_json({"approved": event.to_json()})
    else:
        click.echo(tsv_lines(event.to_json())[0])

