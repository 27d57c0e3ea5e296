"""A Kubernetes cluster for the sandbox: a Kubernetes API emulator whose nodes are the sandbox's VMs.

Each instance is a node named like a Uniform scale set's computer name (`myvmss000003`: the prefix
and the instance id in base 36 on six digits) with `spec.providerID` = `azure://` + the instance's
resource ID, as cloud-provider-azure sets it -- so an agent run with `--kubernetes` finds its node
by providerID, the way it does on a CAPZ cluster. A scale-out adds a node; a deletion that completes
deletes it (its pods go with it; the emulator's controllers recreate ReplicaSet pods on the nodes
left). Everything runs on the sandbox clock, so pods' grace periods pass at the sandbox's speed.

    with Sandbox(SandboxConfig(instances=4, timeout_minutes=5)) as sb:
        cluster = SandboxCluster(sb).start()
        cluster.add_demo_workload()
        SandboxAgents(sb, kubernetes=True, kubeconfig=cluster.kubeconfig)   # one agent per instance
        ...
        cluster.stop()
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from vmss_terminate_sim.emulator.arm.shapes import computer_name_suffix
from vmss_terminate_sim.emulator.kube import NODES, KubeServers, KubeState, start_kube
from vmss_terminate_sim.sandbox.environment import Sandbox
from vmss_terminate_sim.sandbox.timeline import Entry

DEMO_GRACE_S = 20  # terminationGracePeriodSeconds of the demo's web pods (sandbox seconds)


def computer_name(scale_set: str, instance_id: str) -> str:
    """A Uniform scale set instance's computer name: the prefix plus the instance id in base 36,
    six digits (`myvmss` 3 -> `myvmss000003`), lower case as a node name must be."""
    prefix = "".join(c for c in scale_set.lower() if c.isalnum() or c == "-")
    return prefix + computer_name_suffix(instance_id)


def add_demo_workload(state: KubeState, nodes: Sequence[str]) -> None:
    """On every node: two pods of a `web` ReplicaSet under a PodDisruptionBudget that lets one go
    at a time (`maxUnavailable: 1`), so a drain's second eviction waits until the first pod's
    replacement is Ready (`KubeState.pod_start_seconds`); and a `node-logs` DaemonSet pod, which no
    drain evicts. Every drain of the cluster shares the budget: N nodes drained at once take about
    2N start-ups of evictions, plus one grace period for the last pods to leave."""
    state.add_replicaset("web", 2 * len(nodes), labels={"app": "web"})
    state.add_daemonset("node-logs", namespace="kube-system", labels={"app": "node-logs"})
    for node in nodes:
        for slot in ("a", "b"):
            state.add_pod(f"web-{node}-{slot}", node, labels={"app": "web"}, owner="ReplicaSet/web",
                          grace=DEMO_GRACE_S)
        state.add_pod(f"node-logs-{node}", node, namespace="kube-system", labels={"app": "node-logs"},
                      owner="DaemonSet/node-logs")
    state.add_pdb("web", selector={"app": "web"}, max_unavailable=1)


class SandboxCluster:
    """The Kubernetes API emulator linked to a running sandbox (see the module docstring)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.state = KubeState(clock=sandbox.clock)
        self.servers: Optional[KubeServers] = None
        self.nodes: Dict[str, str] = {}  # VM name -> node name
        self._dir: Optional[str] = None
        self._lock = threading.Lock()

    def start(self) -> "SandboxCluster":
        cfg = self.sandbox.config
        self.servers = start_kube(self.state, host=cfg.host)  # plain http on loopback: kubectl works too
        for name in self.sandbox.vm_names():
            self._add_node(name)
        self.sandbox.timeline.subscribe(self._on_entry)
        self._dir = tempfile.mkdtemp(prefix="vmss-terminate-sandbox-kube-")
        self.servers.write_kubeconfig(Path(self._dir) / "kubeconfig")
        self.sandbox.timeline.record("sandbox", "kubernetes", "", f"Kubernetes API at {self.url}: "
                                     f"{len(self.nodes)} nodes, one per instance (spec.providerID = the VM)")
        return self

    @property
    def url(self) -> str:
        if self.servers is None:
            raise RuntimeError("the sandbox cluster is not running: call start() first")
        return self.servers.url

    @property
    def kubeconfig(self) -> str:
        """A kubeconfig for the agents' `--kubeconfig` (and for `kubectl --kubeconfig`)."""
        if self._dir is None:
            raise RuntimeError("the sandbox cluster is not running: call start() first")
        return str(Path(self._dir) / "kubeconfig")

    def node_of(self, vm_name: str) -> str:
        with self._lock:
            return self.nodes[vm_name]

    def pods_on(self, vm_name: str) -> List[str]:
        return sorted(p["metadata"]["name"] for p in self.state.pods_on(self.node_of(vm_name)))

    def add_demo_workload(self) -> None:
        """`add_demo_workload(state, nodes)` on every node of the cluster."""
        add_demo_workload(self.state, [self.node_of(name) for name in self.sandbox.vm_names()])

    def stop(self) -> None:
        if self.servers is not None:
            self.servers.stop()
            self.servers = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "SandboxCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the links --------------------------------------------------------------------------------

    def _add_node(self, vm_name: str) -> None:
        instance = self.sandbox.instance(vm_name)
        if instance is None:
            return
        node = computer_name(self.sandbox.config.name, instance.instance_id)
        self.state.add_node(node, provider_id="azure://" + instance.resource_id,
                            labels={"node.kubernetes.io/instance-type": "Standard_D2s_v3"})
        with self._lock:
            self.nodes[vm_name] = node

    def _on_entry(self, entry: Entry) -> None:
        if entry.source != "sandbox":
            return
        if entry.kind == "instance_added":
            self._add_node(entry.vm)
        elif entry.kind == "deleted":
            with self._lock:
                node = self.nodes.pop(entry.vm, None)
            if node is not None and self.state.find(NODES, "", node) is not None:
                self.state.delete(NODES, "", node)  # its pods go with it (the pod garbage collector)
