"""`vmss-terminate emulator kube`: a local Kubernetes API server in the foreground, for trying the
agent's node drain and kubectl without a cluster. Thin over `vmss_terminate_sim.emulator.kube.start_kube`.

Plain http by default, without authentication (kubectl never sends a bearer token over http);
with `--tls-cert/--tls-key` it serves HTTPS and requires a bearer token (random unless `--token`),
which the printed or written kubeconfig carries.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Optional, Tuple

import click

from vmss_terminate.commands.foreground import Foreground
from vmss_terminate.commands.options import int_range
from vmss_terminate.commands.output import echo_json, output_option
from vmss_terminate.errors import UsageError
from vmss_terminate_sim.commands.options import fault_option, tls_server_context
from vmss_terminate_sim.emulator.faults import Fault

BANNER_NODES = 10


@click.command("kube")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=0, type=int_range("port", 0, 65535), help="Port (0: pick a free one).")
@click.option("--seed", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSON file with the nodes, pods, PodDisruptionBudgets, DaemonSets and ReplicaSets to serve "
                   "(Kubernetes objects as kubectl get -o json prints them, or the shorthand in "
                   "docs/emulators.md).")
@click.option("--kubeconfig-out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Write a kubeconfig for this emulator to FILE (mode 0600) instead of printing it; "
                   "use it with kubectl --kubeconfig FILE or agent run --kubeconfig FILE.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Serve HTTPS with this PEM certificate (chain); a bearer token is then required.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="PEM private key for --tls-cert (omit if the certificate file holds it).")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="PEM CA that signed --tls-cert, put in the kubeconfig (default: the kubeconfig skips "
                   "certificate verification).")
@click.option("--token", default=None, metavar="TOKEN",
              help="Bearer token every request must carry (default: a random one with --tls-cert, none over "
                   "http, where kubectl would not send it).")
@output_option(help="table: a banner for people; json: the endpoint and kubeconfig as one JSON document.")
@fault_option()
def kube_command(host: str, port: int, seed: Optional[Path], kubeconfig_out: Optional[Path],
                 tls_cert: Optional[Path], tls_key: Optional[Path], tls_ca: Optional[Path], token: Optional[str],
                 output: str, faults: Tuple[Fault, ...]) -> None:
    """Serve a local Kubernetes API (nodes, pods, evictions, PodDisruptionBudgets) until Ctrl-C.

    \b
    vmss-terminate emulator kube --seed examples/kube-seed.json --kubeconfig-out kubeconfig
    kubectl --kubeconfig kubeconfig drain vmss000000 --ignore-daemonsets --delete-emptydir-data
    """
    from vmss_terminate_sim.emulator.kube import KubeState, load_seed, start_kube
    from vmss_terminate_sim.emulator.server import PortUnavailable

    state = KubeState()
    if seed is not None:
        try:
            load_seed(state, seed)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"invalid seed {str(seed)!r}: {exc}") from None
    context = tls_server_context(tls_cert, tls_key)
    if tls_ca is not None and context is None:
        raise UsageError("--tls-ca needs --tls-cert")
    if token is not None and not token.strip():
        raise UsageError("--token must not be empty")
    ca_pem = tls_ca.read_bytes() if tls_ca is not None else None
    with Foreground() as foreground:  # before start: a SIGTERM during start-up still stops the server
        try:
            servers = start_kube(state, host=host, port=port, token=token, ssl_context=context, ca_pem=ca_pem)
        except OSError as exc:
            raise UsageError(str(exc) if isinstance(exc, PortUnavailable)
                             else f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        for fault in faults:
            servers.server.faults.add(fault)
        try:
            if kubeconfig_out is not None:
                servers.write_kubeconfig(kubeconfig_out)
            if output == "json":
                echo_json({"url": servers.url, "kubeconfig": str(kubeconfig_out) if kubeconfig_out else None,
                           **({} if kubeconfig_out else {"kubeconfigDocument": servers.kubeconfig()})})
            else:
                _banner(servers, kubeconfig_out, tls_ca)
            foreground.wait()
        finally:
            servers.stop()


def _banner(servers: "object", kubeconfig_out: Optional[Path], tls_ca: Optional[Path]) -> None:
    from vmss_terminate_sim.emulator.kube import NODES, KubeServers

    assert isinstance(servers, KubeServers)
    nodes = servers.state.list(NODES)
    click.echo(f"Kubernetes API emulator: {servers.url}" + (" (bearer token required)" if servers.token else ""))
    for node in nodes[:BANNER_NODES]:
        click.echo(f"node:  {node['metadata']['name']}  ({len(servers.state.pods_on(node['metadata']['name']))} pods)")
    if len(nodes) > BANNER_NODES:
        click.echo(f"       ... and {len(nodes) - BANNER_NODES} more")
    if kubeconfig_out is None:
        click.echo("kubeconfig (or write it to a file with --kubeconfig-out FILE):")
        click.echo(json.dumps(servers.kubeconfig(), indent=2))
    else:
        click.echo(f"kubeconfig written to {kubeconfig_out}")
    if servers.token and servers.url.startswith("http:"):
        # kubectl refuses to send a bearer token over plain http, and this server answers 401 without
        # one: no kubectl line can work, so say why instead of printing one that fails
        click.echo("No kubectl command works with this server: kubectl sends a bearer token over HTTPS only, "
                   "and --token makes every request need one. For kubectl, drop --token (plain http, no "
                   "authentication) or serve HTTPS with --tls-cert/--tls-key.")
        click.echo("Press Ctrl-C to stop.")
        return
    click.echo("Try it:")
    kubectl = f"kubectl {_connection(servers, kubeconfig_out, tls_ca)}"
    click.echo(f"  {kubectl} get nodes")
    if nodes:
        click.echo(f"  {kubectl} drain {shlex.quote(nodes[0]['metadata']['name'])} "
                   f"--ignore-daemonsets --delete-emptydir-data")
    click.echo("Press Ctrl-C to stop.")


def _connection(servers: "object", kubeconfig_out: Optional[Path], tls_ca: Optional[Path]) -> str:
    """kubectl flags that reach this emulator as printed (no placeholder to fill in)."""
    from vmss_terminate_sim.emulator.kube import KubeServers

    assert isinstance(servers, KubeServers)
    if kubeconfig_out is not None:
        return f"--kubeconfig {shlex.quote(str(kubeconfig_out))}"
    flags = f"--server {servers.url}"
    if servers.url.startswith("https:"):
        flags += f" --certificate-authority {shlex.quote(str(tls_ca))}" if tls_ca else " --insecure-skip-tls-verify"
    if servers.token:
        flags += f" --token {shlex.quote(servers.token)}"
    return flags
