"""`vmss-terminate render`: print the terminate-notification setting, or the agent's Kubernetes
manifests, for your own IaC (thin over iac.render)."""

from __future__ import annotations

from typing import Optional, Tuple

import click

from vmss_terminate.commands.fields import declared_options
from vmss_terminate.commands.options import TIMEOUT, int_range
from vmss_terminate.control.events_policy import PolicyChange
from vmss_terminate.errors import UsageError
from vmss_terminate.iac import eventgrid, kubernetes
from vmss_terminate.iac.render import FORMATS, render


@click.command("render")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="arm/bicep: the scheduledEventsProfile fragment (with policy options: the properties fragment "
                   "with scheduledEventsPolicy too); terraform: the termination_notification block (and an "
                   "azapi_update_resource for the policy); rest: the exact PATCH body `enable` sends; cli: the az and vmss-terminate commands; policy: an Azure "
                   "Policy definition auditing scale sets for this timeout; kubernetes: the agent's DaemonSet, "
                   "ServiceAccount and least RBAC (no --timeout); eventgrid: the Event Grid -> Storage queue setup of "
                   "one subscription for `central run --source queue`, as Azure CLI commands (no --timeout). Required.")
@click.option("--timeout", type=TIMEOUT, default=None,
              help="Delay Azure waits before deleting an instance: 5..15 minutes (10, 10m, PT10M). "
                   "Required unless --disable or (as for `enable`) a scheduled-events policy option alone.")
@click.option("--disable", is_flag=True, help="Render the setting that turns terminate notifications off.")
@click.option("-g", "--resource-group", default=None,
              help="Resource group for --format cli (default: $RESOURCE_GROUP) and --format eventgrid (required).")
@click.option("-n", "--name", default=None, help="Scale set name for --format cli (default: $VMSS_NAME).")
@click.option("--image", default=None,
              help=f"Agent image for --format kubernetes (default: {kubernetes.DEFAULT_IMAGE}; build it from "
                   "templates/kubernetes/Dockerfile).")
@click.option("--namespace", default=None,
              help=f"Namespace of the DaemonSet and its ServiceAccount for --format kubernetes "
                   f"(default: {kubernetes.DEFAULT_NAMESPACE}).")
@click.option("--metrics-port", type=int_range("metrics-port", 1, 65535), default=None,
              help=f"Port of the agent's /metrics, /healthz, /readyz for --format kubernetes "
                   f"(default: {kubernetes.DEFAULT_PORT}; host network, so free on every node).")
@click.option("--agent-arg", "agent_args", multiple=True, metavar="ARG",
              help="Append ARG to the DaemonSet's `agent run --kubernetes ...` (repeatable), "
                   "e.g. --agent-arg=--taint --agent-arg=example.com/draining=true:NoSchedule. Checked "
                   "here as the agent on every node would check them (exit 2); --listen, --state-file "
                   "and --once are the DaemonSet's.")
@declared_options(PolicyChange, "policy")
@click.option("--subscription", default=None,
              help="--format eventgrid: the subscription whose scale sets' scheduled events are delivered (required).")
@click.option("--storage-account", default=None,
              help="--format eventgrid: the storage account to create for the queue and lease blobs (required).")
@click.option("--queue", default=None,
              help=f"--format eventgrid: the queue's name (default: {eventgrid.DEFAULT_QUEUE}; poison: QUEUE-poison).")
@click.option("--location", default=None, help="--format eventgrid: the storage account's region (default: eastus).")
@click.option("--principal-id", default=None,
              help="--format eventgrid: object id of the handler's identity; prints its role assignments.")
def render_command(fmt: str, timeout: Optional[int], disable: bool,
                   resource_group: Optional[str], name: Optional[str], image: Optional[str],
                   namespace: Optional[str], metrics_port: Optional[int], agent_args: Tuple[str, ...],
                   policy: PolicyChange, subscription: Optional[str], storage_account: Optional[str],
                   queue: Optional[str], location: Optional[str], principal_id: Optional[str]) -> None:
    """Print a snippet to paste into your own template or pipeline.

    \b
    vmss-terminate render --format terraform --timeout 10m
    vmss-terminate render --format rest --timeout PT10M > body.json
    vmss-terminate render --format rest --timeout 10 --event-grid --auto-approve user-reboot
    vmss-terminate render --format kubernetes --image myregistry.azurecr.io/vmss-terminate:0.1.0 | kubectl apply -f -
    vmss-terminate render --format eventgrid --subscription SUB -g RG --storage-account NAME > setup.sh
    """
    if fmt is None:  # checked here, not by click, whose message spans several lines
        raise UsageError(f"--format is required: one of {', '.join(FORMATS)}")
    kube_options = {"--image": image, "--namespace": namespace, "--metrics-port": metrics_port,
                    "--agent-arg": agent_args or None}
    grid_options = {"--subscription": subscription, "--storage-account": storage_account, "--queue": queue,
                    "--location": location, "--principal-id": principal_id}
    if fmt == "eventgrid":
        given = [option for option, value in {**kube_options, "-n": name}.items() if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: not with --format eventgrid")
        if timeout is not None or disable or not policy.empty:
            raise UsageError("--format eventgrid takes no --timeout, --disable or scheduled-events policy option")
        text = render(fmt, None, resource_group=resource_group, subscription=subscription,
                      storage_account=storage_account, queue=queue or eventgrid.DEFAULT_QUEUE,
                      location=location or "eastus", principal_id=principal_id)
        click.echo(text, nl=False)
        return
    grid_given = [option for option, value in grid_options.items() if value is not None]
    if grid_given:
        raise UsageError(f"{', '.join(grid_given)}: only with --format eventgrid")
    if fmt == "kubernetes":
        if not policy.empty:
            raise UsageError("--format kubernetes takes no scheduled-events policy option: the policy is the scale "
                             "set's (render it with --format arm|bicep|terraform|rest|cli|policy)")
        if timeout is not None or disable:
            raise UsageError("--format kubernetes takes no --timeout or --disable: the timeout is the scale set's "
                             "(render it with --format arm|bicep|terraform|rest|cli)")
        _check_agent_args(agent_args)
        text = render(fmt, None, image=kubernetes.DEFAULT_IMAGE if image is None else image,
                      namespace=namespace or kubernetes.DEFAULT_NAMESPACE,
                      metrics_port=metrics_port or kubernetes.DEFAULT_PORT, agent_args=agent_args)
        click.echo(text, nl=False)
        return
    given = [option for option, value in kube_options.items() if value is not None]
    if given:
        raise UsageError(f"{', '.join(given)}: only with --format kubernetes")
    if timeout is None and not disable and (policy.empty or fmt == "policy"):
        raise UsageError("--timeout is required (5..15 minutes, e.g. 10m) unless --disable"
                         + ("" if fmt == "policy" else " or a scheduled-events policy option is given alone"))
    if timeout is not None and disable:
        raise UsageError("--disable takes no --timeout")
    text = render(fmt, timeout, enable=not disable, resource_group=resource_group, name=name,
                  policy=None if policy.empty else policy)
    # Bytes, not text: `rest` must reach stdout exactly as the control plane sends it (no newline translation).
    click.echo(text.encode("utf-8"), nl=False)


_SET_BY_TEMPLATE = {"--listen": "the DaemonSet sets it from --metrics-port",
                    "--state-file": "the DaemonSet keeps it on the node's hostPath",
                    "--once": "a DaemonSet's agent runs until stopped: it would exit and crash-loop"}


def _check_agent_args(agent_args: Tuple[str, ...]) -> None:
    """The DaemonSet's `agent run --kubernetes ... ARGS` checked as the agent will check it on every
    node (exit 2 here, not a crash-looping pod on each node)."""
    from vmss_terminate.agent.command import check_elsewhere

    if not agent_args:
        return
    for arg in agent_args:
        name = arg.partition("=")[0]
        if name in _SET_BY_TEMPLATE:
            raise UsageError(f"invalid --agent-arg {arg!r}: {name} is not for --agent-arg ({_SET_BY_TEMPLATE[name]})")
    try:
        check_elsewhere(["--kubernetes", *agent_args])
    except UsageError as exc:
        raise UsageError(f"invalid --agent-arg {' '.join(agent_args)!r}: {exc.cli_message or exc}") from None
