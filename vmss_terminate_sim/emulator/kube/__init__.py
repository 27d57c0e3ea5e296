"""Local Kubernetes API server, faithful enough that `kubectl` (v1.32) gets, cordons, uncordons and
drains nodes against it, and that the agent's node drain can be tested over real HTTP. Stdlib only,
so it comes with the lean install. What tests import:

    from vmss_terminate.clock import ManualClock
    from vmss_terminate_sim.emulator.kube import KubeState, start_kube

    clock = ManualClock()
    state = KubeState(clock=clock)
    state.add_node("vmss_0", provider_id="azure:///subscriptions/s/resourceGroups/rg/providers/"
                   "Microsoft.Compute/virtualMachineScaleSets/vmss/virtualMachines/0")
    state.add_replicaset("web", 2, labels={"app": "web"})
    state.add_pod("web-a", "vmss_0", labels={"app": "web"}, owner="ReplicaSet/web", grace=10)
    state.add_pdb("web", selector={"app": "web"}, min_available=1)
    with start_kube(state, token="s3cret") as kube:     # random loopback port; http, checks the token
        kube.write_kubeconfig(tmp_path / "kubeconfig")   # for the agent's --kubeconfig
        kube.url, kube.token                     # or talk REST yourself
        ...                                      # evict; the pod terminates ...
        clock.advance(10)                        # ... and leaves once its grace period has passed
        state.wait_for(lambda s: s.find(PODS, "default", "web-a") is None, timeout=5)
        state.evictions, state.removals, state.events(), kube.server.log   # what happened

kubectl sends bearer tokens over HTTPS only: for kubectl, serve HTTPS with a test CA, e.g.
`ca = trustme.CA(); ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ca.issue_cert("127.0.0.1")
.configure_cert(ctx); start_kube(state, ssl_context=ctx, ca_pem=ca.cert_pem.bytes())` (a random token
then, and the kubeconfig trusts the CA), or plain http without a token (`start_kube(state)`).

`KubeState` holds the cluster (no HTTP; `state.py`); `KubeEmulator` is the HTTP app (`app.py`),
served by `vmss_terminate_sim.emulator.server.EmulatorServer`; `start_kube`/`KubeServers` and the seed
format are in `launch.py`. The kinds served are listed in `kinds.py`; events are stored once and
served as core v1 and events.k8s.io/v1 (`events.py`).
"""

from vmss_terminate_sim.emulator.kube.app import KubeEmulator
from vmss_terminate_sim.emulator.kube.kinds import (
    DAEMON_SETS,
    EVENTS,
    NAMESPACES,
    NEW_EVENTS,
    NODES,
    PDBS,
    PODS,
    REPLICA_SETS,
    STATEFUL_SETS,
    Kind,
)
from vmss_terminate_sim.emulator.kube.launch import KubeServers, kubeconfig, load_seed, start_kube
from vmss_terminate_sim.emulator.kube.state import EvictionRecord, KubeState, Removal
from vmss_terminate_sim.emulator.kube.status import ApiError

__all__ = [
    "DAEMON_SETS", "EVENTS", "NAMESPACES", "NEW_EVENTS", "NODES", "PDBS", "PODS", "REPLICA_SETS",
    "STATEFUL_SETS", "ApiError", "EvictionRecord", "Kind", "KubeEmulator", "KubeServers", "KubeState",
    "Removal", "kubeconfig", "load_seed", "start_kube",
]
