"""`vmss-terminate agent run|events|approve`: thin wrappers over `vmss_terminate.agent`.

The agent library is imported inside each command, so other commands (and `--help`) do not pay
for it, and nothing here imports `azure.*`.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Optional, Tuple

import click

from vmss_terminate.commands.output import echo_json, output_option, tsv_lines
from vmss_terminate.errors import UsageError

_IMDS_URL = click.option("--imds-url", metavar="URL", default=None,
                         help="IMDS base URL [env VMSS_TERMINATE_IMDS_URL; default http://169.254.169.254].")
_API_VERSION = click.option("--api-version", default="2019-01-01", show_default=True,
                            help="Scheduled Events api-version (>= 2019-01-01, the first with Terminate), or "
                                 "'latest': the newest IMDS serves, asked at start.")
_RETRY_FOR = click.option("--retry-for", type=float, default=70.0, show_default=True, metavar="S",
                          help="One-shot commands (run --once, events, approve): keep retrying an unavailable "
                               "IMDS this long before failing (exit 1). A long-running `run` never gives up.")
_VM_NAME = click.option("--vm-name", default=None, metavar="NAME",
                        help="This VM's name (default: instance metadata compute.name).")


@click.group("agent")
def agent_group() -> None:
    """The in-VM agent: drain hooks, then approve this VM's Terminate event."""


@agent_group.command("run")
@_IMDS_URL
@click.option("--hook", "hooks", multiple=True, metavar="CMD",
              help="Command run (no shell) for our own events, in order; repeatable. Event data in "
                   "VMSS_TERMINATE_* env vars and the event JSON on stdin.")
@click.option("--hook-events", default="Terminate", show_default=True, metavar="TYPES",
              help="Event types the hooks and the webhook run for (comma list, 'all').")
@click.option("--webhook", default=None, metavar="URL", help="POST each such event as JSON to URL (may use proxies).")
@click.option("--webhook-format", type=click.Choice(["json", "slack", "teams"]), default="json", show_default=True,
              help="json: the event, as a hook step before approval; slack / teams: incoming-webhook chat "
                   "messages of what the agent did (draining, hook failed, approved), never delaying it.")
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="Serve /metrics (Prometheus), /healthz and /readyz (the drain probe) here; a bare PORT "
                   "is loopback. Off by default.")
@click.option("--drain-delay", type=float, default=0.0, show_default=True, metavar="S",
              help="Approve at least S seconds after /readyz turned 503 (hooks run meanwhile), but no later "
                   "than NotBefore minus --safety-margin.")
@click.option("--poll-interval", type=float, default=1.0, show_default=True, metavar="S",
              help="Seconds between Scheduled Events polls (the docs recommend 1).")
@click.option("--state-file", default=None, metavar="PATH",
              help="Default /var/lib/vmss-terminate/state.json (%ProgramData%\\vmss-terminate on Windows).")
@click.option("--once", is_flag=True, help="Handle what is visible now (waiting for its hooks) and exit.")
@click.option("--approve", "approve_types", default=None, metavar="TYPES",
              help="Event types approved (ours only) after hooks besides Terminate, which is always approved: "
                   "comma list, e.g. Reboot,Redeploy; 'none' approves nothing (observe only).")
@click.option("--approve-shared", is_flag=True,
              help="Also approve an event of ours that names other VMs too (releases them before they drain).")
@click.option("--on-hook-failure", type=click.Choice(["approve", "wait"]), default="approve", show_default=True,
              help="approve: approve anyway (the VM goes at NotBefore regardless); wait: let NotBefore expire.")
@click.option("--safety-margin", type=float, default=15.0, show_default=True, metavar="S",
              help="Stop hooks this many seconds before NotBefore (0 <= S < 900).")
@click.option("--stop-grace", type=float, default=45.0, show_default=True, metavar="S",
              help="On SIGTERM / Ctrl-C, let running hooks finish this long and approve what they drained, "
                   "then stop the rest (they rerun on restart); 0 stops them at once.")
@click.option("--no-rerun-interrupted", is_flag=True,
              help="After a crash, do not rerun a hook that was started but not finished (treat it as failed).")
@_API_VERSION
@_VM_NAME
@click.option("--request-timeout", type=float, default=10.0, show_default=True, metavar="S",
              help="Read timeout of each IMDS request.")
@click.option("--first-call-timeout", type=float, default=130.0, show_default=True, metavar="S",
              help="Read timeout of the first Scheduled Events call (IMDS may take 2 minutes to enable).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Logs on stderr: human-readable lines, or one JSON object per line.")
@_RETRY_FOR
def run_command(imds_url: Optional[str], hooks: Tuple[str, ...], hook_events: str, webhook: Optional[str],
                webhook_format: str, listen: Optional[str], drain_delay: float, poll_interval: float, state_file: Optional[str], once: bool, approve_types: Optional[str],
                approve_shared: bool, on_hook_failure: str, safety_margin: float, stop_grace: float,
                no_rerun_interrupted: bool,
                api_version: str, vm_name: Optional[str], request_timeout: float, first_call_timeout: float,
                log_format: str, retry_for: float) -> None:
    """Poll Scheduled Events; run hooks; approve only this VM's own events."""
    from vmss_terminate.agent import Agent, AgentConfig
    from vmss_terminate.agent.logs import configure
    from vmss_terminate.agent.ops import check_retry_for

    configure(log_format)
    check_retry_for(retry_for)
    if not once and _given("retry_for"):
        raise UsageError("--retry-for applies to run --once (and to events / approve): a long-running agent "
                         "retries IMDS until it is stopped and logs each outage (start, every minute, end)")
    config = AgentConfig(
        imds_url=imds_url, hooks=hooks, hook_events=hook_events, poll_interval=poll_interval,
        state_file=state_file, approve_types=approve_types if approve_types is not None else (),
        on_hook_failure=on_hook_failure, stop_grace=stop_grace,
        approve_shared=approve_shared, api_version=api_version, safety_margin=safety_margin,
        webhook=webhook, vm_name=vm_name, rerun_interrupted=not no_rerun_interrupted,
        request_timeout=request_timeout, first_call_timeout=first_call_timeout, drain_delay=drain_delay,
        webhook_format=webhook_format,
    )
    agent = Agent(config)
    server = None
    if listen is not None:
        from vmss_terminate.agent.probes import serve

        server = serve(agent, listen)
    stop = threading.Event()
    _stop_on_signals(stop)
    try:
        if once:
            agent.run_once(stop, retry_for=retry_for)
        else:
            agent.run(stop)
    finally:
        if server is not None:
            server.close()


def _given(parameter: str) -> bool:
    """Whether the user set `parameter` (command line or environment), not its default."""
    source = click.get_current_context().get_parameter_source(parameter)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM / Ctrl-C (and Ctrl-Break on Windows) end the loop cleanly. CLI only: the library
    never installs handlers, so agents can run in threads."""

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    for name in ("SIGTERM", "SIGINT", "SIGBREAK"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError):  # not the main thread, or unsupported here
                pass


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

