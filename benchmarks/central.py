"""The central handler over Resource Graph, against the ARM emulator (loopback, real azure-identity
chain through the emulator's token endpoint, real azure-mgmt-resourcegraph).

1. Latency: an event added to a scale set's placement group (the moment the ARM emulator can
   publish its maintenanceresources row) -> the Maintenance RP acknowledge POST received by the
   emulator, no hook, `central run` polling every `--poll` seconds. Events are published at random
   moments of the poll cycle; median and max over `--events`.
2. Cost of one poll over an estate of `--sets` scale sets with `--pending` pending events: ARM
   requests (Resource Graph pages, the sets' rows) and the client thread's CPU time
   (`time.thread_time`: the emulator serves on other threads), for the first poll (the events'
   sets are read) and a steady poll (events already handled, sets cached).

usage: python benchmarks/central.py [--poll 2] [--events 10] [--sets 10000] [--pending 50]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
from typing import Any, Dict, List

from vmss_terminate.central.handler import HandlerConfig
from vmss_terminate.central.run import build
from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.control.connection import Connection
from vmss_terminate.fleet.scope import Scope
from vmss_terminate_sim.emulator.arm.app import ArmState, start_arm
from vmss_terminate_sim.emulator.imds.events import PlacementGroup

POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}
SUB = "00000000-0000-0000-0000-000000000000"


def _env(arm: Any) -> None:
    for key in list(os.environ):
        if "PROXY" in key.upper():
            del os.environ[key]
    os.environ.update(arm.env)


def latency(poll: float, events: int) -> Dict[str, Any]:
    state = ArmState()
    ss = state.add_scale_set(SUB, "rg", "web", capacity=3, extra_properties={"scheduledEventsPolicy": POLICY})
    group = PlacementGroup(clock=SYSTEM_CLOCK, auto_start=True)
    state.maintenance.attach(ss, group)
    with start_arm(state) as arm:
        _env(arm)
        central = build(Scope.build(subscriptions=[SUB]), HandlerConfig(poll_interval=poll),
                        connection=Connection(arm_endpoint=arm.arm_url))
        runner = threading.Thread(target=central.handler.run, daemon=True)
        runner.start()
        rng = random.Random(25)
        published: Dict[str, float] = {}
        try:
            time.sleep(poll)  # the first poll (token, tenant) is behind us
            for _ in range(events):
                time.sleep(rng.uniform(0, poll))  # a random moment of the poll cycle
                eid = group.add_event("Terminate", ["web_0"], not_before=time.time() + 600)
                published[eid] = time.time()
                while not any(a.event_id == eid for a in state.maintenance.acknowledgements):
                    time.sleep(0.005)
        finally:
            central.close()
            runner.join(timeout=poll + 5)
        seconds = [next(a.at for a in state.maintenance.acknowledgements if a.event_id == eid) - at
                   for eid, at in published.items()]
    return {"poll": poll, "events": events, "median": statistics.median(seconds), "max": max(seconds),
            "min": min(seconds)}


def poll_cost(sets: int, pending: int) -> Dict[str, Any]:
    state = ArmState()
    state.load_seed({"generate": {"scaleSets": sets, "subscriptions": 10, "capacity": 2}})
    rng = random.Random(25)
    chosen = rng.sample(state.scale_sets(), pending)
    for ss in chosen:
        ss.extra_properties["scheduledEventsPolicy"] = POLICY
        group = PlacementGroup(clock=SYSTEM_CLOCK, auto_start=False)
        state.maintenance.attach(ss, group)
        group.add_event("Terminate", [f"{ss.name}_0"], not_before=time.time() + 3600)
    with start_arm(state) as arm:
        _env(arm)
        central = build(Scope.build(), HandlerConfig(poll_interval=3600),
                        connection=Connection(arm_endpoint=arm.arm_url))
        results: List[Dict[str, Any]] = []
        try:
            central.session.credential.get_token("https://management.azure.com/.default")  # token: not a poll's
            for label in ("first poll", "steady poll"):
                before = len(arm.arm_server.log.all())
                cpu = time.thread_time()
                wall = time.perf_counter()
                started = central.handler.poll_once(wait=False)
                cpu = time.thread_time() - cpu
                wall = time.perf_counter() - wall
                requests = arm.arm_server.log.all()[before:]
                results.append({"poll": label, "events_started": len(started),
                                "arm_requests": len([r for r in requests if "resourcegraph" in r.path.lower()]),
                                "cpu_ms": round(cpu * 1000, 1), "wall_ms": round(wall * 1000, 1)})
                central.handler.join(timeout=60)
        finally:
            central.close()
    return {"sets": sets, "pending": pending, "polls": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--sets", type=int, default=10000)
    parser.add_argument("--pending", type=int, default=50)
    args = parser.parse_args()
    cost = poll_cost(args.sets, args.pending)
    print(f"one poll over {cost['sets']} scale sets with {cost['pending']} pending events:")
    for row in cost["polls"]:
        print(f"  {row['poll']}: {row['arm_requests']} Resource Graph requests, client CPU {row['cpu_ms']} ms, "
              f"wall {row['wall_ms']} ms, {row['events_started']} events started")
    result = latency(args.poll, args.events)
    print(f"published -> acknowledge received, no hook, poll {result['poll']:g} s, {result['events']} events: "
          f"median {result['median']:.2f} s, max {result['max']:.2f} s, min {result['min']:.2f} s "
          f"(target <= poll + 0.5 = {result['poll'] + 0.5:g} s)")


if __name__ == "__main__":
    main()
