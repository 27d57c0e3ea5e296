"""`vmss-terminate demo` and `vmss-terminate sandbox`: the local sandbox from the command line.

Thin wrappers over `vmss_terminate_sim.sandbox.run_demo` and `vmss_terminate_sim.sandbox.Sandbox`.
"""

from __future__ import annotations

import json
import shlex
import threading
from typing import Optional

import click

from vmss_terminate.commands.foreground import Foreground
from vmss_terminate.commands.options import TIMEOUT, decimal_range, int_range
from vmss_terminate.commands.output import emit, output_option, tsv_lines
from vmss_terminate.control.commandline import command
from vmss_terminate.errors import UsageError, VmssTerminateError
from vmss_terminate.timeout import to_iso


@click.command("demo")
@click.option("--instances", type=int_range("instances"), default=4, show_default=True, metavar="INTEGER",
              help="Instances in the scale set (2..20).")
@click.option("--scale-in", type=int_range("scale-in"), default=2, metavar="INTEGER", show_default=True, help="How many instances the scale-in removes.")
@click.option("--timeout", type=TIMEOUT, default="PT5M", show_default=True,
              help="notBeforeTimeout the control plane enables (5..15 minutes: 10, 10m, PT10M).")
@click.option("--speed", type=decimal_range("speed", what="a clock speed"), default=60.0, metavar="FLOAT", show_default=True,
              help="Sandbox clock speed: sandbox seconds per real second (60: PT5M passes in 5 s); 1 up to the "
                   "timeout in seconds / 5 (the timeout must last 5 real seconds).")
@click.option("--hook", default=None, metavar="CMD",
              help="Drain hook command for every agent (default: python -m vmss_terminate_sim.demo_hook).")
@click.option("--deadline", type=decimal_range("deadline", 1), metavar="FLOAT RANGE", default=None,
              help="Real seconds the story may take before the demo fails "
                   "[default: 30 + (timeout + 30 s deletion) / speed].")
@click.option("--kubernetes", is_flag=True,
              help="The VMs are nodes of a local Kubernetes API emulator and every agent runs with --kubernetes: "
                   "it cordons its node and evicts the pods (a PodDisruptionBudget holds one back until an evicted "
                   "one's replacement is Ready) before approving.")
@click.option("--central", is_flag=True,
              help="No agent in any instance: one central handler reads Resource Graph, runs the hook and Azure "
                   "Run Command for each removed VM (and drains its node with --kubernetes), then acknowledges "
                   "through the Maintenance RP (preview APIs).")
@click.option("--windows", is_flag=True, help="With --central: a Windows-typed scale set (RunPowerShellScript).")
@click.option("--source", type=click.Choice(["resourcegraph", "queue"]), default="resourcegraph", show_default=True,
              help="With --central: queue starts Azurite (installed with python -m vmss_terminate_sim.azurite "
                   "install) and the handler reads the Event Grid -> Storage queue instead of Resource Graph.")
@output_option()
def demo(instances: int, scale_in: int, timeout: int, speed: float, hook: Optional[str], deadline: Optional[float],
         kubernetes: bool, central: bool, windows: bool, source: str, output: str) -> None:
    """Run the whole story on local emulators, no Azure: enable terminate notifications and upgrade
    (real control plane and Azure SDK), one real agent per instance with a drain hook, scale in,
    drain, approve, delete. Prints a timeline; exits 1 if the story does not complete."""
    from vmss_terminate_sim import azurite
    from vmss_terminate_sim.sandbox.demo import DemoOptions, header, render_text, run_demo, shown
    from vmss_terminate_sim.sandbox.timeline import format_entry

    options = DemoOptions(instances=instances, scale_in=scale_in, timeout_minutes=timeout, speed=speed,
                          deadline=deadline, hook=hook, kubernetes=kubernetes, central=central,
                          windows=windows, source=source).validated()
    if source == "queue" and not azurite.is_installed():
        raise VmssTerminateError(f"--source queue runs Azurite, Microsoft's Storage emulator: "
                                 f"{azurite.missing_azurite_message()}")
    printing = threading.Lock()

    def live(entry):  # type: ignore[no-untyped-def]
        if shown(entry):
            with printing:
                click.echo(format_entry(entry))

    if output == "table":
        for line in header(options):
            click.echo(line)
    result = run_demo(options, on_entry=live if output == "table" else None)
    with printing:
        emit(result, output, lines=lambda: render_text(result))
    if not result.ok:
        raise VmssTerminateError(f"demo failed: {result.failure}")


@click.command("sandbox")
@click.option("--instances", type=int_range("instances"), default=4, show_default=True, metavar="INTEGER",
              help="Instances in the scale set (1..100).")
@click.option("--timeout", type=TIMEOUT, default="PT5M", show_default=True,
              help="notBeforeTimeout the scale set starts with (ignored with --no-feature).")
@click.option("--no-feature", is_flag=True, help="Create the scale set without terminate notifications "
                                                  "(then try `vmss-terminate enable` against it).")
@click.option("--speed", type=decimal_range("speed", what="a clock speed"), default=1.0, metavar="FLOAT", show_default=True,
              help="Sandbox clock speed. Agents you start yourself run on real time, so keep 1 for them.")
@click.option("--port-base", type=int_range("port-base"), default=0, metavar="INTEGER", show_default=True,
              help="ARM on this port, token endpoint +1, IMDS of each instance +2, +3, ... (0: free ports).")
@click.option("--name", default="myvmss", show_default=True, help="Scale set name.")
@click.option("--resource-group", default="sandbox-rg", show_default=True, help="Resource group name.")
@click.option("--duration", type=decimal_range("duration", 0), metavar="FLOAT RANGE", default=None,
              help="Stop after this many real seconds (default: run until Ctrl-C).")
@click.option("--kubernetes", is_flag=True,
              help="Also a Kubernetes API emulator whose nodes are the instances (spec.providerID = the VM), "
                   "with the demo's pods (web under a PodDisruptionBudget, a DaemonSet): try agents with "
                   "--kubernetes, and kubectl, against it.")
@click.option("--central", is_flag=True,
              help="The scale set publishes its scheduled events to Resource Graph (scheduledEventsPolicy): try "
                   "`vmss-terminate central run` and `events list` against it, no agent needed.")
@click.option("--windows", is_flag=True, help="A Windows-typed scale set (Run Command takes RunPowerShellScript).")
@click.option("--source", type=click.Choice(["resourcegraph", "queue"]), default=None,
              help="With --central: queue also starts Azurite (installed with python -m vmss_terminate_sim.azurite "
                   "install) and delivers every event change to its queue as Event Grid would, for `central run "
                   "--source queue` (default: resourcegraph).")
@output_option("json: one JSON object with the endpoints, then the timeline as JSON lines; tsv: the "
               "environment as NAME<TAB>VALUE rows, then one row per timeline entry.")
def sandbox(instances: int, timeout: int, no_feature: bool, speed: float, port_base: int, name: str,
            resource_group: str, duration: Optional[float], kubernetes: bool, central: bool, windows: bool,
            source: Optional[str], output: str) -> None:
    """Keep a local sandbox running (ARM, token endpoint, one IMDS per instance) and print the
    environment that points the CLI, the Azure SDK and agents at it, to try your own hooks.
    Deleting instances (scale-in, delete) publishes Terminate events; the timeline is printed live."""
    from vmss_terminate_sim import azurite
    from vmss_terminate_sim.emulator.server import PortUnavailable
    from vmss_terminate_sim.sandbox.agents import demo_hook_command
    from vmss_terminate_sim.sandbox.environment import Sandbox, SandboxConfig
    from vmss_terminate_sim.sandbox.eventgrid_queue import SandboxQueue, start_queue
    from vmss_terminate_sim.sandbox.kubernetes import SandboxCluster
    from vmss_terminate_sim.sandbox.timeline import format_entry

    if source is not None and not central:
        raise UsageError("--source needs --central")
    if source == "queue" and not azurite.is_installed():
        raise VmssTerminateError(f"--source queue runs Azurite, Microsoft's Storage emulator: "
                                 f"{azurite.missing_azurite_message()}")
    config = SandboxConfig(instances=instances, timeout_minutes=None if no_feature else timeout, speed=speed,
                           name=name, resource_group=resource_group, port_base=port_base, windows=windows,
                           publish_events=central).validated()
    box = Sandbox(config)
    queue: Optional[SandboxQueue] = None
    cluster: Optional[SandboxCluster] = None
    printing = threading.Lock()

    def live(entry):  # type: ignore[no-untyped-def]
        with printing:
            if output == "table":
                click.echo(format_entry(entry))
            else:
                click.echo(json.dumps(entry.to_dict()) if output == "json" else tsv_lines(entry.to_dict())[0])

    with Foreground() as foreground:  # before start: a SIGTERM during start-up still gets the report
        try:
            box.start()
            if source == "queue":
                queue = start_queue(box)
            if kubernetes:
                cluster = SandboxCluster(box).start()
                cluster.add_demo_workload()
        except PortUnavailable as exc:  # a busy --port-base is the operator's input, as for the emulators
            box.stop()
            if queue is not None:
                queue.stop()
            raise UsageError(str(exc)) from None
        except OSError as exc:
            box.stop()
            if queue is not None:
                queue.stop()
            raise VmssTerminateError(f"cannot start the sandbox: {exc}") from None
        try:
            with printing:
                if output == "json":
                    kube = {} if cluster is None else {"kubernetes": {"url": cluster.url, "kubeconfig": cluster.kubeconfig,
                                                                      "nodes": dict(cluster.nodes)}}
                    grid = {} if queue is None else {"queue": {"url": queue.url,
                                                               "connectionStringEnv": next(iter(queue.env()))}}
                    click.echo(json.dumps({"env": {**box.env(), **(queue.env() if queue else {})},
                                           "imds": box.imds_urls(), "resource_group": resource_group,
                                           "name": name, "speed": box.speed, **kube, **grid}))
                elif output == "tsv":
                    for line in tsv_lines([[key, value] for key, value in box.env().items()]):
                        click.echo(line)
                else:
                    _print_endpoints(box, demo_hook_command(), None if cluster is None else cluster.kubeconfig)
                    if queue is not None:
                        _print_queue(box, queue, demo_hook_command())
            box.timeline.subscribe(live)
            foreground.wait(timeout=duration)
        finally:
            if cluster is not None:
                cluster.stop()
            box.stop()
            if queue is not None:
                queue.stop()
            if output == "table":
                for line in box.report():
                    click.echo(line)
                click.echo("sandbox stopped")


def _print_queue(box, queue, hook: str) -> None:  # type: ignore[no-untyped-def]
    click.echo("")
    click.echo("# --source queue: Event Grid delivers every event change to Azurite's queue (its published")
    click.echo("# development account); the central handler reading it instead of Resource Graph:")
    for key, value in queue.env().items():
        click.echo(f"export {key}={shlex.quote(value)}")
    click.echo(command("central", "run", "--subscription", box.config.subscription, "-g", box.config.resource_group,
                       "--hook", hook, "--source", "queue", "--queue-url", queue.url,
                       "--queue-connection-string-env", next(iter(queue.env()))))


def _print_endpoints(box, hook: str, kubeconfig: Optional[str] = None) -> None:  # type: ignore[no-untyped-def]
    cfg = box.config
    feature = "no terminate notification" if cfg.timeout_minutes is None else \
        f"terminate notification {to_iso(cfg.timeout_minutes)}"
    click.echo(f"sandbox: scale set {cfg.resource_group}/{cfg.name}, {cfg.instances} instances "
               f"(Uniform, Manual upgrade policy), {feature}, clock x{box.speed:g}")
    click.echo("")
    click.echo("# Point the CLI and the Azure SDK at the sandbox (this shell only):")
    for key, value in box.env().items():
        click.echo(f"export {key}={shlex.quote(value)}")
    click.echo("")
    drain = "" if kubeconfig is None else f" --kubernetes --kubeconfig {shlex.quote(kubeconfig)}"
    if kubeconfig is not None:
        click.echo("# The instances are Kubernetes nodes (the demo's pods run on them):")
        click.echo(f"kubectl --kubeconfig {shlex.quote(kubeconfig)} get nodes,pods,pdb -A -o wide")
        click.echo("")
    if cfg.publish_events:
        click.echo("# No agent needed: the set publishes its events to Resource Graph. One central handler:")
        click.echo(command("central", "run", "--subscription", cfg.subscription, "-g", cfg.resource_group, "--hook",
                           hook, *(["--kubernetes", "--kubeconfig", kubeconfig] if kubeconfig else []))
                   + "   # add --run-command FILE to run a script in each removed instance")
        click.echo(command("events", "list", "--subscription", cfg.subscription))
        click.echo("")
    click.echo("# Or one agent per instance, each in its own terminal:" if cfg.publish_events else
               "# One agent per instance, each in its own terminal:")
    for vm, url in box.imds_urls().items():
        click.echo(f"VMSS_TERMINATE_IMDS_URL={url} vmss-terminate agent run --state-file :memory: "
                   f"--hook {shlex.quote(hook)}{drain}   # {vm}")
    click.echo("")
    click.echo("# Then, with the exports above:")
    click.echo(command("status", "-g", cfg.resource_group, "-n", cfg.name))
    if cfg.timeout_minutes is None:
        click.echo(command("enable", "-g", cfg.resource_group, "-n", cfg.name, "--timeout", "PT5M"))
    click.echo(f"curl -s -H 'Metadata: true' '{next(iter(box.imds_urls().values()))}"
               f"/metadata/scheduledevents?api-version=2019-01-01'")
    click.echo("# Scale in: get a token from the sandbox's identity endpoint, then lower sku.capacity")
    click.echo("# (or POST .../delete {\"instanceIds\": [...]}, or DELETE .../virtualMachines/ID):")
    click.echo('TOKEN=$(curl -s -H "X-IDENTITY-HEADER: $IDENTITY_HEADER" '
               '"$IDENTITY_ENDPOINT?api-version=2019-08-01&resource=https://management.azure.com" '
               "| python3 -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])')")
    resource = (f"$VMSS_TERMINATE_ARM_ENDPOINT/subscriptions/$AZURE_SUBSCRIPTION_ID/resourceGroups/"
                f"{cfg.resource_group}/providers/Microsoft.Compute/virtualMachineScaleSets/{cfg.name}")
    click.echo(f'curl -s -X PATCH -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" '
               f"-d '{{\"sku\": {{\"capacity\": {max(cfg.instances - 1, 0)}}}}}' "
               f'"{resource}?api-version=2019-03-01"')
    click.echo("")
    click.echo("# Ctrl-C stops the sandbox. Timeline:")
