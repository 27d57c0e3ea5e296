"""Side by side with the real Azure CLI and the previous release, in the same run: `enable` on one
scale set and `fleet rollout` on 20 sets, each client a process of its own against one ARM emulator
(HTTPS, `--latency`, `Retry-After` on long-running operations: what `emulator arm --latency 50
--lro-retry-after 1` serves), runs alternated and repeated, min and median printed.

    python benchmarks/vs_az.py enable  [--instances 100] [--batch-size 100%] [--runs 5]
    python benchmarks/vs_az.py rollout [--sets 20] [--instances 50] [--subscriptions 4] [--runs 3]

Clients: `az` (tests/az/install_az.py installs it: `az vmss update --enable-terminate-notification
true --terminate-notification-time 10` then `az vmss update-instances --instance-ids '*'`; for the
rollout, that pair for every set that needs it, `--concurrency` sets at a time), this checkout's
`vmss-terminate`, and the previous release's (`--previous DIR`: a `git worktree` of it, run with
this venv: `git worktree add --detach /tmp/prev 6cf9a30`). Every run starts from the same fresh
estate. Printed per client: wall time, ARM requests by kind (from the emulator's log), token
requests, and CPU of the client process(es) (`RUSAGE_CHILDREN`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from vmss_terminate_sim.emulator.arm import fleetgen
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState, start_arm

SUB = "00000000-0000-0000-0000-0000000000a2"
CLOUD = "VmssTerminateBench"
QUIET_AZ = {"AZURE_CORE_COLLECT_TELEMETRY": "false", "AZURE_CORE_SURVEY_MESSAGE": "false",
            "AZURE_CORE_ERROR_RECOMMENDATION": "off", "AZURE_CORE_INSTANCE_DISCOVERY": "false",
            "AZURE_EXTENSION_USE_DYNAMIC_INSTALL": "no", "AZURE_CORE_NO_COLOR": "true"}


def _az() -> str:
    found = os.environ.get("VMSS_TERMINATE_AZ") or str(Path.home() / ".cache/vmss-terminate/az-venv/bin/az")
    if not Path(found).exists():
        found = shutil.which("az") or ""
    if not found:
        sys.exit("az not found: python3 tests/az/install_az.py")
    return found


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kind(method: str, path: str) -> str:
    lowered = path.lower()
    if "resourcegraph" in lowered:
        return "graph"
    if lowered.rstrip("/").endswith("/subscriptions"):
        return "subscriptions"
    if "/operations/" in lowered:
        return "status"
    if lowered.endswith("/virtualmachines"):
        return "vm-list"
    if lowered.endswith("/manualupgrade"):
        return "manualupgrade"
    if "metadata/endpoints" in lowered:
        return "metadata"
    return f"{method} set"


class World:
    """The emulator (HTTPS, in this process: the clients are processes of their own), az set up
    against it once, and how to run each client."""

    def __init__(self, args: argparse.Namespace, seed: Dict[str, Any]) -> None:
        import trustme

        self.args, self.seed = args, seed
        self.tmp = Path(tempfile.mkdtemp(prefix="vs-az-"))
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(self.tmp / "ca.pem"))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        self.servers: ArmServers = start_arm(self._fresh(), ssl_context=context, latency=args.latency,
                                             lro_retry_after=args.retry_after)
        self.url = self.servers.arm_url
        proxy = f"http://127.0.0.1:{_closed_port()}"  # anything not on loopback fails, never leaves
        env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
        env.update(self.servers.env)
        env.update(QUIET_AZ, HOME=str(self.tmp / "home"), AZURE_CONFIG_DIR=str(self.tmp / "azure"),
                   REQUESTS_CA_BUNDLE=str(self.tmp / "ca.pem"), HTTP_PROXY=proxy, HTTPS_PROXY=proxy,
                   NO_PROXY="127.0.0.1,localhost")
        self.env = env
        self.az = _az()
        self.run_az("cloud", "register", "-n", CLOUD, "--endpoint-resource-manager", self.url + "/")
        self.run_az("cloud", "set", "-n", CLOUD)
        self.run_az("login", "--identity")

    def _fresh(self) -> ArmState:
        state = ArmState()
        state.load_seed(self.seed)
        return state

    def reset(self) -> None:
        self.servers.reset(self._fresh())

    def run_az(self, *args: str) -> None:
        done = subprocess.run([self.az, *args, "--output", "none"], env=self.env, capture_output=True, text=True,
                              timeout=600)
        if done.returncode:
            raise SystemExit(f"az {' '.join(args)} exited {done.returncode}: {done.stderr[-1500:]}")

    def run_ours(self, checkout: Optional[str], *args: str) -> None:
        env = dict(self.env)
        if checkout:
            env["PYTHONPATH"] = checkout
        done = subprocess.run([sys.executable, "-m", "vmss_terminate", *args, "--arm-endpoint", self.url],
                              env=env, capture_output=True, text=True, timeout=900, cwd=checkout or None)
        if done.returncode:
            raise SystemExit(f"vmss-terminate {' '.join(args)} ({checkout or 'this checkout'}) exited "
                             f"{done.returncode}: {done.stderr[-1500:]}")

    def measure(self, run: Callable[[], None]) -> Dict[str, Any]:
        self.reset()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        run()
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        log = self.servers.arm_server.log.all()
        kinds = Counter(_kind(r.method, r.path) for r in log)
        return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                "requests": len(log), "kinds": dict(kinds), "tokens": len(self.servers.token_server.log.all())}

    def close(self) -> None:
        self.servers.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _enable_seed(args: argparse.Namespace) -> Dict[str, Any]:
    return {"lroPolls": args.lro_polls, "subscriptions": [{"subscriptionId": SUB, "displayName": "Bench"}],
            "scaleSets": [{"subscription": SUB, "resourceGroup": "rg", "name": "big", "capacity": args.instances,
                           "upgradePolicy": "Manual"}]}


def _rollout_seed(args: argparse.Namespace) -> Dict[str, Any]:
    return {"lroPolls": args.lro_polls, "generate": {"scaleSets": args.sets, "subscriptions": args.subscriptions,
                                                     "capacity": args.instances, "special": False}}


def _rollout_targets(world: World) -> List[Tuple[str, str, str]]:
    """(subscription, group, name) of every set a rollout changes: the sets az is run for."""
    world.reset()
    state = world.servers.state
    out = []
    with state.lock:
        for ss in state.scale_sets():
            tnp = (ss.scheduled_events_profile or {}).get("terminateNotificationProfile") or {}
            stale = any(not inst.latest_model_applied for inst in ss.live_instances())
            if tnp.get("enable") is not True or tnp.get("notBeforeTimeout") != "PT10M" or stale:
                out.append((ss.subscription, ss.resource_group, ss.name))
    return out


def _summary(name: str, runs: List[Dict[str, Any]]) -> str:
    walls, cpus = [r["wall"] for r in runs], [r["cpu"] for r in runs]
    last = runs[-1]
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(last["kinds"].items()))
    return (f"  {name:<10} wall min {min(walls):6.2f} s, median {statistics.median(walls):6.2f} s; client CPU "
            f"median {statistics.median(cpus):5.2f} s; {last['requests']} ARM requests ({kinds}) + "
            f"{last['tokens']} token")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("scenario", choices=["enable", "rollout"])
    parser.add_argument("--instances", type=int, default=None, help="enable: 100; rollout: 50 per set")
    parser.add_argument("--sets", type=int, default=20)
    parser.add_argument("--subscriptions", type=int, default=4)
    parser.add_argument("--batch-size", default="100%", help="enable: ours and the previous release's")
    parser.add_argument("--concurrency", type=int, default=20, help="rollout: sets at a time (az: processes)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--retry-after", type=int, default=1)
    parser.add_argument("--lro-polls", type=int, default=1)
    parser.add_argument("--previous", default=None, help="a checkout of the previous release (git worktree)")
    parser.add_argument("--clients", default="az,ours,previous")
    args = parser.parse_args()
    if args.instances is None:
        args.instances = 100 if args.scenario == "enable" else 50
    clients = [c for c in args.clients.split(",") if c != "previous" or args.previous]
    seed = _enable_seed(args) if args.scenario == "enable" else _rollout_seed(args)
    world = World(args, seed)
    try:
        runners: Dict[str, Callable[[], None]] = {}
        if args.scenario == "enable":
            common = ("enable", "-g", "rg", "-n", "big", "--timeout", "10", "--subscription", SUB)

            def az_enable() -> None:
                world.run_az("vmss", "update", "-g", "rg", "-n", "big", "--subscription", SUB,
                             "--enable-terminate-notification", "true", "--terminate-notification-time", "10")
                world.run_az("vmss", "update-instances", "-g", "rg", "-n", "big", "--subscription", SUB,
                             "--instance-ids", "*")

            runners["az"] = az_enable
            runners["ours"] = lambda: world.run_ours(None, *common, "--batch-size", args.batch_size)
            runners["previous"] = lambda: world.run_ours(args.previous, *common, "--batch-size", args.batch_size)
            what = f"enable, one {args.instances}-instance Manual set, batch {args.batch_size} (az: update-instances '*')"
        else:
            targets = _rollout_targets(world)

            def az_set(target: Tuple[str, str, str]) -> None:
                sub, group, name = target
                world.run_az("vmss", "update", "-g", group, "-n", name, "--subscription", sub,
                             "--enable-terminate-notification", "true", "--terminate-notification-time", "10")
                world.run_az("vmss", "update-instances", "-g", group, "-n", name, "--subscription", sub,
                             "--instance-ids", "*")

            def az_all() -> None:
                with ThreadPoolExecutor(args.concurrency) as pool:
                    list(pool.map(az_set, targets))

            subs = [a for s in range(args.subscriptions) for a in ("--subscription", fleetgen.subscription_id(s))]
            fleet = ("fleet", "rollout", "--timeout", "10", "--concurrency", str(args.concurrency), *subs)
            runners["az"] = az_all
            runners["ours"] = lambda: world.run_ours(None, *fleet)
            runners["previous"] = lambda: world.run_ours(args.previous, *fleet)
            what = (f"fleet rollout, {args.sets} sets x {args.instances} instances in {args.subscriptions} "
                    f"subscriptions ({len(targets)} to change; az: update + update-instances '*' per set, "
                    f"{args.concurrency} sets at a time)")
        results: Dict[str, List[Dict[str, Any]]] = {c: [] for c in clients}
        load = os.getloadavg()
        for number in range(args.runs):  # alternated: each round runs every client once, order rotated
            order = clients[number % len(clients):] + clients[:number % len(clients)]
            for client in order:
                results[client].append(world.measure(runners[client]))
        print(f"{what}; {args.latency * 1000:.0f} ms per request, Retry-After {args.retry_after} s on operations, "
              f"each operation InProgress for {args.lro_polls} status read(s); {args.runs} alternated runs; load "
              f"average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after (2 cores)")
        for client in clients:
            print(_summary(client, results[client]))
        if "az" in results:
            az = statistics.median(r["wall"] for r in results["az"])
            for client in clients:
                if client != "az":
                    mine = [r["wall"] for r in results[client]]
                    print(f"  {client} / az: median {statistics.median(mine) / az:.2f}x "
                          f"(min/min {min(mine) / min(r['wall'] for r in results['az']):.2f}x)")
        if args.scenario == "rollout":
            sets = max(1, len(_rollout_targets(world)))
            for client in clients:
                last = results[client][-1]
                per_set = (last["requests"] - last["kinds"].get("graph", 0) - last["kinds"].get("subscriptions", 0)
                           - last["kinds"].get("metadata", 0))
                print(f"  {client}: {per_set / sets:.1f} ARM requests per set changed (besides subscription "
                      f"lists, Resource Graph pages and cloud metadata)")
        print(json.dumps({c: [{k: v for k, v in r.items() if k != "kinds"} for r in rs] for c, rs in results.items()}))
    finally:
        world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
