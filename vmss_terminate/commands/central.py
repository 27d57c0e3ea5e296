"""`vmss-terminate events list|approve` and `vmss-terminate central run`: thin wrappers over
`vmss_terminate.central` (preview Azure APIs: docs/central.md)."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import click

from vmss_terminate.agent.config import AgentConfig
from vmss_terminate.commands.control import endpoint_options
from vmss_terminate.commands.fields import chosen_options, click_options
from vmss_terminate.commands.fleet import scope_options
from vmss_terminate.commands.output import echo_json, output_option, tsv_lines, work_done
from vmss_terminate.control.connection import Connection
from vmss_terminate.fleet.scope import Scope


def _scale_set_ids(ctx: click.Context, param: click.Parameter, value: Tuple[str, ...]) -> Tuple[str, ...]:
    """Each --scale-set is a scale set's resource id: bad input before any request, named as typed."""
    from vmss_terminate.central.source import ScaleSetRef
    from vmss_terminate.errors import UsageError

    for item in value:
        try:
            ScaleSetRef.parse(item)
        except ValueError:
            raise UsageError(f"invalid --scale-set {item!r}: use /subscriptions/SUB/resourceGroups/RG/providers/"
                             "Microsoft.Compute/virtualMachineScaleSets/NAME") from None
    return value


# `--scale-set ID` of `events list` and `central run`, declared once.
scale_set_option = click.option("--scale-set", "scale_sets", multiple=True, metavar="ID", callback=_scale_set_ids,
                                help="Only this scale set (its resource id; repeatable).")


@click.group("events")
def events_group() -> None:
    """List and acknowledge scheduled events of scale sets across a scope, from outside the VMs (Resource Graph, Maintenance RP; preview)."""


@events_group.command("list")
@scope_options
@endpoint_options
@scale_set_option
@click.option("--all", "include_done", is_flag=True, help="Also Completed and Canceled events.")
@output_option("table: for people; json: a list of event objects; tsv: one row per event.")
def list_command(scope: Scope, connection: Connection, scale_sets: Tuple[str, ...], include_done: bool,
                 output: str) -> None:
    """Pending scheduled events of the scale sets in scope: set, VMs, type, status, NotBefore, time left.

    Preview: reads Resource Graph's maintenanceresources table (events of scale sets whose
    scheduledEventsPolicy enables eventGridAndResourceGraph). An incomplete answer is exit 1.
    """
    from vmss_terminate.central.ops import list_events

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




@click.group("central")
def central_group() -> None:
    """The central handler: drain and acknowledge scale-in events of a whole scope, no agent in the VMs (preview)."""


@central_group.command("run")
@scope_options
@endpoint_options
@scale_set_option
@click.option("--source", type=click.Choice(["resourcegraph", "queue"]), default="resourcegraph", show_default=True,
              help="resourcegraph: poll maintenanceresources; queue: an Event Grid -> Storage queue (--queue-url).")
@click.option("--queue-url", metavar="URL", help="With --source queue: https://ACCOUNT.queue.core.windows.net/QUEUE.")
@click.option("--queue-connection-string-env", metavar="NAME",
              help="With --source queue: read the Storage connection string from this environment variable.")
@click.option("--hook", "hooks", multiple=True, metavar="CMD",
              help="Run CMD (no shell) for every VM the event lists; event in VMSS_TERMINATE_* variables and "
                   "stdin JSON (with VmName, VmId, ScaleSetId, VmIds). Repeatable, in order.")
@click.option("--webhook", metavar="URL", help="POST each event as JSON to URL (once per event).")
@click_options(chosen_options(AgentConfig, only=["webhook_format", "kill_grace"], help={"webhook_format": (
    "json: the event, as an action before the acknowledgement; slack / teams: incoming-webhook chat "
    "messages of what the handler did (event seen, action failed, acknowledged or withheld), never delaying it."),
    "kill_grace": ("A hook stopped (at its deadline, on a stop, or when a queue lease is given up) gets SIGTERM, "
                   "then SIGKILL after S seconds, with its whole process tree; with --source queue it must be "
                   "shorter than 6 s: a failing lease is given up 7 s before its expiry, and a running hook notices "
                   "within 1 s.")}))
@click.option("--kubernetes", is_flag=True,
              help="Cordon and drain every node the event names (found by providerID, cluster-wide).")
@click.option("--kubeconfig", metavar="FILE", help="With --kubernetes: this kubeconfig (default: in-cluster).")
@click.option("--run-command", "run_command", metavar="FILE",
              help="Run FILE's content on every listed VM with Azure Run Command (RunShellScript or "
                   "RunPowerShellScript by the set's OS type).")
@click.option("--type", "types", default="Terminate", show_default=True, metavar="TYPES",
              help="Event types to handle (comma list). Freeze is never drained.")
@click.option("--safety-margin", type=click.FloatRange(0, 899), default=15.0, show_default=True, metavar="S",
              help="Stop actions this many seconds before NotBefore.")
@click.option("--on-failure", type=click.Choice(["approve", "wait"]), default="approve", show_default=True,
              help="approve: acknowledge anyway after a failed action; wait: let NotBefore expire.")
@click.option("--poll-interval", type=click.FloatRange(0.5, 3600), default=5.0, show_default=True, metavar="S",
              help="Seconds between polls (Resource Graph's quota: 15 queries per 5 s per user).")
@click.option("--state-file", metavar="PATH", help="The journal that makes restarts safe (default: memory only).")
@click.option("--listen", metavar="[HOST]:PORT", help="Serve /metrics, /healthz, /readyz (loopback unless --listen-any).")
@click.option("--listen-any", is_flag=True, help="Allow --listen on a non-loopback address (e.g. in a pod).")
@click.option("--once", is_flag=True, help="One pass (act on what is pending, wait for it), then exit.")
def run_command(scope: Scope, connection: Connection, scale_sets: Tuple[str, ...], source: str,
                queue_url: Optional[str], queue_connection_string_env: Optional[str], hooks: Tuple[str, ...],
                webhook: Optional[str], webhook_format: str, kill_grace: float, kubernetes: bool, kubeconfig: Optional[str], run_command: Optional[str],
                types: str, safety_margin: float, on_failure: str, poll_interval: float, state_file: Optional[str],
                listen: Optional[str], listen_any: bool, once: bool) -> None:
    """Handle scheduled events of every scale set in scope from here: hooks, webhook, node drain,
    Run Command, then acknowledge through the Maintenance RP (preview APIs; docs/central.md).
    With --source resourcegraph run one replica; with --source queue several may share the queue
    (one handles each event at a time: a blob lease per EventId)."""
    import logging

    from vmss_terminate.central.handler import HandlerConfig, kill_grace_problem
    from vmss_terminate.central.metrics import CentralMetrics, parse_listen, serve
    from vmss_terminate.central.run import build, handled_types, read_script
    from vmss_terminate.errors import UsageError
    from vmss_terminate.signals import StopOnSignals

    handled = handled_types(types)
    if kubeconfig and not kubernetes:
        raise UsageError("--kubeconfig needs --kubernetes")
    if source == "queue" and not queue_url:
        raise UsageError("--source queue needs --queue-url")
    if source != "queue" and (queue_url or queue_connection_string_env):
        raise UsageError("--queue-url / --queue-connection-string-env need --source queue")
    if source == "queue":
        from vmss_terminate.central.storage_queue import QueueSettings

        problem = kill_grace_problem(kill_grace, QueueSettings.give_up_before)
        if problem is not None:
            raise UsageError(problem)
    address = parse_listen(listen, listen_any) if listen else None
    config = HandlerConfig(hooks=hooks, webhook=webhook, webhook_format=webhook_format, run_command=read_script(run_command), kubernetes=kubernetes,
                           handle_types=handled, safety_margin=safety_margin, on_failure=on_failure,
                           poll_interval=poll_interval, kill_grace=kill_grace)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)  # the SDK's per-request lines are not the handler's story
    queue = None
    if source == "queue":
        from vmss_terminate.central.storage_queue import open_queue_source

        queue = open_queue_source(queue_url or "", queue_connection_string_env)
    metrics = CentralMetrics(poll_interval)
    if queue is not None:
        metrics.sections.append(queue.metrics.render)  # depth, oldest age, duplicates, poison moves
    central = build(scope, config, connection=connection, scale_set_ids=scale_sets, state_file=state_file,
                    kubeconfig=kubeconfig, source=queue, observe=metrics.observe)
    server = serve(metrics, *address) if address else None
    try:
        with StopOnSignals(stop=central.handler.stopping):
            central.handler.run(once=once)
    finally:
        central.handler.stop()
        central.handler.join(timeout=5.0)
        if server is not None:
            server.close()
        if queue is not None:
            queue.close()
        central.close()
