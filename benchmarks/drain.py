"""The agent's Kubernetes node drain, timed against the local emulators (loopback only).

For a node with N pods (grace period 0, no PodDisruptionBudget: what is measured is the agent,
not the pods' shutdown), `agent run --kubernetes` (in-process, real clock, poll interval 1 s) from
the Terminate event appearing in the IMDS emulator to the approval POST: the whole time, the drain
step's own seconds, and the Kubernetes API requests it made. Then the same node with a
PodDisruptionBudget that lets one pod go at a time, a 1 s grace period and a 1 s start-up for each
replacement pod, to show what the
eviction backoff costs when a budget serialises the drain.

usage: python benchmarks/drain.py [--pods 10,50,110]     (110: the kubelet's default max pods per node)
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from vmss_terminate.agent import Agent, AgentConfig, Decision
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.kube import KubeState, start_kube
from vmss_terminate_sim.emulator.server import EmulatorServer

VM = "myvmss_3"
NODE = "pool000003"


def drain_once(pods: int, budget: bool, tmp: Path) -> Dict[str, Any]:
    """One scale-in of one node with `pods` pods; the figures of it."""
    group = PlacementGroup(auto_start=False)
    imds_app = ImdsEmulator(group, vm_name=VM, vmss_name="myvmss", rate_limit=None)
    state = KubeState(pod_start_seconds=1.0)  # the budget opens 1 s after each eviction
    state.add_node(NODE, provider_id="azure://" + imds_app.resource_id)
    state.add_node("pool000001")
    state.add_replicaset("web", pods, labels={"app": "web"})
    for i in range(pods):
        state.add_pod(f"web-{i}", NODE, labels={"app": "web"}, owner="ReplicaSet/web", grace=1 if budget else 0)
    if budget:
        state.add_pdb("web", selector={"app": "web"}, max_unavailable=1)
    approved = threading.Event()
    found: Dict[str, Any] = {}

    def note(decision: Decision) -> None:
        if decision.kind in ("kube_drained", "kube_not_drained"):
            found.update(decision.data)
        elif decision.kind == "approval_sent":
            approved.set()

    with EmulatorServer(imds_app) as imds, start_kube(state) as kube:
        kubeconfig = kube.write_kubeconfig(tmp / "kubeconfig")
        agent = Agent(AgentConfig(imds_url=imds.url, state_file=":memory:", kubernetes=True,
                                  kubeconfig=str(kubeconfig), max_requests_per_second=50))
        agent.subscribe(note)
        stop = threading.Event()
        runner = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        runner.start()
        try:
            if not imds.log.wait_for(lambda r: any("scheduledevents" in x.path for x in r), 30):
                raise SystemExit("the agent did not start polling")
            started = time.monotonic()
            group.add_event("Terminate", [VM], not_before=time.time() + 900)
            if not approved.wait(300):
                raise SystemExit(f"no approval within 300 s ({pods} pods)")
            total = time.monotonic() - started
        finally:
            stop.set()
            runner.join(30)
        requests = len(kube.server.log.all())
    return {"pods": pods, "total": total, "drain": found.get("seconds"), "evicted": found.get("evicted"),
            "refused": found.get("refused", 0), "requests": requests}


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="10,50,110", help="comma list of pod counts per node")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.pods.split(",") if n.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        print("pods  budget        Terminate->approval  drain step  evicted  429s  API requests")
        for budget in (False, True):
            for pods in counts if not budget else counts[:1]:
                r = drain_once(pods, budget, Path(tmp))
                label = "maxUnavail 1" if budget else "none"
                print(f"{r['pods']:>4}  {label:<12}  {r['total']:>17.2f} s  {r['drain']:>8.2f} s  {r['evicted']:>7}  "
                      f"{r['refused']:>4}  {r['requests']:>12}")


if __name__ == "__main__":
    main()
