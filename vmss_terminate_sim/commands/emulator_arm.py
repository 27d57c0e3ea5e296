"""`vmss-terminate emulator arm`: run the local ARM emulator and its token endpoint in the foreground."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Tuple

import click

from vmss_terminate.commands.foreground import Foreground
from vmss_terminate.commands.options import int_range
from vmss_terminate.commands.output import echo_json, output_option
from vmss_terminate.control.commandline import command
from vmss_terminate.errors import UsageError
from vmss_terminate_sim.commands.options import fault_option, tls_server_context
from vmss_terminate_sim.emulator.faults import Fault

if TYPE_CHECKING:
    from vmss_terminate_sim.emulator.arm.app import ArmState

BANNER_SETS = 10  # scale sets listed in the start-up banner


_GENERATE = re.compile(r"^([0-9]{1,6}) */ *([0-9]{1,6}) *(?:x *([0-9]{1,6}))?$", re.ASCII)


def _generate(text: str) -> Dict[str, int]:
    """`--generate 200/5x20`: 200 scale sets across 5 subscriptions, 20 instances each."""
    match = _GENERATE.fullmatch(text)
    if not match or int(match.group(2)) < 1:
        raise UsageError(f"invalid --generate {text!r}: use SETS/SUBSCRIPTIONS[xINSTANCES], e.g. 200/5x20")
    config = {"scaleSets": int(match.group(1)), "subscriptions": int(match.group(2))}
    if match.group(3):
        config["capacity"] = int(match.group(3))
    return config


def _load_state(seed: Optional[Path], page_size: Optional[int], generate: Optional[str] = None,
                quotas: Tuple[str, ...] = (), unregistered: Tuple[str, ...] = ()) -> ArmState:
    from vmss_terminate_sim.emulator.arm.app import ArmState
    from vmss_terminate_sim.emulator.arm.quota import parse_spec

    state = ArmState()
    if seed is not None:
        try:
            state.load_seed(seed)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # json.JSONDecodeError is a ValueError; a missing "name" is a KeyError
            raise UsageError(f"invalid seed {str(seed)!r}: {exc}") from None
    if generate is not None:
        try:
            state.load_seed({"generate": _generate(generate)})
        except ValueError as exc:
            raise UsageError(f"invalid --generate {generate!r}: {str(exc).removeprefix('generate: ')}") from None
    try:
        state.quotas.configure([parse_spec(spec) for spec in quotas])
    except ValueError as exc:
        raise UsageError(f"invalid --quota: {exc}") from None
    for feature in unregistered:
        try:
            state.set_feature(feature, False)
        except ValueError as exc:
            raise UsageError(f"invalid --unregistered-feature {feature!r}: {exc}") from None
    if page_size is not None:
        state.page_size = page_size
    return state


def _ca_bundle(arm_url: str, tls_cert: Path, tls_ca: Optional[Path]) -> Optional[Path]:
    """The file a client needs in REQUESTS_CA_BUNDLE to trust this emulator: --tls-ca, else the
    certificate file itself when a handshake with it as the only trust anchor works (a self-signed
    certificate); None when neither is known to work."""
    if tls_ca is not None:
        return tls_ca
    import socket
    import ssl
    from urllib.parse import urlsplit

    url = urlsplit(arm_url)
    try:
        context = ssl.create_default_context(cafile=str(tls_cert))
        with socket.create_connection((url.hostname or "127.0.0.1", url.port or 443), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname=url.hostname):
                return tls_cert
    except (OSError, ssl.SSLError, ValueError):
        return None


def _document(state: ArmState, arm_url: str, token_url: str, connect: Dict[str, str],
              status: Optional[str], az: Optional[str], ca_bundle: Optional[Path] = None) -> Dict[str, object]:
    """`-o json`: what the banner says, as one document (every scale set, not only the first ten)."""
    return {"url": arm_url, "tokenUrl": token_url, "env": connect, "statusCommand": status,
            "tls": {"azCommand": az, "caBundleEnv": "REQUESTS_CA_BUNDLE",
                    "caBundle": str(ca_bundle) if ca_bundle is not None else None} if az is not None else None,
            "scaleSets": [{"id": ss.resource_id, "orchestration": ss.orchestration,
                           "upgradePolicy": ss.upgrade_policy, "instances": len(ss.instances)}
                          for ss in state.scale_sets()]}


def _banner(state: ArmState, arm_url: str, token_url: str, connect: Dict[str, str],
            status: Optional[str], az: Optional[str], ca_bundle: Optional[Path] = None) -> None:
    click.echo(f"ARM emulator:    {arm_url}")
    click.echo(f"token endpoint:  {token_url}")
    for ss in state.scale_sets()[:BANNER_SETS]:
        click.echo(f"scale set:       {ss.resource_id} ({ss.orchestration}, {ss.upgrade_policy}, "
                   f"{len(ss.instances)} instances)")
    if len(state.scale_sets()) > BANNER_SETS:
        click.echo(f"                 ... and {len(state.scale_sets()) - BANNER_SETS} more "
                   f"(vmss-terminate fleet audit lists them all)")
    click.echo("")
    click.echo("Point DefaultAzureCredential and the CLI at it (bash):")
    for name, value in connect.items():
        click.echo(f"  export {name}={value}")
    if status is not None:
        click.echo("  " + status)
    elif state.scale_sets():  # HTTPS with no CA known to work: no line that would fail as printed
        click.echo("  (a status command needs the CA that signed --tls-cert: pass --tls-ca FILE)")
    else:  # a status command needs a set: say how to have one rather than print one that fails
        click.echo("  (no scale sets yet: start with --seed FILE or --generate SETS/SUBSCRIPTIONS, "
                   "or create one with a PUT, then run vmss-terminate status -g GROUP -n NAME)")
    if az is not None:
        if ca_bundle is None:
            click.echo("Point the Azure CLI at it (with the exports above and REQUESTS_CA_BUNDLE=<CA file>):")
        else:
            click.echo("Point the Azure CLI at it (with the exports above):")
        click.echo("  " + az)
    click.echo("env as JSON: " + json.dumps(connect))


@click.command("arm")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (both servers).")
@click.option("--port", default=0, type=int_range("port", 0, 65535), help="ARM port (0: pick a free one).")
@click.option("--token-port", default=0, type=int_range("token-port", 0, 65535),
              help="Managed-identity token endpoint port (0: pick a free one).")
@click.option("--seed", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSON file with the scale sets to serve (format: examples/seed.json).")
@click.option("--page-size", type=int_range("page-size", 1, 10000), help="VM list page size (default 100).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Serve ARM over HTTPS with this PEM certificate (chain); clients must trust its CA "
                   "(e.g. REQUESTS_CA_BUNDLE). The token endpoint stays http, like App Service's.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="PEM private key for --tls-cert (omit if the certificate file holds it).")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="PEM CA that signed --tls-cert: the printed commands carry it as REQUESTS_CA_BUNDLE "
                   "(default: the certificate itself when it is self-signed).")
@click.option("--lro-retry-after", type=int_range("lro-retry-after", 1, 3600), metavar="S",
              help="Send Retry-After: S on long-running-operation answers, so clients that wait 30 s "
                   "between polls by default (az) poll every S seconds. An emulator convenience, not "
                   "something Azure promises. Default: no Retry-After. (0 would not help: "
                   "azure-core treats Retry-After: 0 as absent.)")
@click.option("--generate", metavar="SETS/SUBS[xN]",
              help="Also serve a generated estate: SETS scale sets across SUBS subscriptions (N instances each), "
                   "e.g. 200/5x20 (mix: vmss_terminate_sim/emulator/arm/fleetgen.py).")
@click.option("--quota", "quotas", multiple=True, metavar="KIND=BUCKET/PERSECOND[,subscription=ID][,compute=POLICY]",
              help="Per-subscription quota (repeatable), e.g. writes=40/20: a bucket of 40 refilled at 20/s; "
                   "writes=4/8s: a sliding window, at most 4 writes in any 8 s (ARM's per-hour limits, "
                   "Compute's windowed policies); "
                   "answers 429 + Retry-After when empty. subscription=ID limits only that subscription; "
                   "compute=POLICY makes it a Compute policy (requests under Microsoft.Compute, header "
                   "x-ms-ratelimit-remaining-resource). Off by default.")
@click.option("--latency", type=int_range("latency", 0, 60000), default=0, metavar="MS",
              help="Milliseconds added before every answer (ARM, Resource Graph and the token endpoint): "
                   "a realistic round trip for benchmarks. Default 0.")
@click.option("--unregistered-feature", "unregistered", multiple=True, metavar="NAME",
              help="Serve this Microsoft.Features feature as NotRegistered in every subscription (repeatable), "
                   "e.g. Microsoft.Compute/SendScheduledEventsPolicy (a bare NAME is a Microsoft.Compute "
                   "feature); every other feature reads Registered. `az feature register` registers it.")
@output_option(help="table: a banner for people; json: the URLs, exports, status command and scale sets "
                   "as one JSON document.")
@fault_option(answer_faults=True)
def arm_command(host: str, port: int, token_port: int, seed: Optional[Path], page_size: Optional[int],
                tls_cert: Optional[Path], tls_key: Optional[Path], tls_ca: Optional[Path],
                lro_retry_after: Optional[int],
                generate: Optional[str], quotas: Tuple[str, ...], latency: int, unregistered: Tuple[str, ...],
                output: str, faults: Tuple[Fault, ...]) -> None:
    """Serve a local Azure Resource Manager for scale sets, plus a token endpoint for
    DefaultAzureCredential (App Service managed identity). Stop with Ctrl+C."""
    from vmss_terminate_sim.emulator.arm.app import start_arm
    from vmss_terminate_sim.emulator.server import PortUnavailable

    state = _load_state(seed, page_size, generate, quotas, unregistered)
    context = tls_server_context(tls_cert, tls_key)
    if tls_ca is not None and context is None:
        raise UsageError("--tls-ca needs --tls-cert")
    with Foreground() as foreground:  # before start: a SIGTERM during start-up still stops the servers
        try:
            servers = start_arm(state, host=host, port=port, token_port=token_port, ssl_context=context,
                                lro_retry_after=lro_retry_after, latency=latency / 1000.0)
        except OSError as exc:
            raise UsageError(str(exc) if isinstance(exc, PortUnavailable)
                             else f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        for fault in faults:
            servers.arm_server.faults.add(fault)
        try:
            example = state.scale_sets()[0] if state.scale_sets() else None
            connect = dict(servers.env, VMSS_TERMINATE_ARM_ENDPOINT=servers.arm_url)
            if example is not None:
                connect["AZURE_SUBSCRIPTION_ID"] = example.subscription
            ca_bundle = _ca_bundle(servers.arm_url, tls_cert, tls_ca) if tls_cert is not None else None
            # over HTTPS the printed lines carry the CA they need, so they run as printed
            trust = f"REQUESTS_CA_BUNDLE={shlex.quote(str(ca_bundle.resolve()))} " if ca_bundle is not None else ""
            status = None
            if example is not None and (context is None or ca_bundle is not None):
                status = trust + command("status", "-g", example.resource_group, "-n", example.name,
                                         "--subscription", example.subscription, "--arm-endpoint", servers.arm_url)
            az = None
            if context is not None:  # az needs HTTPS (docs/emulators.md)
                az = ((f"export {trust.strip()} && " if trust else "") +
                      f"az cloud register -n VmssTerminateLocal --endpoint-resource-manager {servers.arm_url}/"
                      f" && az cloud set -n VmssTerminateLocal && az login --identity")
            if output == "json":
                echo_json(_document(state, servers.arm_url, servers.token_url, connect, status, az, ca_bundle))
            else:
                _banner(state, servers.arm_url, servers.token_url, connect, status, az, ca_bundle)
            foreground.wait()
        finally:
            servers.stop()
