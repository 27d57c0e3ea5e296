"""`vmss-terminate demo --kubernetes` at its largest size, profiled from its own timeline (loopback only).

Runs the demo's library API (`run_demo`) `--runs` times with `--instances` / `--scale-in` (default 20
and 10: issue 27 item 10) and prints per run: the verdict, the wall time, scale-in to last deletion
in sandbox seconds (the agents must approve by NotBefore - 15 s = 285 s of a PT5M notice), the VMs
approved without draining, the evictions allowed and refused, the sandbox seconds between allowed
evictions (all drains share the demo's one-at-a-time budget, so these gaps add up), the agents' poll
lag (event published -> drain hook started) and drain hook time, and the peak thread count.

usage: python benchmarks/demo_drain.py [--runs 3] [--instances 20] [--scale-in 10] [--speed 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Dict, List, Optional

from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.kubernetes.drain import DRAIN_STEP
from vmss_terminate_sim.sandbox.demo import DemoOptions, DemoResult, run_demo
from vmss_terminate_sim.sandbox.timeline import Entry, hook_of


def _spread(values: List[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.0f}/{statistics.median(values):.0f}/{max(values):.0f}"


def _first(entries: List[Entry], kind: str, hooks: bool) -> Dict[str, float]:
    """Sandbox second of each VM's first agent `kind` entry for its drain hook (not the node drain)."""
    seen: Dict[str, float] = {}
    for e in entries:
        if e.source == "agent" and e.kind == kind and (hook_of(e) != DRAIN_STEP) == hooks:
            seen.setdefault(e.vm, e.sandbox_s)
    return seen


def profile(result: DemoResult) -> Dict[str, str]:
    entries = result.entries
    published = {e.vm: e.sandbox_s for e in entries if e.kind == "event_published"}
    started, finished = _first(entries, D.HOOK_STARTED, True), _first(entries, D.HOOK_FINISHED, True)
    evicted = sorted(e.sandbox_s for e in entries if e.source == "agent" and e.kind == D.KUBE_EVICTED)
    t = result.totals
    return {
        "ok": "ok" if result.ok else "FAILED",
        "last deletion": f"{t.get('scale_in_to_deleted_sandbox_s', float('nan')):.0f} s",
        "undrained": str(t.get("approved_without_draining")),
        "evicted/429": f"{t.get('pods_evicted')}/{t.get('evictions_refused')}",
        "eviction gaps": _spread([b - a for a, b in zip(evicted, evicted[1:])]),
        "poll lag": _spread([started[vm] - published[vm] for vm in started if vm in published]),
        "hook": _spread([finished[vm] - started[vm] for vm in finished if vm in started]),
    }


def _sample_threads(peak: List[int], done: threading.Event) -> None:
    """The highest thread count seen until `done`, every 50 ms (a sampling period, not synchronisation)."""
    while not done.wait(0.05):
        peak[0] = max(peak[0], threading.active_count())


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--scale-in", type=int, default=10)
    parser.add_argument("--speed", type=float, default=60.0)
    args = parser.parse_args(argv)
    options = DemoOptions(instances=args.instances, scale_in=args.scale_in, kubernetes=True, speed=args.speed)
    print(f"demo --kubernetes --instances {args.instances} --scale-in {args.scale_in} --speed {args.speed:g}; "
          "sandbox seconds as min/median/max")
    print("run  verdict  wall     last deletion  undrained  evicted/429  eviction gaps  poll lag  hook      "
          "threads  load")
    for run in range(1, args.runs + 1):
        peak, done = [threading.active_count()], threading.Event()
        sampler = threading.Thread(target=_sample_threads, args=(peak, done), daemon=True)
        sampler.start()
        began = time.monotonic()
        result = run_demo(options)
        wall = time.monotonic() - began
        done.set()
        sampler.join(5)
        p = profile(result)
        load = f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "-"
        print(f"{run:>3}  {p['ok']:<7}  {wall:5.2f} s  {p['last deletion']:>13}  {p['undrained']:>9}  "
              f"{p['evicted/429']:>11}  {p['eviction gaps']:>13}  {p['poll lag']:>8}  {p['hook']:<8}  "
              f"{peak[0]:>7}  {load}")


if __name__ == "__main__":
    main()
