"""The Kubernetes API emulator's own costs, and kubectl drain against it (loopback only).

1. Per request, on a node with N pods of one ReplicaSet under a PodDisruptionBudget
   (`maxUnavailable: 50%`): GET one pod, list the node's pods (`fieldSelector=spec.nodeName`), and
   an allowed eviction (budget arithmetic, the pod leaving at once with grace period 0, its
   replacement scheduled on the other node); requests from one keep-alive session, median of each.
2. `kubectl drain --ignore-daemonsets` of the same node (if kubectl is installed): wall time, the
   requests the emulator answered, and the rate kubectl sent them at -- which shows whose limit the
   wall time is.

usage: python benchmarks/kube_emulator.py [--pods 110,500]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, List

import requests

from vmss_terminate_sim.emulator.kube import KubeState, start_kube


def cluster(pods: int) -> KubeState:
    state = KubeState(pod_start_seconds=0.0)  # replacements Ready at once: every eviction allowed
    state.add_node("pool000000")
    state.add_node("pool000001")
    state.add_replicaset("web", pods, labels={"app": "web"})
    for index in range(pods):
        state.add_pod(f"web-{index}", "pool000000", labels={"app": "web"}, owner="ReplicaSet/web", grace=0)
    state.add_pdb("web", selector={"app": "web"}, max_unavailable="50%")
    return state


def median_ms(calls: List[Callable[[], requests.Response]]) -> float:
    times = []
    for call in calls:
        start = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - start)
        assert answer.status_code == 200, answer.text
    return statistics.median(times) * 1000


def per_request(pods: int) -> None:
    with start_kube(cluster(pods)) as kube:
        http = requests.Session()
        http.trust_env = False
        base = kube.url + "/api/v1"
        count = min(pods // 2, 100)  # the budget allows half of them
        def get(index: int) -> Callable[[], requests.Response]:
            return lambda: http.get(f"{base}/namespaces/default/pods/web-{index}", timeout=10)

        def evict(index: int) -> Callable[[], requests.Response]:
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": f"web-{index}"}}
            return lambda: http.post(f"{base}/namespaces/default/pods/web-{index}/eviction", json=body, timeout=10)

        def listing() -> requests.Response:
            return http.get(f"{base}/pods", params={"fieldSelector": "spec.nodeName=pool000000"}, timeout=30)

        got = median_ms([get(i) for i in range(count)])
        listed = median_ms([listing] * 5)
        evicted = median_ms([evict(i) for i in range(count)])
        print(f"| {pods} | {got:.1f} ms | {listed:.0f} ms | {evicted:.1f} ms |")


def kubectl_drain(pods: int, kubectl: str) -> None:
    state = cluster(pods)
    with start_kube(state) as kube, tempfile.TemporaryDirectory() as home:
        config = kube.write_kubeconfig(Path(home) / "kubeconfig")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE") and "PROXY" not in k.upper()}
        env["HOME"] = home
        start = time.perf_counter()
        subprocess.run([kubectl, "--kubeconfig", str(config), "--cache-dir", f"{home}/cache", "drain", "pool000000",
                        "--ignore-daemonsets", "--timeout=600s"], check=True, capture_output=True, env=env,
                       timeout=900)
        wall = time.perf_counter() - start
        log = kube.server.log.all()
        busy = log[-1].at - log[0].at
        print(f"| {pods} | {wall:.1f} s | {len(log)} | {len(log) / busy:.1f} requests/s | "
              f"{sum(1 for e in state.evictions if e.code == 429)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", default="110,500", help="comma-separated pod counts")
    args = parser.parse_args()
    counts = [int(n) for n in args.pods.split(",")]
    print("| pods | GET pod | list the node's pods | eviction |")
    print("|---|---|---|---|")
    for pods in counts:
        per_request(pods)
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("kubectl not installed: drain not measured")
        return
    print()
    print("| pods | kubectl drain | requests | rate | 429s |")
    print("|---|---|---|---|---|")
    for pods in counts:
        kubectl_drain(pods, kubectl)


if __name__ == "__main__":
    main()
