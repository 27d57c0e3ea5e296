"""Start the Kubernetes API emulator: the Python API behind `vmss-terminate emulator kube`, and a
kubeconfig that points kubectl (or the agent's `--kubeconfig`) at it.

Seed files are JSON, either Kubernetes objects as `kubectl get -o json` prints them (`{"items":
[...]}` or a list, each with `apiVersion` and `kind`) or the shorthand below, or both in one file:

    {"nodes": [{"name": "vmss_0", "providerID": "azure:///subscriptions/.../virtualMachines/0"}],
     "replicaSets": [{"name": "web-7d9f", "replicas": 2, "labels": {"app": "web"}}],
     "daemonSets": [{"name": "log-agent", "namespace": "kube-system"}],
     "pods": [{"name": "web-7d9f-a", "node": "vmss_0", "labels": {"app": "web"},
               "owner": "ReplicaSet/web-7d9f", "grace": 5},
              {"name": "log-agent-x", "node": "vmss_0", "namespace": "kube-system",
               "owner": "DaemonSet/log-agent"}],
     "podDisruptionBudgets": [{"name": "web", "selector": {"app": "web"}, "minAvailable": 1}]}

Shorthand pod keys: name, node, namespace, labels, owner (KIND/NAME), grace, ready, phase,
mirror, emptyDir, tolerations; node keys: name, providerID, labels, unschedulable, taints, ready.
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Union

from vmss_terminate.clock import Clock
from vmss_terminate_sim.emulator.kube.app import KubeEmulator
from vmss_terminate_sim.emulator.kube.state import KubeState
from vmss_terminate_sim.emulator.server import EmulatorServer, RunningServers

Seed = Union[str, Path, Dict[str, Any], List[Any]]

_NODE_KEYS = {"name", "providerID", "labels", "unschedulable", "taints", "ready"}
_POD_KEYS = {"name", "node", "namespace", "labels", "owner", "grace", "ready", "phase", "mirror", "emptyDir",
             "tolerations"}


def load_seed(state: KubeState, seed: Seed) -> None:
    """Add a seed's objects to `state`. Raises ValueError (bad JSON, unknown keys or kinds) or OSError."""
    data: Any = seed
    if isinstance(seed, (str, Path)):
        with open(seed, encoding="utf-8") as handle:
            try:
                data = json.load(handle)
            except RecursionError:  # a document nested deeper than the parser's stack
                raise ValueError("JSON nested too deeply") from None
    if isinstance(data, list):
        data = {"items": data}
    if not isinstance(data, dict):
        raise ValueError("a seed is a JSON object or a list of Kubernetes objects")
    known = {"items", "kind", "apiVersion", "metadata", "nodes", "pods", "podDisruptionBudgets", "daemonSets",
             "replicaSets", "namespaces"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown seed keys: {', '.join(unknown)}")
    for name in data.get("namespaces", []):
        state.ensure_namespace(str(name))
    for node in data.get("nodes", []):
        _check_keys("node", node, _NODE_KEYS)
        state.add_node(node["name"], provider_id=node.get("providerID"), labels=node.get("labels"),
                       unschedulable=bool(node.get("unschedulable")), taints=node.get("taints", ()),
                       ready=node.get("ready", True))
    for item in data.get("daemonSets", []):
        state.add_daemonset(item["name"], namespace=item.get("namespace", "default"), labels=item.get("labels"))
    for item in data.get("replicaSets", []):
        state.add_replicaset(item["name"], int(item.get("replicas", 1)), namespace=item.get("namespace", "default"),
                             labels=item.get("labels"))
    for pod in data.get("pods", []):
        _check_keys("pod", pod, _POD_KEYS)
        state.add_pod(pod["name"], pod.get("node"), namespace=pod.get("namespace", "default"),
                      labels=pod.get("labels"), owner=pod.get("owner"), grace=pod.get("grace"),
                      ready=pod.get("ready", True), phase=pod.get("phase", "Running"), mirror=bool(pod.get("mirror")),
                      empty_dir=bool(pod.get("emptyDir")), tolerations=pod.get("tolerations", ()))
    for pdb in data.get("podDisruptionBudgets", []):
        state.add_pdb(pdb["name"], namespace=pdb.get("namespace", "default"), selector=pdb.get("selector"),
                      min_available=pdb.get("minAvailable"), max_unavailable=pdb.get("maxUnavailable"))
    for obj in data.get("items", []):
        state.add_object(obj)


def _check_keys(what: str, item: Any, allowed: Set[str]) -> None:
    if not isinstance(item, dict) or "name" not in item:
        raise ValueError(f"each {what} needs a name")
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise ValueError(f"{what} {item['name']!r}: unknown keys {', '.join(unknown)}")


def kubeconfig(server: str, token: Optional[str], ca_pem: Optional[bytes] = None,
               name: str = "vmss-terminate-emulator") -> Dict[str, Any]:
    """A kubeconfig (as a dict; JSON is valid YAML, so kubectl reads `json.dumps` of it). An https
    server is trusted through `ca_pem` (`certificate-authority-data`), else not verified."""
    user: Dict[str, Any] = {"token": token} if token else {}
    cluster: Dict[str, Any] = {"server": server}
    if server.startswith("https:"):
        if ca_pem:
            cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode("ascii")
        else:
            cluster["insecure-skip-tls-verify"] = True
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }


@dataclass
class KubeServers(RunningServers):
    """A running Kubernetes API emulator. Stop with `stop()` or use as a context manager."""

    state: KubeState
    app: KubeEmulator
    server: EmulatorServer
    ca_pem: Optional[bytes] = None  # the CA of an https server's certificate, for kubeconfig()

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> Optional[str]:
        return self.app.token

    def kubeconfig(self) -> Dict[str, Any]:
        return kubeconfig(self.url, self.token, self.ca_pem)

    def write_kubeconfig(self, path: Union[str, Path]) -> Path:
        """Write the kubeconfig (mode 0600: it holds the token) and return its path."""
        target = Path(path)
        target.touch(mode=0o600, exist_ok=True)
        target.chmod(0o600)
        target.write_text(json.dumps(self.kubeconfig(), indent=2) + "\n", encoding="utf-8")
        return target

    def reset(self, state: Optional[KubeState] = None) -> KubeState:
        """Serve `state` (a fresh one when None) with an empty request log and no faults, so a test
        suite can share one running server."""
        self.server.reset()
        self.state = self.app.state = state if state is not None else KubeState()
        self.state.ca_pem = self.ca_pem
        return self.state

    def stop(self) -> None:
        self.server.stop()


def start_kube(
    state: Optional[KubeState] = None,
    seed: Optional[Seed] = None,
    host: str = "127.0.0.1",
    port: int = 0,
    token: Union[str, None, bool] = None,
    clock: Optional[Clock] = None,
    ssl_context: Optional[ssl.SSLContext] = None,
    ca_pem: Optional[bytes] = None,
) -> KubeServers:
    """Start the emulator in a background thread; returns it running.

    `ssl_context` serves HTTPS (e.g. a `trustme` CA's certificate; give `ca_pem` so `kubeconfig()`
    trusts it). `token`: a string every request must carry as `Authorization: Bearer`; True makes a
    random one; None (default) means a random one over HTTPS and no authentication over plain http
    -- kubectl never sends a bearer token over http, so a token there would lock kubectl out.
    Either way the token is in `kubeconfig()`. `clock` drives grace periods (a `ManualClock` lets a
    test decide when evicted pods leave).
    """
    if state is None:
        state = KubeState(clock=clock) if clock is not None else KubeState()
    elif clock is not None:
        state.clock = clock
    state.ca_pem = ca_pem
    if seed is not None:
        load_seed(state, seed)
    if token is None:
        token = ssl_context is not None
    secret = secrets.token_urlsafe(24) if token is True else (token or None)
    app = KubeEmulator(state, secret)
    server = EmulatorServer(app, host=host, port=port, ssl_context=ssl_context).start()
    app.server_address = f"{server.address}:{server.port}"
    return KubeServers(state, app, server, ca_pem)
